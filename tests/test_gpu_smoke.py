"""The device check's tier 1 (bench/gpu_smoke.py --tier bare) on this CPU: the bytes transformers allocates for
a KV cache of five architectures equal kv_math to the byte, and decode stays under the bandwidth roof. It runs
under vLLM's venv, which has PyTorch and transformers, with PYTHONPATH=. as on a bare GPU image (no labs venv)."""

import os
import subprocess

from conftest import REPO

from labs_lib.engines.vllm import find_vllm


def test_tier_bare_on_this_cpu(vllm_installed):
    proc = subprocess.run(
        [find_vllm().python, "bench/gpu_smoke.py", "--tier", "bare", "--device", "cpu"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert sum("kv_math equals the allocated cache to the byte" in ln and "[ok]" in ln for ln in lines) == 5, proc.stdout
    assert any(ln.startswith("decode at batch 1 on cpu") for ln in lines) and lines[-1] == "PASS"
