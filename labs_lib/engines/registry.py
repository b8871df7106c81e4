"""Which engines exist, how `auto` picks one, and how to make one. The one list of engine kinds."""

from __future__ import annotations

import importlib

from ..errors import choice
from ..gpu import read_gpus
from .base import Engine, EngineConfig

# kind -> "module:class", imported on first use so that choosing one engine never loads the other
KINDS = {"llamacpp": "labs_lib.engines.llamacpp:LlamaCppEngine", "vllm": "labs_lib.engines.vllm:VLLMEngine"}
CHOICES = ("auto", *KINDS)


def engine_class(kind: str) -> type[Engine]:
    """The class behind a concrete kind (llamacpp, vllm)."""
    kind = choice("engine", kind, tuple(KINDS))
    module, _, name = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def resolve_kind(kind: str = "auto", *, vllm_on_cpu: bool = False) -> str:
    """auto -> vllm when vLLM is installed and a GPU answers (or, with `vllm_on_cpu`, wherever it is installed: a lab
    that teaches vLLM's own knobs), else llamacpp."""
    kind = choice("engine", kind, CHOICES)
    if kind != "auto":
        return kind
    from .vllm import find_vllm

    if find_vllm() is not None and (vllm_on_cpu or read_gpus()[0]):
        return "vllm"
    return "llamacpp"


def make_engine(kind: str = "auto", config: EngineConfig | None = None, **changes) -> Engine:
    """An engine of `kind` (not started). `changes` override config fields."""
    config = config or EngineConfig()
    if changes:
        config = config.with_(**changes)
    return engine_class(resolve_kind(kind))(config)
