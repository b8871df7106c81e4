"""The source articles' claims (data/claims.json) and lab 01's recomputation of them."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pandas as pd

from .errors import BadInput
from .kv_math import GIB, allocation_utilization, kv_cache, plan_capacity, weight_bytes
from .models import ModelSpec, load_model
from .paths import DATA_DIR

TOLERANCE = 0.10  # a figure "holds" when within 10% of the recomputed value


@cache
def _claims() -> tuple[dict, ...]:
    return tuple(json.loads((DATA_DIR / "claims.json").read_text())["claims"])


def claims(lab: str | None = None) -> list[dict]:
    """All claims, or those lab `lab` ("01".."05") checks."""
    return [c for c in _claims() if lab is None or c["lab"] == lab]


def claim(claim_id: str) -> dict:
    for c in _claims():
        if c["id"] == claim_id:
            return c
    raise BadInput("claim", claim_id, "allowed: an id from data/claims.json")


def verdict(article: float, computed: float, tolerance: float = TOLERANCE) -> tuple[bool, float]:
    """(holds, relative error of the article's figure against the computed one)."""
    off = (article - computed) / computed if computed else float("inf")
    return abs(off) <= tolerance, off


def row(claim_id: str, computed: float | str, unit: str, holds: bool | None, why: str, off: float | None = None) -> dict:
    """One line of a "check the article" table."""
    c = claim(claim_id)
    mark = {True: "holds", False: "does not hold", None: "depends"}[holds]
    return {
        "claim": c["claim"],
        "source": c["seed"][:3],
        "article": c["value"],
        "computed": computed,
        "unit": unit,
        "verdict": mark,
        "off_by": None if off is None else f"{off:+.0%}",
        "why": why,
    }


def _mha_like(layers: int, kv_heads: int, head_dim: int, q_heads: int = 64) -> ModelSpec:
    return ModelSpec(
        name=f"{layers}L-{kv_heads}kv",
        num_layers=layers,
        num_q_heads=q_heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=q_heads * head_dim,
        vocab_size=32000,
    )


def kv_claims_table(seed: int = 0) -> pd.DataFrame:
    """Every lab-01 claim, recomputed with labs_lib.kv_math."""
    rows = []
    for cid in ("s000-llama7b-2048", "s000-llama7b-2048x10", "s000-llama7b-8192"):
        c = claim(cid)
        gib = kv_cache(c["model"], c["seq_len"], c["batch"], c["kv_dtype"]).kv_bytes / GIB
        holds, off = verdict(c["value"], gib)
        rows.append(
            row(
                cid,
                round(gib, 3),
                "GiB",
                holds,
                "2 x 32 layers x 32 heads x 128 x 2 bytes per token; the article's 'GB' is GiB (x1.074 for GB)",
                off,
            )
        )
    for cid in ("s000-mha-80l", "s000-gqa-80l", "s000-mqa-80l"):
        c = claim(cid)
        est = kv_cache(_mha_like(c["layers"], c["kv_heads"], c["head_dim"]), c["seq_len"], 1, "fp16")
        gb, gib = est.kv_bytes / 1e9, est.kv_bytes / GIB
        holds, off = verdict(c["value"], gb)
        rows.append(
            row(
                cid,
                f"{gib:.3f} GiB = {gb:.3f} GB",
                "GB",
                holds,
                f"{est.kv_bytes:,} bytes; {c['value']} fits neither GB nor GiB (1.28x GiB): the ratios are right, the sizes are not",
                off,
            )
        )
    c = claim("s000-gqa-saving")
    saving = 100 * (1 - c["kv_heads"] / c["q_heads"])
    holds, off = verdict(c["value"], saving)
    rows.append(row("s000-gqa-saving", saving, "%", holds, "1 - 8/64 KV heads", off))
    c = claim("s000-24gb-card")
    plan = plan_capacity(
        c["model"],
        c["max_model_len"],
        kv_dtype="fp16",
        gpu_memory_gib=c["gpu_memory_gib"],
        weight_gib=c["weight_gib"],
        gpu_memory_utilization=0.9,
    )
    holds, off = verdict(c["value"], plan.max_concurrency)
    rows.append(
        row(
            "s000-24gb-card",
            plan.max_concurrency,
            "requests at 2,048 tokens",
            holds,
            f"vLLM may use 24 x 0.9 = 21.6 GiB; minus 14 GiB weights and ~{plan.overhead_bytes / GIB:.0f} GiB activations "
            f"leaves {plan.available_kv_bytes / GIB:.2f} GiB = {plan.num_blocks} blocks of 16 tokens (shorter requests fit more: blocks are taken as used)",
            off,
        )
    )
    c = claim("s001-7b-weights")
    sizes = {m: weight_bytes(m, "fp16") / 1e9 for m in c["models"]}
    ok = [verdict(c["value"], v)[0] for v in sizes.values()]
    rows.append(
        row(
            "s001-7b-weights",
            ", ".join(f"{load_model(m).name} {v:.2f}" for m, v in sizes.items()),
            "GB",
            all(ok),
            "parameters x 2 bytes; 'about 14 GB' is fair for 7B-class models",
            verdict(c["value"], np.mean(list(sizes.values())))[1],
        )
    )
    c = claim("s002-70b-per-token")
    per_token = kv_cache(c["model"], 1, 1, "fp16").kv_bytes_per_token
    holds, off = verdict(c["value"], per_token / 1e6)
    own = 70 * 2 * 8192 * 2
    rows.append(
        row(
            "s002-70b-per-token",
            per_token / 1e6,
            "MB",
            holds,
            f"Llama-2-70B has 80 layers and 8 KV heads (GQA): 2 x 80 x 8 x 128 x 2 = {per_token:,} bytes; "
            f"even the article's own formula gives {own / 1e6:.2f} MB",
            off,
        )
    )
    for cid in ("s002-70b-2048", "s003-70b-4096"):
        c = claim(cid)
        gb = kv_cache(c["model"], c["seq_len"], 1, "fp16").kv_bytes / 1e9
        holds, off = verdict(c["value"], gb)
        mha = kv_cache(_mha_like(80, 64, 128), c["seq_len"], 1, "fp16").kv_bytes / 1e9
        rows.append(row(cid, gb, "GB", holds, f"GQA with 8 KV heads; even MHA (64 KV heads) would be {mha:.1f} GB", off))
    c = claim("s003-70b-weights")
    gb = weight_bytes(c["model"], "fp16") / 1e9
    holds, off = verdict(c["value"], gb)
    rows.append(row("s003-70b-weights", gb, "GB", holds, f"{load_model(c['model']).params:,} parameters x 2 bytes", off))
    for cid, seq in (("s004-7b-per-1k", 1024), ("s004-7b-32k", 32768)):
        c = claim(cid)
        sizes = {load_model(m).name: kv_cache(m, seq, 1, "fp16").kv_bytes / 1e9 for m in c["models"]}
        unit = "MB" if seq == 1024 else "GB"
        shown = {k: (v * 1000 if unit == "MB" else v) for k, v in sizes.items()}
        rows.append(
            row(
                cid,
                ", ".join(f"{k} {v:.0f}" if unit == "MB" else f"{k} {v:.1f}" for k, v in shown.items()),
                unit,
                None,
                "true for an MHA 7B (Llama-2-7B); GQA models (Llama-3.1-8B, Qwen2.5-7B) need 4-9x less",
            )
        )
    lengths = _example_lengths(seed)
    util = allocation_utilization(lengths, max_len=4096, block_size=16)
    rows.append(
        row(
            "s003-paged-utilization",
            f"contiguous {util['contiguous']:.0%}, paged {util['paged']:.1%}",
            "% of KV slots used",
            None,
            f"depends on the lengths: {len(lengths)} requests, median {int(np.median(lengths))} tokens, preallocated to 4,096",
        )
    )
    return pd.DataFrame(rows)


def _example_lengths(seed: int = 0, n: int = 1000) -> list[int]:
    """A chat-like length mix: log-normal, median 512 tokens, capped at 4,096."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in np.clip(rng.lognormal(np.log(512), 0.8, n), 16, 4096)]
