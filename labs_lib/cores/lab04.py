"""Lab 04's build-its: the loop that runs one engine per configuration, one step of a continuous-batching
scheduler (the mechanism: then simulated beside the engine's measurements), and goodput under an SLO."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..errors import EngineError
from ..load import SLO, summarize
from ..scheduler import schedule_step
from ..sweep import sweep_loop
from ..timing import RequestRecord
from .base import Case, Core, awaited, run_apart


def goodput(records: list[RequestRecord], slo: SLO, duration_s: float) -> float:
    """Requests per second of the run that met every limit of `slo` (None: no limit); a failed request never counts;
    a one-token reply (no TPOT) meets a TPOT limit, as `vllm bench serve` counts it."""
    good = 0
    for r in records:
        tpot = 0.0 if r.tpot_ms is None and (r.output_tokens or 0) <= 1 else r.tpot_ms
        limits = ((slo.ttft_ms, r.ttft_ms), (slo.tpot_ms, tpot), (slo.e2e_ms, r.e2e_ms))
        if r.ok and all(limit is None or (value is not None and value <= limit) for limit, value in limits):
            good += 1
    return good / duration_s


def _goodput_reference(records: list[RequestRecord], slo: SLO, duration_s: float) -> float | None:
    """load.summarize()'s goodput: the figure sweeps and lab 04's tables report."""
    return summarize(records, duration_s, slo).goodput


def _record(ttft_ms: float, tpot_ms: float | None, e2e_ms: float, error: str | None = None) -> RequestRecord:
    return RequestRecord(ttft_ms=ttft_ms, tpot_ms=tpot_ms, e2e_ms=e2e_ms, output_tokens=8 if tpot_ms else 1, error=error)


def _goodput_cases() -> list[Case]:
    fast = [_record(100, 20, 240) for _ in range(4)]
    slo = SLO(ttft_ms=200, tpot_ms=25)
    return [
        Case((fast, slo, 2.0), "4 requests within the SLO in 2 s", "goodput: requests meeting the SLO per second of the run (not a fraction, not a count)"),
        Case(([*fast[:3], _record(300, 20, 440)], slo, 2.0), "one of 4 over the TTFT limit", "a request counts only if it meets every limit"),
        Case(([*fast[:3], _record(90, 15, 200, error="HTTP 500")], slo, 2.0), "a fast request that failed", "a failed request never counts, however fast its numbers"),
        Case(([*fast[:3], _record(300, 20, 440)], SLO(tpot_ms=25), 2.0), "no TTFT limit (None)", "a limit of None is no limit"),
        Case(([*fast[:3], _record(100, None, 100)], slo, 2.0), "a one-token request (no TPOT) under a TPOT limit", "one token has no time between tokens: it meets any TPOT limit, as `vllm bench serve` counts it (TPOT 0)"),
        Case(([*fast[:3], _record(200, 25, 375)], slo, 2.0), "a request exactly at both limits", "at the limit meets it (<=)"),
    ]  # fmt: skip


class _Interrupted(BaseException):
    """Kernel -> Interrupt in the sweep-loop probe: a BaseException as KeyboardInterrupt is (`except Exception` does
    not catch it), but one asyncio hands back like any other rather than stopping its event loop with it."""


class _ProbeEngine:
    """What the sweep-loop probe's start returns: an engine that is running until stopped."""

    def __init__(self, config: str) -> None:
        self.config, self.running = config, True


def _drive_sweep_loop(loop: Callable, args: tuple) -> str:
    """Run a sweep_loop over probe callbacks (args: the configurations, those that do not start, the one whose
    measurement is interrupted) and return what happened, in order: each start, measurement and stop, a start that
    raised, an engine started while another still ran, an engine left running, an interrupt that got out."""
    configs, refused, interrupted = args
    events: list[str] = []
    engines: list[_ProbeEngine] = []

    def start(config: str) -> _ProbeEngine:
        if config in refused:
            events.append(f"start {config}: refused")
            raise EngineError(f"{config} did not start")
        events.append(f"start {config}" + "".join(f" (while {e.config} runs)" for e in engines if e.running))
        engines.append(_ProbeEngine(config))
        return engines[-1]

    async def measure(config: str, engine: _ProbeEngine | None, error: str | None) -> None:
        events.append(f"measure {config}" if error is None else f"record {config} as failed ({error})")
        await asyncio.sleep(0)
        if config == interrupted:
            raise _Interrupted

    def stop(config: str, engine: _ProbeEngine | None) -> None:
        if not isinstance(engine, _ProbeEngine):
            events.append(f"stop {config}: {engine!r} is no engine")
            return
        events.append(f"stop {config}")
        engine.running = False

    async def drive() -> None:
        try:
            await awaited(loop(list(configs), start, measure, stop), "measure(config, engine, error)")
        except EngineError as exc:
            events.append(f"the sweep ended: {exc}")
        except _Interrupted:
            events.append("interrupted")

    run_apart(drive)
    events += [f"{e.config} left running" for e in engines if e.running]
    return "; ".join(events) or "nothing"


def _sweep_loop_cases() -> list[Case]:
    return [
        Case((("A", "B"), (), None), "two configurations", "one engine at a time: start, measure, stop, then the next configuration (two engines at once share the device)"),
        Case((("A", "B", "C"), ("B",), None), "B's engine does not start", "an engine that does not start is a failed row, measure(config, None, reason), then the next configuration; it has nothing to stop"),
        Case((("A", "B"), (), "A"), "Kernel -> Interrupt while A is measured", "always stop: an interrupted (or failed) measurement still stops its engine (try/finally), and the interrupt is not swallowed"),
        Case(((), (), None), "no configuration left (a resumed sweep that is done)", "nothing to start"),
    ]  # fmt: skip


def _schedule_cases() -> list[Case]:
    return [
        Case(([(0, 1), (1, 1)], [(2, 100)], 4, 64), "two decoding, one 100-token prompt waiting, budget 64", "the running requests first (1 token each to decode), then the waiting prompt gets what is left of the budget: 62 tokens now, the rest next step (chunked prefill)"),
        Case(([(0, 1), (1, 1)], [(2, 10), (3, 10), (4, 10)], 3, 512), "2 running, 3 waiting, max_num_seqs 3", "max_num_seqs caps the requests in one step, running ones included: only one waiting request joins"),
        Case(([], [(0, 300), (1, 20)], 8, 128), "a 300-token prompt first in line, budget 128", "first come, first served: the first prompt takes the whole budget (128 of its 300); the short one behind it waits, as nothing is left"),
        Case(([(0, 172), (1, 1)], [(2, 5)], 8, 100), "a prompt half prefilled (172 left) ahead of a decode, budget 100", "a running request gets min(what it needs, budget left), in order: 100 for the prompt, and the decode behind it gets nothing this step (not listed)"),
        Case(([(0, 1)], [], 4, 2048), "one request decoding, nothing waiting", "one token for the one decode; nothing else"),
        Case(([], [], 4, 2048), "nothing to do", "an empty step: []"),
    ]  # fmt: skip


CORES: dict[str, Core] = {
    "goodput": Core(
        _goodput_reference, _goodput_cases, goodput, "from labs_lib.load import SLO\nfrom labs_lib.timing import RequestRecord"
    ),
    "sweep_loop": Core(
        sweep_loop,
        _sweep_loop_cases,
        sweep_loop,
        "from collections.abc import Callable\n\nfrom labs_lib.errors import LabsError",
        _drive_sweep_loop,
    ),
    "schedule_step": Core(schedule_step, _schedule_cases, schedule_step),
}
