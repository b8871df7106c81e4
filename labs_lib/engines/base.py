"""The engine interface the labs program against: llama.cpp on CPU, vLLM on CPU or GPU.

start(config) -> wait until ready -> base_url, model_id, allocation, log -> stop(). What differs
between engines (tokenizer, teacher-forced scoring, KV allocation, token counters, the command a
user would type) is a method or class attribute here, so callers never ask which engine they hold.
Every engine runs as a child process in its own session and is stopped on success, error,
KeyboardInterrupt, garbage collection and interpreter exit; a child whose parent dies exits
by itself (it watches its parent).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import weakref
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Self

import httpx

from ..errors import EngineError, fraction, positive_int, positive_number
from ..keys import auth_headers, read_key
from ..paths import cache_dir
from .guard import PARENT_PID_VARIABLE


@dataclass
class EngineConfig:
    """Serving knobs in the labs' vocabulary; each engine maps them onto its own flags.

    See engine_mapping() for the vLLM <-> llama.cpp table."""

    model: str | None = None  # llama.cpp: a GGUF path (default: the shipped Gemma 3 270M); vLLM: HF id or path
    served_model_name: str | None = None  # the id clients send (default: gemma-3-270m / the model)
    ctx: int = 4096  # llama.cpp: total KV cells shared by all slots (n_ctx); each slot gets ctx / parallel
    parallel: int | None = None  # sequences decoded together: llama.cpp slots (n_parallel, default 1) / vLLM max_num_seqs
    kv_cache_dtype: str = "f16"  # llama.cpp: f16, q8_0, q4_0, …; vLLM: auto, fp8, …
    kv_cache_dtype_v: str | None = None  # llama.cpp: V cache type when it differs from K
    flash_attention: bool | None = None  # None: the engine decides
    prompt_cache: bool = True  # reuse KV of earlier prompts (llama.cpp prompt cache / vLLM prefix caching)
    batch_tokens: int | None = None  # llama.cpp n_batch / vLLM max_num_batched_tokens
    ubatch_tokens: int | None = None  # llama.cpp n_ubatch
    threads: int | None = None  # CPU threads (llama.cpp); None: the engine's default
    cpu_poll: int = 0  # llama.cpp: threads' busy-polling between steps, 0-100 (0 sleeps; llama.cpp's own default 50 spins)
    swa_full: bool = False  # llama.cpp: full-size sliding-window cache
    kv_unified: bool = False  # llama.cpp: one KV stream shared by all slots
    chat_template: str | None = None  # llama.cpp built-in template name; None: gemma for the shipped model
    memory_limit_mib: int | None = None  # cap on the engine process (RLIMIT_AS); None: 75% of RAM
    api_key_env: str | None = None  # NAME of the environment variable holding the key, never the key
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    # vLLM only
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    chunked_prefill: bool | None = None
    attention_backend: str | None = None
    quantization: str | None = None
    block_size: int | None = None
    tensor_parallel_size: int | None = None
    enforce_eager: bool | None = None  # None: on for vLLM on CPU (start-up ~80 s instead of ~3 min of compiling)
    dtype: str | None = None  # vLLM: the weights' compute dtype (--dtype: auto, bfloat16, float16, float32)
    # vLLM: the KV pool in GiB (--kv-cache-memory-bytes); None: from the utilization on a GPU, 1 GiB on CPU
    kv_cache_gib: float | None = None
    extra_args: list[str] = field(default_factory=list)  # vLLM: further `vllm serve` flags, verbatim

    def validated(self) -> EngineConfig:
        """A copy with numbers converted and checked (CLI values arrive as strings)."""
        changes: dict = {"ctx": positive_int("ctx", self.ctx, maximum=1 << 31)}
        for name in (
            "parallel",
            "batch_tokens",
            "ubatch_tokens",
            "threads",
            "memory_limit_mib",
            "max_model_len",
            "block_size",
            "tensor_parallel_size",
        ):
            if getattr(self, name) is not None:
                changes[name] = positive_int(name, getattr(self, name), maximum=1 << 31)
        changes["cpu_poll"] = positive_int("cpu_poll", self.cpu_poll, minimum=0, maximum=100)
        if self.port is not None:
            changes["port"] = positive_int("port", self.port, maximum=65535)
        if self.gpu_memory_utilization is not None:
            changes["gpu_memory_utilization"] = fraction("gpu_memory_utilization", self.gpu_memory_utilization)
        if self.kv_cache_gib is not None:
            changes["kv_cache_gib"] = positive_number("kv_cache_gib", self.kv_cache_gib)
        if self.api_key_env is not None:
            read_key(self.api_key_env, required=True)
        return replace(self, **changes)

    def with_(self, **changes) -> EngineConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TokenCounters:
    """Names of an engine's /metrics counters of prompt tokens, prompt tokens served from its prefix
    (prompt) cache, and output tokens."""

    prompt: str
    cached: str
    output: str
    prompt_includes_cached: bool  # vLLM counts cache hits as prompt tokens; llama.cpp counts only computed ones


@dataclass(frozen=True)
class EngineInfo:
    """What a running engine reports about itself, for tables and results files."""

    kind: str
    base_url: str
    model_id: str
    pid: int | None
    log_path: str | None


class Engine:
    """Base class: a server process the labs start, talk to over HTTP, and always stop."""

    kind = "base"
    health_path = "/health"
    counters: TokenCounters  # the engine's /metrics token counters
    uncached_body: ClassVar[dict] = {}  # request fields that make the engine compute the prompt (no prompt-cache hit)
    # lab 05's comparison: True, weight variants of the shipped GGUF built here (labs_lib.quant) and served one by
    # one; False, configurations of one checkpoint the engine quantizes itself (dtype, online quantization, KV dtype)
    builds_weight_variants: ClassVar[bool] = False
    # llama.cpp's native /completion: token ids in and out, the prompt cache switchable per request (kv_effect)
    serves_token_ids: ClassVar[bool] = False
    # time.monotonic() when an engine of this process was last stopped: a GPU start soon after may find the card
    # still holding that engine's memory while its process ends (VLLMEngine waits for it)
    last_stopped_at: ClassVar[float] = float("-inf")

    def __init__(self, config: EngineConfig | None = None):
        self.config = (config or EngineConfig()).validated()
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.allocation = None
        self.started_s: float | None = None  # seconds from launch to ready
        self._finalizer: weakref.finalize | None = None

    # -- to implement
    def _command(self) -> tuple[list[str], dict[str, str | None], bytes | None]:
        """argv, environment changes (None removes a variable), bytes for stdin."""
        raise NotImplementedError

    def _parse_allocation(self, log_text: str):
        return None

    def _start_error(self, log_text: str) -> str:
        lines = [ln for ln in log_text.splitlines() if ln.strip()]
        return lines[-1] if lines else "no output"

    @property
    def model_id(self) -> str:
        raise NotImplementedError

    @classmethod
    def command_for(cls, config: EngineConfig, device: str | None = None) -> tuple[str, str]:
        """(the shell command that starts this configuration, a warning or ""), for `device` ("cpu", "gpu") where
        the engine's command depends on it; None: this machine's."""
        raise NotImplementedError

    @classmethod
    def grid_family(cls) -> str:
        """Which of lab 04's grids (data/grids/<family>_<experiment>.yaml) fit this engine on this machine."""
        raise NotImplementedError

    # `serve` options this engine takes (argparse dest) -> the EngineConfig field each sets; cli/serve.py offers the
    # union of all engines' and refuses one the chosen engine does not take
    SERVE_OPTIONS: ClassVar[dict[str, str]] = {}

    @classmethod
    def serve_config(cls, options: dict[str, Any], **common) -> EngineConfig:
        """The configuration `serve` starts from the options given (keys of SERVE_OPTIONS) and the common fields."""
        return EngineConfig(**common, **{cls.SERVE_OPTIONS[name]: value for name, value in options.items()})

    # The engine's own defaults for EngineConfig fields a grid may turn (field -> (value, where it is read));
    # a grid whose configuration leaves them says so (sweep.defaults_note)
    DEFAULTS: ClassVar[dict[str, tuple[object, str]]] = {}

    @classmethod
    def installed_defaults(cls) -> dict[str, object] | None:
        """DEFAULTS' knobs as the installed engine states them, read from its code at run time, with "version";
        None where the engine cannot be read here (not installed, or it states no defaults)."""
        return None

    @staticmethod
    def kv_pool_row(row: dict) -> dict:
        """One sweep result row (flattened: config.*, allocation.*, memory.*) as a KV-pool table row."""
        raise NotImplementedError

    def allocation_summary(self) -> dict:
        """The KV allocation in a few columns, for comparison tables."""
        return {}

    def kernel_lines(self) -> list[str]:
        """What the engine logged about the weights' quantization and the kernels it picked (empty if it says nothing)."""
        return []

    def weight_bytes(self) -> int | None:
        """Bytes of the weights a decode step reads (None when the engine cannot tell)."""
        return None

    @property
    def device(self) -> str:
        """Where the engine computes: "cpu", or "cuda" (its weights and KV cache then live in the GPU's memory)."""
        return "cpu"

    def allocation_lines(self) -> list[str]:
        """The KV allocation the engine logged, for people."""
        return ["KV cache: not reported"]

    def prompt_tokenizer(self):
        """text -> token pieces with this engine's tokenizer, or None (prompts are then cut by words)."""
        return None

    def tokenize_text(self, text: str, limit: int | None = None) -> tuple[int | None, list[int]]:
        """(BOS id or None, the text's token ids, at most `limit`)."""
        raise NotImplementedError

    def score(self, bos: int | None, token_ids: list[int]):
        """quality.Scores: teacher-forced log-probabilities of token_ids after BOS."""
        raise NotImplementedError

    def greedy(self, prompt_ids: list[int], n: int) -> list[int]:
        """n greedy token ids after prompt_ids."""
        raise NotImplementedError

    # -- common
    @property
    def root_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (the SDK appends /chat/completions)."""
        return f"{self.root_url}/v1"

    @property
    def api_key(self) -> str | None:
        return read_key(self.config.api_key_env)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def info(self) -> EngineInfo:
        return EngineInfo(self.kind, self.base_url, self.model_id, self.pid, str(self.log_path) if self.log_path else None)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 120.0) -> Self:
        if self.is_running():
            return self
        self.port = self.config.port or free_port(self.config.host)
        argv, env, stdin = self._command()
        logs = cache_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        _prune(logs, keep=60)
        self.log_path = logs / f"{self.kind}-{self.port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        started = time.perf_counter()
        with open(self.log_path, "wb") as log:
            # the child watches for this PID to stop being its parent (guard.expected_parent)
            self.proc = proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={k: v for k, v in {**os.environ, **env, PARENT_PID_VARIABLE: str(os.getpid())}.items() if v is not None},
                start_new_session=True,
            )
        self._finalizer = weakref.finalize(self, _terminate_group, self.proc)
        try:
            with contextlib.suppress(BrokenPipeError):  # a child that died at once: _wait_ready reports why
                if proc.stdin is not None:  # always: stdin=PIPE
                    if stdin is not None:
                        proc.stdin.write(stdin)
                    proc.stdin.close()
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            _record_start(logs, self.kind, time.perf_counter() - started, ok=False)
            raise
        self.started_s = time.perf_counter() - started
        _record_start(logs, self.kind, self.started_s, ok=True)
        self.allocation = self._parse_allocation(self.log_text())
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    raise EngineError(f"{self.kind} failed to start: {self._start_error(self.log_text())} (log: {self.log_path})")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.root_url + self.health_path).status_code == 200:
                        return
                time.sleep(0.05)
        raise EngineError(f"{self.kind} was not ready after {timeout_s:.0f} s (log: {self.log_path})")

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the server and everything it started; safe to call twice."""
        if self.proc is not None:
            _terminate_group(self.proc, grace_s)
            Engine.last_stopped_at = time.monotonic()
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def resident_bytes(self) -> int | None:
        """Resident memory of the engine process and its children (bytes)."""
        import psutil

        if self.proc is None or not self.is_running():
            return None
        try:
            root = psutil.Process(self.proc.pid)
            return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        except psutil.Error:
            return None

    def headers(self) -> dict[str, str]:
        return auth_headers(self.api_key)

    def client(self, **kwargs):
        """An openai.OpenAI client for this engine, with retries off (a retry would hide failures)."""
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.api_key or "not-needed", max_retries=0, **kwargs)

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running pid {self.pid} at {self.base_url}" if self.is_running() else "stopped"
        return f"<{type(self).__name__} {self.model_id if self.port else ''} {state}>"


