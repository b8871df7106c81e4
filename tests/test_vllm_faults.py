"""The faults of test_faults.py on vLLM (on CPU here), with the same expectations: the engine killed
mid-stream (API server and engine core together), frozen past the client's timeout, and 64 streams
against max_num_seqs 4. Failures are records with reasons; the run completes."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import require_vllm
from test_faults import TRANSPORT, accounted, frozen_mid_stream, killed_mid_stream, specs

from labs_lib.endpoints import endpoint_for
from labs_lib.engines import EngineConfig, make_engine
from labs_lib.engines.metrics import scrape
from labs_lib.load import run_blocking, run_load

pytestmark = [pytest.mark.engine, pytest.mark.vllm]


async def both_sequences_decoding(engine, tokens: int = 8, limit_s: float = 600) -> None:
    """The event, not a guess of its time: vLLM's /metrics shows two running sequences and `tokens` generated
    since this call (the counter is the engine's lifetime total, and the module's engine has served before)."""
    deadline = time.monotonic() + limit_s
    before = None
    while time.monotonic() < deadline:
        m = await asyncio.to_thread(scrape, engine.root_url, engine.headers())
        generated = m.get("vllm:generation_tokens_total", 0)
        before = generated if before is None else before
        if m.get("vllm:num_requests_running", 0) >= 2 and generated - before >= tokens:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"two sequences were not decoding within {limit_s:.0f} s")


@pytest.fixture(scope="module")
def vllm4():
    require_vllm()
    with make_engine("vllm", EngineConfig(parallel=4, max_model_len=256, kv_cache_gib=0.25)) as engine:
        yield engine


def test_64_concurrent_streams_against_max_num_seqs_4(vllm4):
    result = run_blocking(
        run_load(endpoint_for(vllm4), specs(64, 8, "Name a colour."), concurrency=64, progress=False, timeout_s=900)
    )
    assert vllm4.is_running()
    accounted(result, 64)
    assert result.summary.completed == 64, result.summary.errors
    assert all(r.output_tokens == 8 for r in result.records)


def test_engine_frozen_past_the_timeout(vllm4):
    # the guard leads the group: API server and engine core freeze together; 200 tokens fit max_model_len 256
    result, waited_s, timeout_s = frozen_mid_stream(vllm4, both_sequences_decoding, max_tokens=200)
    accounted(result, 2)
    assert result.summary.failed == 2 and all("ReadTimeout" in r.error for r in result.records), [r.error for r in result.records]
    # mid-stream: /metrics can count a token the API server has not yet sent, so one stream may have none
    assert any(r.chunks > 0 for r in result.records)
    assert waited_s < timeout_s + 30, (waited_s, timeout_s)  # the timeout ended the run, not a thaw
    # and the engine serves again once it thaws
    after = run_blocking(run_load(endpoint_for(vllm4), specs(1, 4), concurrency=1, progress=False, timeout_s=600))
    assert after.summary.completed == 1, after.summary.errors


def test_engine_killed_mid_stream():
    require_vllm()
    engine = make_engine("vllm", EngineConfig(parallel=2, max_model_len=512, kv_cache_gib=0.25)).start()
    try:
        result = killed_mid_stream(engine, both_sequences_decoding, max_tokens=300)
    finally:
        engine.stop()
    accounted(result, 6)
    cut = [r for r in result.records if not r.ok and r.chunks > 0]
    never = [r for r in result.records if not r.ok and r.chunks == 0]
    assert len(cut) == 2, [r.error for r in result.records]
    assert all(r.tokens_estimated and r.text for r in cut)
    assert len(never) == 4 and all(r.error.startswith(TRANSPORT) for r in never), [r.error for r in never]
