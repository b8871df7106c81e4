"""Engines the labs start and stop: one interface (base), one registry, llama.cpp and vLLM behind it.

base.py               EngineConfig, Engine (start/stop/health/log), the knob mapping table
registry.py           KINDS, resolve_kind("auto"), make_engine(kind, config)
llamacpp.py           LlamaCppEngine: xllamacpp in a child process, its KV log parsed
llamacpp_launcher.py  the child process itself
llamacpp_api.py       llama.cpp's native /tokenize and /completion
vllm.py               VLLMEngine: `vllm serve` flags, start-up log, prompt_logprobs
guard.py              keeps a server from outliving its parent
metrics.py            /metrics scraped and differenced
model_files.py        the shipped Gemma 3 270M GGUF
"""

from .base import ENGINE_MAPPING, Engine, EngineConfig, EngineInfo, free_port, port_is_free
from .registry import CHOICES, KINDS, engine_class, make_engine, resolve_kind

__all__ = [
    "CHOICES",
    "ENGINE_MAPPING",
    "KINDS",
    "Engine",
    "EngineConfig",
    "EngineInfo",
    "engine_class",
    "free_port",
    "make_engine",
    "port_is_free",
    "resolve_kind",
]
