"""The articles' claims (data/claims.json): every one is judged somewhere in the labs — a verdict
computed or measured in the run, or an explicit "not testable here, because …" — and the computed
verdicts rest on arithmetic that is checked here."""

import functools
import json
import re
import subprocess
import sys

import pytest
from conftest import REPO

from labs_lib.claims import AWQ_GROUP, awq_memory, claims, kv_claims_table, unmeasurable_table, vllm_claims_table
from labs_lib.kv_math import VLLM_GPU_MEMORY_UTILIZATION as VLLM_UTIL
from labs_lib.kv_math import weight_bytes
from labs_lib.mechanism_claims import mechanism_claims_table
from labs_lib.package_claims import package_claims_table
from labs_lib.roofline import article_claims_table
from labs_lib.vllm_source import source_claims_table

NOTEBOOKS = {p.name[:2]: p.read_text() for p in (REPO / "notebooks").glob("*.ipynb")}
# each table's claims, computed once for all the parametrized cases
LIBRARY_TABLES = {
    name: functools.cache(lambda table=table: frozenset(table()["claim"]))
    for name, table in {
        "kv_claims_table": kv_claims_table,
        "vllm_claims_table": vllm_claims_table,
        "roofline.article_claims_table": article_claims_table,
        "source_claims_table": source_claims_table,
        "mechanism_claims_table": mechanism_claims_table,
        "package_claims_table": package_claims_table,
        "unmeasurable_table": unmeasurable_table,
    }.items()
}
MEASURED_TABLES = {
    "article_checks": REPO / "labs_lib" / "sweep_views.py",
    "timing_article_checks": REPO / "labs_lib" / "claims.py",
    "quant_article_checks": REPO / "labs_lib" / "quant_compare.py",
    "connection_article_checks": REPO / "labs_lib" / "doctor" / "troubleshoot.py",
    "gateway_article_checks": REPO / "labs_lib" / "doctor" / "gateway_checks.py",
}
ARTICLE_CODE = REPO / "labs_lib" / "article_code.py"


@pytest.mark.parametrize("claim", claims(), ids=lambda c: c["id"])
def test_every_claim_is_judged_in_the_appendix(claim):
    """The appendix (06) computes the claim in a table it calls, or reads it from the record of its lab, which calls
    the function of its measurements that names the claim's id and records that table."""
    appendix, lab = NOTEBOOKS["07"], NOTEBOOKS[claim["lab"]]
    computed = any(f"{name}(" in appendix and claim["claim"] in shown() for name, shown in LIBRARY_TABLES.items())
    computed |= "article_code_table(" in appendix and f'"{claim["id"]}"' in ARTICLE_CODE.read_text()
    recorded = f'articles.record(\\"{claim["lab"]}\\"' in lab
    measured = recorded and any(
        f"{function}(" in lab and f'"{claim["id"]}"' in module.read_text() for function, module in MEASURED_TABLES.items()
    )
    assert computed or measured, f"{claim['id']} is neither computed in the appendix nor recorded by lab {claim['lab']}"


def test_lab01_table_covers_its_claims():
    """Lab 01's claims are all computed (its planner, its block pool, the configurations, vLLM's source)."""
    shown = set().union(*(table() for table in LIBRARY_TABLES.values()))
    missing = [c["id"] for c in claims("01") if c["claim"] not in shown and f'\\"{c["id"]}\\"' not in NOTEBOOKS["01"]]
    assert not missing, missing


def test_every_claim_quotes_its_seed():
    for c in claims():
        seed = REPO.parent / "shared" / "seeds" / c["seed"]
        if not seed.exists():
            pytest.skip("the seeds live in ../shared beside the checkout")
        text = seed.read_text()
        # verbatim in full: each part between the quote's own ellipses is the seed's words, character for character
        missing = [part for part in c["quote"].split("…") if part.strip() and part.strip() not in text]
        assert not missing, (c["id"], missing)


def test_awq_saves_the_weights_not_vllms_memory():
    m = awq_memory("llama-2-7b", "RTX-4090", 0.9)
    assert m["bits_per_weight"] == 4 + 20 / AWQ_GROUP
    assert m["fp16_weight_bytes"] == weight_bytes("llama-2-7b", "fp16")
    assert 0.65 < m["weight_saving"] < 0.75  # "more than half" holds for the weights
    # vLLM reserves the same share of the card either way: the bytes saved become KV pool, byte for byte
    assert m["kv_pool_bytes_awq"] - m["kv_pool_bytes_fp16"] == pytest.approx(
        m["fp16_weight_bytes"] - m["awq_weight_bytes"], abs=2
    )
    assert m["max_concurrency_awq"] > 2 * m["max_concurrency_fp16"]


def test_claims_file_is_well_formed():
    data = json.loads((REPO / "data" / "claims.json").read_text())
    ids = [c["id"] for c in data["claims"]]
    assert len(ids) == len(set(ids))
    assert all(c["lab"] in NOTEBOOKS for c in data["claims"])


def test_the_claims_page_is_current():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "claims_table.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = (REPO / "docs" / "claims.md").read_text()
    assert all(f"`{c['id']}`" in text for c in claims())


def test_lab01_verdicts_show_the_claims_own_settings_in_readable_figures():
    """Each utilization claim is planned at its own fraction (seed 002 says 0.92, not seed 000's 0.9), a
    recomputed figure carries three significant digits, and no verdict repeats its unit."""
    from labs_lib.claims import kv_claims_table

    table = kv_claims_table().set_index("claim")
    for cid, fraction in (("s000-util-rest-for-weights", "0.9"), ("s002-util-8pct-temp", "0.92")):
        c = next(c for c in claims("01") if c["id"] == cid)
        assert f"x {fraction} =" in table.loc[c["claim"], "computed"], table.loc[c["claim"], "computed"]
    for name, r in table.iterrows():
        if isinstance(r["computed"], float):
            assert len(f"{r['computed']:g}".replace(".", "").lstrip("0")) <= 3, (name, r["computed"])
        assert not str(r["computed"]).endswith(" " + r["unit"]), (name, r["computed"], r["unit"])


def test_the_vllm_facts_the_settings_table_cites_are_in_the_installed_vllm(vllm_installed):
    """vllm_claims_table quotes vLLM's source: each fact it rests on is read again here from the installed vLLM."""
    from labs_lib.kv_math import VLLM_GPU_MEMORY_UTILIZATION

    site = vllm_installed
    cache = (site / "config" / "cache.py").read_text()
    assert f"gpu_memory_utilization: float = Field(default={VLLM_GPU_MEMORY_UTILIZATION}," in cache
    assert '"Prefix cache hit rate: %.1f%%"' in (site / "v1" / "metrics" / "loggers.py").read_text()
    assert '"VLLM_LOG_STATS_INTERVAL", "10."' in (site / "envs.py").read_text()
    awq = (site / "model_executor" / "layers" / "quantization" / "auto_awq.py").read_text()
    assert re.search(r"TYPE_MAP = \{\s*4: scalar_types\.uint4,\s*\}", awq), "AWQ takes other widths now"
    registry = (site / "model_executor" / "layers" / "quantization" / "__init__.py").read_text()
    assert all(f'"{name}": AutoAWQConfig' in registry for name in ("awq", "awq_marlin", "auto_awq"))


