"""`python -m labs_lib serve`: the embedded engine in the foreground, for JupyterLab users and other tools."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from .engine import EngineConfig
from .errors import BadInput
from .keys import mask, read_key


def _on_off_auto(value: str | None) -> bool | None:
    if value is None or value == "auto":
        return None
    if value in ("on", "off"):
        return value == "on"
    raise BadInput("--flash-attn", value, "allowed: on, off, auto")


def allocation_lines(engine) -> list[str]:
    alloc = engine.allocation
    if alloc is None or not alloc.caches:
        return ["KV cache: not reported"]
    lines = [f"KV cache: {alloc.kv_mib:.2f} MiB for {alloc.n_slots} slot(s) x {alloc.n_ctx_seq:,} tokens "
             f"(n_ctx {alloc.n_ctx:,}, flash attention {'on' if alloc.flash_attn_resolved else 'off'})"]
    for c in alloc.caches:
        lines.append(f"  {c.kind:<4} {c.size_mib:>8} MiB  {c.cells:,} cells x {c.layers} layers x {c.seqs} seqs  "
                     f"K {c.type_k} {c.k_mib} MiB, V {c.type_v} {c.v_mib} MiB")
    return lines


def cmd_serve(args: argparse.Namespace) -> int:
    from .llamacpp_engine import LlamaCppEngine

    if args.api_key_env:
        read_key(args.api_key_env, required=True)
    config = EngineConfig(model=args.model_file, ctx=args.ctx, parallel=args.parallel, kv_cache_dtype=args.kv_dtype,
                          kv_cache_dtype_v=args.kv_dtype_v, flash_attention=_on_off_auto(args.flash_attn),
                          prompt_cache=not args.no_prompt_cache, batch_tokens=args.batch, ubatch_tokens=args.ubatch,
                          threads=args.threads, swa_full=args.swa_full, kv_unified=args.kv_unified,
                          api_key_env=args.api_key_env, port=args.port, host=args.host, served_model_name=args.served_model_name)
    engine = LlamaCppEngine(config)

    def on_term(signum, frame):  # SIGTERM: stop like Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        print(f"starting llama.cpp with {engine.model_path.name} …", flush=True)
        engine.start(timeout_s=args.timeout)
        key = engine.api_key
        print(f"OpenAI base URL: {engine.base_url}")
        print(f"model id:        {engine.model_id}")
        print(f"API key:         {mask(key)}" + (f" (from ${args.api_key_env})" if key else " — none required"))
        for line in allocation_lines(engine):
            print(line)
        print(f"log:             {engine.log_path}")
        print(f"ready in {engine.started_s:.1f} s. Ctrl-C to stop.", flush=True)
        while engine.is_running():
            time.sleep(0.5)
        print(f"error: the engine exited on its own; log tail:\n{engine.log_tail(10)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping …", flush=True)
        return 0
    finally:
        engine.stop()
        print("stopped.", flush=True)


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the embedded llama.cpp engine in the foreground")
    p.add_argument("--port", help="port (default: a free one)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--ctx", default=4096, help="total KV cells shared by all slots (default 4096)")
    p.add_argument("--parallel", default=1, help="slots: sequences decoded together (default 1)")
    p.add_argument("--kv-dtype", default="f16", help="K and V cache type: f16 (default), q8_0, q4_0, …")
    p.add_argument("--kv-dtype-v", help="V cache type when it differs from K")
    p.add_argument("--batch", help="n_batch: tokens per decode step (default 2048)")
    p.add_argument("--ubatch", help="n_ubatch: physical batch (default 512)")
    p.add_argument("--swa-full", action="store_true", help="full-size sliding-window cache")
    p.add_argument("--kv-unified", action="store_true", help="one KV stream shared by all slots")
    p.add_argument("--flash-attn", choices=["on", "off", "auto"], default="auto")
    p.add_argument("--no-prompt-cache", action="store_true", help="recompute every prompt")
    p.add_argument("--threads", help="CPU threads (default: llama.cpp's choice)")
    p.add_argument("--api-key-env", help="NAME of the environment variable holding the key clients must send")
    p.add_argument("--model-file", help="serve another GGUF instead of the shipped Gemma 3 270M")
    p.add_argument("--served-model-name", help="the model id clients send (default gemma-3-270m / the file name)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness")
    p.set_defaults(func=cmd_serve)
