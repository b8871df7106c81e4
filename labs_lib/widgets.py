"""Sliders for JupyterLab. Each redraws with the same function the headless cells call."""

from __future__ import annotations

import matplotlib.pyplot as plt

from . import plots
from .kv_math import DTYPES


def kv_sliders(models: list[str], *, model: str, seq_len: int, batch: int, kv_dtype: str, budget_gib: float | None = None):
    """seq_len, batch, KV dtype and model sliders redrawing `plots.kv_memory_figure`."""
    import ipywidgets as w

    def draw(model: str, seq_len: int, batch: int, kv_dtype: str) -> None:
        plots.kv_memory_figure(model, seq_len, batch, kv_dtype, budget_gib=budget_gib)
        plt.show()

    return w.interactive(
        draw,
        model=w.Dropdown(options=models, value=model, description="model"),
        seq_len=w.IntSlider(value=seq_len, min=256, max=131072, step=256, description="seq_len", continuous_update=False),
        batch=w.IntSlider(value=batch, min=1, max=256, description="batch", continuous_update=False),
        kv_dtype=w.Dropdown(options=list(DTYPES), value=kv_dtype, description="KV dtype"),
    )
