"""The embedded engine: llama.cpp's server (xllamacpp) serving a GGUF, as a managed child process."""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..errors import BadInput, LabsError, positive_int
from ..keys import read_key
from ..kv_math import MIB, llamacpp_layout
from ..models import load_model
from ..quality import TOP_K, Scores
from .base import Engine, EngineConfig, TokenCounters
from .llamacpp_api import LlamaCppAPI
from .llamacpp_launcher import KV_TYPES
from .model_files import MODEL_ID, default_model_path

_CACHE = re.compile(
    r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), "
    r"K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB"
)
_CREATING = re.compile(r"llama_kv_cache_iswa: creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
_CONTEXT = re.compile(r"llama_context: (n_ctx|n_ctx_seq|n_batch|n_ubatch|flash_attn|kv_unified|n_seq_max)\s+= (\S+)")
_SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)")
_TAG = re.compile(r"^(?:srv|cmn|slot|spec|main|log)\s+")  # llama.cpp's component tags


@dataclass(frozen=True)
class LoggedCache:
    """One `llama_kv_cache: size = …` line."""

    kind: str  # "full" or "swa"
    size_mib: str  # as printed, two decimals
    cells: int
    layers: int
    seqs: int
    type_k: str
    k_mib: str
    type_v: str
    v_mib: str


@dataclass
class LlamaCppAllocation:
    """What llama.cpp logged about its context and KV caches at start-up."""

    n_ctx: int | None = None
    n_ctx_seq: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    n_slots: int | None = None
    flash_attn: str | None = None  # as requested: auto, enabled, disabled
    flash_attn_resolved: bool | None = None  # what "auto" became
    kv_unified: bool | None = None
    caches: list[LoggedCache] = field(default_factory=list)

    @property
    def kv_mib(self) -> float:
        return sum(float(c.size_mib) for c in self.caches)

    def to_dict(self) -> dict:
        return {**asdict(self), "kv_mib": round(self.kv_mib, 2)}


def parse_allocation(log_text: str) -> LlamaCppAllocation:
    out = LlamaCppAllocation()
    kind = "full"
    for line in log_text.splitlines():
        if m := _CREATING.search(line):
            kind = "full" if m.group(1) == "non-SWA" else "swa"
        elif m := _CACHE.search(line):
            out.caches.append(
                LoggedCache(
                    kind,
                    m.group(1),
                    int(m.group(2)),
                    int(m.group(3)),
                    int(m.group(5)),
                    m.group(6),
                    m.group(7),
                    m.group(8),
                    m.group(9),
                )
            )
        elif m := _CONTEXT.search(line):
            key, value = m.group(1), m.group(2)
            if key == "flash_attn":
                out.flash_attn = value
            elif key == "kv_unified":
                out.kv_unified = value == "true"
            elif key != "n_seq_max":
                setattr(out, key, int(value))
        elif m := _SLOTS.search(line):
            out.n_slots = int(m.group(1))
        elif "Flash Attention enabled" in line:
            out.flash_attn_resolved = True
        elif "Flash Attention not supported" in line or "flash_attn = disabled" in line:
            out.flash_attn_resolved = False
    if out.flash_attn in ("enabled", "disabled"):
        out.flash_attn_resolved = out.flash_attn == "enabled"
    return out