def _terminate_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the child's process group, then SIGKILL after grace_s."""
    if proc.poll() is not None:
        return
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        try:
            proc.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # grandchildren of an already-dead leader
        os.killpg(pgid, signal.SIGKILL)


STARTS_FILE = "starts.jsonl"
# Who started an engine, where several runs start engines side by side (two test runs, a run beside a lab): each
# start's line carries this variable's value, which kernels and commands inherit.
STARTED_BY_VARIABLE = "LABS_STARTED_BY"


def _record_start(logs: Path, kind: str, seconds: float, ok: bool) -> None:
    """One line per engine start in logs/starts.jsonl (unix time, kind, seconds to ready or to failure):
    how start-up time is measured across processes (notebook kernels, CLI commands, tests)."""
    row = {"t": round(time.time(), 3), "kind": kind, "start_s": round(seconds, 3), "ok": ok, "pid": os.getpid()}
    line = json.dumps({**row, "by": os.environ.get(STARTED_BY_VARIABLE, "")})
    with contextlib.suppress(OSError), open(logs / STARTS_FILE, "a") as f:
        f.write(line + "\n")


def read_starts(since: float = 0.0, by: str | None = None) -> list[dict]:
    """Engine starts recorded at or after unix time `since` (see _record_start); only those started with
    $LABS_STARTED_BY = `by` when given."""
    try:
        lines = (cache_dir() / "logs" / STARTS_FILE).read_text().splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if row.get("t", 0) >= since and (by is None or row.get("by", "") == by):
                rows.append(row)
    return rows


