"""Where things live: the repository's data, the cache of built models, the runs folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
# data/ at the top of a checkout (editable install), or inside the installed package (wheel)
DATA_DIR = REPO_DIR / "data" if (REPO_DIR / "data").is_dir() else Path(__file__).resolve().parent / "data"
NOTEBOOKS_DIR = REPO_DIR / "notebooks"
RUNS_DIR = REPO_DIR / "runs"


def cache_dir() -> Path:
    """Models and variants built once and reused: $LABS_CACHE_DIR, else ~/.cache/llm-inference-labs."""
    base = os.environ.get("LABS_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llm-inference-labs"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path