def test_the_settings_table_computes_what_it_says():
    table = vllm_claims_table().set_index("source", append=True)
    rows = {c["id"]: r for c in claims("04") for _, r in table.iterrows() if r["claim"] == c["claim"]}
    assert rows["s004-8k-32k-order"]["verdict"] == "does not hold" and "4.0x" in rows["s004-8k-32k-order"]["computed"]
    sizes = re.findall(r"block \d+: ([\d,]+) tokens", rows["s004-smaller-block-for-oom"]["computed"])
    assert len(sizes) == 3 and max(int(s.replace(",", "")) for s in sizes) - min(int(s.replace(",", "")) for s in sizes) <= 32
    assert f"default {VLLM_UTIL}" in rows["s001-util-default-low"]["computed"]


def test_the_article_config_table_holds_for_the_installed_vllm(vllm_installed):
    """Seed 004's config.toml judged against the installed vLLM's own flag list and quantization methods, not only
    the recorded 0.33.0 list the lab shows."""
    from labs_lib.claims import article_config_table
    from labs_lib.engines.vllm import known_flags

    recorded, installed = article_config_table(), article_config_table(known_flags()[1])
    assert list(installed.exists) == list(recorded.exists), installed[installed.exists != recorded.exists]
    site = vllm_installed
    methods = (site / "model_executor" / "layers" / "quantization" / "__init__.py").read_text()
    methods = methods[methods.index("QuantizationMethods = Literal[") :].split("]", 1)[0]
    assert all(f'"{m}"' in methods for m in ("awq", "gptq", "fp8", "int8_per_channel_weight_only"))
    assert '"int8"' not in methods and '"int4"' not in methods


def test_the_article_config_is_the_articles_own():
    """data/article_config_seed004.toml is seed 004's config with its line breaks put back: every key = value pair
    is in the article as printed, and the table judges every key of it."""
    import tomllib

    from labs_lib.claims import ARTICLE_CONFIG_KEYS, article_config_table
    from labs_lib.paths import DATA_DIR

    text = (DATA_DIR / "article_config_seed004.toml").read_text()
    seed = REPO.parent / "shared" / "seeds" / "004_fb39d58077a52d92.txt"
    if seed.exists():
        printed = seed.read_text()
        pairs = [line.split("#")[0].strip() for line in text.splitlines() if "=" in line and not line.startswith("#")]
        assert all(pair in printed for pair in pairs), [p for p in pairs if p not in printed]
    keys = [f"{s}.{k}" for s, values in tomllib.loads(text).items() for k in values]
    assert keys == list(ARTICLE_CONFIG_KEYS) == list(article_config_table().key)


def test_the_24gb_card_is_judged_as_written_and_for_the_model_it_names():
    """Seed 000's card: 14 GB of weights at 0.9 as written; Llama-2-7B's real fp16 weights at today's default. The
    verdict follows where the claimed 8 falls in each reading's range: "depends" when one reading holds it."""
    from labs_lib.claims import claim, kv_claims_table
    from labs_lib.kv_math import VLLM_GPU_MEMORY_UTILIZATION, plan_capacity

    c = claim("s000-24gb-card")
    plans = [
        plan_capacity(c["model"], 2048, kv_dtype="fp16", gpu_memory_gib=24, weight_gib=14, gpu_memory_utilization=0.9),
        plan_capacity(c["model"], 2048, kv_dtype="fp16", gpu_memory_gib=24, gpu_memory_utilization=VLLM_GPU_MEMORY_UTILIZATION),
    ]
    inside = [p.max_concurrency_low <= c["value"] <= p.max_concurrency_high for p in plans]
    want = {(True, True): "holds", (False, False): "does not hold"}.get(tuple(inside), "depends")
    table = kv_claims_table()
    got = table[table["claim"] == c["claim"]].iloc[0]
    assert got["verdict"] == want
    assert got["computed"] == " / ".join(f"{p.max_concurrency:.3g}" for p in plans)
    assert "as written" in got["why"] and "for the model it names" in got["why"]


@pytest.mark.parametrize("claim_id", ["s002-70b-per-token", "s002-70b-2048"])
def test_seed_002s_70b_class_figures_are_judged_for_gqa_and_for_mha(claim_id):
    """Seed 002 sizes "a 70B-class model" with an MHA formula: judged for Llama-2-70B (GQA) and for an MHA model of
    the formula's shape (80 layers x 64 heads x 128); one reading holding and the other not is "depends"."""
    from labs_lib.claims import TOLERANCE, claim, kv_claims_table
    from labs_lib.kv_math import kv_cache
    from labs_lib.models import ModelSpec

    c = claim(claim_id)
    mha = ModelSpec("mha", num_layers=80, num_q_heads=64, num_kv_heads=64, head_dim=128, hidden_size=8192, vocab_size=32000)
    tokens, scale = (1, 1e6) if c["unit"] == "MB" else (c["seq_len"], 1e9)
    values = [kv_cache(m, tokens, 1, "fp16").kv_bytes / scale for m in (c["model"], mha)]
    inside = [abs(c["value"] - v) / v <= TOLERANCE for v in values]
    want = {(True, True): "holds", (False, False): "does not hold"}.get(tuple(inside), "depends")
    table = kv_claims_table()
    got = table[table["claim"] == c["claim"]].iloc[0]
    assert got["verdict"] == want and "slip" not in got["why"] and "even the article" not in got["why"]


def test_the_paged_utilization_claim_is_judged_half_by_half():
    """Seed 003's "from 60-70% to over 95%": the paged half against the paged allocation of the lab's lengths, the
    baseline against contiguous preallocation of the same lengths; the claim holds only when both halves do."""
    from labs_lib.claims import claim, example_lengths, kv_claims_table
    from labs_lib.kv_math import allocation_utilization

    c = claim("s003-paged-utilization")
    util = allocation_utilization(example_lengths(0), max_len=4096, block_size=16)
    baseline, paged = 100 * util["contiguous"], 100 * util["paged"]
    halves = (abs(baseline - c["value"][0]) <= 5, paged >= c["value"][1])
    got = kv_claims_table().set_index("claim").loc[c["claim"]]
    assert got["verdict"] == ("holds" if all(halves) else "does not hold")
    assert ("holds: over" in got["why"]) == halves[1] and ("outside 60-70%" in got["why"]) == (not halves[0])
    assert "20.4-38.2%" in got["why"] and f"{100 * 200 / 4096:.0f}%" in got["why"]


