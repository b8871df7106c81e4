"""Progress bars: one place that picks the kind. A widget where a person runs a notebook; text where a notebook
runs headless (`labs run`, `make run`, CI): the runner sets LABS_PROGRESS=text for its kernels, so a bar writes
carriage-return updates to stderr and the saved notebook shows each bar's final state, not the widget's first
frame ("0%| 0/4" above a finished table)."""

from __future__ import annotations

import os

ENV = "LABS_PROGRESS"


def bar(*args, **kwargs):
    """A tqdm bar (same arguments): the text kind when LABS_PROGRESS=text, else tqdm.auto's choice. Text bars are
    left in place when done (a bar that clears itself would leave a blank line in the saved notebook)."""
    if os.environ.get(ENV) == "text":
        from tqdm.std import tqdm

        kwargs["leave"] = True
    else:
        from tqdm.auto import tqdm
    return tqdm(*args, **kwargs)
