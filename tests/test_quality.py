"""Lab 05's quality measures: KL divergence from top-K reports (a lower bound) and block-bootstrap intervals."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labs_lib.quality import Scores, agreement, bootstrap_ci, kl_lower_bound, per_token, tokens_to_separate


def _full_kl(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sum(p * (np.log(p) - np.log(q))))


def _top(logp: np.ndarray, k: int) -> dict[int, float]:
    order = np.argsort(-logp)[:k]
    return {int(i): float(logp[i]) for i in order}


def _distribution(rng, n: int, peak: float) -> np.ndarray:
    logits = rng.normal(size=n) * peak
    return np.exp(logits - np.logaddexp.reduce(logits))


def test_kl_with_every_token_reported_is_the_exact_kl():
    rng = np.random.default_rng(1)
    p, q = _distribution(rng, 50, 2.0), _distribution(rng, 50, 2.0)
    assert kl_lower_bound(_top(np.log(p), 50), _top(np.log(q), 50)) == pytest.approx(_full_kl(p, q), rel=1e-9)
    assert kl_lower_bound(_top(np.log(p), 50), _top(np.log(p), 50)) == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, 60), peak=st.floats(0.1, 6.0), n=st.integers(2, 200))
def test_kl_from_top_k_never_exceeds_the_full_kl_and_tightens_with_k(seed, k, peak, n):
    rng = np.random.default_rng(seed)
    p, q = _distribution(rng, n, peak), _distribution(rng, n, peak)
    forced = int(rng.integers(n))
    full = _full_kl(p, q)
    logp, logq = np.log(p), np.log(q)
    bound = kl_lower_bound({**_top(logp, k), forced: float(logp[forced])}, {**_top(logq, k), forced: float(logq[forced])})
    assert 0.0 <= bound <= full * (1 + 1e-8) + 1e-9  # equal up to rounding when the top k hold nearly all the mass
    wider = kl_lower_bound({**_top(logp, n), forced: float(logp[forced])}, {**_top(logq, n), forced: float(logq[forced])})
    assert wider == pytest.approx(full, rel=1e-6, abs=1e-9)


def test_bootstrap_interval_holds_the_mean_narrows_with_data_and_repeats():
    rng = np.random.default_rng(0)
    values = rng.normal(0.1, 1.0, size=4000)
    low, high = bootstrap_ci(values[:200])
    assert low < values[:200].mean() < high
    wide = high - low
    low4k, high4k = bootstrap_ci(values)
    assert low4k < 0.1 < high4k  # the true mean, well inside at this size
    assert (high4k - low4k) < wide / 3  # ~sqrt(20) narrower
    assert bootstrap_ci(values[:200]) == (low, high)  # seeded: the same text gives the same interval
    assert all(math.isnan(x) for x in bootstrap_ci(np.array([])))


def test_bootstrap_blocks_widen_the_interval_for_correlated_tokens():
    # neighbouring tokens are correlated: resampling single tokens would understate the uncertainty
    rng = np.random.default_rng(3)
    runs = np.repeat(rng.normal(size=40), 16)  # 40 independent values, each held for 16 tokens
    one = bootstrap_ci(runs, block=1)
    blocks = bootstrap_ci(runs, block=16)
    assert (blocks[1] - blocks[0]) > 2 * (one[1] - one[0])


def _scores(logprobs, top1, tops, ids=(5, 6, 7, 8)):
    return Scores(list(ids), np.array(logprobs, dtype=float), list(top1), tops)


def test_agreement_is_zero_against_itself_and_signs_a_worse_variant_positive():
    tops = [{5: -0.1, 9: -2.5}, {6: -0.2, 9: -2.0}, {7: -0.3, 1: -1.5}, {8: -0.1, 2: -3.0}]
    ref = _scores([-0.1, -0.2, -0.3, -0.1], [5, 6, 7, 8], tops)
    same = agreement(ref, ref)
    assert same["delta_nll"] == 0 and same["kl"] == 0 and same["top1_agreement"] == 1
    assert same["delta_nll_ci_low"] == same["delta_nll_ci_high"] == 0 and same["perplexity_ratio"] == 1
    worse_tops = [{9: -0.5, 5: -1.0}, {6: -0.4, 9: -1.2}, {7: -0.6, 1: -1.0}, {8: -0.2, 2: -2.0}]
    worse = _scores([-1.0, -0.4, -0.6, -0.2], [9, 6, 7, 8], worse_tops)
    a = agreement(ref, worse)
    assert a["delta_nll"] == pytest.approx(np.mean([0.9, 0.2, 0.3, 0.1]))
    assert a["kl"] > 0 and a["kl_ci_low"] <= a["kl"] <= a["kl_ci_high"]
    assert a["top1_agreement"] == 0.75
    assert a["perplexity_ratio"] == pytest.approx(math.exp(a["delta_nll"]))
    no_tops = per_token(_scores([-0.1] * 4, [5, 6, 7, 8], None), _scores([-0.2] * 4, [5, 6, 7, 8], None))
    assert np.isnan(no_tops["kl"]).all()
    with pytest.raises(ValueError, match="different texts"):
        per_token(ref, _scores([-0.1] * 4, [1, 2, 3, 4], None, ids=(1, 2, 3, 4)))


def test_tokens_to_separate_by_hand():
    # half-widths 0.1 and 0.1 against a gap of 0.5: (0.2 / 0.5)^2 = 0.16 of the tokens would still part them
    assert tokens_to_separate((1.0, 0.9, 1.1), (1.5, 1.4, 1.6), 100) == pytest.approx(16.0)
    assert tokens_to_separate((1.5, 1.4, 1.6), (1.0, 0.95, 1.05), 100) == pytest.approx(100 * (0.15 / 0.5) ** 2)
    assert tokens_to_separate((1.0, 0.9, 1.1), (1.0, 0.8, 1.2), 100) == math.inf


def test_tokens_to_separate_predicts_where_bootstrap_intervals_part():
    """The 1/sqrt(tokens) law, checked on the bootstrap the labs use: far fewer tokens than predicted overlap, far
    more part."""
    rng = np.random.default_rng(7)
    a, b = rng.normal(1.0, 1.0, 200), rng.normal(1.25, 1.0, 200)

    def interval(values):
        return (values.mean(), *bootstrap_ci(values))

    needed = tokens_to_separate(interval(a), interval(b), 200)
    assert 100 < needed < 600
    for factor, part in ((0.25, False), (4.0, True)):
        n = int(factor * needed)
        (_, la, ha), (_, lb, hb) = interval(rng.normal(1.0, 1.0, n)), interval(rng.normal(1.25, 1.0, n))
        assert (ha < lb or hb < la) == part, (n, (la, ha), (lb, hb))
