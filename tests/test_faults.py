"""Faults during measurement, each against a real engine: killed mid-stream, a connection cut before
the usage chunk, a server that stalls past the timeout, a gateway's 5xx. Each becomes a failed record
with its reason; the run completes; the summary counts the failures. Then load: 64 concurrent
streams against 4 slots, every request accounted for, client memory bounded."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import tracemalloc

import httpx
import pytest
from fault_proxy import FaultProxy

from labs_lib.endpoints import Endpoint, endpoint_for
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.load import run_blocking, run_load
from labs_lib.timing import RequestSpec

pytestmark = pytest.mark.engine
TRANSPORT = ("ConnectError", "RemoteProtocolError", "ReadError")  # how a dead engine looks to a client


def specs(n: int, max_tokens: int, prompt: str = "Write a long story about a lighthouse keeper.") -> list[RequestSpec]:
    return [RequestSpec(f"{prompt} ({i})", max_tokens, ignore_eos=True) for i in range(n)]


def accounted(result, n: int) -> None:
    """Every request has a record; the summary's counts are the records' counts; failures have reasons."""
    assert len(result.records) == n
    failed = [r for r in result.records if not r.ok]
    assert result.summary.failed == len(failed) and result.summary.completed == n - len(failed)
    assert all(r.error and r.error.strip() for r in failed)
    assert sum(result.summary.errors.values()) == len(failed)


async def both_slots_decoding(engine, tokens: int = 4, limit_s: float = 600) -> None:
    """Wait for the event itself, not a guess of its time: the engine's /slots reports two slots that have
    each decoded `tokens` tokens (on a busy machine that can take many times longer than on a quiet one)."""
    deadline = time.monotonic() + limit_s
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        while time.monotonic() < deadline:
            slots = (await client.get(engine.root_url + "/slots")).json()
            decoded = [s["next_token"][0]["n_decoded"] for s in slots if s.get("is_processing")]
            if len(decoded) == 2 and min(decoded) >= tokens:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"two slots were not decoding within {limit_s:.0f} s")


async def ended_before(event: asyncio.Task, load: asyncio.Task) -> list[str] | None:
    """Wait for whichever comes first, the event or the run's end. None when the event came while the run
    goes on (a waiter that gave up raises its AssertionError here); else the ended run's errors: a run that
    fails early makes its test fail at once with its reasons, not after the waiter's limit."""
    await asyncio.wait({event, load}, return_when=asyncio.FIRST_COMPLETED)
    if load.done():
        return [r.error for r in load.result().records if not r.ok]
    event.result()
    return None


async def cancel_both(*tasks: asyncio.Task) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def cut_two_and_refused_four(result) -> None:
    """What killed_mid_stream's run must show on any engine: six records, two cut mid-stream, four never served."""
    accounted(result, 6)
    cut = [r for r in result.records if not r.ok and r.chunks > 0]
    never = [r for r in result.records if not r.ok and r.chunks == 0]
    assert len(cut) == 2, [r.error for r in result.records]  # the two in flight: tokens received, then the cut
    assert all(r.tokens_estimated and r.text for r in cut)  # what arrived is kept and marked as counted by the client
    # the rest never got a token: refused (not yet connected) or dropped (connected, queued in the server) when it died
    assert len(never) == 4 and all(r.error.startswith(TRANSPORT) for r in never), [r.error for r in never]


def killed_mid_stream(engine, decoding, max_tokens: int, endpoint: Endpoint | None = None):
    """Six streams of `max_tokens`, two at a time, to `endpoint` (default: the engine's own); once
    `decoding(engine)` reports two decoding, the engine's whole process group is killed (SIGKILL). Returns the run."""

    async def run():
        event = asyncio.create_task(decoding(engine))
        load = asyncio.create_task(
            run_load(endpoint or endpoint_for(engine), specs(6, max_tokens), concurrency=2, progress=False, timeout_s=600)
        )
        try:
            errors = await ended_before(event, load)
            assert errors is None, f"the run ended before two streams were decoding: {errors}"
            os.killpg(engine.proc.pid, signal.SIGKILL)
            return await load
        finally:
            await cancel_both(event, load)

    return run_blocking(run())


def test_engine_killed_mid_stream():
    engine = LlamaCppEngine(EngineConfig(ctx=2048, parallel=2)).start()
    try:
        result = killed_mid_stream(engine, both_slots_decoding, max_tokens=400)
    finally:
        engine.stop()
    cut_two_and_refused_four(result)


def test_connection_cut_before_the_usage_chunk():
    with LlamaCppEngine(EngineConfig(ctx=1024, parallel=2)) as engine, FaultProxy(engine.port, "cut_before_usage") as proxy:
        endpoint = Endpoint("proxied", proxy.base_url, engine.model_id)
        result = run_blocking(run_load(endpoint, specs(4, 12), concurrency=2, progress=False, timeout_s=30))
    accounted(result, 4)
    assert proxy.cuts == 4 and result.summary.failed == 4
    for r in result.records:
        assert r.chunks > 0 and r.output_tokens == r.chunks and r.tokens_estimated
        assert "RemoteProtocolError" in r.error or "before the usage chunk" in r.error