def first_error(log_text: str) -> str:
    """The engine's own words for a failed start: its first error-level line, else the last line."""
    for line in log_text.splitlines():
        stamp, marker, rest = line.partition(" E ")
        if marker and stamp.replace(".", "").isdigit():
            return _TAG.sub("", rest.strip())
        if line.startswith("launcher: error:"):
            return line.removeprefix("launcher: error:").strip()
    lines = [ln for ln in log_text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


class LlamaCppEngine(Engine):
    """llama.cpp's OpenAI-compatible server on CPU. The configuration's vocabulary maps onto CommonParams."""

    kind = "llamacpp"
    builds_weight_variants = True
    serves_token_ids = True
    counters = TokenCounters(
        "llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total", "llamacpp:tokens_predicted_total", False
    )

    uncached_body: ClassVar[dict] = {"cache_prompt": False}
    SERVE_OPTIONS: ClassVar[dict[str, str]] = {
        "model_file": "model",
        "ctx": "ctx",
        "parallel": "parallel",
        "kv_dtype_v": "kv_cache_dtype_v",
        "flash_attn": "flash_attention",
        "batch": "batch_tokens",
        "ubatch": "ubatch_tokens",
        "threads": "threads",
        "swa_full": "swa_full",
        "kv_unified": "kv_unified",
        "max_model_len": "ctx",  # see serve_config
    }

    @classmethod
    def serve_config(cls, options: dict[str, object], **common) -> EngineConfig:
        """llama.cpp has no longest-request setting: --max-model-len sizes the context as that many cells per slot."""
        options = dict(options)
        max_len = options.pop("max_model_len", None)
        config = super().serve_config(options, **common)
        if max_len is None:
            return config
        slots = positive_int("--parallel", config.parallel) if config.parallel is not None else 1
        return config.with_(ctx=positive_int("--max-model-len", max_len) * slots)

    def __init__(self, config: EngineConfig | None = None):
        super().__init__(config)
        cfg = self.config
        self.model_path = Path(cfg.model).expanduser() if cfg.model else default_model_path()
        if not self.model_path.is_file():
            raise BadInput("model file", str(self.model_path), "allowed: a path to an existing .gguf file")
        for name in ("kv_cache_dtype", "kv_cache_dtype_v"):
            value = getattr(cfg, name)
            if value is not None and value.lower() not in KV_TYPES:
                raise BadInput(name, value, "allowed for llama.cpp: " + ", ".join(KV_TYPES))
        shipped = cfg.model is None
        self._model_id = cfg.served_model_name or (MODEL_ID if shipped else self.model_path.stem)
        self._chat_template = cfg.chat_template or ("gemma" if shipped else None)

    @property
    def model_id(self) -> str:
        return self._model_id

    def _command(self):
        cfg = self.config
        if cfg.api_key_env:
            read_key(cfg.api_key_env, required=True)
        payload = {
            **cfg.to_dict(),
            "model_path": str(self.model_path),
            "served_model_name": self._model_id,
            "chat_template": self._chat_template,
            "port": self.port,
        }
        return (
            [sys.executable, "-m", "labs_lib.engines.llamacpp_launcher"],
            {"PYTHONUNBUFFERED": "1"},
            json.dumps(payload).encode(),
        )

    def _parse_allocation(self, log_text: str) -> LlamaCppAllocation:
        return parse_allocation(log_text)

    def _start_error(self, log_text: str) -> str:
        return first_error(log_text)

    @classmethod
    def command_for(cls, config: EngineConfig, device: str | None = None) -> tuple[str, str]:
        return serve_command(config), ""  # llama.cpp's command here names no device

    @classmethod
    def grid_family(cls) -> str:
        return "cpu"

    @staticmethod
    def kv_pool_row(row: dict) -> dict:
        model = row.get("config.model")
        spec = load_model(model) if isinstance(model, str) and model else load_model("gemma-3-270m")
        ctx, parallel = int(row["config.ctx"]), int(row.get("config.parallel") or 1)
        layout = llamacpp_layout(spec, ctx, parallel, type_k=row.get("config.kv_cache_dtype") or "f16")
        return {
            "n_ctx asked": ctx,
            "slots": parallel,
            "context per request (logged)": int(row["allocation.n_ctx_seq"]),
            "KV MiB (logged)": row["allocation.kv_mib"],
            "KV MiB (lab-01 math)": round(layout.kv_bytes / MIB, 2),
            "match": f"{layout.kv_bytes / MIB:.2f}" == f"{row['allocation.kv_mib']:.2f}",
            "engine RSS MiB": round((row.get("memory.engine_rss_bytes") or 0) / MIB, 1),
        }

    def allocation_lines(self) -> list[str]:
        alloc = self.allocation
        if alloc is None or not alloc.caches:
            return ["KV cache: not reported"]
        lines = [
            f"KV cache: {alloc.kv_mib:.2f} MiB for {alloc.n_slots} slot(s) x {alloc.n_ctx_seq:,} tokens "
            f"(n_ctx {alloc.n_ctx:,}, flash attention {'on' if alloc.flash_attn_resolved else 'off'})"
        ]
        lines += [
            f"  {c.kind:<4} {c.size_mib:>8} MiB  {c.cells:,} cells x {c.layers} layers x {c.seqs} seqs  "
            f"K {c.type_k} {c.k_mib} MiB, V {c.type_v} {c.v_mib} MiB"
            for c in alloc.caches
        ]
        return lines

    def weight_bytes(self) -> int:
        from ..gguf_meta import read_gguf_meta

        return read_gguf_meta(self.model_path).tensor_bytes

    def allocation_summary(self) -> dict:
        return {"kv_MiB": round(self.allocation.kv_mib, 2)} if self.allocation else {}

    @property
    def api(self) -> LlamaCppAPI:
        return LlamaCppAPI(self.root_url, self.headers())

    def prompt_tokenizer(self):
        return self.api.pieces

    def tokenize_text(self, text: str, limit: int | None = None) -> tuple[int | None, list[int]]:
        ids = self.api.tokenize(text, add_special=True)
        return ids[0], ids[1:][:limit] if limit else ids[1:]

    def score(self, bos: int | None, token_ids: list[int]) -> Scores:
        return score(self.api, bos, token_ids)

    def greedy(self, prompt_ids: list[int], n: int) -> list[int]:
        return greedy(self.api, prompt_ids, n)


def score(api: LlamaCppAPI, bos: int | None, token_ids: list[int]) -> Scores:
    """Teacher-forced log-probs of token_ids after BOS, one decode step per token (exact, no sampling).

    A grammar (`root ::= <[id1]> <[id2]> …`) forces the text while `n_probs` reports each forced
    token's log-probability from the raw logits and the model's own TOP_K most likely tokens."""
    grammar = "root ::= " + " ".join(f"<[{i}]>" for i in token_ids)
    body = {
        "prompt": [bos] if bos is not None else [],
        "n_predict": len(token_ids),
        "grammar": grammar,
        "n_probs": TOP_K,
        "temperature": 0,
        "cache_prompt": False,
        "return_tokens": True,
    }
    probs = api.completion(body)["completion_probabilities"]
    got = [p["id"] for p in probs]
    if got != token_ids:
        differ = sum(a != b for a, b in zip(got, token_ids, strict=False))
        raise LabsError(f"the grammar did not force the text: got {len(got)} tokens, {differ} differ")
    return Scores(
        token_ids,
        np.array([p["logprob"] for p in probs]),
        [p["top_logprobs"][0]["id"] for p in probs],
        [{o["id"]: o["logprob"] for o in p["top_logprobs"]} for p in probs],
    )


def greedy(api: LlamaCppAPI, prompt_ids: list[int], n: int) -> list[int]:
    body = {
        "prompt": prompt_ids,
        "n_predict": n,
        "temperature": 0,
        "cache_prompt": False,
        "return_tokens": True,
        "ignore_eos": True,
    }
    return api.completion(body)["tokens"]


def serve_command(config: EngineConfig) -> str:
    """The `python -m labs_lib serve` command that starts the same llama.cpp configuration."""
    args = [
        "python",
        "-m",
        "labs_lib",
        "serve",
        "--ctx",
        str(config.ctx),
        "--parallel",
        str(config.parallel or 1),
        "--kv-dtype",
        config.kv_cache_dtype,
    ]
    if config.kv_cache_dtype_v:
        args += ["--kv-dtype-v", config.kv_cache_dtype_v]
    args += ["--flash-attn", {None: "auto", True: "on", False: "off"}[config.flash_attention]]
    for flag, value in (
        ("--batch", config.batch_tokens),
        ("--ubatch", config.ubatch_tokens),
        ("--threads", config.threads),
        ("--model-file", config.model),
        ("--api-key-env", config.api_key_env),
    ):
        if value is not None:
            args += [flag, str(value)]
    for flag, on in (
        ("--no-prompt-cache", not config.prompt_cache),
        ("--swa-full", config.swa_full),
        ("--kv-unified", config.kv_unified),
    ):
        if on:
            args.append(flag)
    return shlex.join(args)
