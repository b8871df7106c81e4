"""An engine's Prometheus /metrics, parsed with prometheus_client, and differences between scrapes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .registry import engine_class

if TYPE_CHECKING:
    from .base import Engine


def parse_metrics(text: str) -> dict[str, float]:
    """Sample name -> value, summed over label sets (counters keep their _total suffix)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def scrape(root_url: str, headers: dict[str, str] | None = None, timeout_s: float = 10.0) -> dict[str, float]:
    resp = httpx.get(f"{root_url}/metrics", headers=headers or {}, timeout=timeout_s, trust_env=False)
    resp.raise_for_status()
    return parse_metrics(resp.text)


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for every sample present in `after` (gauges too: read them as changes)."""
    return {name: value - before.get(name, 0.0) for name, value in after.items()}


def token_counts(d: dict[str, float], engine: str | type[Engine] | Engine = "llamacpp") -> dict[str, int]:
    """Prompt tokens (cached included), cached prompt tokens and output tokens an engine counted,
    from a delta of two scrapes. `engine`: a kind, or an engine (class or instance) naming its counters."""
    names = (engine_class(engine) if isinstance(engine, str) else engine).counters
    cached = d.get(names.cached, 0.0)
    prompt = d.get(names.prompt, 0.0) + (0.0 if names.prompt_includes_cached else cached)
    return {
        "prompt_tokens": round(prompt),
        "output_tokens": round(d.get(names.output, 0.0)),
        "prompt_tokens_cached": round(cached),
    }


def cache_hit_rate(hits: float, queries: float, queries_include_hits: bool) -> float | None:
    """Share of prompt tokens served from the cache."""
    total = queries if queries_include_hits else queries + hits
    return hits / total if total > 0 else None
