"""The bench/ scripts start from a fresh clone; the cheap one runs whole (its verdict is not judged
here: speed is shown by the scripts, not asserted by tests)."""

import os
import subprocess
import sys

import pytest
from conftest import REPO

SCRIPTS = [
    "series_runtime",
    "harness_fidelity",
    "harness_headroom",
    "decode_roofline",
    "client_comparison",
    "cpu_poll",
    "gpu_smoke",
]


def bench(name: str, *args: str, timeout: int = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_imports_and_documents_itself(name):
    done = bench(name, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_headroom_runs_and_ends_with_a_verdict():
    done = bench("harness_headroom", "--chunks", "20000", "--streams", "8", "--repeats", "1")
    lines = done.stdout.strip().splitlines()
    assert done.returncode in (0, 1), done.stderr
    assert lines[-1] in ("PASS", "FAIL") and (done.returncode == 0) == (lines[-1] == "PASS")
    measured = [line for line in lines if "harness/plain throughput" in line]
    assert len(measured) == 2 and "µs/chunk" in measured[0]


def test_client_comparison_says_why_without_guidellm():
    done = bench("client_comparison", "--client", "guidellm", "--guidellm", "/nonexistent/guidellm")
    assert done.returncode == 1 and "guidellm not found" in done.stdout and done.stdout.strip().endswith("FAIL")


def test_client_comparison_says_why_without_vllm():
    done = bench("client_comparison", "--client", "vllm", env={"LABS_VLLM_PYTHON": "/nonexistent/python"})
    assert done.returncode == 1 and "no vLLM found" in done.stdout and done.stdout.strip().endswith("FAIL")


def test_sweep_comparison_says_why_without_vllm():
    done = bench("sweep_comparison", env={"LABS_VLLM_PYTHON": "/nonexistent/python"})
    assert done.returncode == 1 and "no vLLM found" in done.stdout and done.stdout.strip().endswith("FAIL")


def test_gpu_smoke_check_says_when_there_is_no_gpu():
    """bench/gpu_smoke.py is run by hand on a GPU instance; here, without a GPU, it says so and passes."""
    from labs_lib.gpu import read_gpus

    if read_gpus()[0]:
        pytest.skip("a GPU is present: run bench/gpu_smoke.sh itself")
    done = bench("gpu_smoke")
    assert done.returncode == 0, done.stderr
    assert "no GPU" in done.stdout and "nothing to check without a GPU" in done.stdout
    from labs_lib.catalogs import catalogue_name  # the name matching it will need on a GPU instance

    assert catalogue_name("NVIDIA H200") == "H200" and catalogue_name("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert catalogue_name("NVIDIA L40S") == "L40S" and catalogue_name("NVIDIA L4") == "L4"
    assert catalogue_name("NVIDIA H100 80GB HBM3") == "H100-SXM" and catalogue_name("NVIDIA H100 PCIe") == "H100-PCIe"
    assert catalogue_name("NVIDIA H100 NVL") is None  # 94 GB: a card the catalogue does not hold
