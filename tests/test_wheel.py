"""`pip install .` is a working install: the wheel built here, installed into a fresh venv, run outside the checkout.

The venv reaches the labs' dependencies through one .pth line naming this environment's site-packages (no
network, no second 1 GB install); .pth files there are not run, so the checkout's editable install stays out of
it: what is imported is the wheel's own labs_lib, which the test asserts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.notebook  # `labs run --only 01` executes lab 01 with papermill


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the fresh venv's bin folder, a working directory outside the checkout) with the wheel installed."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("labs_lib-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # every data file the labs read (lab 04 reads data/article_config_seed004.toml and data/article_code/) and every lab
    data = [f"labs_lib/data/{f.relative_to(REPO / 'data')}" for f in (REPO / "data").rglob("*") if f.is_file()]
    labs = [f"labs_lib/notebooks/{f.name}" for f in (REPO / "notebooks").glob("*.ipynb")]
    missing = [shipped for shipped in ("labs_lib/py.typed", *data, *labs) if shipped not in names]
    assert not missing, f"the wheel lacks {missing[:5]}"
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    target = Path(
        subprocess.run(
            [str(env_dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (target / "labs-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    work = root / "work"
    work.mkdir()
    return env_dir / "bin", work


def _labs(installed: tuple[Path, Path], *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    bin_dir, work = installed
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LABS_RUNS_DIR", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([str(bin_dir / "labs"), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s)


def test_the_wheel_imports_its_own_files_outside_the_checkout(installed):
    bin_dir, work = installed
    proc = subprocess.run(
        [
            str(bin_dir / "python"),
            "-c",
            "import labs_lib.paths as p; print(p.__file__); print(p.DATA_DIR); print(p.NOTEBOOKS_DIR)",
        ],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    module, data, notebooks = proc.stdout.split()
    package = Path(module).parent
    assert REPO not in Path(module).parents, f"imported the checkout's labs_lib: {module}"
    assert Path(data) == package / "data" and Path(notebooks) == package / "notebooks"


def test_labs_models_and_kv_run_from_the_console_script(installed):
    models = _labs(installed, "models")
    assert models.returncode == 0, models.stderr
    assert "meta-llama/Llama-2-7b-hf" in models.stdout
    kv = _labs(installed, "kv", "--model", "llama-2-7b", "--seq-len", "2048", "--kv-dtype", "fp16", "--json")
    assert kv.returncode == 0, kv.stderr
    assert '"kv_bytes": 1073741824' in kv.stdout  # 2 x 32 layers x 4096 x 2 bytes x 2048 tokens: exactly 1 GiB
    bad = _labs(installed, "kv", "--model", "no-such-model", "--seq-len", "2048")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_labs_run_executes_lab_01_and_writes_into_the_working_directory(installed):
    bin_dir, work = installed
    run = _labs(installed, "run", "--only", "01")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    executed = list((work / "runs").glob("*/01_kv_cache_memory.ipynb"))
    assert executed, f"no executed notebook under {work / 'runs'}: {run.stdout[-1000:]}"
    package = next((bin_dir.parent / "lib").glob("python3*/site-packages/labs_lib"))
    assert not (package / "runs").exists() and not (package / "notebooks" / "runs").exists(), "wrote into site-packages"