@pytest.mark.parametrize(("unstreamed_ms", "holds"), [(2400.0, False), (105.0, True)])
def test_the_unstreamed_ttft_verdict_follows_what_was_measured(unstreamed_ms, holds):
    """Seed 003's "TTFT" from a body without stream: true holds only where it came out near the streamed TTFT."""
    import pandas as pd

    from labs_lib.claims import _unstreamed_row

    nt = pd.DataFrame(
        {"ttft_ms": [100.0, unstreamed_ms], "output_tokens": [32, 1]}, index=["harness", "seed 003: unstreamed lines"]
    )
    got = _unstreamed_row(nt, e2e_ms=2500.0)
    assert got["verdict"] == ("holds" if holds else "does not hold")
    assert f"{unstreamed_ms / 100:.1f}x the streamed TTFT" in got["why"]


@pytest.mark.parametrize(("error_pct", "holds"), [(12.0, False), (-3.0, True), (-40.0, False)])
def test_the_lines_as_tokens_verdict_follows_the_counted_error(error_pct, holds):
    import pandas as pd

    from labs_lib.claims import _chunks_as_tokens_row

    nt = pd.DataFrame({"output_tokens_error_%": [0.0, error_pct]}, index=["harness", "seed 002: data lines"])
    assert _chunks_as_tokens_row(nt)["verdict"] == ("holds" if holds else "does not hold")


@pytest.mark.parametrize(
    "cut, holds, said",
    [
        (0.50, True, "50%"),
        (0.72, False, "more than the article says"),
        (0.30, False, "(less)"),
        (float("nan"), None, "not measured"),
    ],
)
def test_the_prefix_ttft_verdict_holds_only_inside_the_articles_range(cut, holds, said):
    """Seed 003 says 40%-60%: a cut above the range does not hold any more than one below it."""
    from labs_lib.sweep_views import prefix_ttft_row

    judged = prefix_ttft_row(cut)
    assert judged["verdict"] == {True: "holds", False: "does not hold", None: "cannot be checked here"}[holds]
    assert said in str(judged["computed"]) and "40%-60%" in judged["why"]


@pytest.mark.parametrize(
    "held, tpot_q8_ms, holds",
    [(0.40, 9.0, True), (0.42, 10.5, False), (0.30, 9.0, False), (0.50, 9.0, False)],
)
def test_the_int8_verdict_needs_the_memory_near_40_percent_and_a_lower_tpot(held, tpot_q8_ms, holds):
    from labs_lib.quant_compare import int8_row

    judged = int8_row(held, 0.47, 10.0, tpot_q8_ms)
    assert (judged["verdict"] == "holds") is holds, judged
    assert ("within" in judged["why"]) is (0.36 < held < 0.45) and ("TPOT lower:" in judged["why"]) is (tpot_q8_ms < 10.0)


def test_the_awq_flag_and_the_startup_log_are_judged_under_both_readings(monkeypatch):
    """Read in vLLM's source: the method comes from the checkpoint (the flag mattered only in 0.2.0-0.2.1), and the
    hit rate is in the serving stats line, not the start-up line; a source without either flips the verdict."""
    import labs_lib.vllm_source as vs

    table = source_claims_table().set_index("id")
    awq, log = table.loc["s001-awq-needs-flag"], table.loc["s001-hit-rate-in-startup-log"]
    assert awq["verdict"] == "depends" and "0.2.2" in awq["why"] and "0.2.1" in awq["why"]
    assert log["verdict"] == "depends" and "while it starts" in log["why"] and "Prefix cache hit rate" in log["computed"]
    monkeypatch.setattr(vs, "reads_quant_method", lambda source: False)
    monkeypatch.setattr(vs, "logs_prefix_hit_rate", lambda source: False)
    table = source_claims_table().set_index("id")
    assert table.loc["s001-awq-needs-flag", "verdict"] == "holds"
    assert table.loc["s001-hit-rate-in-startup-log", "verdict"] == "does not hold"


@pytest.mark.parametrize(
    "ttft_off, speed_off, holds", [(0.0, 9.6, True), (0.0, 25.0, False), (-12.0, 3.0, False), (float("nan"), 1.0, None)]
)
def test_seed_004s_timer_holds_only_where_both_its_figures_land_near_the_harness(ttft_off, speed_off, holds):
    import pandas as pd

    from labs_lib.claims import _seed004_timer_row

    nt = pd.DataFrame(
        {"ttft_ms_error_%": [ttft_off], "decode_tokens_per_s_error_%": [speed_off]}, index=["seed 004: lines, TPOT"]
    )
    assert _seed004_timer_row(nt)["verdict"] == {True: "holds", False: "does not hold", None: "cannot be checked here"}[holds]


@pytest.mark.parametrize("spread, holds", [(0.03, None), (0.10, None), (0.20, False)])
def test_the_level_tps_verdict_follows_the_measured_spread(spread, holds):
    """Seed 000's "TPS stays level": TPOT moving with max_tokens does not hold; level here still depends, since each
    decode step reads the whole cache and TPOT grows with the context."""
    from labs_lib.claims import tps_flat_verdict

    assert tps_flat_verdict(spread) is holds


def _judged(table_fn, claim_id, monkeypatch=None, **changes):
    """The row a table computes for `claim_id`, with the claim's inputs changed by `changes` (a what-if)."""
    import labs_lib.claims as cl

    if changes:
        original = cl.claim(claim_id)
        monkeypatch.setattr(cl, "claim", lambda i: {**original, **changes} if i == claim_id else original_claim(i))
    return table_fn().set_index("id").loc[claim_id]


def original_claim(claim_id):
    return next(c for c in claims() if c["id"] == claim_id)


def test_int_kv_bytes_count_the_scales(monkeypatch):
    r = _judged(kv_claims_table, "s000-int-kv-bytes")
    assert r["verdict"] == "depends" and r["computed"] == "int8 1.0625, int4 0.5625"  # 34/32 and 18/32
    # stored without scales, the article's widths would hold outright: the verdict follows the formats' bytes
    bare = _judged(kv_claims_table, "s000-int-kv-bytes", monkeypatch, stored_as={"int8": "int8", "int4": "int4"})
    assert bare["verdict"] == "holds"


def test_order_of_magnitude_is_the_head_ratio(monkeypatch):
    import labs_lib.claims as cl
    from labs_lib.models import catalogue, load_model

    r = _judged(kv_claims_table, "s000-gqa-order-of-magnitude")
    ratios = [s.num_q_heads / s.num_kv_heads for s in map(load_model, catalogue()) if 1 < s.num_kv_heads < s.num_q_heads]
    assert r["computed"] == f"{min(ratios):g}-{max(ratios):g}" and "8x for Llama-2-70B" in r["why"]
    assert r["verdict"] == ("holds" if min(ratios) >= 10**0.5 else "depends")
    seventy = [ref for ref in catalogue() if "70b" in ref.lower()]  # only the 70Bs: every one is 8x
    monkeypatch.setattr(cl, "catalogue", lambda: {ref: catalogue()[ref] for ref in seventy})
    assert kv_claims_table().set_index("id").loc["s000-gqa-order-of-magnitude", "verdict"] == "holds"


