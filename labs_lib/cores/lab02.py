"""Lab 02's build-its: the metrics of one stream from its token times, a decode step with a KV cache (the
mechanism: then timed against decoding without one), and a closed-loop load generator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np

from ..load import closed_loop
from ..timing import metrics_from_times
from ..tiny_decoder import TinyHead, causal_attention, decode, decode_step, tokens
from .base import Case, Core, awaited, run_apart


def _timing_cases() -> list[Case]:
    return [
        Case(([0.2, 0.25, 0.3, 0.35], 4), "four one-token chunks", "TTFT is the first token's time, E2E the last's; times are seconds, the metrics milliseconds"),
        Case(([0.5, 0.6, 0.9], 7), "seven tokens in three chunks", "TPOT divides the decode time by output tokens - 1, not by chunks; ITL is one gap per pair of chunks"),
        Case(([0.1, 0.15, 0.5, 0.55], 4), "a stall between chunks 2 and 3", "ITL keeps each gap (the 350 ms stall shows); TPOT is their mean"),
        Case(([0.3], 1), "one token", "one token has no decode interval: TPOT is None (undefined), not 0; ITL is empty"),
        Case(([], None), "no token (a failed request)", "nothing arrived: None for each time, and no ITL"),
    ]  # fmt: skip


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


def _drive_decode(step: Callable, args: tuple) -> str:
    """Decode random tokens one at a time with `step` (args: tokens, d_model, seed, the tokens' scale) from an
    empty cache, and say whether every output is full causal attention's and how the cache filled."""
    n_tokens, d_model, seed, scale = args
    head, x = TinyHead.random(d_model, seed), tokens(n_tokens, d_model, seed + 1, scale)
    outputs, held = decode(step, x, head)
    want = causal_attention(x, head)
    wrong = [i for i in range(n_tokens) if not np.allclose(outputs[i], want[i], rtol=1e-4, atol=1e-5)]
    verdict = (
        f"every output matches causal attention ({n_tokens} positions)"
        if not wrong
        else f"position {wrong[0]} differs from causal attention"
    )
    return f"{verdict}; cache length after each step: {', '.join(map(str, held))}"


def _decode_cases() -> list[Case]:
    return [
        Case((1, 8, 0, 1.0), "the first token", "write the new token's key and value in row `length`, add 1 to length, then attend: the first token attends to itself alone (its output is its value)"),
        Case((6, 8, 1, 1.0), "six tokens, d_model 8", "each step writes one key and one value in row `length`, adds 1 to length, and attends the new query over rows 0 … length - 1: softmax(K q / sqrt(d)) V"),
        Case((5, 64, 2, 1.0), "five tokens, d_model 64", "the scores are divided by sqrt(d_model) (8 here) before the softmax"),
        Case((4, 16, 3, 40.0), "large activations (scores in the thousands)", "subtract the largest score before exp: the softmax is the same, and exp(1000) overflows to inf (nan outputs)"),
    ]  # fmt: skip


CORES: dict[str, Core] = {
    "metrics_from_times": Core(metrics_from_times, _timing_cases, metrics_from_times, "from itertools import pairwise"),
    "decode_step": Core(decode_step, _decode_cases, decode_step, "import math\n\nimport numpy as np", _drive_decode),
    "closed_loop": Core(
        closed_loop,
        _closed_loop_cases,
        closed_loop,
        "import asyncio\nfrom collections.abc import Awaitable, Callable\nfrom typing import Any",
        _drive_closed_loop,
    ),
}
