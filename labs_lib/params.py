"""Validation of each lab's parameters cell: one clear line for a bad value, never a traceback."""

from __future__ import annotations

from types import SimpleNamespace

from .errors import BadInput, choice, fraction, positive_int
from .kv_math import dtype
from .models import load_model

ENGINES = ("auto", "llamacpp", "vllm")


def flag(what: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise BadInput(what, value, "allowed: True or False")


def lab01(*, model, compare_models, seq_len, batch, kv_dtype, gpu, gpu_memory_utilization, quick, interactive) -> SimpleNamespace:
    from .catalogs import gpu_spec

    if not isinstance(compare_models, (list, tuple)):
        raise BadInput("compare_models", compare_models, "allowed: a list of model ids or aliases")
    return SimpleNamespace(
        model=load_model(model),
        compare_models=[load_model(m) for m in compare_models],
        seq_len=positive_int("seq_len", seq_len, maximum=10_000_000),
        batch=positive_int("batch", batch, maximum=1_000_000),
        kv_dtype=dtype(kv_dtype).name,
        gpu=gpu_spec(gpu)["name"],
        gpu_memory_utilization=fraction("gpu_memory_utilization", gpu_memory_utilization),
        quick=flag("quick", quick),
        interactive=flag("interactive", interactive),
    )


def engine_name(value: object) -> str:
    return choice("engine", value, ENGINES)
