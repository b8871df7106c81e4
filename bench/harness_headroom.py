"""How many streamed chunks per second the timing harness can take on one core, against a plain
httpx loop reading the same stream.

The stream comes from bench/sse_source.py, a measuring instrument that sends pre-built SSE chunks
as fast as the socket allows (on another core). Goal: the harness keeps up with 10x the highest
token rate the labs measure on a GPU instance (20,000 tokens/s aggregate), i.e. >= 200,000 chunks/s,
one stream and many concurrent streams alike; the per-chunk overhead and the ratio to the plain loop
are reported.

    .venv/bin/python bench/harness_headroom.py [--chunks 200000] [--streams 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from labs_lib.endpoints import Endpoint
from labs_lib.engines import free_port
from labs_lib.timing import RequestSpec, ameasure

from _common import header, verdict

GPU_TOKENS_PER_S = 20_000  # the highest aggregate rate the labs measure on a GPU instance
HEADROOM = 10


async def plain_loop(client: httpx.AsyncClient, url: str, n_chunks: int) -> int:
    """The floor: read the stream line by line and count data lines; no parsing, no clock."""
    count = 0
    async with client.stream("POST", url, json={"max_tokens": n_chunks}) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                count += 1
    return count


async def timed(streams: int, n_chunks: int, port: int, harness: bool) -> tuple[float, int]:
    """Wall seconds to take `streams` concurrent streams of n_chunks each, and the chunks timed."""
    endpoint = Endpoint("sse-source", f"http://127.0.0.1:{port}/v1", "bench")
    spec = RequestSpec("x", max_tokens=n_chunks)
    limits = httpx.Limits(max_connections=streams + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as client:
        t = time.perf_counter()
        if harness:
            records = await asyncio.gather(*(ameasure(client, endpoint, spec, request_id=i) for i in range(streams)))
            bad = [r.error for r in records if not r.ok or r.output_tokens != n_chunks or r.chunks != n_chunks]
            if bad:
                raise SystemExit(f"harness mis-timed the instrument's stream: {bad[:3]}")
            chunks = sum(r.chunks for r in records)
        else:
            counts = await asyncio.gather(*(plain_loop(client, endpoint.base_url + spec.path, n_chunks) for _ in range(streams)))
            chunks = sum(counts) - 3 * streams  # the role, finish and usage lines carry no token
        return time.perf_counter() - t, chunks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200_000, help="chunks per trial, split across the streams")
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams in the second trial")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    header("Harness headroom: streamed chunks per second on one core")

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    port = free_port()
    source_cmd = [sys.executable, str(Path(__file__).with_name("sse_source.py")), "--port", str(port)]
    if len(cpus) >= 2:
        source_cmd += ["--cpu", str(cpus[1])]
        os.sched_setaffinity(0, {cpus[0]})  # the client gets one core, the instrument another
    source = subprocess.Popen(source_cmd, stdout=subprocess.PIPE, text=True)
    try:
        if not (source.stdout and source.stdout.readline().startswith("ready")):
            raise SystemExit("the SSE source did not start")
        print(f"client pinned to CPU {cpus[0] if cpus else '?'}, instrument on CPU {cpus[1] if len(cpus) > 1 else 'shared'}")
        goal = HEADROOM * GPU_TOKENS_PER_S
        checks: dict[str, bool] = {}
        for streams in (1, args.streams):
            per_stream = args.chunks // streams
            rows = {}
            for harness in (False, True):
                asyncio.run(timed(streams, 200, port, harness))  # warm the code paths
                trials = [asyncio.run(timed(streams, per_stream, port, harness)) for _ in range(args.repeats)]
                seconds = statistics.median(t for t, _ in trials)
                rows[harness] = (trials[0][1] / seconds, seconds / trials[0][1] * 1e6)
            (plain_rate, plain_us), (rate, us) = rows[False], rows[True]
            print(
                f"{streams:>3} stream(s) x {per_stream:,} chunks: plain loop {plain_rate:,.0f}/s ({plain_us:.2f} µs/chunk); "
                f"harness {rate:,.0f}/s ({us:.2f} µs/chunk); harness overhead {us - plain_us:.2f} µs/chunk; "
                f"harness/plain throughput {rate / plain_rate:.2f}; headroom {rate / GPU_TOKENS_PER_S:.1f}x of {GPU_TOKENS_PER_S:,} tok/s"
            )
            checks[f"{streams} stream(s): harness >= {goal:,} chunks/s ({HEADROOM}x {GPU_TOKENS_PER_S:,} tok/s)"] = rate >= goal
        return verdict(checks)
    finally:
        source.terminate()
        source.wait(10)


if __name__ == "__main__":
    sys.exit(main())
