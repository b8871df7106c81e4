"""Record one real chat stream, line by line with its arrival times, as a test fixture (tests/fixtures/streams/).

    python tools/record_stream.py --engine vllm --out tests/fixtures/streams/vllm_chat_0.32.0.json

The engine is started as the labs start it (the shipped Gemma 3 270M), sent one streamed chat request (max_tokens
12, include_usage, greedy) through labs_lib.timing.measure(keep_trace=True), and stopped; the file keeps
[seconds after sending, SSE line] pairs, blank lines dropped, and says where and when it was recorded.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labs_lib.endpoints import endpoint_for
from labs_lib.engines import EngineConfig, make_engine
from labs_lib.timing import RequestSpec, measure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["llamacpp", "vllm"], required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with make_engine(args.engine, EngineConfig(max_model_len=2048, parallel=1, kv_cache_gib=1)) as engine:
        endpoint = endpoint_for(engine)
        measure(endpoint, RequestSpec("Say hello.", 4))  # warm: the recorded request is not the first
        record, timer = measure(endpoint, RequestSpec("Write one short sentence about the sea.", 12), keep_trace=True)
        described = engine.install.describe().split(" from ")[0] if hasattr(engine, "install") else args.engine
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    args.out.write_text(
        json.dumps(
            {
                "provenance": f"{described} serving the shipped Gemma 3 270M on the project's {platform.machine()} CPU "
                f"machine, {when}: POST /v1/chat/completions, stream=true, include_usage, "
                "max_tokens 12, after one warm-up request. Captured by tools/record_stream.py with "
                "labs_lib.timing.measure(keep_trace=True): [seconds after sending, SSE line], blank lines dropped.",
                "end_s": timer.end_s,
                "ttft_ms": record.ttft_ms,
                "trace": timer.trace,
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    print(f"{args.out}: {len(timer.trace)} lines, TTFT {record.ttft_ms:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