# Read timeouts tried in turn: a short one first; a longer one only when the machine was too slow for the
# shorter before the freeze (a stream timed out while the engine was merely busy, so nothing was frozen).
FREEZE_TIMEOUTS_S = (3.0, 10.0, 30.0, 90.0)


def frozen_mid_stream(engine, decoding, max_tokens: int = 400, endpoint: Endpoint | None = None) -> tuple[object, float, float]:
    """Two streams of `max_tokens` to `endpoint` (default: the engine's own); once `decoding(engine)` reports both
    decoding, the engine's whole process group is frozen (SIGSTOP), and thawed when the run returns. Returns the
    run, the seconds from the freeze to the run's end, and the read timeout it ran with. The freeze lasts until
    the run returns, so a run that returns at all was ended by the client's timeout."""
    endpoint = endpoint or endpoint_for(engine)

    async def attempt(timeout_s: float):
        event = asyncio.create_task(decoding(engine))
        load = asyncio.create_task(run_load(endpoint, specs(2, max_tokens), concurrency=2, progress=False, timeout_s=timeout_s))
        try:
            errors = await ended_before(event, load)
            if errors is not None:  # the run ended before the event: nothing was frozen
                if errors and all("ReadTimeout" in e for e in errors):
                    return None  # the machine was slower than this timeout: try a longer one
                raise AssertionError(f"the run ended before both streams were decoding: {errors}")
            os.killpg(engine.proc.pid, signal.SIGSTOP)
            try:
                frozen = time.monotonic()
                return await load, time.monotonic() - frozen
            finally:
                os.killpg(engine.proc.pid, signal.SIGCONT)
        finally:
            await cancel_both(event, load)

    for timeout_s in FREEZE_TIMEOUTS_S:
        outcome = run_blocking(attempt(timeout_s))
        if outcome is not None:
            return (*outcome, timeout_s)
    raise AssertionError(f"every run ended before both streams were decoding (read timeouts {FREEZE_TIMEOUTS_S} s)")


def test_server_that_stalls_past_the_timeout():
    with LlamaCppEngine(EngineConfig(ctx=1024, parallel=2)) as engine:
        result, waited_s, timeout_s = frozen_mid_stream(engine, both_slots_decoding)
        # and the engine serves again once it thaws
        after = run_blocking(run_load(endpoint_for(engine), specs(1, 4), concurrency=1, progress=False, timeout_s=600))
    accounted(result, 2)
    assert result.summary.failed == 2 and all("ReadTimeout" in r.error for r in result.records), [r.error for r in result.records]
    assert all(r.chunks > 0 for r in result.records)  # both were mid-stream when the engine froze
    assert waited_s < timeout_s + 30, (waited_s, timeout_s)  # the timeout ended the run, not a thaw
    assert after.summary.completed == 1, after.summary.errors


def test_gateway_5xx_becomes_records_and_the_run_goes_on():
    engine = LlamaCppEngine(EngineConfig(ctx=1024, parallel=1)).start()
    with FaultProxy(engine.port, "gateway") as gateway:
        endpoint = Endpoint("gateway", gateway.base_url, engine.model_id)
        before = run_blocking(run_load(endpoint, specs(2, 4), concurrency=1, progress=False))
        engine.stop()  # the upstream goes away; the gateway keeps answering
        after = run_blocking(run_load(endpoint, specs(3, 4), concurrency=1, progress=False))
    accounted(before, 2)
    accounted(after, 3)
    assert before.summary.failed == 0
    assert after.summary.failed == 3 and all(r.error.startswith("HTTP 502") and "Bad Gateway" in r.error for r in after.records)
    assert after.summary.errors == {after.records[0].error: 3}


def test_64_concurrent_streams_against_4_slots():
    with LlamaCppEngine(EngineConfig(ctx=4 * 160, parallel=4)) as engine:
        endpoint = endpoint_for(engine)
        tracemalloc.start()
        # the last of 64 requests waits for 15 rounds of 4 slots: on a busy machine that is minutes, so the
        # timeout bounds a hang, not the machine's speed
        result = run_blocking(run_load(endpoint, specs(64, 8, "Name a colour."), concurrency=64, progress=False, timeout_s=900))
        _, peak_bytes = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert engine.is_running()
    accounted(result, 64)
    assert result.summary.completed == 64, result.summary.errors
    assert all(r.output_tokens == 8 for r in result.records)
    assert peak_bytes < 64 * 2**20, f"client peak {peak_bytes / 2**20:.1f} MiB for 64 streams"


@pytest.mark.slow
@pytest.mark.parametrize("streams", [128, 256])
def test_many_more_streams_than_slots(streams):
    with LlamaCppEngine(EngineConfig(ctx=4 * 160, parallel=4)) as engine:
        tracemalloc.start()
        result = run_blocking(
            run_load(
                endpoint_for(engine), specs(streams, 8, "Name a colour."), concurrency=streams, progress=False, timeout_s=300
            )
        )
        _, peak_bytes = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    accounted(result, streams)
    assert peak_bytes < streams * 2**20