def test_the_24gb_floor_follows_the_planner(monkeypatch):
    r = _judged(kv_claims_table, "s001-24gb-minimum")
    assert r["verdict"] == "holds" and "T4 (15 GiB): cannot start" in r["why"]
    # at half the card, no 24 GB card fits a 7B in fp16 either: the floor no longer holds
    low = _judged(kv_claims_table, "s001-24gb-minimum", monkeypatch, gpu_memory_utilization=0.5)
    assert low["verdict"] == "does not hold"


def test_lowering_utilization_shrinks_the_pool_vllm_asked_to_grow():
    r = _judged(vllm_claims_table, "s001-lower-util-on-start-oom")
    before, after = (float(x) for x in r["computed"].split(" -> "))
    assert after < before and r["verdict"] == "depends" and "increasing `gpu_memory_utilization`" in r["why"]


def test_vllms_two_startup_memory_errors_say_opposite_things(vllm_installed):
    """The verdict on "lower it to 0.8" rests on vLLM's own words, read here from the installed vLLM's source."""
    site = vllm_installed
    kv = (site / "v1" / "core" / "kv_cache_utils.py").read_text()
    free = (site / "v1" / "worker" / "utils.py").read_text()
    assert "Try increasing `gpu_memory_utilization`" in kv
    assert "Free memory on device" in free and "Decrease GPU memory" in free


HARNESS = "harness (usage, first content)"


def _timing_checks(
    chunks_error=5.0,
    unstreamed_ttft_ms=900.0,
    role_ms=None,
    tpots=(20.0, 20.4, 20.8),
    ttfts=(100, 102, 98),
    seed004_error=(2.0, -5.0),
):
    """lab 02's verdicts on tables shaped as its run makes them, with the figures a test chooses."""
    import pandas as pd

    from labs_lib.claims import timing_article_checks

    methods = [
        HARNESS,
        "seed 000: len(text)/1.5",
        "seed 001: first chunk",
        "seed 002: data lines",
        "seed 003: unstreamed lines",
        "seed 004: lines, TPOT",
    ]
    naive = pd.DataFrame(
        {
            "method": methods,
            "ttft_ms": [100.0, 100.0, 100.0, 100.0, unstreamed_ttft_ms, 100.0],
            "end_ms": [None, None, None, None, 1000.0, None],
            "output_tokens": [64, 60, 64, 64 * (1 + chunks_error / 100), 40, 67],
            "output_tokens_error_%": [0.0, -6.0, 0.0, chunks_error, -40.0, 4.0],
            "ttft_ms_error_%": [0.0, 0.0, 1.0, 0.0, unstreamed_ttft_ms - 100.0, seed004_error[0]],
            "decode_tokens_per_s_error_%": [0.0, 0.0, 0.0, 0.0, 0.0, seed004_error[1]],
        }
    )
    by_language = pd.DataFrame(
        {
            "language": ["zh", "en"],
            "text": ["a Chinese text", "an English text"],
            "len/1.5 error_%": [3.0, 125.0],
            "chars_per_token": [1.55, 3.38],
        }
    )
    by_output = pd.DataFrame({"max_tokens": [64, 128, 256], "tpot_ms": list(tpots)})
    by_prompt = pd.DataFrame({"prompt_tokens": [16, 1024], "tpot_ms": [20.0, 23.0]})
    table = timing_article_checks(naive, by_language, by_output, by_prompt, list(ttfts), 1000.0, role_ms, 100.0)
    return table.set_index("id")["verdict"]


def test_lab02_verdicts_follow_the_run():
    """Each timing verdict is the run's numbers against the article's, both ways: a test that moves a number past
    the article's figure moves the verdict."""
    close, far = (
        _timing_checks(),
        _timing_checks(
            chunks_error=30.0,
            unstreamed_ttft_ms=104.0,
            role_ms=40.0,
            tpots=(20.0, 24.0, 28.0),
            ttfts=(100, 150, 60),
            seed004_error=(2.0, -40.0),
        ),
    )
    assert close["s002-chunks-as-tokens"] == "holds" and far["s002-chunks-as-tokens"] == "does not hold"
    assert close["s003-unstreamed-ttft"] == "does not hold" and far["s003-unstreamed-ttft"] == "holds"
    assert close["s000-role-chunk"] == "depends" and far["s000-role-chunk"] == "holds"  # seen, or only "may"
    assert close["s000-tps-flat"] == "depends" and far["s000-tps-flat"] == "does not hold"
    assert close["s000-ttft-jitter"] == "holds" and far["s000-ttft-jitter"] == "does not hold"
    assert close["s004-timer-tpot"] == "holds" and far["s004-timer-tpot"] == "does not hold"
    assert close["s000-len-over-1.5"] == "depends"  # near for the Chinese text, far for the English one


def test_lab05_verdicts_follow_the_run():
    """Lab 05's measured verdicts move with the figures measured: the fp8 cache by the tokens vLLM's pool held,
    INT8's 40% by the memory saved and TPOT's direction."""
    import pandas as pd

    from labs_lib.quant_compare import int8_row, quant_article_checks

    def fp8(tokens_fp8, tokens_bf16):
        results = pd.DataFrame({"kv_dtype": ["bf16", "fp8"], "kv_cache_tokens": [tokens_bf16, tokens_fp8]})
        table = quant_article_checks(pd.DataFrame(), results, reference="BF16", eval_tokens=0, weight_variants=False)
        return table.set_index("id").loc["s001-fp8-kv-half"]

    halved, not_halved = fp8(20_000, 10_000), fp8(13_000, 10_000)
    assert halved["verdict"] == "holds" and "measured on vLLM" in halved["why"]
    assert not_halved["verdict"] == "does not hold"
    computed = quant_article_checks(
        pd.DataFrame(), pd.DataFrame({"kv_dtype": ["f16", "q8_0"]}), reference="F16", eval_tokens=0, weight_variants=False
    )
    assert "computed with vLLM's layout" in computed.set_index("id").loc["s001-fp8-kv-half", "why"]  # no fp8 served
    assert int8_row(0.39, 0.45, 30.0, 28.0)["verdict"] == "holds"
    assert int8_row(0.20, 0.45, 30.0, 28.0)["verdict"] == "does not hold"  # memory saved: outside 10% of 40%
    assert int8_row(0.40, 0.45, 30.0, 31.0)["verdict"] == "does not hold"  # TPOT did not improve


