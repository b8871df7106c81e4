"""The NVIDIA driver against the CUDA the GPU set is built for: checked before `make setup-gpu` installs anything
(`python labs_lib/driver.py LOCK`, standard library only) and by `labs doctor --machine` on a running instance.

A driver runs CUDA programs up to the CUDA version it reports (`nvidia-smi`'s "CUDA Version: X.Y"); within a major
version, newer minors run on the first driver of that major (CUDA minor-version compatibility). CUDA 13.x needs
the R580 driver family or newer, CUDA 12.x R525 or newer (NVIDIA's CUDA Toolkit release notes, table of minimum
driver versions). The CUDA a lock needs is read from its `nvidia-cuda-runtime` pin (13.0.96 for vLLM 0.33's
PyPI wheel and its torch 2.14).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MIN_DRIVER_FAMILY = {12: 525, 13: 580}  # CUDA major -> the first driver branch that runs it (Linux)


@dataclass(frozen=True)
class Driver:
    version: str  # "580.65.06"
    cuda: tuple[int, int]  # the newest CUDA it runs, as nvidia-smi reports it


def parse_nvidia_smi(text: str) -> Driver | None:
    """The driver from `nvidia-smi`'s header ("Driver Version: 570.172.08   CUDA Version: 12.8"), or None."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", text)
    if not driver or not cuda:
        return None
    return Driver(driver.group(1), (int(cuda.group(1)), int(cuda.group(2))))


def read_driver() -> tuple[Driver | None, str]:
    """(the driver, "") when nvidia-smi answers, else (None, why in one line)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "no NVIDIA driver here (nvidia-smi is not on PATH)"
    try:
        done = subprocess.run([smi], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi did not answer ({type(exc).__name__})"
    found = parse_nvidia_smi(done.stdout)
    if found is None:
        last = (done.stderr or done.stdout).strip().splitlines()
        return None, f"nvidia-smi reports no driver: {last[-1] if last else 'no output'}"
    return found, ""


def cuda_of_lock(lock_text: str) -> tuple[int, int] | None:
    """The CUDA a hashed lock's packages are built for, from its nvidia-cuda-runtime pin (None: no CUDA in it)."""
    pin = re.search(r"^nvidia-cuda-runtime(?:-cu\d+)?==(\d+)\.(\d+)", lock_text, re.MULTILINE)
    return (int(pin.group(1)), int(pin.group(2))) if pin else None


def too_old(driver: Driver, needed: tuple[int, int]) -> str | None:
    """One line when `driver` cannot run CUDA `needed`, naming both and what to do; None when it can."""
    if driver.cuda >= needed:
        return None
    family = MIN_DRIVER_FAMILY.get(needed[0])
    wanted = f"the R{family} driver family or newer" if family else f"a driver that runs CUDA {needed[0]}.{needed[1]}"
    return (
        f"the NVIDIA driver {driver.version} runs CUDA up to {driver.cuda[0]}.{driver.cuda[1]}, but vLLM and torch here "
        f"are built for CUDA {needed[0]}.{needed[1]}, which needs {wanted}: choose an instance image with a newer "
        "driver (nvidia-smi shows its CUDA Version), or update the driver, then run make setup-gpu again"
    )


def main(argv: list[str]) -> int:
    """`python labs_lib/driver.py LOCK`: exit 0 when this machine's driver runs the lock's CUDA, else one line and 2."""
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print(f"usage: python {Path(__file__).name} LOCKFILE (a hashed lock under locks/)", file=sys.stderr)
        return 2
    needed = cuda_of_lock(Path(argv[0]).read_text())
    if needed is None:
        return 0  # a lock without CUDA packages needs no driver
    driver, why = read_driver()
    problem = too_old(driver, needed) if driver else f"{why}: the GPU set (CUDA {needed[0]}.{needed[1]}) needs one"
    if problem or driver is None:
        print(f"make setup-gpu: {problem}", file=sys.stderr)
        return 2
    print(
        f"NVIDIA driver {driver.version} (CUDA up to {driver.cuda[0]}.{driver.cuda[1]}) runs the GPU set's CUDA {needed[0]}.{needed[1]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
