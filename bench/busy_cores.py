"""Keep the machine's cores busy for a bounded time, so tests and benchmarks can be run the way CI and
workshop laptops run them: beside other work. Stops by itself.

    .venv/bin/python bench/busy_cores.py --seconds 600 [--workers 2] &
    .venv/bin/python -m pytest tests/test_faults.py

Each worker spins in pure Python (one core each); Ctrl-C or the time limit ends them all.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time


def spin(until: float) -> None:
    x = 0
    while time.monotonic() < until:
        x = (x * 1103515245 + 12345) % 2**31  # arithmetic that no cache makes cheaper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long (default 300 s; at most 3600)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="spinning processes (default: one per core)")
    args = parser.parse_args()
    until = time.monotonic() + min(max(args.seconds, 0.0), 3600.0)
    workers = [multiprocessing.Process(target=spin, args=(until,), daemon=True) for _ in range(max(1, args.workers))]
    for w in workers:
        w.start()
    print(f"busy: {len(workers)} worker(s) for {until - time.monotonic():.0f} s", flush=True)
    try:
        for w in workers:
            w.join()
    except KeyboardInterrupt:
        for w in workers:
            w.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
