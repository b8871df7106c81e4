"""Run the reliability tests several times in a row with the cores kept busy (bench/busy_cores.py), the
way docs/reliability.md's "On a busy machine" table was made. Stops at the first failing run unless
--keep-going; prints one line per run and the table row to paste.

    .venv/bin/python bench/busy_runs.py --runs 5            # make test-busy
    .venv/bin/python bench/busy_runs.py --runs 1 -- tests/test_faults.py
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_faults.py", "tests/test_orphans.py", "tests/test_crash_safety.py", "tests/test_harness.py"]


def run_once(tests: list[str], marker: str, workers: int, log_path: Path) -> tuple[int, float, str]:
    """One pytest run beside `workers` spinning processes; returns (exit code, wall s, pytest's summary)."""
    busy = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "busy_cores.py"), "--seconds", "3600", "--workers", str(workers)],
        stdout=subprocess.DEVNULL,
        # a run started from a background job inherits SIGINT ignored; the spinner must still stop on it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    started = time.monotonic()
    try:
        with log_path.open("w") as log:
            code = subprocess.call(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marker, *tests],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    finally:
        busy.send_signal(signal.SIGINT)
        busy.wait()
    wall_s = time.monotonic() - started
    lines = [line for line in log_path.read_text().splitlines() if re.search(r"\d+ (passed|failed|skipped)", line)]
    summary = lines[-1].strip("= ") if lines else "no summary"
    if code == 0 and not re.search(r"[1-9]\d* passed", summary):
        # a run that skipped everything (e.g. vLLM not installed) proves nothing: count it as failed
        return 5, wall_s, f"{summary}: nothing passed"
    return code, wall_s, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs in a row (default 5)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="spinning processes (default: one per core)")
    parser.add_argument("--marker", default="not vllm", help='pytest -m expression (default "not vllm")')
    parser.add_argument("--keep-going", action="store_true", help="run them all even after a failure")
    parser.add_argument("--logs", type=Path, default=ROOT / "runs" / "busy", help="pytest output per run")
    parser.add_argument("tests", nargs="*", default=TESTS, help="test files (default: faults, orphans, crash safety, harness)")
    args = parser.parse_args()
    if args.runs < 1 or args.workers < 1:
        parser.error(f"--runs {args.runs} / --workers {args.workers}: both must be at least 1")
    args.logs.mkdir(parents=True, exist_ok=True)
    print(f"{args.runs} run(s) of {' '.join(args.tests)} (-m {args.marker!r}) beside {args.workers} busy worker(s)", flush=True)
    failed = 0
    for i in range(1, args.runs + 1):
        code, wall_s, summary = run_once(args.tests, args.marker, args.workers, args.logs / f"run_{i}.txt")
        print(f"run {i}: exit {code}, {wall_s:.0f} s: {summary}", flush=True)
        failed += code != 0
        if code != 0 and not args.keep_going:
            print(f"stopped: run {i} failed; its output is {args.logs / f'run_{i}.txt'}")
            break
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
