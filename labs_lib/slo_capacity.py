"""How much load fits an SLO: the highest request rate whose TTFT and TPOT at a percentile meet it.

A bounded search over open-loop rates (Poisson arrivals, or gamma with `burstiness`): the rate doubles from
`start_rps` until a rate misses the SLO or the server saturates, then the gap between the last rate that met it
and the first that did not is bisected, `max_points` runs in all. The answer is an interval: capacity lies
between the highest rate that met the SLO and the lowest that did not (the search stops when the gap is within
`resolution` of the rate, or out of runs).

Latency counts from when each request was *scheduled* (`load.from_schedule_ms`): a client that falls behind its
schedule would otherwise hide the wait it adds (coordinated omission). A rate "saturates" when the server cannot
keep up: requests queue, so every request of the last third of the run waited more than twice as long for its first
token as the first third's median, or fewer requests per second completed than this run's arrivals offered (below
`1 - SATURATION_SHORTFALL` of it). "Every" because a queue delays each late request, while a burst of random
arrivals, or the host stalling for a moment, delays a few.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .endpoints import Endpoint
from .errors import BadInput, positive_int, positive_number
from .load import SLO, Arrivals, LoadResult, arrival_times_s, from_schedule_ms, latency_values_ms, percentile_ms, run_load
from .timing import RequestSpec

PERCENTILE_CHOICES = (50, 90, 95, 99)
SATURATION_SHORTFALL = 0.2  # completed/s this far below offered/s: the server did not keep up
QUEUE_GROWTH = 2.0  # the last third's fastest TTFT over the first third's median: requests are queueing
QUEUE_FLOOR_MS = 200.0  # ... and slower by at least this much, so that jitter on a fast server is not a queue
TTFT_HEADROOM = 2.0  # lab 03's SLO: TTFT p90 within this x the slowest closed-loop median within the slots
TPOT_HEADROOM = 1.5  # ... and TPOT p90 within this x
Search = Callable[[Callable[[float], Awaitable[bool]], float, float, int, float], Awaitable[tuple]]  # bracket's signature


@dataclass
class RatePoint:
    """One open-loop run at `rate_rps`: its latencies at the percentile (ms, from the schedule) and the verdict."""

    rate_rps: float
    completed: int
    failed: int
    achieved_rps: float  # completed requests / (last completion - first scheduled send)
    ttft_ms: float | None  # at the percentile, from the scheduled send
    tpot_ms: float | None  # at the percentile
    ttft_from_send_ms: float | None  # at the percentile, from the actual send: lower where the client lagged
    queue_growth: float | None  # the last third's fastest TTFT / the first third's median
    meets: bool
    saturated: bool
    why: str  # what missed, or "meets"


@dataclass
class SLOCapacity:
    """The search's answer: capacity lies in [max_rps, first_miss_rps) (None: not found on that side)."""

    slo: SLO
    percentile: float
    max_rps: float | None  # the highest rate that met the SLO (None: even the lowest rate tried missed it)
    first_miss_rps: float | None  # the lowest rate that missed (None: every rate tried met it; capacity is higher)
    points: list[RatePoint] = field(default_factory=list)

    def describe(self) -> str:
        """One line a person reads."""
        limits = ", ".join(
            f"{name} p{self.percentile:g} <= {v:g} ms"
            for name, v in (("TTFT", self.slo.ttft_ms), ("TPOT", self.slo.tpot_ms))
            if v
        )
        if self.max_rps is None:
            return f"no rate tried meets {limits}: the lowest, {self.points[0].rate_rps:g} req/s, already misses ({self.points[0].why})"
        if self.first_miss_rps is None:
            return f"every rate tried meets {limits}: capacity is above {self.max_rps:g} req/s (raise max_rps or max_points)"
        return f"capacity for {limits}: between {self.max_rps:g} and {self.first_miss_rps:g} req/s"

    def rows(self) -> list[dict]:
        return [asdict(p) for p in self.points]


