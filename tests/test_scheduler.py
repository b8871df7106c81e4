"""The continuous-batching simulation lab 04 runs the participant's scheduler in: calibrated on the one-user point,
it gives that point back, queues requests behind one slot, and sets every measured point beside its prediction."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import REPO

from labs_lib import sweep_views
from labs_lib.scheduler import StepCost, schedule_step, simulate

FIXTURE = REPO / "tests" / "fixtures" / "sweeps" / "batching-llamacpp-quick.jsonl"


def test_the_calibrated_step_gives_the_one_user_point_back_and_one_slot_queues():
    cost = StepCost.calibrated(tpot_ms=12.0, ttft_ms=130.0, prompt_tokens=64)
    load = dict(requests=8, prompt_tokens=64, output_tokens=32, token_budget=2048)
    alone = simulate(schedule_step, cost, concurrency=1, max_num_seqs=1, **load)
    assert alone.ttft_p50_ms == pytest.approx(130.0) and alone.tpot_p50_ms == pytest.approx(12.0)
    queued = simulate(schedule_step, cost, concurrency=4, max_num_seqs=1, **load)
    together = simulate(schedule_step, cost, concurrency=4, max_num_seqs=4, **load)
    # behind one slot a request waits for whole replies: TTFT grows by replies, TPOT does not move
    assert queued.ttft_p50_ms > 3 * alone.ttft_p50_ms and queued.tpot_p50_ms == pytest.approx(alone.tpot_p50_ms)
    assert together.ttft_p50_ms < queued.ttft_p50_ms and together.tok_s > queued.tok_s
    chunked = simulate(schedule_step, cost, concurrency=4, max_num_seqs=4, **{**load, "token_budget": 16})
    assert chunked.steps > together.steps  # prompts of 64 in chunks of 16 take more steps


def test_every_measured_point_is_set_beside_its_prediction():
    df = pd.json_normalize([json.loads(line) for line in FIXTURE.read_text().splitlines()])
    table = sweep_views.scheduled_beside_measured(df, schedule_step)
    assert len(table) == len(df) and set(table.max_num_seqs) == {1, 4}
    base = table[(table.max_num_seqs == 1) & (table.concurrency == 1)].iloc[0]
    assert base["predicted TTFT p50"] == pytest.approx(base["TTFT p50"])
    assert sweep_views.scheduled_beside_measured(df[df["config.parallel"] == 4], schedule_step).empty  # no base
    assert sweep_views.scheduled_beside_measured(None, schedule_step).empty


def test_a_step_that_schedules_nothing_is_named():
    with pytest.raises(ValueError, match="scheduled nothing"):
        simulate(
            lambda *a: [],
            StepCost(0.01, 0.001),
            concurrency=1,
            requests=1,
            prompt_tokens=4,
            output_tokens=2,
            max_num_seqs=1,
            token_budget=8,
        )