LOG_KEEP_S = 3600.0  # a log written within the hour stays: a run beside this one may still read it


def _prune(folder: Path, keep: int) -> None:
    """Engine logs beyond the newest `keep`, older than LOG_KEEP_S (another process may prune at the same time)."""
    now, ages = time.time(), {}
    for path in folder.glob("*.log"):
        with contextlib.suppress(OSError):
            ages[path] = now - path.stat().st_mtime
    for old in sorted(ages, key=ages.__getitem__)[keep:]:
        if ages[old] > LOG_KEEP_S:
            with contextlib.suppress(OSError):
                old.unlink()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on the port and a new server could bind it.

    Connections the old server closed may linger in TIME_WAIT; servers bind with SO_REUSEADDR,
    so that does not count as bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


# The same knob in both engines (lab 04 shows this table once).
ENGINE_MAPPING = [
    {
        "knob": "KV pool size",
        "vllm": "--gpu-memory-utilization (or --kv-cache-memory-bytes)",
        "llamacpp": "n_ctx (-c): total cells for all slots",
        "EngineConfig": "gpu_memory_utilization / ctx",
    },
    {
        "knob": "longest request",
        "vllm": "--max-model-len",
        "llamacpp": "n_ctx / n_parallel per slot",
        "EngineConfig": "max_model_len / ctx, parallel",
    },
    {
        "knob": "sequences decoded together",
        "vllm": "--max-num-seqs",
        "llamacpp": "n_parallel (-np): slots",
        "EngineConfig": "parallel",
    },
    {
        "knob": "tokens per scheduler step",
        "vllm": "--max-num-batched-tokens (chunked prefill)",
        "llamacpp": "n_batch (-b) / n_ubatch (-ub)",
        "EngineConfig": "batch_tokens / ubatch_tokens",
    },
    {
        "knob": "chunked prefill",
        "vllm": "--enable-chunked-prefill / --disable-chunked-prefill",
        "llamacpp": "always: prompts are processed n_batch at a time",
        "EngineConfig": "chunked_prefill",
    },
    {
        "knob": "prefix / prompt caching",
        "vllm": "--enable-prefix-caching / --disable-prefix-caching",
        "llamacpp": "cache_prompt + prompt cache (--cache-ram)",
        "EngineConfig": "prompt_cache",
    },
    {
        "knob": "KV cache dtype",
        "vllm": "--kv-cache-dtype auto|fp8|…",
        "llamacpp": "-ctk/-ctv f16|q8_0|q4_0 (quantized V needs flash attention)",
        "EngineConfig": "kv_cache_dtype",
    },
    {
        "knob": "attention kernel",
        "vllm": "--attention-backend FLASH_ATTN|FLASHINFER|TRITON_ATTN|…",
        "llamacpp": "flash attention on/off (-fa)",
        "EngineConfig": "attention_backend / flash_attention",
    },
    {
        "knob": "weight quantization",
        "vllm": "--quantization awq|gptq|fp8|… (or the checkpoint's config)",
        "llamacpp": "the GGUF file's type (Q4_K_M, Q8_0, …)",
        "EngineConfig": "quantization / model",
    },
    {
        "knob": "API key",
        "vllm": "--api-key or VLLM_API_KEY",
        "llamacpp": "--api-key",
        "EngineConfig": "api_key_env (the variable's name)",
    },
]
