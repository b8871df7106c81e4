"""The GPU catalogue (data/gpus.json)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
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


def compute_capability(name: str) -> tuple[int, int] | None:
    """A catalogue card's CUDA compute capability as (major, minor); None for a card without one (AMD)."""
    raw = gpu_spec(name).get("compute_capability")
    if not raw:
        return None
    major, minor = str(raw).split(".")
    return int(major), int(minor)


def gpu_table():
    """The catalogue as a pandas DataFrame indexed by name (pandas imported here: a bare GPU image may lack it)."""
    import pandas as pd

    return pd.DataFrame([gpu_spec(n) for n in gpu_names()]).set_index("name")


def catalogue_name(nvml_name: str) -> str | None:
    """The data/gpus.json entry for an NVML device name ("NVIDIA H200" -> "H200", "NVIDIA A100-SXM4-80GB" -> "A100-80GB",
    "NVIDIA H100 80GB HBM3" -> "H100-SXM" by the catalogue's aliases), or None."""
    text = nvml_name.upper().replace("NVIDIA", "").replace("GEFORCE", "").strip()
    if alias := _gpus()["aliases"].get(text.lower()):  # a name that holds no catalogue name: the SXM H100's
        return alias
    best = None
    for name in gpu_names():
        parts = [p for p in re.split(r"[-\s]", name.upper()) if p]
        if all(p in text for p in parts) and (best is None or len(name) > len(best)):
            best = name
    return best


@dataclass(frozen=True)
class DevicePrice:
    """On-demand rental of one device in USD per hour: the range one survey lists for one tier of providers."""

    low_usd: float
    high_usd: float
    tier: str
    as_of: str
    source: str

    @property
    def mid_usd(self) -> float:
        return (self.low_usd + self.high_usd) / 2

    def __str__(self) -> str:
        return f"{self.tier}s' on-demand ${self.low_usd:.2f}-{self.high_usd:.2f} per GPU-hour, {self.as_of} ({self.source})"


def gpu_price(name: str, tier: str = "specialty cloud") -> DevicePrice | None:
    """The catalogue's sourced price range for a card (data/gpus.json "prices"), or None for a card it lists no price
    for. `tier`: "hyperscaler", "specialty cloud" or "long-tail provider"."""
    prices = _gpus()["prices"]
    tiers = prices["usd_per_gpu_hour"]
    if tier not in tiers:
        raise BadInput("tier", tier, "allowed: " + ", ".join(tiers))
    found = tiers[tier].get(gpu_spec(name)["name"])
    return DevicePrice(found[0], found[1], tier, prices["as_of"], prices["source"]) if found else None