def test_the_70bs_shape_is_read_from_their_configs(monkeypatch):
    assert _judged(kv_claims_table, "s000-70b-shape")["verdict"] == "holds"
    mha = _judged(kv_claims_table, "s000-70b-shape", monkeypatch, value=[80, 64, 64])  # had it said MHA
    assert mha["verdict"] == "does not hold"


def test_the_printed_formula_is_exact_where_every_layer_keeps_every_token(monkeypatch):
    import labs_lib.claims as cl
    from labs_lib.models import catalogue

    r = _judged(kv_claims_table, "s000-kv-formula")
    assert r["verdict"] == "depends" and "DeepSeek-V3 (MLA, not applicable)" in r["why"] and "Gemma-3-270M" in r["why"]
    full = {ref: e for ref, e in catalogue().items() if not e.get("sliding_window") and not e.get("kv_lora_rank")}
    monkeypatch.setattr(cl, "catalogue", lambda: full)  # full attention only: the formula is kv_math's, exactly
    assert kv_claims_table().set_index("id").loc["s000-kv-formula", "verdict"] == "holds"
    assert kv_claims_table().set_index("id").loc["s004-kv-linear", "verdict"] == "holds"


def test_ten_70b_requests_are_neither_reading_of_50_gb(monkeypatch):
    r = _judged(kv_claims_table, "s003-70b-10x4096")
    assert r["verdict"] == "does not hold" and float(r["computed"]) == pytest.approx(13.4, abs=0.05)
    assert _judged(kv_claims_table, "s003-70b-10x4096", monkeypatch, value=13.4)["verdict"] == "holds"


def test_integer_weights_shares_count_their_scales(monkeypatch):
    r = _judged(kv_claims_table, "s004-int-weights-fraction")
    assert r["computed"] == "int8 0.531, int4 0.281" and r["verdict"] == "depends"  # 34/64 and 18/64
    bare = _judged(kv_claims_table, "s004-int-weights-fraction", monkeypatch, stored_as={"int8": "int8", "int4": "int4"})
    assert bare["verdict"] == "holds"


def test_float32_doubles_the_weights_bytes(monkeypatch):
    assert _judged(kv_claims_table, "s004-fp32-doubles")["verdict"] == "holds"
    assert _judged(kv_claims_table, "s004-fp32-doubles", monkeypatch, value=4)["verdict"] == "does not hold"


def test_the_default_09_depends_on_the_vllm_version(monkeypatch):
    r = _judged(kv_claims_table, "s000-util-default-09")
    assert r["verdict"] == "depends" and r["computed"] == VLLM_UTIL
    assert _judged(kv_claims_table, "s000-util-default-09", monkeypatch, value=VLLM_UTIL)["verdict"] == "holds"


def test_max_model_len_and_the_pool_set_concurrency_in_the_planner(monkeypatch):
    assert _judged(kv_claims_table, "s004-max-model-len-kv")["verdict"] == "holds"
    same = _judged(kv_claims_table, "s004-max-model-len-kv", monkeypatch, lengths=[8192, 8192])
    assert same["verdict"] == "does not hold"  # no longer context: nothing moved
    for cid in ("s002-concurrency-by-pool", "s001-tight-memory-fewer-blocks"):
        assert _judged(kv_claims_table, cid)["verdict"] == "holds"
        assert _judged(kv_claims_table, cid, monkeypatch, utilizations=[0.92, 0.92])["verdict"] == "does not hold"


def test_once_fixed_verdicts_follow_their_inputs(monkeypatch):
    """Verdicts that were literals, now computed: move the input and the verdict moves."""
    import labs_lib.engines.vllm as vllm_engine
    from labs_lib.sweep_views import _swap_space_row

    assert _judged(vllm_claims_table, "s001-util-default-low")["verdict"] == "does not hold"  # 0.85 < 0.92
    assert _judged(vllm_claims_table, "s001-util-default-low", monkeypatch, value=0.95)["verdict"] == "holds"
    assert _judged(kv_claims_table, "s000-util-rest-for-weights")["verdict"] == "does not hold"
    # at 0.3 the rest (70% of 24 GB) could hold a 7B's fp16 weights: the reading would be possible
    assert _judged(kv_claims_table, "s000-util-rest-for-weights", monkeypatch, value=0.3)["verdict"] == "holds"
    assert _swap_space_row()["verdict"] == "does not hold"
    monkeypatch.setattr(vllm_engine, "known_flags", lambda: ("0.6.0", frozenset({"--swap-space"})))
    assert _swap_space_row()["verdict"] == "holds"


def test_decodes_roofs_judge_the_batch1_and_memory_bound_claims(monkeypatch):
    assert _judged(article_claims_table, "s003-batch1-under-10pct")["verdict"] == "holds"
    # under a tenth of a percent would not hold: the memory roof lets a batch-1 decode use more than that
    assert _judged(article_claims_table, "s003-batch1-under-10pct", monkeypatch, value=0.1)["verdict"] == "does not hold"
    for cid in ("s003-decode-memory-bound", "s004-decode-memory-bound"):
        assert _judged(article_claims_table, cid)["verdict"] == "holds"
        # short contexts at a batch of thousands: the weights' read is shared, and the compute roof is the lower one
        what_if = _judged(article_claims_table, cid, monkeypatch, batches=[1, 4096], context_tokens=16)
        assert what_if["verdict"] == "depends"


def _recorded_source(**edits: tuple[str, str]):
    """vLLM 0.33.0's recorded source, with (old, new) text replaced per file key ("awq", "cuda")."""
    from labs_lib import vllm_source as vs

    recorded = json.loads(vs.RECORDED.read_text())
    files = dict(recorded["files"])
    for key, (old, new) in edits.items():
        path = {
            "awq": vs.AUTO_AWQ_PY,
            "cuda": vs.CUDA_PY,
            "kv": vs.KV_CACHE_UTILS_PY,
            "cli": vs.CLI_ARGS_PY[0],
            "models": vs.MODELS_ROUTER_PY,
            "cache": vs.CACHE_CONFIG_PY,
            "parallel": vs.PARALLEL_CONFIG_PY,
        }[key]
        assert old in files[path], (path, old)
        files[path] = files[path].replace(old, new)
    return vs.VllmSource(f"vLLM {recorded['version']}", None, files)


