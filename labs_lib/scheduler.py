"""Continuous batching, step by step: an iteration-level scheduler (vLLM V1's, reduced to what sets latency: a
token budget per step, a cap on sequences, decodes first, chunked prefill) and a simulation of a closed-loop load
through it, its step time calibrated from the engine's own one-user measurement.

A step runs every scheduled request's tokens in one forward pass. Its time is modelled as
fixed_s + per_token_s x tokens: the fixed part (the weights read once, the launch) is one decode step of one
sequence, the TPOT measured at concurrency 1; the per-token part is what a prompt token adds, from the TTFT
measured there. The model leaves out what grows with the context (attention) and any queue outside the engine,
so where the prediction and the measurement part ways is where those matter."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

Need = tuple[int, int]  # (request id, tokens it needs now: its prompt tokens not yet prefilled, or 1 to decode)
ScheduleStep = Callable[[list[Need], list[Need], int, int], list[Need]]


def schedule_step(
    running: list[tuple[int, int]], waiting: list[tuple[int, int]], max_num_seqs: int, token_budget: int
) -> list[tuple[int, int]]:
    """One iteration of continuous batching: (request id, tokens) to run this step. The running requests first, in
    order, each given what it needs (1 to decode, or the rest of its prompt) within the budget left; then waiting
    requests, first come first served, while fewer than max_num_seqs are scheduled and budget is left, each given
    its prompt or as much of it as the budget allows (chunked prefill). A request given no token is not listed."""
    scheduled: list[tuple[int, int]] = []
    budget = token_budget
    for rid, need in running:
        if budget == 0:
            break
        scheduled.append((rid, min(need, budget)))
        budget -= scheduled[-1][1]
    for rid, need in waiting:
        if budget == 0 or len(scheduled) >= max_num_seqs:
            break
        scheduled.append((rid, min(need, budget)))
        budget -= scheduled[-1][1]
    return scheduled


@dataclass(frozen=True)
class StepCost:
    """Seconds of one engine step: fixed_s + per_token_s x the tokens it runs."""

    fixed_s: float
    per_token_s: float

    @classmethod
    def calibrated(cls, tpot_ms: float, ttft_ms: float, prompt_tokens: int) -> StepCost:
        """From one user's measurement: a decode step (1 token) takes the TPOT; the prefill step of the prompt
        (prompt_tokens tokens), the TTFT."""
        per_token_s = max(0.0, (ttft_ms - tpot_ms) / 1000 / max(prompt_tokens - 1, 1))
        return cls(max(0.0, tpot_ms / 1000 - per_token_s), per_token_s)

    def seconds(self, tokens: int) -> float:
        return self.fixed_s + self.per_token_s * tokens


@dataclass(frozen=True)
class Predicted:
    """A simulated load: p50 TTFT and TPOT (ms) over its requests, output tokens per second, steps run."""

    ttft_p50_ms: float
    tpot_p50_ms: float
    tok_s: float
    steps: int


def simulate(
    step: ScheduleStep,
    cost: StepCost,
    *,
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    max_num_seqs: int,
    token_budget: int,
) -> Predicted:
    """A closed loop of `concurrency` users sending `requests` requests of prompt_tokens in and output_tokens out,
    scheduled by `step`. The step that finishes a prompt also gives its first token; each later step one more."""
    arrival: dict[int, float] = {}
    prefill_left: dict[int, int] = {}
    first_at: dict[int, float] = {}
    made: dict[int, int] = {}
    waiting: list[int] = []
    running: list[int] = []
    ttft, tpot = [], []
    sent = done = steps = 0
    now = 0.0

    def send() -> None:
        nonlocal sent
        arrival[sent], prefill_left[sent], made[sent] = now, prompt_tokens, 0
        waiting.append(sent)
        sent += 1

    for _ in range(min(concurrency, requests)):
        send()
    while done < requests:
        need = lambda rid: prefill_left[rid] or 1  # noqa: E731 — the rest of the prompt, else one decode token
        batch = step([(r, need(r)) for r in running], [(r, need(r)) for r in waiting], max_num_seqs, token_budget)
        if not batch:
            raise ValueError(f"the step scheduled nothing with {len(running)} running and {len(waiting)} waiting")
        now += cost.seconds(sum(tokens for _, tokens in batch))
        steps += 1
        for rid, tokens in batch:
            if rid in waiting:
                waiting.remove(rid)
                running.append(rid)
            if prefill_left[rid]:
                prefill_left[rid] -= tokens
                if prefill_left[rid]:
                    continue  # a chunk of the prompt: no token yet
            made[rid] += 1
            if made[rid] == 1:
                first_at[rid] = now
                ttft.append((now - arrival[rid]) * 1000)
            if made[rid] == output_tokens:
                running.remove(rid)
                done += 1
                if output_tokens > 1:
                    tpot.append((now - first_at[rid]) * 1000 / (output_tokens - 1))
                if sent < requests:  # the user sends the next request at once
                    send()
    return Predicted(statistics.median(ttft), statistics.median(tpot) if tpot else 0.0, requests * output_tokens / now, steps)
