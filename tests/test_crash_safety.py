"""Crash-safe sweeps: a sweep killed (SIGKILL) mid-point leaves a parseable results file; a torn last
line (a kill mid-write) is dropped with a warning; the re-run keeps every finished point untouched
and completes the rest. The randomized variant (kill at a random moment, repeatedly) needs --run-slow."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, TAG_VARIABLE, run_cli, wait_until_gone

from labs_lib.sweep import read_rows

GRID = (
    "name: crash\nengine: llamacpp\nbase: {ctx: 1024}\naxes: {parallel: [1, 2, 3]}\n"
    "workloads: [{name: tiny, concurrency: [1], requests: 2, prompt_tokens: 16, max_tokens: 24}]\n"
)


def rows_in(path) -> int:
    return len([line for line in path.read_text().splitlines() if line.strip()]) if path.exists() else 0


def kill_sweep(tmp_path, tag: str, after_rows: int, extra_delay_s: float = 0.0):
    grid, out = tmp_path / "grid.yaml", tmp_path / "rows.jsonl"
    grid.write_text(GRID)
    proc = subprocess.Popen(
        [sys.executable, "-m", "labs_lib", "sweep", "--grid", str(grid), "--out", str(out)],
        cwd=REPO,
        env={**os.environ, TAG_VARIABLE: tag},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while rows_in(out) < after_rows and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(extra_delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert not wait_until_gone(tag, 20), "the sweep's engine outlived the kill"
    return grid, out


def rerun_and_check(grid, out, finished_before: list[dict]) -> subprocess.CompletedProcess:
    done = run_cli("sweep", "--grid", str(grid), "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = read_rows(out)
    assert [r["point_id"] for r in rows[: len(finished_before)]] == [r["point_id"] for r in finished_before]
    assert rows[: len(finished_before)] == finished_before  # kept byte for byte: nothing re-run
    assert len(rows) == 3 and len({r["point_id"] for r in rows}) == 3 and all(r["status"] == "ok" for r in rows)
    return done


@pytest.mark.engine
def test_kill_mid_point_then_resume(tmp_path):
    grid, out = kill_sweep(tmp_path, f"crash-{os.getpid()}", after_rows=1, extra_delay_s=1.0)
    finished = read_rows(out)  # parseable as left
    assert len(finished) in (1, 2)
    rerun_and_check(grid, out, finished)


@pytest.mark.engine
def test_torn_last_line_is_dropped_with_a_warning_on_resume(tmp_path):
    grid, out = kill_sweep(tmp_path, f"torn-{os.getpid()}", after_rows=1)
    finished = read_rows(out)
    whole = json.dumps({**finished[-1], "point_id": "half-written"})
    with open(out, "a") as f:  # what a kill in the middle of a write leaves: the start of a row, no newline
        f.write(whole[: len(whole) // 2])
    with pytest.warns(UserWarning, match="torn last line"):
        assert read_rows(out) == finished
    done = rerun_and_check(grid, out, finished)
    said = [line for line in done.stderr.splitlines() if "torn last line" in line]
    assert len(said) == 1 and said[0].startswith("warning: ") and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.parametrize("trial", range(6))
def test_kill_at_a_random_moment(trial, tmp_path):
    rng = random.Random(1000 + trial)
    grid, out = kill_sweep(
        tmp_path, f"crash-random-{trial}-{os.getpid()}", after_rows=rng.choice([0, 1, 2]), extra_delay_s=rng.uniform(0, 4)
    )
    rerun_and_check(grid, out, read_rows(out))
