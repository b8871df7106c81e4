"""Model architectures: the numbers the KV-cache and weight math need.

A `ModelSpec` comes from the catalogue (`data/models.json`, keyed by Hugging Face id, with
aliases), from a Hugging Face `config.json`, or from a GGUF file's metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from .errors import BadInput, read_user_file
from .paths import DATA_DIR

# llama.cpp's layer pattern for sliding-window architectures whose GGUF carries no per-layer
# flags: layer il uses the window when il % n < n - 1 (llama-hparams set_swa_pattern).
GGUF_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "cohere2": 4}


@dataclass(frozen=True)
class ModelSpec:
    """Transformer shape. Head counts and sizes are per layer; `params` counts all weights."""

    name: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int | None  # explicit; hidden/heads is only a fallback (wrong for Gemma). None for MLA.
    hidden_size: int
    vocab_size: int
    params: int | None = None
    sliding_window: int | None = None  # tokens a sliding layer attends to
    sliding_layers: tuple[int, ...] = ()  # 0-based layers that use the window
    kv_lora_rank: int | None = None  # MLA latent size (DeepSeek-V2/V3)
    qk_rope_head_dim: int | None = None  # MLA decoupled RoPE key, cached beside the latent
    max_position_embeddings: int | None = None
    hf_id: str | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_q_heads", "num_kv_heads", "hidden_size", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise BadInput(f"{self.name}: {name}", value, "allowed: an integer >= 1")
        if self.is_mla:
            if not self.qk_rope_head_dim or self.qk_rope_head_dim < 1:
                raise BadInput(f"{self.name}: qk_rope_head_dim", self.qk_rope_head_dim, "allowed: an integer >= 1 for MLA")
        elif not isinstance(self.head_dim, int) or self.head_dim < 1:
            raise BadInput(f"{self.name}: head_dim", self.head_dim, "allowed: an integer >= 1")
        if self.num_kv_heads > self.num_q_heads:
            raise BadInput(f"{self.name}: num_kv_heads", self.num_kv_heads, f"allowed: <= num_q_heads ({self.num_q_heads})")
        if any(not 0 <= i < self.num_layers for i in self.sliding_layers):
            raise BadInput(
                f"{self.name}: sliding_layers", self.sliding_layers, f"allowed: layer indices 0..{self.num_layers - 1}"
            )
        if self.sliding_layers and not (self.sliding_window and self.sliding_window > 0):
            raise BadInput(
                f"{self.name}: sliding_window", self.sliding_window, "allowed: a window >= 1 when sliding layers exist"
            )

    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank)

    @property
    def attention(self) -> str:
        """MHA, GQA, MQA or MLA."""
        if self.is_mla:
            return "MLA"
        if self.num_kv_heads == self.num_q_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    def is_sliding(self, layer: int) -> bool:
        return layer in self._sliding_set

    @property
    def _sliding_set(self) -> frozenset[int]:
        return frozenset(self.sliding_layers)

    @property
    def num_sliding_layers(self) -> int:
        return len(self.sliding_layers)

    @property
    def num_full_layers(self) -> int:
        return self.num_layers - len(self.sliding_layers)


# ---------------------------------------------------------------- catalogue


@cache
def catalogue() -> dict[str, dict]:
    """data/models.json's entries, keyed by Hugging Face id."""
    return json.loads((DATA_DIR / "models.json").read_text())["models"]


def _spec_from_entry(hf_id: str, entry: dict) -> ModelSpec:
    return ModelSpec(
        name=entry["name"],
        num_layers=entry["num_layers"],
        num_q_heads=entry["num_q_heads"],
        num_kv_heads=entry["num_kv_heads"],
        head_dim=entry["head_dim"],
        hidden_size=entry["hidden_size"],
        vocab_size=entry["vocab_size"],
        params=entry.get("params"),
        sliding_window=entry.get("sliding_window"),
        sliding_layers=tuple(entry.get("sliding_layers") or ()),
        kv_lora_rank=entry.get("kv_lora_rank"),
        qk_rope_head_dim=entry.get("qk_rope_head_dim"),
        max_position_embeddings=entry.get("max_position_embeddings"),
        hf_id=hf_id,
        source="catalogue: " + "; ".join(entry.get("sources", [])),
        notes=tuple(entry.get("unconfirmed", [])),
    )


def from_catalogue(ref: str) -> ModelSpec | None:
    """Look a model up by Hugging Face id, name or alias (case-insensitive); None if absent."""
    key = ref.strip().lower()
    for hf_id, entry in catalogue().items():
        names = [hf_id, hf_id.split("/")[-1], entry["name"], *entry.get("aliases", [])]
        if key in (n.lower() for n in names):
            return _spec_from_entry(hf_id, entry)
    return None


def load_model(ref: str | ModelSpec) -> ModelSpec:
    """A ModelSpec from a catalogue id/alias, a config.json path (or a model folder holding one: a downloaded
    checkpoint, as the workshop model) or a .gguf path."""
    if isinstance(ref, ModelSpec):
        return ref
    text = str(ref).strip()
    path = Path(text).expanduser()
    if text.lower().endswith(".gguf"):
        return from_gguf(path)
    if text.lower().endswith(".json"):
        return from_hf_config(path)
    if (path / "config.json").is_file():
        return from_hf_config(path / "config.json")
    spec = from_catalogue(text)
    if spec is None:
        raise BadInput(
            "model",
            ref,
            "allowed: a catalogue id or alias (list them with `labs models`), a Hugging Face config.json path, or a .gguf path",
        )
    return spec


# ---------------------------------------------------------------- Hugging Face config.json


