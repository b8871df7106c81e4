"""The GPU catalogue (data/gpus.json)."""

from __future__ import annotations

import json
import re
from functools import cache

from .errors import BadInput
from .paths import DATA_DIR


@cache
def _gpus() -> dict:
    return json.loads((DATA_DIR / "gpus.json").read_text())


def gpu_names() -> list[str]:
    return list(_gpus()["gpus"])


def gpu_spec(name: str) -> dict:
    """One GPU's row (memory_gib, bandwidth_gb_per_s, bf16_dense_tflops) plus its name."""
    data = _gpus()
    key = str(name).strip()
    key = data["aliases"].get(key.lower(), key)
    for gpu_name, row in data["gpus"].items():
        if gpu_name.lower() == key.lower():
            return {"name": gpu_name, **row}
    raise BadInput("gpu", name, "allowed: " + ", ".join(data["gpus"]))


def gpu_table():
    """The catalogue as a pandas DataFrame indexed by name (pandas imported here: a bare GPU image may lack it)."""
    import pandas as pd

    return pd.DataFrame([gpu_spec(n) for n in gpu_names()]).set_index("name")


def catalogue_name(nvml_name: str) -> str | None:
    """The data/gpus.json entry for an NVML device name ("NVIDIA H200" -> "H200", "NVIDIA A100-SXM4-80GB" -> "A100-80GB")."""
    text = nvml_name.upper().replace("NVIDIA", "").replace("GEFORCE", "").strip()
    best = None
    for name in gpu_names():
        parts = [p for p in re.split(r"[-\s]", name.upper()) if p]
        if all(p in text for p in parts) and (best is None or len(name) > len(best)):
            best = name
    return best
