"""Where things live: the labs' data and notebooks, the cache of built models, the runs folder.

In a checkout (`make setup`'s editable install) data/ and notebooks/ are the repository's own and runs go to its
runs/; installed from the wheel (`pip install .`) both ship inside the package and runs go to $LABS_RUNS_DIR, else
runs/ in the working directory: never into site-packages.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_ABOVE = _PACKAGE_DIR.parent
# a checkout is the folder holding this package beside the project's own pyproject.toml (not any site-packages)
CHECKOUT_DIR: Path | None = (
    _ABOVE if (_ABOVE / "pyproject.toml").is_file() and (_ABOVE / "notebooks").is_dir() and (_ABOVE / "data").is_dir() else None
)
# the wheel maps data/ and notebooks/ into the package (pyproject.toml's package-dir)
DATA_DIR = CHECKOUT_DIR / "data" if CHECKOUT_DIR else Path(str(files("labs_lib") / "data"))
NOTEBOOKS_DIR = CHECKOUT_DIR / "notebooks" if CHECKOUT_DIR else Path(str(files("labs_lib") / "notebooks"))
# where `labs` runs from: the checkout, or the working directory of an installed package (.venv-vllm is looked up here)
PROJECT_DIR = CHECKOUT_DIR or Path.cwd()
RESULTS_DIR = PROJECT_DIR / "results"  # what the labs and sweeps measure, one folder per lab
# the Jupyter kernel the notebooks name and `make setup` / `make setup-gpu` register (its display name beside it):
# a running JupyterLab opens the labs on this environment's Python without a kernel switch
KERNEL_NAME, KERNEL_DISPLAY_NAME = "llm-inference-labs", "LLM Inference Labs"


def runs_dir() -> Path:
    """Executed notebooks: $LABS_RUNS_DIR, else runs/ in the checkout, else runs/ in the working directory."""
    chosen = os.environ.get("LABS_RUNS_DIR")
    return Path(chosen) if chosen else PROJECT_DIR / "runs"


def cache_dir() -> Path:
    """Models and variants built once and reused: $LABS_CACHE_DIR, else ~/.cache/llm-inference-labs."""
    base = os.environ.get("LABS_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llm-inference-labs"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path
