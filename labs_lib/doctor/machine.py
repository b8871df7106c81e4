"""`labs doctor --machine`: this GPU instance checked before a lab starts an engine on it: the NVIDIA driver runs
the CUDA the installed vLLM's torch is built for (labs_lib.driver), and the card vLLM will compute on is readable
with room for an engine."""

from __future__ import annotations

import subprocess

from ..driver import read_driver, too_old
from .report import Check, Report

_TORCH_CUDA = "import torch; print(torch.version.cuda or '')"


def _installed_cuda() -> tuple[tuple[int, int] | None, str]:
    """(the CUDA the vLLM environment's torch is built for, or None; what was found, in words)."""
    from ..engines.vllm import find_vllm

    found = find_vllm()
    if found is None:
        return None, "vLLM is not installed (make setup-gpu on a GPU instance)"
    if found.device == "cpu":
        return None, f"{found.describe()}: the CPU build needs no driver"
    try:
        out = subprocess.run([found.python, "-c", _TORCH_CUDA], capture_output=True, text=True, timeout=300).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{found.python} did not answer ({type(exc).__name__})"
    parts = out.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None, f"{found.describe()}: its torch names no CUDA ({out or 'none'})"
    return (int(parts[0]), int(parts[1])), f"{found.describe()}, torch built for CUDA {out}"


def driver_check() -> Check:
    """The driver against the installed GPU vLLM's CUDA: ok, fail (too old, naming both), or skipped (no GPU vLLM)."""
    needed, what = _installed_cuda()
    if needed is None:
        return Check("1 driver", "skipped", what)
    driver, why = read_driver()
    if driver is None:
        return Check("1 driver", "fail", f"{what}; {why}", "no NVIDIA driver answers", "run the labs on a GPU instance")
    problem = too_old(driver, needed)
    evidence = f"{what}; driver {driver.version} runs CUDA up to {driver.cuda[0]}.{driver.cuda[1]}"
    if problem:
        return Check("1 driver", "fail", evidence, problem.split(":")[0], problem.split(": ", 1)[1])
    return Check("1 driver", "ok", evidence)


def card_check() -> Check:
    """The card a CUDA process computes on (CUDA_VISIBLE_DEVICES honoured) and what it has free."""
    from ..engines.vllm import MIN_ENGINE_BYTES
    from ..gpu import engine_card, gpu_processes, read_gpus

    readings, no_gpu = read_gpus()
    card, why = engine_card(readings)
    if card is None:
        return Check("2 card", "skipped", why or no_gpu or "no card")
    free_gib, total_gib = card.memory_free_bytes / 2**30, card.memory_total_bytes / 2**30
    evidence = f"{card.name}: {free_gib:.1f} of {total_gib:.1f} GiB free"
    if card.memory_free_bytes < MIN_ENGINE_BYTES:
        held = ", ".join(f"PID {p.pid}" for p in gpu_processes(card.index)) or "another process"
        return Check(
            "2 card",
            "fail",
            f"{evidence}; held by {held}",
            "another engine holds the card",
            "stop it (its notebook's Kernel -> Shut Down, or kill its PID)",
        )
    return Check("2 card", "ok", evidence)


def run_machine_checks() -> Report:
    """The machine's checks, in order."""
    return Report({"base_url": "this machine", "model": None, "api_key": None}, [driver_check(), card_check()])