def test_the_awq_width_and_default_backend_verdicts_run_vllms_own_code(monkeypatch):
    """s003-awq-6bit and s001-default-backend are computed from vLLM's source (recorded 0.33.0 here): a TYPE_MAP with
    a 6-bit entry, or a priority list with another backend first, moves the verdicts."""
    from labs_lib import vllm_source as vs

    recorded = _recorded_source()
    assert vs.awq_weight_bits(recorded) == (4,)
    assert vs.default_backends(recorded) == {
        "A100": "FLASH_ATTN",
        "L4 / RTX 4090": "FLASH_ATTN",
        "H100 / H200": "FLASH_ATTN",
        "B200": "FLASHINFER",
    }
    assert vs.backend_priorities(recorded, (9, 0), use_mla=True)[0] == "FLASH_ATTN_MLA"  # the MLA branch runs too
    monkeypatch.setattr(vs, "vllm_source", lambda: recorded)
    assert _judged(source_claims_table, "s003-awq-6bit")["verdict"] == "does not hold"
    assert _judged(source_claims_table, "s001-default-backend")["verdict"] == "depends"  # flash-attn first but on B200
    six = _recorded_source(awq=("4: scalar_types.uint4,", "4: scalar_types.uint4,\n        6: scalar_types.uint6,"))
    monkeypatch.setattr(vs, "vllm_source", lambda: six)
    assert vs.awq_weight_bits(six) == (4, 6) and _judged(source_claims_table, "s003-awq-6bit")["verdict"] == "holds"
    old_order = "                AttentionBackendEnum.FLASH_ATTN,\n                AttentionBackendEnum.FLASHINFER,\n"
    swapped = "                AttentionBackendEnum.FLASHINFER,\n                AttentionBackendEnum.FLASH_ATTN,\n"
    flashinfer_everywhere = _recorded_source(cuda=(old_order, swapped))
    monkeypatch.setattr(vs, "vllm_source", lambda: flashinfer_everywhere)
    assert set(vs.default_backends(flashinfer_everywhere).values()) == {"FLASHINFER"}
    assert _judged(source_claims_table, "s001-default-backend")["verdict"] == "holds"


def test_the_vllm_source_read_is_the_installed_vllms(vllm_installed):
    """Where vLLM is installed the verdicts read its files (not the recorded excerpt), and vLLM's code runs there."""
    from labs_lib import vllm_source as vs

    source = vs.vllm_source()
    assert source.read(vs.CUDA_PY) == (vllm_installed / "platforms" / "cuda.py").read_text()
    assert vs.awq_weight_bits(source) and set(vs.default_backends(source)) == set(vs.CARDS)
    assert "KV cache size" in vs.kv_size_log_line(source) and vs.default_port(source) and vs.serves_models_list(source)


def _prefix_points(pool_off: float, pool_on: float, window: bool = False):
    import pandas as pd

    rows = [
        {"status": "ok", "config.prompt_cache": False, "config.swa_full": True, "allocation.kv_mib": pool_off},
        {"status": "ok", "config.prompt_cache": True, "config.swa_full": True, "allocation.kv_mib": pool_on},
    ]
    if window:  # llama.cpp's third point: caching on without the full-size window cache
        rows.append({"status": "ok", "config.prompt_cache": True, "config.swa_full": False, "allocation.kv_mib": 54.0})
    return pd.DataFrame(rows)


def test_prefix_caching_memory_is_judged_on_pools_that_differ_only_in_caching():
    """s001-prefix-cache-takes-memory is measured in lab 04: the pool with caching off against on, every other
    setting equal; a point that differs in another setting too (llama.cpp's smaller window cache) is not the pair."""
    from labs_lib.sweep_views import prefix_pool_row

    same = prefix_pool_row(_prefix_points(144.0, 144.0, window=True))
    assert same["verdict"] == "does not hold" and "144 MiB against 54" in same["why"], same
    assert prefix_pool_row(_prefix_points(144.0, 100.0))["verdict"] == "holds"
    assert prefix_pool_row(None)["verdict"] == "cannot be checked here"
    assert prefix_pool_row(_prefix_points(144.0, 144.0).iloc[:1])["computed"] == "not measured"


def test_the_kv_cache_complexity_claims_are_counted_flops(monkeypatch):
    """s000-kv-n2-to-n (all N tokens) and s002-kv-step-nd-to-d (one step): the growth exponents of FLOPs with and
    without the cache, counted by decode_step_flops; far past the point where attention outweighs the weights'
    products, the cached exponent is no longer the article's."""
    from labs_lib.models import load_model
    from labs_lib.roofline import attention_equals_weights_tokens, growth_exponent

    assert growth_exponent(lambda n: n.astype(float) ** 2, 1000) == pytest.approx(2.0)
    spec = load_model("llama-2-7b")
    expected = spec.params / (2 * spec.num_q_heads * spec.head_dim * spec.num_layers)  # 4 x heads x dim x layers x t = 2P
    assert abs(attention_equals_weights_tokens(spec) - expected) <= 64
    for cid in ("s000-kv-n2-to-n", "s002-kv-step-nd-to-d"):
        assert _judged(article_claims_table, cid)["verdict"] == "holds"
        assert _judged(article_claims_table, cid, monkeypatch, tokens=400_000)["verdict"] == "does not hold"


@pytest.mark.parametrize(
    ("prompt_tokens", "verdict"), [([128, 2048], "depends"), ([2048, 4096], "holds"), ([16, 64], "does not hold")]
)
def test_prefill_is_compute_bound_only_past_the_cards_ridge(prompt_tokens, verdict, monkeypatch):
    """s000-prefill-compute-bound: a prompt meets the compute roof once it has more tokens than the card's FLOP/s
    per byte/s (153 on an A100, 403 on an L4); a 128-token prompt is below some cards' ridge, 2,048 above all."""
    assert (
        _judged(article_claims_table, "s000-prefill-compute-bound", monkeypatch, prompt_tokens=prompt_tokens)["verdict"]
        == verdict
    )


def test_the_servers_log_line_port_and_models_route_are_read_from_vllm(monkeypatch):
    """s002-kv-size-log, s001-serve-port-8000 and s001-models-alive follow vLLM's source: another pool name, another
    default port or no /v1/models route each move their verdict."""
    from labs_lib import vllm_source as vs

    ids = ("s002-kv-size-log", "s001-serve-port-8000", "s001-models-alive")
    recorded = _recorded_source()
    assert vs.kv_size_log_line(recorded, 120_000) == "GPU KV cache size: 120,000 tokens"
    monkeypatch.setattr(vs, "vllm_source", lambda: recorded)
    assert [_judged(source_claims_table, cid)["verdict"] for cid in ids] == ["holds"] * 3
    edits = {
        "s002-kv-size-log": {"kv": ('return "GPU" if', 'return "CUDA" if')},
        "s001-serve-port-8000": {"cli": ("port: int = 8000", "port: int = 8080")},
        "s001-models-alive": {"models": ('@router.get("/v1/models")', '@router.get("/models")')},
    }
    for cid, edit in edits.items():
        changed = _recorded_source(**edit)
        monkeypatch.setattr(vs, "vllm_source", lambda changed=changed: changed)
        assert _judged(source_claims_table, cid)["verdict"] == "does not hold", cid


