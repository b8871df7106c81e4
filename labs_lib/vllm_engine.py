"""vLLM as an engine: `vllm serve` built from an EngineConfig, its start-up log parsed, its flags checked.

Flag names are those of the installed vLLM (`vllm serve --help=all`, cached per version) or, where
vLLM is not installed, those of vLLM 0.33.0 (data/vllm_serve_flags_0.33.0.txt, from its real --help).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from functools import cache

from .engine import Engine, EngineConfig
from .errors import BadInput, LabsError
from .keys import read_key
from .paths import DATA_DIR, cache_dir

REFERENCE_VERSION = "0.33.0"
_FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
VLLM_KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                  "int8_per_token_head", "int4_per_token_head", "nvfp4")
_KV_DTYPE_ALIASES = {"f16": "auto", "fp16": "float16", "bf16": "bfloat16"}  # f16: the EngineConfig default = the model's dtype


def parse_help_flags(help_text: str) -> set[str]:
    """Every option name in `vllm serve --help` output (both spellings of on/off pairs)."""
    flags = set()
    for line in help_text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("--") and len(line) - len(stripped) <= 4:
            head = re.split(r"\s{2,}", stripped)[0]
            flags.update(_FLAG.findall(head))
    return flags


def installed_vllm_version() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


@cache
def known_flags() -> tuple[str, frozenset[str]]:
    """(vLLM version the flags are from, the flags)."""
    version = installed_vllm_version()
    if version:
        cached = cache_dir() / f"vllm_serve_flags_{version}.txt"
        if not cached.exists():
            exe = shutil.which("vllm") or sys.executable
            cmd = [exe, "serve", "--help=all"] if exe != sys.executable else [exe, "-m", "vllm.entrypoints.cli.main", "serve", "--help=all"]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
            except (OSError, subprocess.TimeoutExpired):
                out = ""
            flags = parse_help_flags(out)
            if flags:
                cached.write_text("\n".join(sorted(flags)) + "\n")
        if cached.exists():
            return version, frozenset(cached.read_text().split())
    shipped = DATA_DIR / f"vllm_serve_flags_{REFERENCE_VERSION}.txt"
    return REFERENCE_VERSION, frozenset(shipped.read_text().split())


def vllm_kv_dtype(name: str) -> str:
    key = _KV_DTYPE_ALIASES.get(str(name).lower(), str(name).lower())
    if key not in VLLM_KV_DTYPES:
        raise BadInput("kv_cache_dtype", name, "allowed for vLLM: " + ", ".join(VLLM_KV_DTYPES))
    return key


def serve_args(config: EngineConfig, port: int | None = None) -> list[str]:
    """`vllm serve` arguments for a configuration (real flag names of current vLLM)."""
    if not config.model:
        raise BadInput("model", None, "allowed: a Hugging Face id or local path for vLLM (e.g. Qwen/Qwen2.5-7B-Instruct)")
    args = ["serve", config.model, "--host", config.host, "--port", str(port or config.port or 8000)]

    def add(flag: str, value: object) -> None:
        if value is not None:
            args.extend([flag, str(value)])

    add("--served-model-name", config.served_model_name)
    add("--max-model-len", config.max_model_len)
    add("--gpu-memory-utilization", config.gpu_memory_utilization)
    add("--max-num-seqs", config.parallel)
    add("--max-num-batched-tokens", config.batch_tokens)
    args.append("--enable-prefix-caching" if config.prompt_cache else "--disable-prefix-caching")
    if config.chunked_prefill is not None:
        args.append("--enable-chunked-prefill" if config.chunked_prefill else "--disable-chunked-prefill")
    kv = vllm_kv_dtype(config.kv_cache_dtype)
    if kv != "auto":
        add("--kv-cache-dtype", kv)
    backend = config.attention_backend or ("FLASH_ATTN" if config.flash_attention else None)
    add("--attention-backend", backend)
    add("--quantization", config.quantization)
    add("--block-size", config.block_size)
    add("--tensor-parallel-size", config.tensor_parallel_size)
    if config.enforce_eager:
        args.append("--enforce-eager")
    args.extend(config.extra_args)
    return args


def unknown_flags(args: list[str], flags: frozenset[str] | None = None) -> list[str]:
    flags = flags if flags is not None else known_flags()[1]
    return [a.split("=")[0] for a in args if a.startswith("--") and a.split("=")[0] not in flags]


def command_line(config: EngineConfig, port: int | None = None) -> str:
    """The shell command a user would type (the key travels as VLLM_API_KEY, never on the line)."""
    prefix = f"VLLM_API_KEY=${config.api_key_env} " if config.api_key_env else ""
    return prefix + "vllm " + shlex.join(serve_args(config, port))


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
    "too_long": re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)"),
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


def first_error(text: str) -> str:
    """vLLM's own reason for a failed start: the last error-looking line."""
    candidates = [ln.strip() for ln in text.splitlines()
                  if re.search(r"\b(Error|error:|ERROR|unrecognized arguments|CUDA out of memory|No available memory)", ln)]
    if candidates:
        return candidates[-1][-400:]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][-400:] if lines else "no output"


class VLLMEngine(Engine):
    """`vllm serve` as a child process (inside labs_lib.child_guard, so it dies with its parent)."""

    kind = "vllm"

    def __init__(self, config: EngineConfig | None = None, *, check_flags: bool = True):
        super().__init__(config)
        args = serve_args(self.config, 8000)
        if check_flags:
            version, flags = known_flags()
            bad = unknown_flags(args, flags)
            if bad:
                raise BadInput("vLLM flag", bad[0], f"vLLM {version} has no such option (removed or misspelled); "
                               f"see `vllm serve --help=all`")

    @property
    def model_id(self) -> str:
        return self.config.served_model_name or self.config.model

    def _command(self):
        if installed_vllm_version() is None:
            raise LabsError("vLLM is not installed here: pip install -r requirements-gpu.txt on a GPU instance "
                            "(the embedded llama.cpp engine needs nothing more)")
        env = {"PYTHONUNBUFFERED": "1"}
        if self.config.api_key_env:
            env["VLLM_API_KEY"] = read_key(self.config.api_key_env, required=True)
        exe = shutil.which("vllm")
        cmd = [exe] if exe else [sys.executable, "-m", "vllm.entrypoints.cli.main"]
        return [sys.executable, "-m", "labs_lib.child_guard", "--", *cmd, *serve_args(self.config, self.port)], env, None

    def start(self, timeout_s: float = 1800.0) -> VLLMEngine:
        return super().start(timeout_s)  # first starts download and compile: minutes

    def _parse_allocation(self, log_text: str) -> VLLMAllocation:
        return parse_startup_log(log_text)

    def _start_error(self, log_text: str) -> str:
        return first_error(log_text)


def dump_flags_file(help_text: str, path) -> int:
    """Write the flag list of a --help text (how data/vllm_serve_flags_0.33.0.txt was made)."""
    flags = sorted(parse_help_flags(help_text))
    path.write_text("\n".join(flags) + "\n")
    return len(flags)
