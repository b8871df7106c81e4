"""Write requirements.txt and requirements-gpu.txt from pyproject.toml, the one list of dependencies.

python tools/requirements.py          # rewrite both files
python tools/requirements.py --check  # exit 1 when they differ from pyproject.toml (tests/test_project.py)
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = "# Generated from pyproject.toml by `make requirements`; edit pyproject.toml, not this file.\n"


def expected() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    cpu = [*project["dependencies"], *extras["lab"], *extras["dev"]]
    return {
        "requirements.txt": HEADER
        + "# Everything the CPU path needs (CI, laptops, GPU instances too); make setup installs its hashed lock, locks/labs.txt.\n"
        + "".join(f"{r}\n" for r in cpu),
        "requirements-gpu.txt": HEADER
        + "# GPU notebook instances: vLLM on top of the CPU requirements (vLLM brings its own CUDA build of PyTorch),\n"
        + "# installed from its hashed lock locks/gpu-linux-<machine>.txt by make setup-gpu\n-r requirements.txt\n"
        + "".join(f"{r}\n" for r in extras["gpu"]),
    }


def main(argv: list[str]) -> int:
    stale = [name for name, text in expected().items() if (ROOT / name).read_text() != text]
    if "--check" in argv:
        for name in stale:
            print(f"{name} differs from pyproject.toml: run make requirements", file=sys.stderr)
        return 1 if stale else 0
    for name, text in expected().items():
        (ROOT / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