def test_seed_000s_streaming_timing_claims_follow_the_run():
    """s000-unstreamed-total, s000-tps-steadier and s000-short-output-tps move with what lab 02 measured."""
    import pandas as pd

    from labs_lib.claims import _short_output_tps_row, _tps_steadier_row, _unstreamed_total_row

    naive = pd.DataFrame({"ttft_ms": [998.0], "end_ms": [1000.0]}, index=["seed 003: unstreamed lines"])
    assert _unstreamed_total_row(naive)["verdict"] == "holds"  # the body came when the answer was done
    assert _unstreamed_total_row(naive.assign(ttft_ms=120.0))["verdict"] == "does not hold"
    assert _tps_steadier_row([100, 110, 90], [20.0, 20.2, 19.9])["verdict"] == "holds"
    assert _tps_steadier_row([100, 101, 99], [20.0, 24.0, 17.0])["verdict"] == "does not hold"
    assert _tps_steadier_row([100, 101, 99], None)["verdict"] == "cannot be checked here"
    # 16 tokens at 20 ms each after a 300-ms TTFT: tokens / E2E reads 47% low, the article's timer 7% high
    by_output = pd.DataFrame(
        {"max_tokens": [16, 256], "output_tokens": [16, 256], "tpot_ms": [20.0, 20.0], "e2e_ms": [600.0, 5400.0]}
    )
    short = _short_output_tps_row(by_output)
    assert short["verdict"] == "depends" and "47% below" in short["computed"] and "+6.7%" in short["computed"], short
    # a TTFT of one step: the E2E reading is not pulled down past 10% either, so neither reading holds
    assert _short_output_tps_row(by_output.assign(e2e_ms=[320.0, 5120.0]))["verdict"] == "does not hold"
    assert _short_output_tps_row(by_output.drop(columns="e2e_ms"))["computed"] == "not measured"


def test_the_default_block_and_too_many_ranks_are_read_from_vllms_configs(monkeypatch):
    """s003-block-16 and s003-tp-8-on-4 follow vLLM's config source: another default block or no rank check move them."""
    from labs_lib import vllm_source as vs

    recorded = _recorded_source()
    assert vs.default_block_size(recorded) == 16
    assert vs.too_many_ranks_error(recorded, 8, 4).startswith("World size (8) is larger than the number of available GPUs (4)")
    assert vs.too_many_ranks_error(recorded, 4, 4) is None
    monkeypatch.setattr(vs, "vllm_source", lambda: recorded)
    assert _judged(source_claims_table, "s003-block-16")["verdict"] == "holds"
    assert _judged(source_claims_table, "s003-tp-8-on-4")["verdict"] == "holds"
    assert _judged(source_claims_table, "s003-tp-8-on-4", monkeypatch, value=4)["verdict"] == "does not hold"
    bigger = _recorded_source(cache=("DEFAULT_BLOCK_SIZE: ClassVar[int] = 16", "DEFAULT_BLOCK_SIZE: ClassVar[int] = 32"))
    unchecked = _recorded_source(parallel=("device_count() < self.world_size", "device_count() < 0"))
    for source, cid in ((bigger, "s003-block-16"), (unchecked, "s003-tp-8-on-4")):
        monkeypatch.setattr(vs, "vllm_source", lambda source=source: source)
        assert _judged(source_claims_table, cid)["verdict"] == "does not hold", cid


def test_one_slot_is_judged_by_whether_its_throughput_stays_level():
    """s002-max-num-seqs-1-off: the one-slot configuration's tokens/s from one request to the most sent."""
    import pandas as pd

    from labs_lib.sweep_views import one_slot_row

    def sweep(one_slot_at_4: float):
        return pd.DataFrame(
            {
                "config": ["parallel=1", "parallel=1", "parallel=4", "parallel=4"],
                "concurrency": [1, 4, 1, 4],
                "tok/s": [33.0, one_slot_at_4, 32.4, 62.8],
            }
        )

    assert one_slot_row(sweep(31.1))["verdict"] == "holds"
    assert one_slot_row(sweep(60.0))["verdict"] == "does not hold"  # one slot that still batched
    assert one_slot_row(sweep(31.1).iloc[2:])["computed"] == "not measured"


def test_taotokens_figures_are_judged_only_where_it_was_measured():
    """s003-taotoken-ttft, s003-taotoken-tps and s000-taotoken-short: lab 02's TaoToken medians against the
    articles' ranges, or 'not measured' without its key (never a verdict on no measurement)."""
    import pandas as pd

    from labs_lib.claims import _taotoken_rows

    def judged(ttft_ms: float, tpot_ms: float) -> dict:
        remote = pd.DataFrame(
            [
                {"endpoint": "local", "ttft_ms_p50": 90.0, "tpot_ms_p50": 25.0},
                {"endpoint": "taotoken", "ttft_ms_p50": ttft_ms, "tpot_ms_p50": tpot_ms},
            ]
        )
        return {r["id"]: r["verdict"] for r in _taotoken_rows(remote)}

    assert judged(950.0, 25.0) == {"s003-taotoken-ttft": "holds", "s003-taotoken-tps": "holds", "s000-taotoken-short": "holds"}
    assert judged(400.0, 5.0) == {
        "s003-taotoken-ttft": "does not hold",
        "s003-taotoken-tps": "does not hold",
        "s000-taotoken-short": "does not hold",
    }
    assert {r["computed"] for r in _taotoken_rows(pd.DataFrame())} == {"not measured"}
    assert {r["verdict"] for r in _taotoken_rows(None)} == {"cannot be checked here"}


def test_a_claim_nothing_here_can_check_says_what_would():
    """Every claim with `needs` is 'cannot be checked here' with that reason, and judged nowhere else."""
    table = unmeasurable_table().set_index("id")
    needing = {c["id"]: c["needs"] for c in claims() if c.get("needs")}
    assert set(table.index) == set(needing) and len(needing) >= 7
    assert set(table["verdict"]) == {"cannot be checked here"}
    assert all(table.loc[cid, "why"] == f"needs {why}" for cid, why in needing.items())
    judged_elsewhere = {
        cid
        for name, shown in LIBRARY_TABLES.items()
        if name != "unmeasurable_table"
        for cid in needing
        if claim_text(cid) in shown()
    }
    assert not judged_elsewhere, judged_elsewhere
    measured_sources = "".join(p.read_text() for p in MEASURED_TABLES.values())
    assert not [cid for cid in needing if f'"{cid}"' in measured_sources]


def claim_text(claim_id):
    return original_claim(claim_id)["claim"]


