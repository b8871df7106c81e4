"""Lab 03's build-its: a closed-loop load generator, open-loop arrival times (the mechanism: what an open loop
sends, and when), and the search for the highest request rate within an SLO."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np

from ..load import arrival_times_s, closed_loop
from ..slo_capacity import bracket
from .base import Case, Core, awaited, run_apart


def _drive_closed_loop(load_generator: Callable, args: tuple) -> str:
    """Run a closed_loop over a probe send whose request i takes durations[i] event-loop turns (args: durations,
    concurrency), on an event loop of its own (a notebook's is already running). Returns what the probe saw: the
    answers, the sends, the most in flight, and whether the users kept every slot busy while requests waited (a
    refill takes a few turns: more than four idle slot-turns per request is an engine left waiting)."""
    durations, concurrency = args
    seen = {"sends": 0, "in_flight": 0, "peak": 0, "idle_slot_turns": 0}

    async def send(i: int) -> str:
        if not 0 <= i < len(durations):
            raise IndexError(f"send({i}): there are {len(durations)} requests, 0 … {len(durations) - 1}")
        seen["sends"] += 1
        seen["in_flight"] += 1
        seen["peak"] = max(seen["peak"], seen["in_flight"])
        for _ in range(durations[i]):
            await asyncio.sleep(0)  # one turn of the event loop: the other requests in flight move on
        seen["in_flight"] -= 1
        return f"answer {i}"

    async def clock() -> None:  # each turn: the slots left free while a request waits to be sent
        while True:
            usable = min(concurrency, len(durations) - seen["sends"] + seen["in_flight"])
            seen["idle_slot_turns"] += max(0, usable - seen["in_flight"])
            await asyncio.sleep(0)

    async def drive() -> Any:
        ticking = asyncio.create_task(clock())
        try:
            return await awaited(load_generator(send, len(durations), concurrency), "send(i)")
        finally:
            ticking.cancel()

    answers = run_apart(drive)
    in_order = isinstance(answers, (list, tuple)) and list(answers) == [f"answer {i}" for i in range(len(durations))]
    busy = seen["idle_slot_turns"] <= 4 * len(durations)
    return (
        f"{'answers in request order' if in_order else f'answers {answers!r}'}; {seen['sends']} sends; "
        f"at most {seen['peak']} in flight; slots kept busy: {'yes' if busy else 'no'}"
    )


def _closed_loop_cases() -> list[Case]:
    return [
        Case(((4, 4, 4, 4), 1), "4 requests, one user", "concurrency caps what is in flight: one user sends one request at a time, not all at once"),
        Case(((5, 5, 5), 8), "3 requests, 8 users", "the users send at the same time: all 3 requests in flight together, each sent once (no send(3))"),
        Case(((30, 20, 10, 5), 4), "4 requests answered in reverse order", "answers[i] is request i's answer, whatever order the answers arrive in"),
        Case(((200, 5, 5, 5, 5, 5, 5, 5, 5, 5), 4), "one long request among nine short ones, 4 users", "a user sends its next request the moment its answer arrives; waiting for a whole batch (static batching) leaves the engine idle behind the long one"),
        Case(((6, 9, 4, 7, 5, 8, 3, 6), 2), "8 requests of mixed lengths, 2 users", "at most `concurrency` in flight and refilled at once, each request sent once, answers in request order"),
    ]  # fmt: skip


MEAN_TOL = 0.03  # 200,000 gaps: the mean of a gamma sample with CV 2 is within 1.4% of its expectation 99.7% of the time
CV_TOL = 0.05


def _drive_arrivals(arrivals: Callable, args: tuple) -> str:
    """Call `arrivals` twice with one case's arguments (n, rate, burstiness, seed) and say what its times hold: their
    number, the first after a gap of its own, the last at n / rate, none earlier than the one before, the mean gap
    against 1 / rate, the gaps' coefficient of variation against 1 / sqrt(burstiness), and the same times for the
    same seed. Properties, not values: any correct way of drawing the gaps passes."""
    n, rate, burstiness, seed = args
    times = np.asarray(arrivals(n, rate, burstiness, seed), dtype=float)
    again = np.asarray(arrivals(n, rate, burstiness, seed), dtype=float)
    if times.shape != (n,):
        return f"{times.size} times for {n} requests"
    gaps = np.diff(times, prepend=0.0)  # the first request's gap is from the start
    last_ok = bool(np.isclose(times[-1], n / rate, rtol=1e-9, atol=0))
    facts = [f"{n} times", f"the first after a gap: {'yes' if times[0] > 0 else f'no (at {times[0]:.3g} s)'}"]
    facts.append(f"the last at n / rate: {'yes' if last_ok else f'no ({times[-1]:.4g} s, want {n / rate:.4g})'}")
    facts.append(f"never earlier than the one before: {'yes' if (gaps >= 0).all() else 'no'}")
    if n >= 1000:  # enough gaps for their mean and spread to say something
        mean_ok = abs(gaps.mean() * rate - 1) <= MEAN_TOL
        cv = gaps.std() / gaps.mean()
        cv_ok = abs(cv * np.sqrt(burstiness) - 1) <= CV_TOL
        facts.append(f"mean gap 1 / rate: {'yes' if mean_ok else f'no ({gaps.mean():.4g} s, want {1 / rate:.4g})'}")
        facts.append(
            f"gaps' spread 1 / sqrt(burstiness): {'yes' if cv_ok else f'no (CV {cv:.3g}, want {1 / np.sqrt(burstiness):.3g})'}"
        )
    facts.append(f"the same seed, the same times: {'yes' if np.array_equal(times, again) else 'no'}")
    return "; ".join(facts)


def _arrival_cases() -> list[Case]:
    return [
        Case((5, 2.0, 1.0, 0), "five requests at 2 per second", "one send time per request, in seconds from the start: the running sum of one gap per request (the first request waits its own), scaled so that the last is at n / rate (2.5 s here), as vLLM does; seed the generator: the same seed, the same times"),
        Case((200_000, 4.0, 1.0, 1), "Poisson arrivals at 4 per second", "the gaps average 1 / rate; a gamma of shape 1 is an exponential (Poisson arrivals): its gaps' CV is 1"),
        Case((200_000, 4.0, 0.25, 2), "bursty arrivals (burstiness 0.25)", "shape = burstiness sets the spread, CV 1 / sqrt(0.25) = 2, and scale = 1 / (rate x burstiness) keeps the mean gap at 1 / rate"),
        Case((200_000, 0.5, 4.0, 3), "steadier arrivals (burstiness 4) at 0.5 per second", "burstiness above 1 evens the gaps out (CV 0.5) without changing the rate"),
    ]  # fmt: skip


def _drive_search(search: Callable, args: tuple) -> str:
    """Run `search` (async) against a server that meets the SLO up to a capacity (args: capacity, start, ceiling,
    max_points, resolution), counting its measurements. Says what came back and whether it is a bracket the
    measurements support: the rate it returns as met was measured and met, the one it returns as missed was
    measured and missed, no more than max_points measurements, and the gap narrowed to resolution unless the
    measurements ran out."""
    capacity, start, ceiling, max_points, resolution = args
    measured: dict[float, bool] = {}
    calls = 0

    async def meets(rate: float) -> bool:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        measured[rate] = rate <= capacity
        return measured[rate]

    async def drive() -> Any:
        return await awaited(search(meets, start, ceiling, max_points, resolution), "meets(rate)")

    found = run_apart(drive)
    if not (isinstance(found, (tuple, list)) and len(found) == 2):
        return f"returned {found!r}, not (highest rate that met, lowest that missed)"
    good, bad = found
    facts = [
        f"met: {good!r}" + ("" if good is None or measured.get(good) is True else " (not measured as met)"),
        f"missed: {bad!r}" + ("" if bad is None or measured.get(bad) is False else " (not measured as missed)"),
        f"within {max_points} measurements: {'yes' if calls <= max_points else f'no ({calls})'}",
    ]
    if good is not None and bad is not None:
        narrow = bad - good <= resolution * good or calls >= max_points
        facts.append(f"narrowed to the resolution or out of measurements: {'yes' if narrow else 'no'}")
    return "; ".join(facts)


def _search_cases() -> list[Case]:
    return [
        Case((3.3, 0.5, 64.0, 20, 0.25), "capacity 3.3 req/s, start 0.5", "double from start until a rate misses (0.5, 1, 2, 4: 4 misses), then bisect between the last met and the first missed"),
        Case((100.0, 1.0, 8.0, 20, 0.25), "every rate meets, up to the ceiling 8", "stop at the ceiling: (8, None), nothing missed (the server's capacity is above what was asked)"),
        Case((0.1, 1.0, 8.0, 20, 0.25), "the first rate already misses", "nothing met: (None, 1), and no bisection without a rate that met"),
        Case((5.0, 1.0, 64.0, 4, 0.01), "only 4 measurements allowed", "count every measurement, doubling and bisecting alike, and return the bracket you have when they run out"),
        Case((6.0, 1.0, 64.0, 30, 0.05), "a fine resolution", "bisect until the missed rate is within resolution x the met rate, not a fixed number of times"),
    ]  # fmt: skip


CORES: dict[str, Core] = {
    "closed_loop": Core(
        closed_loop,
        _closed_loop_cases,
        closed_loop,
        "import asyncio\nfrom collections.abc import Awaitable, Callable\nfrom typing import Any",
        _drive_closed_loop,
    ),
    "arrival_times_s": Core(arrival_times_s, _arrival_cases, arrival_times_s, "import numpy as np", _drive_arrivals),
    "bracket": Core(bracket, _search_cases, bracket, "from collections.abc import Awaitable, Callable", _drive_search),
}
