"""The NVIDIA driver checked before `make setup-gpu` installs the GPU set, and by `labs doctor --machine`, against
recorded `nvidia-smi` headers of real R550 machines (tests/fixtures/nvidia_smi/: no GPU here)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from labs_lib.driver import cuda_of_lock, parse_nvidia_smi, too_old

RECORDED = Path(__file__).parent / "fixtures" / "nvidia_smi"
GPU_LOCK = REPO / "locks" / "gpu-linux-x86_64.txt"


def test_the_gpu_lock_needs_cuda_13_and_an_r550_driver_runs_12_4():
    assert cuda_of_lock(GPU_LOCK.read_text()) == (13, 0)  # nvidia-cuda-runtime 13.0.96, vLLM 0.33's torch 2.14
    assert cuda_of_lock((REPO / "locks" / "labs.txt").read_text()) is None  # the CPU set needs no driver
    for recorded, version in (("driver_550.40.07_rtx4070.txt", "550.40.07"), ("driver_550.135_tesla_p4.txt", "550.135")):
        driver = parse_nvidia_smi((RECORDED / recorded).read_text())
        assert driver is not None and (driver.version, driver.cuda) == (version, (12, 4))
        problem = too_old(driver, (13, 0))
        assert problem and f"driver {version} runs CUDA up to 12.4" in problem and "CUDA 13.0" in problem
        assert "R580" in problem and "\n" not in problem
        assert too_old(driver, (12, 4)) is None and too_old(driver, (12, 1)) is None
    h200 = parse_nvidia_smi((RECORDED / "driver_580.159.04_h200.txt").read_text())  # the project's device machine
    assert h200 is not None and (h200.version, h200.cuda) == ("580.159.04", (13, 0))
    assert too_old(h200, cuda_of_lock(GPU_LOCK.read_text())) is None


def test_make_setup_gpu_stops_in_one_line_before_installing_on_an_old_driver(tmp_path):
    """`make setup-gpu` on an instance whose driver is R550: the driver line first, and nothing installed (no GPU
    mark, no pip). The instance's nvidia-smi is the recorded one, first on PATH."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat '{RECORDED / 'driver_550.135_tesla_p4.txt'}'\n")
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    marked = (REPO / ".venv" / ".gpu-set").exists()
    done = subprocess.run(
        ["make", "--no-print-directory", "setup-gpu", f"PYTHON={sys.executable}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    said = [line for line in done.stderr.splitlines() if line.startswith("make setup-gpu:")]
    assert len(said) == 1 and "driver 550.135 runs CUDA up to 12.4" in said[0] and "CUDA 13.0" in said[0], done.stderr
    assert "pip" not in done.stdout + done.stderr and (REPO / ".venv" / ".gpu-set").exists() == marked


def test_without_a_driver_setup_gpu_says_so_and_the_doctor_skips_a_cpu_vllm(tmp_path):
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + "/usr/bin:/bin"}
    if any((Path(p) / "nvidia-smi").exists() for p in env["PATH"].split(os.pathsep)):
        pytest.skip("this machine has a driver: the recorded-driver test above covers the old one")
    done = subprocess.run(
        [sys.executable, "labs_lib/driver.py", str(GPU_LOCK)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "no NVIDIA driver here" in done.stderr and "CUDA 13.0" in done.stderr


def test_the_doctor_checks_this_machine_in_order():
    """`labs doctor --machine` on this CPU machine: the driver check is skipped for a CPU vLLM (or none) and the card
    check for want of NVML, each saying why; on a GPU instance the same checks read the driver and the card."""
    from labs_lib.doctor.machine import run_machine_checks

    report = run_machine_checks()
    assert [c.name for c in report.checks] == ["1 driver", "2 card"]
    assert all(c.status == "skipped" and c.evidence for c in report.checks) and report.ok
    done = subprocess.run([sys.executable, "-m", "labs_lib", "doctor", "--machine"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and "[skip] 1 driver" in done.stdout


def test_on_a_gpu_instance_the_doctor_checks_the_driver_against_vllms_torch(tmp_path, monkeypatch):
    """A GPU instance with the CUDA vLLM installed (its torch built for CUDA 13.0) and an R550 driver (the recorded
    nvidia-smi): the doctor's first check fails, naming both versions and what to do."""
    from labs_lib.doctor import machine
    from labs_lib.engines import vllm as vllm_engine

    python = tmp_path / "python"  # vLLM's Python on the instance: it answers what its torch is built for
    python.write_text("#!/bin/sh\necho 13.0\n")
    python.chmod(0o755)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat '{RECORDED / 'driver_550.40.07_rtx4070.txt'}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(vllm_engine, "find_vllm", lambda: vllm_engine.VLLMInstall(str(python), "0.33.0", "vllm"))
    check = machine.driver_check()
    assert check.status == "fail" and "torch built for CUDA 13.0" in check.evidence and "driver 550.40.07" in check.evidence
    assert "R580" in check.fix or "R580" in check.cause
    python.write_text("#!/bin/sh\necho 12.4\n")  # a torch built for CUDA 12.4 runs on it
    assert machine.driver_check().status == "ok"
