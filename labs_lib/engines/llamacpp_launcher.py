"""Child process: llama.cpp's HTTP server (xllamacpp) until told to stop.

Started by LlamaCppEngine with `python -m labs_lib.engines.llamacpp_launcher`; reads its configuration as
JSON on stdin (the API key stays in the environment, under the variable the config names, so it
never appears in `ps`). Logs go to stderr.

Stopping: llama.cpp's teardown blocks for ~30 s while a stream is in flight, holding the GIL, so
this process never tears down: SIGTERM/SIGINT/SIGHUP end it with os._exit, and a watcher thread
does the same when the parent process dies (including SIGKILL of the parent).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import threading
import time

from .guard import expected_parent

KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


def _exit_now(signum=None, frame=None) -> None:
    sys.stderr.flush()
    os._exit(0)


def _watch_parent(parent_pid: int, interval_s: float = 0.2) -> None:
    def loop() -> None:
        while True:  # checked at once too: the parent may have died before this process got here
            if os.getppid() != parent_pid:
                print("launcher: parent process is gone; exiting", file=sys.stderr, flush=True)
                _exit_now()
            time.sleep(interval_s)

    threading.Thread(target=loop, name="watch-parent", daemon=True).start()


def _limit_memory(limit_mib: int | None) -> None:
    """Cap this process's address space, so a context too large fails to allocate instead of
    waking the OOM killer (llama.cpp zero-fills its KV buffers, touching every page)."""
    if limit_mib is None:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        limit = int(total * 0.75)
    else:
        limit = int(limit_mib) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def build_params(cfg: dict):
    """xllamacpp CommonParams from the engine configuration (see EngineConfig)."""
    import xllamacpp as x

    def ggml_type(name: str):
        name = name.lower()
        if name not in KV_TYPES:
            raise ValueError(f"unknown KV cache type {name!r}; allowed: {', '.join(KV_TYPES)}")
        return getattr(x.ggml_type, "GGML_TYPE_" + name.upper())

    p = x.CommonParams()
    p.model.path = cfg["model_path"]
    p.n_ctx = int(cfg["ctx"])
    p.n_parallel = int(cfg.get("parallel") or 1)
    p.cache_type_k = ggml_type(cfg["kv_cache_dtype"])
    p.cache_type_v = ggml_type(cfg.get("kv_cache_dtype_v") or cfg["kv_cache_dtype"])
    fa = cfg.get("flash_attention")
    p.flash_attn_type = (
        x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_AUTO
        if fa is None
        else x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if fa
        else x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    if not cfg.get("prompt_cache", True):
        p.cache_prompt = False  # no reuse of a slot's previous prompt
        p.cache_ram_mib = 0  # no prompt cache across slots
    if cfg.get("batch_tokens"):
        p.n_batch = int(cfg["batch_tokens"])
    if cfg.get("ubatch_tokens"):
        p.n_ubatch = int(cfg["ubatch_tokens"])
    if cfg.get("threads"):
        p.cpuparams.n_threads = int(cfg["threads"])
        p.cpuparams_batch.n_threads = int(cfg["threads"])
    # Worker threads sleep between steps (poll 0) unless asked to spin (llama.cpp's own default is 50): with two
    # engines, or an engine and a test, on two cores, spinning threads starve each other; bench/cpu_poll.py measures it.
    p.cpuparams.poll = p.cpuparams_batch.poll = int(cfg.get("cpu_poll") or 0)
    p.swa_full = bool(cfg.get("swa_full"))
    p.kv_unified = bool(cfg.get("kv_unified"))
    p.fit_params = False  # serve exactly the context asked for; the labs compare it with the KV math
    key_env = cfg.get("api_key_env")
    if key_env:
        p.api_keys = [os.environ[key_env].strip()]
    p.hostnames = [cfg.get("host", "127.0.0.1")]
    p.port = int(cfg["port"])
    p.model_alias = {cfg["served_model_name"]}
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.endpoint_props = True
    template = cfg.get("chat_template")
    if template:
        # a built-in template name; with use_jinja on, the name itself would become the template text
        p.chat_template = template
        p.use_jinja = False
    p.verbosity = 4  # KV allocation lines appear only at verbosity >= 4
    return p


def main() -> int:
    parent = expected_parent()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _exit_now)
    _watch_parent(parent)
    cfg = json.loads(sys.stdin.read())
    try:
        _limit_memory(cfg.get("memory_limit_mib"))
        params = build_params(cfg)
        import xllamacpp

        server = xllamacpp.Server(params)  # returns once listening
    except Exception as exc:
        print(f"launcher: error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(3)
    print(f"launcher: ready at {server.listening_address}", file=sys.stderr, flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    raise SystemExit(main())
