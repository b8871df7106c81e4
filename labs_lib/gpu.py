"""The GPUs on this machine, read with NVML (pynvml), or a clear "no GPU"."""

from __future__ import annotations

import contextlib
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
            readings.append(GPUReading(i, name, int(mem.total), int(mem.used), int(mem.free), util, capability, energy_mj))
        return readings, None if readings else "no GPU: NVML found no devices"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


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
