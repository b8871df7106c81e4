"""Energy counters, for tokens per joule: NVML's on a GPU, RAPL's (Linux powercap) on a CPU where the kernel lets it
be read. A reading holds the counters' values; joules_between turns two readings into the joules spent between them.

What is counted: on a GPU every card's whole energy (idle power included: an hour of a rented card costs that too); on
a CPU each package's (all its cores, so the client's share as well as the engine's, and DRAM not at all)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .gpu import read_gpus

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class EnergyReading:
    source: str  # what was read: "NVML, 1 GPU" or "RAPL package-0"
    joules: tuple[float, ...]  # each counter's value
    wrap_joules: tuple[float | None, ...]  # where each counter starts again from 0 (RAPL's range); None: it does not


def read_energy(powercap: Path = POWERCAP) -> tuple[EnergyReading | None, str]:
    """(reading, "") from every GPU's NVML energy counter, else from RAPL's package zones under `powercap`; else
    (None, why in one line)."""
    gpus, no_gpu = read_gpus()
    if gpus:
        counters = [g.energy_mj for g in gpus]
        if any(c is None for c in counters):
            return None, "the GPU reports no energy counter (NVML's total energy needs a Volta or later card)"
        return EnergyReading(f"NVML, {len(gpus)} GPU", tuple(c / 1e3 for c in counters if c is not None), (None,) * len(gpus)), ""
    # a package's zone is intel-rapl:N (AMD's too); intel-rapl:N:M are parts of it (cores, uncore), counted within it
    zones = sorted(z for z in powercap.glob("intel-rapl:*") if z.name.count(":") == 1)
    if not zones:
        return None, f"{no_gpu}; no RAPL energy counter ({powercap} holds no package zone)"
    try:
        names = [(z / "name").read_text().strip() for z in zones]
        joules = [int((z / "energy_uj").read_text()) / 1e6 for z in zones]
        wraps = [int((z / "max_energy_range_uj").read_text()) / 1e6 for z in zones]
    except PermissionError:
        return None, "RAPL is there but this user may not read it (energy_uj is root's since Linux 5.10)"
    except (OSError, ValueError) as exc:
        return None, f"RAPL could not be read ({exc})"
    return EnergyReading("RAPL " + ", ".join(names), tuple(joules), tuple(wraps)), ""


def joules_between(before: EnergyReading, after: EnergyReading) -> float:
    """Joules spent from `before` to `after` (the same counters), a counter that passed its range counted once round."""
    total = 0.0
    for b, a, wrap in zip(before.joules, after.joules, before.wrap_joules, strict=True):
        total += a - b if a >= b or wrap is None else a + wrap - b
    return total