def test_smaller_weights_are_judged_by_the_tpot_each_variant_measured():
    """s004-smaller-weights-faster: every quantized variant's TPOT against F16's, from lab 05's weight rows."""
    import pandas as pd

    from labs_lib.quant_compare import smaller_weights_decode_row

    def weights(q8_tpot: float, q4_tpot: float) -> pd.DataFrame:
        rows = [("F16", 517.7, 34.6), ("Q8_0", 278.0, q8_tpot), ("Q4_0", 230.2, q4_tpot)]
        return pd.DataFrame(rows, columns=["variant", "file_MiB", "tpot_p50_ms"]).set_index("variant")

    assert smaller_weights_decode_row(weights(27.0, 24.3))["verdict"] == "holds"
    assert smaller_weights_decode_row(weights(27.0, 36.0))["verdict"] == "depends"  # one of two faster: "often"
    assert smaller_weights_decode_row(weights(35.0, 36.0))["verdict"] == "does not hold"
    assert smaller_weights_decode_row(weights(27.0, 24.3).drop(index="F16"))["verdict"] == "cannot be checked here"


def test_prefill_claims_follow_the_prompt_length_sweep():
    """Lab 02's prefill claims from its prompt-length sweep: each verdict moves with the figure it reads."""
    import pandas as pd

    from labs_lib.claims import PREFILL_CLAIMS, _prefill_rows

    def sweep(long_ttft=330.0, long_tpot=24.5, prompt_ms=(95.0, 300.0)):
        rows = [(41, 8, 120.0, 25.3, prompt_ms[0]), (137, 8, long_ttft, long_tpot, prompt_ms[1])]
        return pd.DataFrame(rows, columns=["prompt_tokens", "max_tokens", "ttft_ms", "tpot_ms", "server_prompt_ms"])

    def verdicts(by_prompt):
        return {r["id"]: r["verdict"] for r in _prefill_rows(by_prompt)}

    assert verdicts(sweep()) == {
        "s000-long-prompt-ttft": "holds",  # +175%
        "s000-decode-steady-long-prompt": "holds",  # -3%
        "s004-ttft-mostly-prefill": "holds",  # 79% and 91%
        "s003-local-ttft-pure-compute": "does not hold",  # 25 ms of 120 outside the prompt
        "s002-short-prompt-throughput": "holds",  # 26.9 against 16.0 tokens/s
    }
    flat = verdicts(sweep(long_ttft=125.0, prompt_ms=(40.0, 45.0)))
    assert flat["s000-long-prompt-ttft"] == flat["s002-short-prompt-throughput"] == "does not hold"
    assert flat["s004-ttft-mostly-prefill"] == "does not hold"
    assert verdicts(sweep(long_tpot=30.0))["s000-decode-steady-long-prompt"] == "does not hold"
    assert verdicts(sweep(prompt_ms=(40.0, 300.0)))["s004-ttft-mostly-prefill"] == "depends"  # short prompts: fixed costs
    untimed = verdicts(sweep(prompt_ms=(None, None)))  # as vLLM's sweep reports it
    assert untimed["s004-ttft-mostly-prefill"] == untimed["s003-local-ttft-pure-compute"] == "cannot be checked here"
    assert set(verdicts(sweep().iloc[:1]).values()) == {"cannot be checked here"}
    assert set(verdicts(sweep())) == set(PREFILL_CLAIMS)


def test_quantized_prefill_is_judged_against_f16s():
    import pandas as pd

    from labs_lib.quant_compare import quantized_prefill_row

    def weights(q8_prefill: float) -> pd.DataFrame:
        rows = [("F16", 517.7, 32.4, 317.3), ("Q8_0", 278.0, 25.1, q8_prefill)]
        return pd.DataFrame(rows, columns=["variant", "file_MiB", "tpot_p50_ms", "prefill_tok_s"]).set_index("variant")

    assert quantized_prefill_row(weights(454.4))["verdict"] == "does not hold"  # 1.43x: this CPU's int8 kernels
    assert quantized_prefill_row(weights(330.0))["verdict"] == "holds"
    assert quantized_prefill_row(weights(330.0).drop(index="F16"))["verdict"] == "cannot be checked here"


def test_the_token_split_is_the_engines_own():
    from labs_lib.claims import _token_split_row

    assert _token_split_row(lambda text: ["大", "模型", "推理"])["verdict"] == "holds"
    other = _token_split_row(lambda text: ["大模型", "推理"])
    assert other["verdict"] == "depends" and other["computed"] == "大模型 / 推理"
    assert _token_split_row(None)["verdict"] == "cannot be checked here"


def test_verdicts_on_a_class_of_models_or_parts_follow_each_member(monkeypatch):
    """Seed 004's 7B sizes, seed 002's max_num_seqs rule, seed 004's utilization curve, and AWQ's half and quarter:
    each verdict is computed from its parts, so moving an input moves it."""
    from labs_lib.quant_compare import _awq_half_row

    per_1k = _judged(kv_claims_table, "s004-7b-per-1k")
    assert per_1k["verdict"] == "depends" and "Llama-2-7B" in per_1k["why"]  # MHA only
    assert _judged(kv_claims_table, "s004-7b-per-1k", monkeypatch, range=[50, 1000])["verdict"] == "holds"
    assert _judged(kv_claims_table, "s004-7b-32k", monkeypatch, range=[30, 40])["verdict"] == "does not hold"
    assert _judged(vllm_claims_table, "s002-max-num-seqs-rule")["verdict"] == "depends"  # chat-like requests: many more
    assert _judged(vllm_claims_table, "s004-util-tpot-curve")["verdict"] == "depends"
    # a batch that every fraction holds: TPOT is flat, and the curve shows nothing
    assert _judged(vllm_claims_table, "s004-util-tpot-curve", monkeypatch, batch=1)["verdict"] == "does not hold"
    assert _awq_half_row()["verdict"] == "depends"  # the weights halve, vLLM's reservation does not
    monkeypatch.setattr(
        "labs_lib.claims.claim", lambda i: {**original_claim(i), "value": 90} if i == "s001-awq-half" else original_claim(i)
    )
    assert _awq_half_row()["verdict"] == "does not hold"


def test_no_verdict_is_a_literal_in_code():
    """Every claims.row() call computes its verdict (the fourth argument) from what it measured or read; a literal is
    allowed only where the row says nothing was measured (computed "not measured", "not testable here", …)."""
    import ast

    from labs_lib.claims import NOT_HERE_PREFIXES

    fixed = []
    for path in (REPO / "labs_lib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            is_row = isinstance(node, ast.Call) and (
                getattr(node.func, "id", None) == "row" or getattr(node.func, "attr", None) == "row"
            )
            if is_row and len(node.args) >= 4 and isinstance(node.args[3], ast.Constant):
                # every value the computed argument can take (a conditional's two) says nothing was measured
                computed = node.args[1]
                values = [computed.body, computed.orelse] if isinstance(computed, ast.IfExp) else [computed]
                if not all(isinstance(v, ast.Constant) and str(v.value).startswith(NOT_HERE_PREFIXES) for v in values):
                    fixed.append(f"{path.name}:{node.lineno}")
    assert not fixed, fixed
