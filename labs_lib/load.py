"""Load generation and run summaries: closed loop at fixed concurrency, open loop at a request rate.

Async functions, so a notebook can `await` them at top level and scripts can `asyncio.run` them.
Open-loop arrivals follow vLLM's benchmark: gamma-distributed gaps with mean 1/rate and shape
`burstiness` (1 = Poisson), scaled so that the last request goes at n / rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

from .endpoints import Endpoint
from .errors import BadInput, LabsError, choice, positive_int, positive_number
from .timing import TIMEOUT_S, RequestRecord, RequestSpec, ameasure

PERCENTILES = (50, 90, 99)
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")
ClosedLoop = Callable[[Callable[[int], Awaitable], int, int], Awaitable[list]]  # closed_loop's signature
Arrivals = Callable[[int, float, float, int], Sequence[float]]  # arrival_times_s's signature


def latency_values_ms(records: list[RequestRecord], metric: str) -> list[float]:
    """One latency metric over a run's successful requests (ms): TTFT, TPOT and E2E one value per request,
    ITL every gap of every request pooled (as `vllm bench serve` pools them)."""
    metric = choice("metric", metric, LATENCY_METRICS)
    ok = [r for r in records if r.ok]
    if metric == "itl":
        return [gap for r in ok for gap in r.itl_ms]
    return [v for r in ok if (v := getattr(r, f"{metric}_ms")) is not None]


def definition_forms(rec: RequestRecord) -> pd.DataFrame:
    """One request timed both ways (ms): the harness's TTFT and ITL (chunks that carry text) beside `vllm bench
    serve`'s client's (chunks whose `choices` is non-empty, text or not: ttft_first_choice_ms, itl_choice_chunks_ms).
    They part where a role-only chunk comes before the first token, or a text-less chunk (the finish) after it."""
    forms = {
        "harness (chunks with text)": (rec.ttft_ms, rec.itl_ms),
        "vllm bench serve's client (chunks with choices)": (rec.ttft_first_choice_ms, rec.itl_choice_chunks_ms),
    }
    return pd.DataFrame(
        [
            {
                "timed as": name,
                "TTFT ms": ttft,
                "ITL gaps": len(gaps),
                "ITL p50 ms": percentile_ms(gaps, 50),
                "ITL min ms": min(gaps, default=None),
            }
            for name, (ttft, gaps) in forms.items()
        ]
    ).set_index("timed as")


def from_schedule_ms(records: list[RequestRecord], metric: str) -> list[float]:
    """TTFT or E2E of an open-loop run's successful requests measured from when each was *scheduled* (ms): the
    latency plus the client's own lag behind its schedule. Where the client kept up, the same as from the send;
    where it fell behind (or a concurrency cap held requests back), the difference is the coordinated omission
    that latency from the send hides. Closed-loop records (no schedule) count from their send."""
    metric = choice("metric", metric, ("ttft", "e2e"))
    out = []
    for r in records:
        value = getattr(r, f"{metric}_ms")
        if r.ok and value is not None:
            lag_ms = (r.sent_s - r.scheduled_s) * 1000 if r.scheduled_s is not None else 0.0
            out.append(value + max(0.0, lag_ms))
    return out


def percentile_ms(values: list[float], percentile: float) -> float | None:
    """The percentile of `values` as numpy computes it by default (linear between the two nearest ranks, as
    vLLM's benchmark does); None without values. With n values, any percentile above 100 - 100/(n - 1) lies
    between the two largest: p99 of 16 requests is all but the maximum."""
    if isinstance(percentile, bool) or not isinstance(percentile, (int, float)) or not 0 <= percentile <= 100:
        raise BadInput("percentile", percentile, "allowed: a number from 0 to 100")
    return float(np.percentile(np.asarray(values, dtype=float), percentile)) if len(values) else None


@dataclass(frozen=True)
class SLO:
    """Service-level objectives for goodput (ms; None = no limit)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def met(self, r: RequestRecord) -> bool:
        """Whether a request met every limit; a failed one never does. A one-token reply has no time per output
        token: it meets any TPOT limit, as `vllm bench serve` counts it (its TPOT taken as 0 for goodput:
        vllm/benchmarks/serve.py, calculate_metrics, in 0.32 and 0.33)."""
        if not r.ok:
            return False
        one_token = r.tpot_ms is None and r.output_tokens is not None and r.output_tokens <= 1
        tpot = 0.0 if one_token else r.tpot_ms
        checks = ((self.ttft_ms, r.ttft_ms), (self.tpot_ms, tpot), (self.e2e_ms, r.e2e_ms))
        return all(limit is None or (value is not None and value <= limit) for limit, value in checks)


@dataclass
class Stats:
    """Mean, standard deviation and percentiles of one metric over a run (ms; None without values)."""

    mean: float | None = None
    std: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Stats:
        kept = [v for v in values if v is not None]
        if not kept:
            return cls()
        p50, p90, p99 = (percentile_ms(kept, p) for p in PERCENTILES)
        return cls(float(np.mean(kept)), float(np.std(kept)), p50, p90, p99)


@dataclass
class Summary:
    """One run's metrics over its successful requests (failures counted, never averaged in).

    Throughputs are per second of the run's wall time; goodput counts requests meeting every SLO."""

    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    tokens_estimated: bool
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2e_ms: Stats
    goodput: float | None = None
    slo_attainment: float | None = None
    errors: dict[str, int] = field(default_factory=dict)

    def flat(self) -> dict:
        """Flat columns as `vllm bench serve` names them (p50_ttft_ms, mean_tpot_ms, …), errors left out."""
        out = {k: v for k, v in asdict(self).items() if not isinstance(v, dict)}
        for metric in LATENCY_METRICS:
            for stat, value in asdict(getattr(self, f"{metric}_ms")).items():
                out[f"{stat}_{metric}_ms"] = value
        return out


def summarize(records: list[RequestRecord], duration_s: float, slo: SLO | None = None) -> Summary:
    """Per-run metrics over successful requests (failures counted, never averaged in)."""
    ok = [r for r in records if r.ok]
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    in_tokens = sum(r.prompt_tokens or 0 for r in ok)

    def per_s(n: float) -> float | None:
        return n / duration_s if duration_s > 0 else None

    errors: dict[str, int] = {}
    for r in records:
        if not r.ok:
            reason = r.error or "unknown"
            errors[reason] = errors.get(reason, 0) + 1
    summary = Summary(
        completed=len(ok),
        failed=len(records) - len(ok),
        duration_s=duration_s,
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        request_throughput=per_s(len(ok)),
        output_throughput=per_s(out_tokens),
        total_token_throughput=per_s(in_tokens + out_tokens),
        tokens_estimated=any(r.tokens_estimated for r in ok),
        ttft_ms=Stats.of(latency_values_ms(ok, "ttft")),
        tpot_ms=Stats.of(latency_values_ms(ok, "tpot")),
        itl_ms=Stats.of(latency_values_ms(ok, "itl")),
        e2e_ms=Stats.of(latency_values_ms(ok, "e2e")),
        errors=errors,
    )
    if slo is not None:
        good = sum(slo.met(r) for r in records)
        summary.goodput = per_s(good)
        summary.slo_attainment = good / len(records) if records else None
    return summary


@dataclass
class LoadResult:
    """Records of one run, its settings and its summary."""

    records: list[RequestRecord]
    duration_s: float
    settings: dict = field(default_factory=dict)
    slo: SLO | None = None
    engine_delta: dict[str, float] | None = None  # the engine's /metrics over the run (after - before), when scraped

    @property
    def summary(self) -> Summary:
        return summarize(self.records, self.duration_s, self.slo)

    def row(self) -> dict:
        """Settings and flat summary columns: one table row per run."""
        return {**self.settings, **self.summary.flat()}

    @property
    def df(self) -> pd.DataFrame:
        return pd.DataFrame([r.to_row() for r in self.records])

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """One row per request (CSV) and the settings + summary (JSON). No key is ever written."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = self.df.drop(columns=["text"])
        for gaps in ("itl_ms", "itl_choice_chunks_ms"):  # lists, one per request: JSON in their CSV cell
            rows[gaps] = rows[gaps].map(json.dumps)
        csv_path, json_path = path.with_suffix(".csv"), path.with_suffix(".json")
        rows.to_csv(csv_path, index=False)
        summary = {**self.row(), "errors": self.summary.errors}
        json_path.write_text(
            json.dumps({"summary": summary, "slo": asdict(self.slo) if self.slo else None}, indent=2, default=str)
        )
        return csv_path, json_path


def latency_table(runs: list[LoadResult], metric: str = "ttft", percentile: float = 99) -> pd.DataFrame:
    """One row per run: concurrency, completed requests, output tokens/s, how many values the metric has, and
    its p50 and p`percentile` (ms), columns named as Summary.flat names them (p50_ttft_ms, p95_ttft_ms, …)."""
    metric = choice("metric", metric, LATENCY_METRICS)
    rows = []
    for run in runs:
        values = latency_values_ms(run.records, metric)
        summary = run.summary
        rows.append(
            {
                "concurrency": run.settings.get("concurrency"),
                "completed": summary.completed,
                "output_throughput": summary.output_throughput,
                "values": len(values),
                f"p50_{metric}_ms": percentile_ms(values, 50),
                f"p{percentile:g}_{metric}_ms": percentile_ms(values, percentile),
            }
        )
    return pd.DataFrame(rows)


def _client(endpoint: Endpoint, connections: int, timeout_s: float) -> httpx.AsyncClient:
    # the measurement is of the server: a loopback endpoint never goes through a proxy
    return httpx.AsyncClient(
        timeout=timeout_s,
        trust_env=not endpoint.is_loopback,
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=0),
    )


def _progress(total: int, desc: str, enabled: bool):
    from .progress import bar as tqdm

    return tqdm(total=total, desc=desc, unit="req", disable=not enabled, leave=False)


async def closed_loop(send: Callable[[int], Awaitable[Any]], num_requests: int, concurrency: int) -> list[Any]:
    """Closed-loop load: `concurrency` users, each awaiting send(i) for the next request i (0 … num_requests - 1)
    the moment its previous answer arrives, until none is left; returns the answers in request order."""
    answers: list[Any] = [None] * num_requests
    todo = iter(range(num_requests))  # shared by the users: each takes the next request, none is sent twice

    async def user() -> None:
        for i in todo:
            answers[i] = await send(i)

    await asyncio.gather(*(user() for _ in range(min(concurrency, num_requests))))
    return answers


def arrival_times_s(num_requests: int, rate_rps: float, burstiness: float, seed: int) -> list[float]:
    """Open-loop send times (seconds after the run starts) of `num_requests` requests arriving at `rate_rps`, as
    vLLM 0.33's benchmark computes them (`vllm bench serve --request-rate --burstiness`: benchmarks/serve.py,
    get_request): one gap per request from a gamma distribution of shape `burstiness` and mean 1 / rate_rps (shape 1
    is an exponential: Poisson arrivals; below 1 they come in bursts, above 1 more evenly: the gaps' coefficient of
    variation is 1 / sqrt(burstiness)), summed, then scaled so that the last request goes at exactly
    num_requests / rate_rps. Without that scaling a short run's rate is a draw too (8 exponential gaps sum to within
    ±35% of their mean only two times in three). The same seed, the same times."""
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=num_requests)
    times = np.cumsum(gaps)
    return (times * (num_requests / rate_rps / times[-1])).tolist()


def one_at_a_time_mean_ttft_ms(ttft_alone_ms: float, e2e_alone_ms: float, concurrency: int, requests: int) -> float:
    """Mean TTFT (ms) when `concurrency` closed-loop users send `requests` requests to an engine that serves one at a
    time, first come first served, each request taking e2e_alone_ms (its TTFT alone ttft_alone_ms). The first
    `concurrency` are sent at once and request k of them waits for the k ahead of it; every later one is sent as
    one finishes, behind the concurrency - 1 still queued. Mean wait = e2e_alone x (C(C-1)/2 + (N-C)(C-1)) / N."""
    c = min(positive_int("concurrency", concurrency), positive_int("requests", requests))
    waits = c * (c - 1) / 2 + (requests - c) * (c - 1)  # in units of one request's service time
    return ttft_alone_ms + e2e_alone_ms * waits / requests


def in_flight_means(records: list[RequestRecord], duration_s: float) -> dict[str, float]:
    """Little's law over one run: the time-average number of requests waiting for their first token (the sum of
    the successful requests' TTFT over the run's duration, both in the same unit) and of those decoding (the sum
    of E2E - TTFT). Their total is the mean number in flight: a closed loop's concurrency, less the client's gaps."""
    duration_ms = positive_number("duration_s", duration_s) * 1000
    timed = [(r.ttft_ms, r.e2e_ms) for r in records if r.ok and r.ttft_ms is not None and r.e2e_ms is not None]
    waiting = sum(ttft for ttft, _ in timed) / duration_ms
    decoding = sum(e2e - ttft for ttft, e2e in timed) / duration_ms
    return {"waiting": waiting, "decoding": decoding, "in_flight": waiting + decoding}


async def run_load(
    endpoint: Endpoint,
    specs: list[RequestSpec],
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    slo: SLO | None = None,
    timeout_s: float = TIMEOUT_S,
    progress: bool = True,
    desc: str = "requests",
    settings: dict | None = None,
    load_generator: ClosedLoop = closed_loop,
    arrivals: Arrivals = arrival_times_s,
) -> LoadResult:
    """Send `specs`: at most `concurrency` in flight (closed loop, sent by `load_generator`: lab 03's
    participant's own, or the library's closed_loop), or arriving at `rate` per second (open loop, at the times
    `arrivals` draws: lab 03's participant's own, or the library's arrival_times_s; optionally also capped by
    concurrency)."""
    if not specs:
        raise BadInput("requests", 0, "allowed: at least one request")
    if concurrency is None and rate is None:
        raise BadInput("load", "neither concurrency nor rate", "allowed: a concurrency, a request rate, or both")
    if concurrency is not None:
        concurrency = positive_int("concurrency", concurrency, maximum=100_000)
    if rate is not None:
        rate = positive_number("request rate", rate)
    burstiness = positive_number("burstiness", burstiness)
    records: list[RequestRecord | None] = [None] * len(specs)
    bar = _progress(len(specs), desc, progress)
    async with _client(endpoint, concurrency or len(specs), timeout_s) as client:
        start = time.perf_counter()

        async def send(i: int, scheduled_s: float | None = None) -> RequestRecord:
            rec = await ameasure(client, endpoint, specs[i], request_id=i, sent_s=time.perf_counter() - start)
            rec.scheduled_s = scheduled_s
            records[i] = rec
            bar.update(1)
            return rec

        if rate is None:
            assert concurrency is not None  # checked above: a closed loop has a concurrency
            await load_generator(send, len(specs), concurrency)
        else:
            limit = asyncio.Semaphore(concurrency) if concurrency else contextlib.nullcontext()

            async def arrive(i: int, scheduled_s: float) -> None:
                async with limit:
                    await send(i, scheduled_s)

            tasks = []
            for i, when in enumerate(arrivals(len(specs), rate, burstiness, seed)):
                delay = start + when - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(arrive(i, float(when))))
            await asyncio.gather(*tasks)
        duration = time.perf_counter() - start
    bar.close()
    burst = burstiness if rate else None
    meta = _run_meta(endpoint, settings, requests=len(specs), concurrency=concurrency, request_rate=rate, burstiness=burst)
    return LoadResult([r for r in records if r is not None], duration, meta, slo)


async def run_conversations(
    endpoint: Endpoint,
    conversations: list[list[RequestSpec]],
    *,
    concurrency: int,
    slo: SLO | None = None,
    timeout_s: float = TIMEOUT_S,
    progress: bool = True,
    desc: str = "turns",
    settings: dict | None = None,
) -> LoadResult:
    """Multi-turn load: each conversation's turns sent one after another, each with the whole conversation so far
    (its earlier prompts and the answers the server gave) before its own prompt, so the context grows turn by turn;
    at most `concurrency` conversations at once (a user waits for an answer before the next question). One record
    per turn, with its conversation and turn; a failed turn ends its conversation (the next question needs the
    answer), and the turns never sent are counted as not sent in the settings."""
    if not conversations or not all(conversations):
        raise BadInput("conversations", len(conversations), "allowed: at least one conversation, each with a turn")
    concurrency = positive_int("concurrency", concurrency, maximum=100_000)
    records: list[RequestRecord] = []
    ids = itertools.count()  # taken at send time: conversations in flight together never share an id
    total = sum(len(c) for c in conversations)
    bar = _progress(total, desc, progress)
    async with _client(endpoint, concurrency, timeout_s) as client:
        start = time.perf_counter()

        async def talk(c: int) -> None:  # one user: a conversation, turn after turn
            history: tuple[tuple[str, str], ...] = ()
            for t, spec in enumerate(conversations[c]):
                sent = replace(spec, history=history)
                rec = await ameasure(client, endpoint, sent, request_id=next(ids), sent_s=time.perf_counter() - start)
                rec.conversation, rec.turn = c, t
                records.append(rec)
                bar.update(1)
                if not rec.ok:
                    return
                history = (*history, (str(spec.prompt), rec.text))

        await closed_loop(talk, len(conversations), concurrency)
        duration = time.perf_counter() - start
    bar.close()
    meta = _run_meta(
        endpoint,
        settings,
        requests=total,
        conversations=len(conversations),
        turns_not_sent=total - len(records),
        concurrency=concurrency,
    )
    return LoadResult(records, duration, meta, slo)


def _run_meta(endpoint: Endpoint, settings: dict | None, **fields: object) -> dict:
    """A run's settings: where it was sent, what it sent (`fields`), then the caller's own `settings`."""
    return {"endpoint": endpoint.name, "base_url": endpoint.base_url, "model": endpoint.model, **fields, **(settings or {})}


async def warm_up(endpoint: Endpoint, n: int = 1, max_tokens: int = 4) -> list[RequestRecord]:
    """A few tiny requests so the first measured one does not pay for cold caches."""
    async with _client(endpoint, 1, TIMEOUT_S) as client:
        return [await ameasure(client, endpoint, RequestSpec(f"Warm-up {i}.", max_tokens)) for i in range(n)]


def run_blocking(coro):
    """Run a coroutine from synchronous code (CLI, scripts). In a notebook, `await` it instead.

    Ctrl-C raises KeyboardInterrupt at once, as in synchronous code and in a notebook. asyncio.run's own handler
    (Python 3.11+) only cancels the main task, which a blocking call inside it does not see until the call returns:
    a sweep interrupted while vLLM starts went on waiting for the start (a minute, more on a busy machine)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with _interrupt_at_once():
            return asyncio.run(coro)
    coro.close()
    raise LabsError("an event loop is already running (a notebook?): use `await` instead of run_blocking")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _interrupt_at_once():
    # asyncio.run installs its handler only over Python's default one; elsewhere (a thread, SIGINT ignored) leave it
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


VLLM_PREFILL = "vllm:request_prefill_time_seconds"  # vLLM's histogram of each request's scheduled-to-first-token time


async def prefill_tokens_per_s(endpoint: Endpoint, prompts: list[str], *, extra: dict | None = None) -> float | None:
    """Prefill speed (prompt tokens/s) by the server's own clocks, one uncached prompt at a time (`extra`: the
    engine's uncached_body): the median of its per-request prompt timings (llama.cpp), else its prompt tokens over
    the prefill seconds of its /metrics histogram (vLLM's vllm:request_prefill_time_seconds, scheduled to first
    token). Long prompts run the kernels at their best, so this is the compute roof the roofline compares decode
    with. None when the server reports neither, or its histogram counted requests other than these."""
    from .engines.metrics import delta, scrape

    def metrics() -> dict[str, float] | None:
        try:
            return scrape(endpoint.root_url, endpoint.headers(), timeout_s=5.0)
        except (httpx.HTTPError, ValueError):  # a remote API serves no /metrics
            return None

    specs = [RequestSpec(p, 1, extra=extra or {}) for p in prompts]
    before = metrics()
    records = (await run_load(endpoint, specs, concurrency=1, progress=False)).records
    rates = [r.prompt_tokens * 1000 / r.server_prompt_ms for r in records if r.ok and r.prompt_tokens and r.server_prompt_ms]
    if rates:
        return float(np.median(rates))
    after = metrics() if before is not None else None
    ok = [r for r in records if r.ok and r.prompt_tokens]
    counted = delta(before, after) if before is not None and after is not None else {}
    mean_ms = _histogram_mean_ms(counted, VLLM_PREFILL)
    if not ok or not mean_ms or counted.get(f"{VLLM_PREFILL}_count") != len(ok):
        return None
    return sum(r.prompt_tokens or 0 for r in ok) * 1000 / (mean_ms * len(ok))


def _histogram_mean_ms(d: dict[str, float], name: str) -> float | None:
    count = d.get(f"{name}_count", 0.0)
    return 1000 * d.get(f"{name}_sum", 0.0) / count if count > 0 else None


def ttft_parts(run: LoadResult) -> dict:
    """Where a run's mean TTFT (ms, successful requests, as the client measured it) went, by the engine's own clocks:
    queue (arrival in the engine core to scheduled: vLLM's vllm:request_queue_time_seconds), prefill (scheduled to
    first token: vLLM's vllm:request_prefill_time_seconds; llama.cpp's per-request timings.prompt_ms), and the rest:
    TTFT minus both (HTTP, tokenizing, detokenizing, the stream's first write, and any wait the engine does not report:
    llama.cpp reports no queue time, so its wait for a free slot is in the rest). vLLM's parts are means over the run's
    requests from histogram deltas (`run.engine_delta`); None where the engine reports nothing."""
    ok = [r for r in run.records if r.ok and r.ttft_ms is not None]
    ttft = float(np.mean([r.ttft_ms for r in ok])) if ok else None
    d = run.engine_delta or {}
    queue = _histogram_mean_ms(d, "vllm:request_queue_time_seconds")
    prefill = _histogram_mean_ms(d, VLLM_PREFILL)
    server_prompt = [r.server_prompt_ms for r in ok if r.server_prompt_ms is not None]
    if prefill is None and server_prompt:
        prefill = float(np.mean(server_prompt))
    known = [p for p in (queue, prefill) if p is not None]
    rest = ttft - sum(known) if ttft is not None and known else None
    return {"requests": len(ok), "ttft_ms": ttft, "queue_ms": queue, "prefill_ms": prefill, "rest_ms": rest}