def _sliding_layers_from_config(cfg: dict, num_layers: int) -> tuple[int, ...]:
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers:
        return tuple(i for i, kind in enumerate(layer_types) if "sliding" in str(kind))
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return ()
    model_type = str(cfg.get("model_type", ""))
    if model_type == "gemma2":
        return tuple(range(0, num_layers, 2))
    if model_type.startswith("gemma3"):
        pattern = int(cfg.get("sliding_window_pattern") or 6)
        return tuple(i for i in range(num_layers) if (i + 1) % pattern != 0)
    if cfg.get("use_sliding_window") and "max_window_layers" in cfg:  # Qwen2: top layers slide
        return tuple(range(int(cfg["max_window_layers"]), num_layers))
    return tuple(range(num_layers))


def estimate_params(cfg: dict) -> int | None:
    """Exact weight count of a Llama-style decoder (gated MLP, optional MoE, biases, q/k norms).

    Returns None for shapes it does not know (MLA, non-gated MLPs)."""
    if cfg.get("kv_lora_rank") or "intermediate_size" not in cfg:
        return None
    hidden, layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    inter = cfg["intermediate_size"]
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = hidden * q + 2 * hidden * kv + q * hidden
    if cfg.get("attention_bias") or cfg.get("model_type") == "qwen2":
        attn += q + 2 * kv
    if cfg.get("model_type") == "qwen3":
        attn += 2 * head_dim  # q_norm and k_norm
    experts = cfg.get("num_local_experts") or 1
    mlp = experts * 3 * hidden * inter + (hidden * experts if experts > 1 else 0)
    per_layer = attn + mlp + 2 * hidden  # two RMSNorms
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return embeddings + layers * per_layer + hidden  # final norm


def from_hf_config(source: str | Path | dict) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (a path or the parsed dict)."""
    if isinstance(source, dict):
        cfg, label = source, "config dict"
    else:
        path = Path(source)
        text = read_user_file(path, "config.json", "Hugging Face config.json")
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(
                "config.json", str(path), f"it is not readable JSON ({type(exc).__name__}); allowed: a Hugging Face config.json"
            ) from None
        label = str(path)
    if not isinstance(cfg, dict):
        raise BadInput("config.json", label, "allowed: a JSON object with num_hidden_layers, num_attention_heads, hidden_size")
    cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    missing = [k for k in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size") if k not in cfg]
    if missing:
        raise BadInput("config.json", label, f"it lacks {', '.join(missing)}; allowed: a decoder-only transformer config")
    layers, heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    mla = bool(cfg.get("kv_lora_rank"))
    head_dim = None if mla else int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    sliding = _sliding_layers_from_config(cfg, layers)
    names = cfg.get("_name_or_path") or (cfg.get("architectures") or ["model"])[0]
    return ModelSpec(
        name=str(names),
        num_layers=layers,
        num_q_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        hidden_size=int(cfg["hidden_size"]),
        vocab_size=int(cfg["vocab_size"]),
        params=estimate_params(cfg),
        sliding_window=int(cfg["sliding_window"]) if sliding else None,
        sliding_layers=sliding,
        kv_lora_rank=cfg.get("kv_lora_rank") if mla else None,
        qk_rope_head_dim=cfg.get("qk_rope_head_dim") if mla else None,
        max_position_embeddings=cfg.get("max_position_embeddings"),
        source=f"config.json: {label}",
    )


# ---------------------------------------------------------------- GGUF


def from_gguf(path: str | Path) -> ModelSpec:
    """A ModelSpec from a GGUF file's metadata; `params` is the sum of its tensors' elements."""
    from .gguf_meta import read_gguf_meta

    meta = read_gguf_meta(path)
    arch = meta.architecture

    def need(key: str) -> int:
        value = meta.arch_field(key)
        if isinstance(value, list):  # per-layer arrays (e.g. head_count_kv): take the largest
            value = max(value) if value else None
        if value is None:
            raise BadInput("GGUF file", str(path), f"its metadata lacks {arch}.{key}; allowed: a decoder-only LLM GGUF")
        return int(value)

    layers, heads = need("block_count"), need("attention.head_count")
    hidden = need("embedding_length")
    kv_value = meta.arch_field("attention.head_count_kv", heads)
    kv_heads = int(max(kv_value) if isinstance(kv_value, list) else kv_value)
    head_dim = int(meta.arch_field("attention.key_length", hidden // heads))
    window = meta.arch_field("attention.sliding_window")
    pattern = meta.arch_field("attention.sliding_window_pattern")
    sliding: tuple[int, ...] = ()
    if window:
        if isinstance(pattern, list) and len(pattern) == layers:
            sliding = tuple(i for i, flag in enumerate(pattern) if flag)
        elif arch in GGUF_SWA_PATTERN:
            n = GGUF_SWA_PATTERN[arch]
            sliding = tuple(i for i in range(layers) if i % n < n - 1)
        else:
            sliding = tuple(range(layers))
    kv_lora = meta.arch_field("attention.kv_lora_rank")
    rope_dim = meta.arch_field("rope.dimension_count")
    vocab = meta.array_lengths.get("tokenizer.ggml.tokens") or int(meta.arch_field("vocab_size", 0) or 0)
    return ModelSpec(
        name=str(meta.fields.get("general.name", Path(path).stem)),
        num_layers=layers,
        num_q_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=None if kv_lora else head_dim,
        hidden_size=hidden,
        vocab_size=vocab or 1,
        params=meta.n_params,
        sliding_window=int(window) if sliding else None,
        sliding_layers=sliding,
        kv_lora_rank=int(kv_lora) if kv_lora else None,
        qk_rope_head_dim=int(rope_dim) if kv_lora and rope_dim else None,
        max_position_embeddings=meta.arch_field("context_length"),
        source=f"gguf: {path}",
    )