def judge(result: LoadResult, rate_rps: float, slo: SLO, percentile: float) -> RatePoint:
    """One run's verdict against the SLO at the percentile, with the saturation signals."""
    records = result.records
    ok = [r for r in records if r.ok]
    ttft = percentile_ms(from_schedule_ms(records, "ttft"), percentile)
    tpot = percentile_ms(latency_values_ms(records, "tpot"), percentile)
    scheduled = sorted(r.scheduled_s if r.scheduled_s is not None else r.sent_s for r in records)
    by_send = sorted(ok, key=lambda r: r.sent_s)
    third = max(1, len(by_send) // 3)
    # service time before any queue could build: the first third's median E2E (s)
    baseline_s = float(np.median([r.e2e_ms or 0.0 for r in by_send[:third]])) / 1000 if by_send else 0.0
    last_done = max((r.sent_s + (r.e2e_ms or 0.0) / 1000 for r in ok), default=scheduled[0])
    span = last_done - scheduled[0]
    achieved = len(ok) / span if span > 0 else 0.0
    # the rate the schedule offered, read from its own times: `arrivals` may be anyone's, not only vLLM's scaled draw
    offered = len(records) / (scheduled[-1] - scheduled[0] + baseline_s) if scheduled[-1] > scheduled[0] else rate_rps
    growth = None
    if len(by_send) >= 6:
        early = float(np.median([r.ttft_ms or 0.0 for r in by_send[:third]]))
        late = min(r.ttft_ms or 0.0 for r in by_send[-third:])
        # a queue, not jitter: every late request twice as slow, and slower by more than QUEUE_FLOOR_MS
        growth = late / early if early > 0 and late - early > QUEUE_FLOOR_MS else 1.0
    misses = []
    if len(ok) < len(records):
        misses.append(f"{len(records) - len(ok)} failed")
    if slo.ttft_ms is not None and (ttft is None or ttft > slo.ttft_ms):
        misses.append(f"TTFT p{percentile:g} {ttft:,.0f} ms > {slo.ttft_ms:g}" if ttft is not None else "no TTFT")
    if slo.tpot_ms is not None and (tpot is None or tpot > slo.tpot_ms):
        misses.append(f"TPOT p{percentile:g} {tpot:,.1f} ms > {slo.tpot_ms:g}" if tpot is not None else "no TPOT")
    saturated = achieved < (1 - SATURATION_SHORTFALL) * offered or (growth is not None and growth > QUEUE_GROWTH)
    if saturated:
        misses.append(f"saturated: {achieved:.2f} req/s completed of {offered:.2f} offered, TTFT growth x{growth or 1:.1f}")
    return RatePoint(
        rate_rps=rate_rps,
        completed=len(ok),
        failed=len(records) - len(ok),
        achieved_rps=round(achieved, 3),
        ttft_ms=ttft,
        tpot_ms=tpot,
        ttft_from_send_ms=percentile_ms(latency_values_ms(records, "ttft"), percentile),
        queue_growth=growth,
        meets=not misses,
        saturated=saturated,
        why="; ".join(misses) or "meets",
    )


def slo_from_closed_loop(levels: Sequence[int], ttft_p50_ms: Sequence[float], tpot_p50_ms: Sequence[float], slots: int) -> SLO:
    """An SLO relative to this server (ms): TTFT within TTFT_HEADROOM and TPOT within TPOT_HEADROOM times their
    slowest closed-loop medians at the concurrency levels within `slots` (a full batch, no queue). The slowest, not
    the busiest level's: on a CPU one request can decode slower than four together (vLLM: 71 against 61 ms). Headroom,
    because random arrivals bunch up: at half the closed loop's capacity, 10 requests' p90 reached 1.3x (TPOT) and
    1.6x (TTFT) those medians in this project's runs (tests/test_slo_capacity.py), so a limit closer to them is
    missed at the first rate a quick search tries."""
    levels, ttft, tpot = list(levels), list(ttft_p50_ms), list(tpot_p50_ms)  # by position: a table's columns or lists
    within = [i for i, c in enumerate(levels) if c <= slots] or [levels.index(min(levels))]  # none: the lightest
    return SLO(
        ttft_ms=round(TTFT_HEADROOM * max(float(ttft[i]) for i in within), 1),
        tpot_ms=round(TPOT_HEADROOM * max(float(tpot[i]) for i in within), 1),
    )


def check_search(slo: SLO, percentile: float, requests: int, start_rps: float, max_rps: float, max_points: int = 8) -> None:
    """BadInput (one line) for settings the search cannot honour; called before any engine starts."""
    if slo.ttft_ms is None and slo.tpot_ms is None:
        raise BadInput("slo", "no limit", "allowed: a TTFT and/or TPOT limit in ms")
    if percentile not in PERCENTILE_CHOICES:
        raise BadInput("percentile", percentile, "allowed: " + ", ".join(map(str, PERCENTILE_CHOICES)))
    # a percentile is an observation only with enough requests beyond it: p90 needs 10, p99 100
    needed = round(100 / (100 - percentile))
    if requests < needed:
        raise BadInput("requests", requests, f"allowed: at least {needed} requests per rate for p{percentile:g} (one beyond it)")
    if max_rps < start_rps:
        raise BadInput("max_rps", max_rps, f"allowed: at least start_rps ({start_rps:g})")
    if max_points < 2:
        raise BadInput("max_points", max_points, "allowed: 2 or more runs")


async def slo_capacity(
    endpoint: Endpoint,
    make_specs: Callable[[int], list[RequestSpec]],
    slo: SLO,
    *,
    percentile: float = 90,
    requests: int = 20,
    start_rps: float = 0.5,
    max_rps: float = 64.0,
    max_points: int = 8,
    resolution: float = 0.25,
    burstiness: float = 1.0,
    seed: int = 0,
    progress: bool = True,
    on_point: Callable[[RatePoint], None] | None = None,
    arrivals: Arrivals = arrival_times_s,
    search: Search | None = None,
) -> SLOCapacity:
    """The highest open-loop request rate (req/s) whose TTFT and TPOT at `percentile` meet `slo`, bracketed.

    make_specs(n) gives n requests (fresh prompts per run: a repeated prompt would be a prefix-cache hit). Each rate's
    requests arrive at the times `arrivals` draws; `search` chooses the rates (lab 03's participant's `bracket`, or
    the library's)."""
    requests = positive_int("requests", requests, maximum=100_000)
    start_rps, max_rps = positive_number("start_rps", start_rps), positive_number("max_rps", max_rps)
    max_points = positive_int("max_points", max_points, maximum=100)
    check_search(slo, percentile, requests, start_rps, max_rps, max_points)
    from .progress import bar as tqdm

    found = SLOCapacity(slo, percentile, None, None)
    bar = tqdm(total=max_points, desc="SLO capacity", unit="rate", disable=not progress)

    async def measure(rate: float) -> RatePoint:
        result = await run_load(
            endpoint,
            make_specs(requests),
            rate=rate,
            burstiness=burstiness,
            seed=seed + len(found.points),
            progress=False,
            arrivals=arrivals,
        )
        point = judge(result, rate, slo, percentile)
        found.points.append(point)
        bar.update(1)
        bar.set_postfix_str(f"{rate:g} req/s: {point.why}"[:60])
        if on_point:
            on_point(point)
        return point

    async def meets(rate: float) -> bool:
        return (await measure(rate)).meets

    try:
        found.max_rps, found.first_miss_rps = await (search or bracket)(meets, start_rps, max_rps, max_points, resolution)
    finally:
        bar.close()
    return found


async def bracket(
    meets: Callable[[float], Awaitable[bool]], start: float, ceiling: float, max_points: int, resolution: float
) -> tuple[float | None, float | None]:
    """The search alone: (highest rate that met, lowest that missed), calling meets(rate) at most max_points times.
    Doubles from start until a miss or the ceiling, then bisects until the gap is within resolution x the rate."""
    good: float | None = None
    bad: float | None = None
    tried = 0
    rate = start
    while tried < max_points:
        tried += 1
        if await meets(rate):
            good = rate
        else:
            bad = rate
            break
        if rate >= ceiling:
            break
        rate = min(rate * 2, ceiling)
    while good is not None and bad is not None and tried < max_points and bad - good > resolution * good:
        tried += 1
        middle = round((good + bad) / 2, 3)
        if await meets(middle):
            good = middle
        else:
            bad = middle
    return good, bad
