"""The GPUs on this machine, read with NVML (pynvml), or a clear "no GPU"."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class GPUReading:
    index: int
    name: str
    memory_total_bytes: int
    memory_used_bytes: int
    memory_free_bytes: int
    utilization_pct: float | None
    compute_capability: tuple[int, int] | None = None  # (major, minor): 8.0 A100, 8.9 L4/RTX 4090, 9.0 H100/H200
    energy_mj: float | None = None  # NVML's total energy since the driver loaded, mJ (Volta and later); None: not reported
    uuid: str | None = None  # "GPU-…" as CUDA_VISIBLE_DEVICES may name it


def read_gpus() -> tuple[list[GPUReading], str | None]:
    """(readings, None) when NVML answers, else ([], the reason in one line)."""
    try:
        import pynvml
    except ImportError:
        return [], "no GPU: the NVML bindings (nvidia-ml-py) are not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return [], f"no GPU: NVML is not available here ({type(exc).__name__})"
    try:
        readings = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                util = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception:
                util = None
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                capability: tuple[int, int] | None = (int(major), int(minor))
            except Exception:
                capability = None
            try:
                energy_mj: float | None = float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
            except Exception:  # NVMLError_NotSupported before Volta
                energy_mj = None
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            try:
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            except Exception:
                uuid = None
            readings.append(GPUReading(i, name, int(mem.total), int(mem.used), int(mem.free), util, capability, energy_mj, uuid))
        return readings, None if readings else "no GPU: NVML found no devices"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def engine_card(readings: list[GPUReading]) -> tuple[GPUReading | None, str | None]:
    """(the card a CUDA process started now computes on, None) — the first device CUDA_VISIBLE_DEVICES names (an
    index or a "GPU-" UUID as NVML counts them), else NVML's device 0 — or (None, why) when it cannot be told:
    a MIG instance ("MIG-…": NVML's whole-card figures are not the instance's) or a device NVML does not list."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not readings:
        return (readings[0] if readings else None), None
    first = visible.split(",")[0].strip()
    if first == "" or first.startswith("-"):
        return None, f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    if first.startswith("MIG-"):
        return None, f"CUDA_VISIBLE_DEVICES names a MIG instance ({first[:12]}…): NVML's card-wide memory is not its own"
    for card in readings:
        if (first.isdigit() and card.index == int(first)) or (card.uuid and card.uuid.startswith(first)):
            return card, None
    return None, f"CUDA_VISIBLE_DEVICES={visible!r} names no device NVML lists ({len(readings)} found)"


def catalogued_card() -> tuple[GPUReading | None, str | None, str | None]:
    """(the card a GPU engine started now computes on, its data/gpus.json name or None, None), or (None, None, why
    there is none): NVML read, CUDA_VISIBLE_DEVICES honoured (engine_card), the name matched (catalogue_name)."""
    from .catalogs import catalogue_name

    readings, no_gpu = read_gpus()
    card, why_not = engine_card(readings)
    if card is None:
        return None, None, why_not or no_gpu
    return card, catalogue_name(card.name), None


@dataclass(frozen=True)
class GPUProcess:
    pid: int
    name: str  # the process's command line, shortened ("" when it cannot be read, e.g. another container's)
    memory_used_bytes: int | None


def gpu_processes(index: int = 0) -> list[GPUProcess]:
    """The compute processes holding memory on GPU `index`, from NVML (empty without NVML or a GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        found = []
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            try:
                with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                    name = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
            except OSError:
                name = ""
            found.append(GPUProcess(int(proc.pid), name, getattr(proc, "usedGpuMemory", None)))
        return found
    except Exception:
        return []
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
