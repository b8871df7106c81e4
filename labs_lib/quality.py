"""Quality of a model variant, measured: exact teacher-forced log-probabilities of a fixed text.

Each engine produces Scores its own way (Engine.score: llama.cpp forces the tokens with a grammar,
vLLM reports prompt_logprobs), with each position's TOP_K most likely tokens. From them:
- mean NLL (nats/token) and perplexity = exp(NLL);
- against a reference variant, per position: ΔNLL (nats), KL(reference ‖ variant) (nats), and whether
  the top-1 token agrees;
- 95% confidence intervals of the means by a block bootstrap over positions (neighbouring tokens are
  not independent, so whole blocks are resampled).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

TOP_K = 20  # tokens reported per position: vLLM's default max_logprobs; llama.cpp's n_probs takes the same
BOOTSTRAP_BLOCK = 16  # tokens per resampled block
BOOTSTRAP_RESAMPLES = 2000


@dataclass
class Scores:
    token_ids: list[int]  # the scored text's tokens (BOS excluded)
    logprobs: np.ndarray  # log p(token_i | BOS, tokens_<i), natural log
    top1_ids: list[int]  # the model's own most likely token at each position
    top_logprobs: list[dict[int, float]] | None = None  # each position's TOP_K most likely tokens -> log-prob

    @property
    def nll(self) -> float:
        return float(-self.logprobs.mean())

    @property
    def perplexity(self) -> float:
        return perplexity(self.logprobs.tolist())

    @property
    def top1_accuracy(self) -> float:
        return float(np.mean([a == b for a, b in zip(self.top1_ids, self.token_ids, strict=True)]))


def identical_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def kl_lower_bound(p_top: dict[int, float], q_top: dict[int, float]) -> float:
    """KL(P ‖ Q) in nats at one position, from the log-probs each model reported for its top tokens.

    Tokens with both probabilities known (reported by both; per_token adds the scored token to both) keep
    their own terms; every other token is merged into one "rest" bucket. Merging
    outcomes never increases KL (the log-sum inequality), so this is a lower bound of the full-vocabulary
    KL; it is tight when the K reported tokens hold nearly all of P's mass."""
    known = {t: (p, q_top[t]) for t, p in p_top.items() if t in q_top}
    if not known:
        return 0.0
    logp = np.array([v[0] for v in known.values()])
    logq = np.array([v[1] for v in known.values()])
    p = np.exp(logp)
    kl = float(np.sum(p * (logp - logq)))
    p_rest = 1.0 - float(p.sum())
    q_rest = 1.0 - float(np.exp(logq).sum())
    if p_rest > 1e-9:
        kl += p_rest * math.log(p_rest / max(q_rest, 1e-12))
    return max(kl, 0.0)


def perplexity(logprobs: Sequence[float]) -> float:
    """exp of the mean negative log-likelihood per token (natural-log probabilities of each token)."""
    return math.exp(-sum(logprobs) / len(logprobs))


KL = Callable[[dict[int, float], dict[int, float]], float]  # (P's top tokens, Q's) -> KL(P || Q), nats


@dataclass(frozen=True)
class Scorers:
    """The functions that turn log-probabilities into lab 05's figures: the library's, or the participant's once
    their checks pass (lab 05 passes its own)."""

    perplexity: Callable[[Sequence[float]], float] = perplexity
    kl: KL = kl_lower_bound


def per_token(reference: Scores, other: Scores, kl: KL = kl_lower_bound) -> dict[str, np.ndarray]:
    """Per position: delta_nll (nats; positive = other is worse), kl (nats, a lower bound from `kl`, given both
    top-token lists with the scored token added to each; NaN without top_logprobs) and top1_agree (1.0 or 0.0)."""
    if reference.token_ids != other.token_ids:
        raise ValueError("the two scores are of different texts")
    delta_nll = reference.logprobs - other.logprobs
    if reference.top_logprobs is not None and other.top_logprobs is not None:
        kl_nats = np.array(
            [
                kl({**p, t: lp}, {**q, t: lq})
                for p, q, t, lp, lq in zip(
                    reference.top_logprobs,
                    other.top_logprobs,
                    reference.token_ids,
                    reference.logprobs,
                    other.logprobs,
                    strict=True,
                )
            ]
        )
    else:
        kl_nats = np.full(len(delta_nll), np.nan)
    agree = np.array([float(a == b) for a, b in zip(reference.top1_ids, other.top1_ids, strict=True)])
    return {"delta_nll": delta_nll, "kl": kl_nats, "top1_agree": agree}


def bootstrap_ci(
    values: np.ndarray,
    *,
    block: int = BOOTSTRAP_BLOCK,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Confidence interval of the mean of per-token values: blocks of `block` consecutive tokens resampled
    with replacement (a moving-block bootstrap), percentile interval. Deterministic for a given seed."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0 or np.isnan(values).all():
        return (math.nan, math.nan)
    block = max(1, min(block, len(values)))
    starts = np.arange(len(values) - block + 1)
    blocks_needed = -(-len(values) // block)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(starts, size=(resamples, blocks_needed))
    idx = (chosen[:, :, None] + np.arange(block)).reshape(resamples, -1)[:, : len(values)]
    means = values[idx].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return (float(low), float(high))


def tokens_to_separate(a: tuple[float, float, float], b: tuple[float, float, float], tokens: int) -> float:
    """Tokens to score so that two means' intervals, each (mean, low, high) measured on `tokens` tokens, just stop
    overlapping (or, when already apart, just touch), if each narrows as 1/sqrt(tokens) around its mean as a mean's
    interval does: tokens x ((half-width of a + half-width of b) / |mean of a - mean of b|)^2. Inf for equal means."""
    (mean_a, low_a, high_a), (mean_b, low_b, high_b) = a, b
    gap = abs(mean_a - mean_b)
    widths = (high_a - low_a) / 2 + (high_b - low_b) / 2
    return math.inf if gap == 0 else tokens * (widths / gap) ** 2


def agreement(reference: Scores, other: Scores, kl: KL = kl_lower_bound) -> dict[str, float]:
    """How closely `other` follows `reference` on the same text: means and 95% bootstrap intervals, KL by `kl`.

    perplexity_ratio = exp(ΔNLL), so its interval is exp of ΔNLL's."""
    tokens = per_token(reference, other, kl)
    dn_low, dn_high = bootstrap_ci(tokens["delta_nll"])
    kl_low, kl_high = bootstrap_ci(tokens["kl"])
    delta_nll = float(tokens["delta_nll"].mean())
    return {
        "delta_nll": delta_nll,
        "delta_nll_ci_low": dn_low,
        "delta_nll_ci_high": dn_high,
        "perplexity_ratio": math.exp(delta_nll),
        "perplexity_ratio_ci_low": math.exp(dn_low),
        "perplexity_ratio_ci_high": math.exp(dn_high),
        "kl": float(np.mean(tokens["kl"])),
        "kl_ci_low": kl_low,
        "kl_ci_high": kl_high,
        "top1_agreement": float(tokens["top1_agree"].mean()),
        "mean_abs_delta_logprob": float(np.mean(np.abs(tokens["delta_nll"]))),
    }
