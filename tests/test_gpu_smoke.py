"""The device check's tier 1 (bench/gpu_smoke.py --tier bare) on this CPU: the bytes transformers allocates for
a KV cache of five architectures equal kv_math to the byte, and decode stays under the bandwidth roof. It runs
under vLLM's venv, which has PyTorch and transformers, with PYTHONPATH=. as on a bare GPU image (no labs venv)."""

import importlib.util
import os
import re
import subprocess
import sys

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


def _smoke_module():
    spec = importlib.util.spec_from_file_location("gpu_smoke", REPO / "bench" / "gpu_smoke.py")
    sys.path.insert(0, str(REPO / "bench"))  # gpu_smoke imports its neighbour _common
    try:
        smoke = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(smoke)
    finally:
        sys.path.remove(str(REPO / "bench"))
    return smoke


def test_tier_bare_states_the_transformers_it_needs():
    """A bare image with an older transformers (4.53's StaticCache has no layers) is told so in one line, not a
    traceback; the versions the locks install pass."""
    smoke = _smoke_module()
    said = smoke.transformers_too_old("4.53.0")
    assert said and "4.56 or newer" in said and "4.53.0" in said and "\n" not in said
    for lock in ("gpu-linux-x86_64.txt", "vllm-cpu-linux-x86_64.txt"):
        pinned = re.search(r"^transformers==(\S+)", (REPO / "locks" / lock).read_text(), re.MULTILINE).group(1)
        assert smoke.transformers_too_old(pinned) is None, (lock, pinned)


def test_the_h200_record_matches_kv_math_as_it_is_now():
    """Tier 1 ran once on an H200 (tests/fixtures/gpu_smoke/, its provenance in its first lines): the caches
    transformers allocated there on the GPU still equal what kv_math computes today, for each architecture."""
    from labs_lib.kv_math import kv_cache

    smoke = _smoke_module()
    record = (REPO / "tests" / "fixtures" / "gpu_smoke" / "bare_h200_2026-12-04.txt").read_text()
    allocated = re.findall(r"^([\w.-]+) \((\d+) layers\) KV cache on cuda: transformers allocated ([\d,]+) B", record, re.M)
    assert [(name, int(layers)) for name, layers, _ in allocated] == list(smoke.ARCHITECTURES)
    for name, layers, got in allocated:
        want = kv_cache(str(smoke.shrunk_config(name, int(layers))), 8192, 2, "bf16").kv_bytes
        assert int(got.replace(",", "")) == want, name
    assert "NVML: NVIDIA H200" in record and record.rstrip().endswith("PASS")
