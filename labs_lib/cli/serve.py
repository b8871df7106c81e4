"""`serve`: an engine in the foreground, for JupyterLab users and other tools."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from ..errors import BadInput


def _on_off_auto(value: str | None) -> bool | None:
    if value is None or value == "auto":
        return None
    if value in ("on", "off"):
        return value == "on"
    raise BadInput("--flash-attn", value, "allowed: on, off, auto")


class StopRequested(BaseException):
    """Ctrl-C or SIGTERM while serving. Not KeyboardInterrupt: CPython (3.11) marks a process as killed by Ctrl-C
    when a KeyboardInterrupt passes through code run by exec() (as dataclasses build their methods during an
    import), and at exit kills it with SIGINT even though the exception was caught, so a SIGTERM during start-up
    ended `serve` with -2 about once in twenty after it had stopped everything (reproduced with a caught
    KeyboardInterrupt inside exec(): exit 130)."""


def _stop_on_signals() -> list[int]:
    """Ctrl-C and SIGTERM raise StopRequested; the signals received so far, which `run` checks too: a handler runs
    wherever the main thread is, and where that is a weakref callback or a __del__ (an import's module-lock callback,
    seen in CI), Python prints "Exception ignored" and drops the exception, and serve went on serving."""
    received: list[int] = []

    def on_stop(signum, frame):
        received.append(signum)
        raise StopRequested(signum)

    signal.signal(signal.SIGTERM, on_stop)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # left ignored where started with SIGINT ignored
        signal.signal(signal.SIGINT, on_stop)
    return received


def _raise_if_stopped(received: list[int]) -> None:
    if received:
        raise StopRequested(received[0])


def run(args: argparse.Namespace) -> int:
    from ..engines import KINDS, engine_class, make_engine
    from ..errors import positive_number
    from ..keys import mask, read_key

    if args.api_key_env:
        read_key(args.api_key_env, required=True)
    common = {
        "api_key_env": args.api_key_env,
        "port": args.port,
        "host": args.host,
        "served_model_name": args.served_model_name,
        "prompt_cache": not args.no_prompt_cache,
        "kv_cache_dtype": args.kv_dtype or "f16",
    }
    chosen = engine_class(args.engine)
    takers = {kind: engine_class(kind).SERVE_OPTIONS for kind in KINDS}
    given = {name: getattr(args, name) for options in takers.values() for name in options}
    given = {name: value for name, value in given.items() if value is not None and value is not False}
    for name, value in given.items():
        if name not in chosen.SERVE_OPTIONS:
            engines = " or ".join(kind for kind, options in takers.items() if name in options)
            raise BadInput("--" + name.replace("_", "-"), value, f"allowed with --engine {engines} only")
    if "flash_attn" in given:
        given["flash_attn"] = _on_off_auto(given["flash_attn"])
    config = chosen.serve_config(given, **common)
    start = {} if args.timeout is None else {"timeout_s": positive_number("--timeout", args.timeout)}
    engine = make_engine(args.engine, config)

    received = _stop_on_signals()
    try:
        print(f"starting {engine.kind} with {engine.model_id} …", flush=True)
        engine.start(**start)
        _raise_if_stopped(received)
        key = engine.api_key
        print(f"OpenAI base URL: {engine.base_url}")
        print(f"model id:        {engine.model_id}")
        print(f"API key:         {mask(key)}" + (f" (from ${args.api_key_env})" if key else " — none required"))
        for line in engine.allocation_lines():
            print(line)
        print(f"log:             {engine.log_path}")
        print(f"ready in {engine.started_s:.1f} s. Ctrl-C to stop.", flush=True)
        while engine.is_running():
            _raise_if_stopped(received)
            time.sleep(0.5)
        print(f"error: the engine exited on its own; log tail:\n{engine.log_tail(10)}", file=sys.stderr)
        return 1
    except StopRequested:
        print("\nstopping …", flush=True)
        return 0
    finally:
        engine.stop()
        print("stopped.", flush=True)


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="run an engine in the foreground: llama.cpp (default) or vLLM")
    # checked by the registry when run (engine_class: one line naming the kinds), not imported for --help
    p.add_argument("--engine", default="llamacpp", help="llamacpp (default) or vllm")
    p.add_argument("--port", help="port (default: a free one)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--ctx", help="llamacpp: total KV cells shared by all slots (default 4096)")
    p.add_argument("--parallel", help="llamacpp: slots, sequences decoded together (default 1)")
    p.add_argument("--kv-dtype", help="K and V cache type: llama.cpp f16 (default), q8_0, q4_0, …; vLLM auto (default), fp8, …")
    p.add_argument("--kv-dtype-v", help="llamacpp: V cache type when it differs from K")
    p.add_argument("--batch", help="llamacpp: n_batch, tokens per decode step (default 2048)")
    p.add_argument("--ubatch", help="llamacpp: n_ubatch, the physical batch (default 512)")
    p.add_argument("--swa-full", action="store_true", help="llamacpp: full-size sliding-window cache")
    p.add_argument("--kv-unified", action="store_true", help="llamacpp: one KV stream shared by all slots")
    p.add_argument("--flash-attn", choices=["on", "off", "auto"], help="llamacpp (default auto)")
    p.add_argument("--no-prompt-cache", action="store_true", help="recompute every prompt")
    p.add_argument("--threads", help="llamacpp: CPU threads (default: llama.cpp's choice)")
    p.add_argument("--api-key-env", help="NAME of the environment variable holding the key clients must send")
    p.add_argument("--model-file", help="llamacpp: serve another GGUF instead of the shipped Gemma 3 270M")
    p.add_argument("--served-model-name", help="the model id clients send (default gemma-3-270m / the file name)")
    p.add_argument("--max-model-len", help="longest request in tokens (llama.cpp: sets --ctx to this x --parallel)")
    p.add_argument("--model", help="vllm: a Hugging Face id or folder (default: the shipped Gemma 3 270M, converted once)")
    p.add_argument("--max-num-seqs", help="vllm: sequences decoded together")
    p.add_argument("--max-num-batched-tokens", help="vllm: tokens per scheduler step")
    p.add_argument(
        "--kv-cache-gib",
        help="vllm: the KV pool in GiB (passed as --kv-cache-memory-bytes; default 1 on CPU, from the utilization on a GPU)",
    )
    p.add_argument("--timeout", type=float, help="seconds to wait for readiness (default: 120 llama.cpp, 1800 vLLM)")
    p.set_defaults(func=run)
