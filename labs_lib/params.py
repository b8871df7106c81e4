"""Validation of each lab's parameters cell: one clear line for a bad value, never a traceback."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from .engines.registry import CHOICES, engine_class, resolve_kind
from .errors import BadInput, choice, fraction, positive_int, positive_number
from .kv_math import dtype
from .models import load_model
from .workshop_model import for_labs


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
    return choice("engine", value, CHOICES)


def int_list(what: str, value: object, *, maximum: int = 1_000_000) -> list[int]:
    if not isinstance(value, (list, tuple)) or not value:
        raise BadInput(what, value, "allowed: a non-empty list of integers >= 1")
    return [positive_int(what, v, maximum=maximum) for v in value]


def _endpoint(endpoint, model, engine, slots, prompt_tokens, max_tokens, quick) -> SimpleNamespace:
    """What labs 02 and 03 share: where to send, which engine a local endpoint starts, what each request asks."""
    from .endpoints import BUILTIN, check_url

    if not isinstance(endpoint, str) or (endpoint not in BUILTIN and "://" not in endpoint):
        raise BadInput("endpoint", endpoint, "allowed: " + ", ".join(BUILTIN) + ", or an http(s):// base URL")
    if "://" in endpoint:
        check_url(endpoint)
    if model is not None and not isinstance(model, str):
        raise BadInput("model", model, "allowed: None or a model id string")
    p = SimpleNamespace(
        endpoint=endpoint,
        model=model,
        engine=engine_name(engine),
        slots=positive_int("slots", slots, maximum=64),
        prompt_tokens=positive_int("prompt_tokens", prompt_tokens, maximum=100_000),
        max_tokens=positive_int("max_tokens", max_tokens, maximum=100_000),
        quick=flag("quick", quick),
    )
    # the model a local engine serves: the workshop model on a GPU where one is recorded, else the shipped one
    p.engine_model, p.model_note = {}, ""
    if endpoint == "local" and model is None:
        kind = resolve_kind(p.engine)
        served, p.model_note = for_labs(engine_class(kind).grid_family() == "gpu")
        p.engine_model = {"model": served} if served else {}
    if p.quick:  # small sizes: the same experiments, fewer and shorter requests
        p.max_tokens = min(p.max_tokens, 32)
        p.prompt_tokens = min(p.prompt_tokens, 64)
    return p


def lab02(
    *, endpoint, model, engine, slots, prompt_tokens, max_tokens, repeats, prompt_lengths, max_tokens_list, kv_demo_tokens, quick
) -> SimpleNamespace:
    p = _endpoint(endpoint, model, engine, slots, prompt_tokens, max_tokens, quick)
    p.repeats = positive_int("repeats", repeats, maximum=100)
    p.prompt_lengths = int_list("prompt_lengths", prompt_lengths, maximum=100_000)
    p.max_tokens_list = int_list("max_tokens_list", max_tokens_list, maximum=100_000)
    p.kv_demo_tokens = positive_int("kv_demo_tokens", kv_demo_tokens, maximum=4096)
    if p.quick:
        p.repeats = min(p.repeats, 2)
        p.prompt_lengths = [n for n in p.prompt_lengths if n <= 256][:2] or [32]
        p.max_tokens_list = [m for m in p.max_tokens_list if m <= 64][:2] or [16]
        p.kv_demo_tokens = min(p.kv_demo_tokens, 24)
    return p


def lab03(
    *,
    endpoint,
    model,
    engine,
    slots,
    prompt_tokens,
    max_tokens,
    concurrency_levels,
    requests_per_level,
    lengths,
    quick,
    interactive,
) -> SimpleNamespace:
    from .lengths import length_distribution

    p = _endpoint(endpoint, model, engine, slots, prompt_tokens, max_tokens, quick)
    p.concurrency_levels = int_list("concurrency_levels", concurrency_levels, maximum=1024)
    p.requests_per_level = positive_int("requests_per_level", requests_per_level, maximum=100_000)
    p.lengths = None if lengths is None else length_distribution(lengths).name  # one line naming the traces
    p.interactive = flag("interactive", interactive)
    if p.quick:
        p.concurrency_levels = sorted({1, min(p.slots, 8), min(2 * p.slots, 8)})  # below, at and past the slots
        p.requests_per_level = min(p.requests_per_level, 8)
    return p


def lab04(*, engine, model, slo_ttft_ms, slo_tpot_ms, resume, quick, interactive, usd_per_device_hour=None) -> SimpleNamespace:
    if model is not None and not isinstance(model, str):
        raise BadInput("model", model, "allowed: None (the grids' model) or a model id / path string")
    kind = resolve_kind(engine_name(engine), vllm_on_cpu=True)  # the lab of vLLM's knobs: vLLM wherever installed
    family = engine_class(kind).grid_family()
    served, note = (model, f"{model}, as given") if model is not None else for_labs(family == "gpu")
    return SimpleNamespace(
        engine=kind,
        grid_prefix=family,
        model=served,
        model_note=note,
        slo_ttft_ms=positive_number("slo_ttft_ms", slo_ttft_ms),
        slo_tpot_ms=positive_number("slo_tpot_ms", slo_tpot_ms),
        usd_per_device_hour=None if usd_per_device_hour is None else positive_number("usd_per_device_hour", usd_per_device_hour),
        resume=flag("resume", resume),
        quick=flag("quick", quick),
        interactive=flag("interactive", interactive),
    )


def lab05(*, engine, variants, kv_dtypes, eval_tokens, gpu_models, quick, interactive) -> SimpleNamespace:
    from .quant import ORIGINAL, VARIANTS, check_variant
    from .quant_compare import GPU_MODEL_FAMILIES, KV_DTYPES, VLLM_CPU_MODELS, VLLM_CPU_QUICK_MODELS

    if not isinstance(variants, (list, tuple)) or not variants:
        raise BadInput("variants", variants, "allowed: a non-empty list among " + ", ".join(VARIANTS))
    if not isinstance(kv_dtypes, (list, tuple)) or not kv_dtypes:
        raise BadInput("kv_dtypes", kv_dtypes, "allowed: a non-empty list among " + ", ".join(KV_DTYPES))
    for k in kv_dtypes:
        choice("kv_dtypes", k, KV_DTYPES)
    if isinstance(gpu_models, str):
        gpu_models = [dict(m) for m in GPU_MODEL_FAMILIES[choice("gpu_models", gpu_models, tuple(GPU_MODEL_FAMILIES))]]
    if not isinstance(gpu_models, (list, tuple)) or not gpu_models or not all(isinstance(m, dict) for m in gpu_models):
        raise BadInput(
            "gpu_models", gpu_models, f"allowed: {', '.join(GPU_MODEL_FAMILIES)}, or a list of mappings of EngineConfig fields"
        )
    quick = flag("quick", quick)
    names = [check_variant(v) for v in variants]
    kind = resolve_kind(engine_name(engine))
    chosen = engine_class(kind)
    on_gpu = chosen.grid_family() == "gpu"
    checkpoint = not chosen.builds_weight_variants  # one checkpoint's configurations, not GGUF variants built here
    served, model_note = for_labs(on_gpu and checkpoint)
    if served and gpu_models == [dict(m) for m in GPU_MODEL_FAMILIES["shipped"]]:  # the default family, on the workshop model
        gpu_models = [{**m, "model": served} for m in gpu_models]
    elif not (on_gpu and checkpoint):
        model_note = ""
    p = SimpleNamespace(
        engine=kind,
        weight_variants=not checkpoint,
        # vLLM on CPU: the shipped model
        vllm_models=list(gpu_models) if on_gpu else [dict(m) for m in (VLLM_CPU_QUICK_MODELS if quick else VLLM_CPU_MODELS)],
        vllm_note=(
            "quick: float32 weights left out (a vLLM start less); quick=False compares them too"
            if quick and checkpoint and not on_gpu
            else ""
        ),
        variants=names,
        kv_dtypes=[str(k).lower() for k in kv_dtypes],
        eval_tokens=positive_int("eval_tokens", eval_tokens, minimum=32, maximum=1024),
        gpu_models=list(gpu_models),
        model_note=model_note,
        quick=quick,
        interactive=flag("interactive", interactive),
    )
    if quick:
        p.variants = [v for v in names if v in (ORIGINAL, "F16", "Q8_0", "Q4_0", "Q4_0-PURE")] or names[:2]
        p.eval_tokens = min(p.eval_tokens, 128)
    # what section 3 compares on this engine: llama.cpp's weight files and KV dtypes, or vLLM's configurations
    p.compared = (
        f"weights {', '.join(p.variants)}; KV {', '.join(p.kv_dtypes)}"
        if p.weight_variants
        else "configurations: " + "; ".join(_fields(m) or "as served" for m in p.vllm_models)
    )
    return p


def _fields(config: dict) -> str:
    """One vLLM configuration of lab 05, as its fields (a model by its name, not its path)."""
    return ", ".join(f"{k}={Path(str(v)).name if k == 'model' else v}" for k, v in config.items())


def lab06(*, ctx_per_request, quick) -> SimpleNamespace:
    return SimpleNamespace(
        ctx_per_request=positive_int("ctx_per_request", ctx_per_request, minimum=256, maximum=32768),
        quick=flag("quick", quick),
    )


def lab07(*, seeds) -> SimpleNamespace:
    from .articles import articles

    known = [a["seed"] for a in articles()]
    if not isinstance(seeds, (list, tuple)) or not seeds or any(s not in known for s in seeds):
        raise BadInput("seeds", seeds, "allowed: a non-empty list among " + ", ".join(known))
    return SimpleNamespace(seeds=list(seeds))


def check_notebook(lab: str, values: dict[str, object]) -> SimpleNamespace | None:
    """Validate lab `lab` ("01"…"07")'s parameters as its parameters cell will, so the runner can refuse
    a bad value in one line before starting a kernel. None when the lab has no validator."""
    import inspect

    validate = globals().get(f"lab{lab}")
    if validate is None:
        return None
    wanted = inspect.signature(validate).parameters
    if not set(wanted) <= set(values):
        return None
    return validate(**{name: values[name] for name in wanted})
