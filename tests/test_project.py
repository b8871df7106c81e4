"""Layout promises: one source of requirements, clean notebooks, CI = make test, ruff clean."""

import json
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from conftest import REPO


def test_environment_yml_pip_includes_requirements():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert "-r requirements.txt" in pip
    listed = [d for d in env["dependencies"] if isinstance(d, str) and not d.startswith(("python", "pip"))]
    assert listed == [], f"packages belong in requirements.txt, not environment.yml: {listed}"


def test_gpu_requirements_build_on_cpu_requirements():
    assert "-r requirements.txt" in (REPO / "requirements-gpu.txt").read_text()


def test_ci_runs_make_test_and_nothing_else():
    commands = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert commands[-1] == "make test"
    assert all(c.startswith(("set ", "cd ")) for c in commands[:-1]), commands


def test_readme_shows_the_two_commands_first():
    readme = (REPO / "README.md").read_text()
    assert readme.index("make run") < readme.index("make test")
    headings = [line for line in readme.splitlines() if line.startswith("## ")]
    order = [next(i for i, h in enumerate(headings) if key in h) for key in ("Two commands", "GPU instance", "conda")]
    assert order == sorted(order) and order[0] == 0, headings


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_committed_clean(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "commit notebooks without outputs"
    tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    assert "quick" in "".join(tagged[0]["source"]) and "interactive" in "".join(tagged[0]["source"])


def test_ruff_clean():
    ruff = shutil.which("ruff", path=str(REPO / ".venv" / "bin")) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed")
    proc = subprocess.run([ruff, "check", "--quiet", "."], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_package_imports_without_optional_gpu_stack():
    proc = subprocess.run([sys.executable, "-c", "import labs_lib.cli, labs_lib.kv_math, labs_lib.runner"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_reliability_table_is_true():
    """docs/reliability.md: every test it names exists, and each row's Times is the number of cases
    those tests hold."""
    text = (REPO / "docs" / "reliability.md").read_text()
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                *sorted({m.split("::")[0] for m in re.findall(r"tests/\w+\.py::\w+", text)})],
                               capture_output=True, text=True, cwd=REPO, timeout=120).stdout
    counts = Counter(line.split("[")[0] for line in collected.splitlines() if "::" in line)
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"tests/\w+\.py::\w+", cells[-1])
        assert names, row
        for name in names:
            assert counts[name] > 0, f"{name} is named in docs/reliability.md but no such test is collected"
        assert int(cells[2]) == sum(counts[n] for n in names), f"row {cells[0]}: Times {cells[2]} != {sum(counts[n] for n in names)}"
