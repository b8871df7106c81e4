"""Request lengths drawn from recorded production traces instead of one fixed length (issue 25).

data/length_distributions.json holds, per trace, the quantiles of its context (prompt) and generated token counts
and their rank correlation (tools/length_distributions.py builds it; the traces are cited there, not shipped).
Sampling is by inverse CDF, linear between quantiles; context and output are drawn independently, which the traces
allow (Spearman rank correlation 0.07 for Azure's conversation trace, -0.02 for its code trace). `scale` shrinks
both lengths for a small machine (0.25: a CPU run), keeping the shape; every length is at least 1 token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

import numpy as np

from .errors import BadInput, positive_int, positive_number
from .paths import DATA_DIR
from .prompts import PromptFactory
from .timing import RequestSpec


@dataclass(frozen=True)
class LengthDistribution:
    """One trace's request lengths (tokens), as quantiles of each marginal."""

    name: str
    description: str
    source: str
    requests: int  # requests in the trace
    quantiles: tuple[float, ...]
    context_tokens: tuple[float, ...]  # the context (prompt) length at each quantile
    generated_tokens: tuple[float, ...]  # the output length at each quantile
    rank_correlation: float  # Spearman, context against output, in the trace

    def sample(self, n: int, *, seed: int = 0, scale: float = 1.0, cap: int = 0) -> list[tuple[int, int]]:
        """`n` (context tokens, output tokens) pairs, reproducible from `seed`. With `cap` (an engine's context per
        request), a pair longer than it keeps its output and loses the start of its context."""
        rng = np.random.default_rng(seed)
        u, v = rng.random(n), rng.random(n)
        context = np.interp(u, self.quantiles, self.context_tokens) * scale
        generated = np.interp(v, self.quantiles, self.generated_tokens) * scale
        pairs = [(max(1, round(c)), max(1, round(g))) for c, g in zip(context, generated, strict=True)]
        if cap:
            pairs = [(max(1, min(c, cap - min(g, cap - 1))), min(g, cap - 1)) for c, g in pairs]
        return pairs

    def mean_tokens(self) -> float:
        """Mean prompt + output tokens of a request, unscaled and uncapped: each marginal's quantile function, linear
        between quantiles as `sample` draws it, integrated over (0, 1)."""
        return float(np.trapezoid(self.context_tokens, self.quantiles) + np.trapezoid(self.generated_tokens, self.quantiles))

    def median(self) -> tuple[float, float]:
        """(context, output) medians, tokens."""
        return float(np.interp(0.5, self.quantiles, self.context_tokens)), float(
            np.interp(0.5, self.quantiles, self.generated_tokens)
        )


@cache
def _all() -> dict[str, dict]:
    return json.loads((DATA_DIR / "length_distributions.json").read_text())["distributions"]


def distribution_names() -> list[str]:
    return sorted(_all())


def length_distribution(name: str) -> LengthDistribution:
    """The named trace's distribution; one line naming the allowed names for any other."""
    entry = _all().get(str(name))
    if entry is None:
        raise BadInput("lengths", name, "allowed: " + ", ".join(distribution_names()))
    return LengthDistribution(
        name=str(name),
        description=entry["description"],
        source=entry["source"],
        requests=entry["requests"],
        quantiles=tuple(entry["quantiles"]),
        context_tokens=tuple(entry["context_tokens"]),
        generated_tokens=tuple(entry["generated_tokens"]),
        rank_correlation=entry["rank_correlation"],
    )


def sampled_lengths(name: str, n: int, *, seed: int = 0, scale: float = 1.0, cap: int = 0) -> list[tuple[int, int]]:
    """`n` (context, output) token pairs from the named trace, both scaled by `scale` (checked: a number > 0), each
    pair at most `cap` tokens in all when cap > 1."""
    cap = positive_int("length cap", cap, minimum=0, maximum=10_000_000)
    if cap == 1:
        raise BadInput("length cap", cap, "allowed: 0 (no cap) or at least 2 tokens")
    return length_distribution(name).sample(n, seed=seed, scale=positive_number("length scale", scale), cap=cap)


def trace_requests(
    factory: PromptFactory, name: str, n: int, *, seed: int = 0, scale: float = 1.0, cap: int = 0, ignore_eos: bool = True
) -> list[RequestSpec]:
    """`n` requests whose prompt and output lengths are drawn from the named trace (sampled_lengths), the prompts
    from `factory`."""
    pairs = sampled_lengths(name, n, seed=seed, scale=scale, cap=cap)
    return [RequestSpec(factory.prompt(context), output, ignore_eos=ignore_eos) for context, output in pairs]
