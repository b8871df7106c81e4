"""Does llama.cpp's thread polling matter? Decode speed with worker threads sleeping (cpu_poll 0, the
labs' setting) and spinning (50, llama.cpp's own default): alone, and with a second engine decoding at
the same time on the same cores (what a test suite, a notebook beside a server, or CI does).

    .venv/bin/python bench/cpu_poll.py [--tokens 64] [--rounds 3]

Prints tokens/s per configuration and the ratios; PASS when sleeping costs under 10% alone.
"""

from __future__ import annotations

import argparse
import statistics
import threading

from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine

from _common import header, verdict


def decode_tok_s(engine: LlamaCppEngine, tokens: int) -> float:
    """Greedy decode of `tokens` tokens after BOS, timed by the server (predicted_per_second)."""
    body = {"prompt": "The lighthouse keeper", "n_predict": tokens, "temperature": 0, "cache_prompt": False, "ignore_eos": True}
    return float(engine.api.completion(body)["timings"]["predicted_per_second"])


def measure(poll: int, tokens: int, rounds: int, busy: bool) -> float:
    with LlamaCppEngine(EngineConfig(ctx=1024, cpu_poll=poll)) as engine:
        decode_tok_s(engine, 8)  # warm-up
        if not busy:
            return statistics.median(decode_tok_s(engine, tokens) for _ in range(rounds))
        with LlamaCppEngine(EngineConfig(ctx=1024, cpu_poll=poll)) as other:
            stop = threading.Event()

            def load() -> None:  # the neighbour decodes until the measurement is done
                while not stop.is_set():
                    decode_tok_s(other, 32)

            worker = threading.Thread(target=load, daemon=True)
            worker.start()
            try:
                return statistics.median(decode_tok_s(engine, tokens) for _ in range(rounds))
            finally:
                stop.set()
                worker.join(timeout=300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    header("llama.cpp thread polling: sleeping (0) vs spinning (50)")
    results = {(poll, busy): measure(poll, args.tokens, args.rounds, busy) for busy in (False, True) for poll in (0, 50)}
    for (poll, busy), tok_s in results.items():
        print(f"  poll {poll:>2}, {'beside a second decoding engine' if busy else 'alone':<32} {tok_s:8.1f} tok/s")
    alone = results[(0, False)] / results[(50, False)]
    shared = results[(0, True)] / results[(50, True)]
    print(f"sleep/spin alone: {alone:.2f}x; beside a second engine: {shared:.2f}x")
    return verdict({"sleeping threads cost under 10% of a lone engine's decode speed": alone >= 0.9})


if __name__ == "__main__":
    raise SystemExit(main())
