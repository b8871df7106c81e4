"""Build-it cells: the participant writes a lesson's core function, and `check` compares it with the library's on
cases chosen to catch the usual mistakes, explaining the first that differs (CS231n's skeleton and check). The
library keeps the reference ("write it here, keep it in the library"): the runner puts each reference's source in
its cell, and `labs run --as-written` runs the cells as the notebook has them.

Each lab's cores live in `labs_lib/cores/labNN.py` (NN: the notebook's number); `base.py` is what they share.
A build-it cell is a code cell tagged `build-it` that defines one function named in CORES; its check cell is
`name = cores.check("name", name)`, which returns the function the lab goes on with: the participant's when it
agrees on every case, else the library's (the lab never stops on an unwritten cell)."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..errors import BadInput
from . import lab01, lab02, lab03, lab04, lab05, lab06
from .base import Core, verdict

TAG = "build-it"
FIX_TAG = "fix-it"  # a cell holding a broken client snippet to fix (lab 06); the runner puts its fix in place
FIXES: dict[str, str] = dict(lab06.FIXES)
BY_LAB: dict[str, dict[str, Core]] = {
    "01": lab01.CORES, "02": lab02.CORES, "03": lab03.CORES, "04": lab04.CORES, "05": lab05.CORES, "06": lab06.CORES
}  # fmt: skip
CORES: dict[str, Core] = {name: core for cores in BY_LAB.values() for name, core in cores.items()}


def _core(name: str) -> Core:
    if name not in CORES:
        raise BadInput("build-it function", name, "allowed: " + ", ".join(CORES))
    return CORES[name]


def check(name: str, candidate: Callable) -> Callable:
    """Run `candidate` on every case of core `name` and print the verdict: not written yet, the first case that
    differs (what it holds, both answers, the mistake it catches), or agreement on all of them. Returns the
    function the lab goes on with: `candidate` when it agrees on every case, else the library's reference."""
    return verdict(name, _core(name), candidate)


def whose(function: Callable) -> str:
    """ "yours" for a function a notebook defined (the participant's, once check() kept it), else "the library's"."""
    return "yours" if function.__module__ == "__main__" else "the library's"


def solution_source(name: str) -> str:
    """The cell a runner puts in place of the build-it cell: the reference's imports and source."""
    core = _core(name)
    source = inspect.getsource(core.solution)
    return f"{core.imports}\n\n\n{source}".strip() if core.imports else source.strip()


def snippet_in(source: str) -> str | None:
    """The fix-it snippet a cell defines (its first `def NAME(` among FIXES), or None."""
    names = [line[4:].split("(", 1)[0].strip() for line in source.splitlines() if line.startswith("def ")]
    return next((n for n in names if n in FIXES), None)


def defined_in(source: str) -> str | None:
    """The core a build-it cell's source defines (its first `def NAME(`, `async def NAME(` or `class NAME` among
    CORES), or None."""
    for line in source.splitlines():
        if line.startswith(("def ", "async def ", "class ")):
            name = line.removeprefix("async ").split(" ", 1)[1].split("(", 1)[0].split(":", 1)[0].strip()
            if name in CORES:
                return name
    return None


def fill_in(cells: list[dict]) -> list[str]:
    """Put each build-it cell's reference in place of what it holds (notebook cells, as nbformat reads them), and
    each fix-it cell's fixed snippet; returns the names filled in. A cell that defines none of them is refused."""
    filled = []
    for cell in cells:
        tags = cell.get("metadata", {}).get("tags", [])
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if FIX_TAG in tags:
            name = snippet_in(source)
            if name is None:
                raise BadInput("fix-it cell", source.splitlines()[0] if source else "(empty)", "allowed: " + ", ".join(FIXES))
            cell["source"] = FIXES[name]
            filled.append(name)
            continue
        if TAG not in tags:
            continue
        name = defined_in(source)
        if name is None:
            raise BadInput(
                "build-it cell",
                source.splitlines()[0] if source else "(empty)",
                "allowed: a cell defining one of " + ", ".join(CORES),
            )
        cell["source"] = solution_source(name)
        filled.append(name)
    return filled
