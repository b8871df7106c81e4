"""Lab 05's machinery: variants built from the shipped model, the teacher-forced scorer, the comparison."""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, assert_one_line_error, run_cli

from labs_lib import quant
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.errors import BadInput, LabsError
from labs_lib.gguf_meta import read_gguf_meta
from labs_lib.load import run_blocking
from labs_lib.prompts import corpus_text
from labs_lib.quant_compare import QuantSettings, compare_variants, rank


def test_variants_are_built_once_and_reused():
    first = quant.build_variant("Q4_0-PURE", progress=False)
    meta = read_gguf_meta(first.path)
    assert first.tensor_types == {"F32": 109, "Q4_0": 127}  # --pure: the tied embedding too
    assert meta.n_params == read_gguf_meta(quant.variant_path("Q4_K_M")).n_params
    assert meta.fields["general.file_type"] == 2 and meta.array_lengths["tokenizer.ggml.tokens"] == 262144
    again = quant.build_variant("Q4_0-PURE", progress=False)
    assert again.build_s is None and again.path == first.path


def test_two_processes_building_one_variant_at_once_both_get_the_whole_file():
    """Two runs side by side (two notebooks, two test runs) may build the same variant at the same moment:
    each writes its own partial file, and the file either leaves is the whole variant."""
    code = "from labs_lib.quant import build_variant; print(build_variant('Q8_0', force=True, progress=False).file_bytes)"
    builds = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in "ab"
    ]
    done = [b.communicate(timeout=600) for b in builds]
    assert [b.returncode for b in builds] == [0, 0], [err[-500:] for _, err in done]
    built = quant.describe("Q8_0", quant.variant_path("Q8_0"))
    assert {int(out) for out, _ in done} == {built.file_bytes} and built.tensor_types == {"F32": 109, "Q8_0": 127}
    assert not list(quant.variant_path("Q8_0").parent.glob("*.partial"))


def test_llama_quant_rules_reproduce_the_shipped_file_and_keep_the_embedding_in_8_bits():
    shipped = read_gguf_meta(quant.variant_path("Q4_K_M"))
    planned = quant.planned_types(shipped, "Q4_K_M")
    assert {t.name: t.type_name for t in shipped.tensors} == planned  # every one of the 236 tensors
    q4 = quant.build_variant("Q4_0", progress=False)
    types = {t.name: t.type_name for t in read_gguf_meta(q4.path).tensors}
    # the tied embedding/output takes Q6_K, which 640-value rows cannot hold: Q8_0, as llama-quantize does
    assert types["token_embd.weight"] == "Q8_0" and types["blk.0.ffn_down.weight"] == "Q4_0"
    assert q4.tensor_types == {"F32": 109, "Q4_0": 126, "Q8_0": 1}
    assert 6.9 < q4.bits_per_weight < 7.1 < 7.3 < shipped.tensor_bytes * 8 / shipped.n_params < 7.4


def test_change_from_reference_tells_rounding_from_requantizing():
    f16, q5, pure = (
        quant.change_from_reference(quant.build_variant(v, progress=False).name) for v in ("F16", "Q5_0", "Q4_0-PURE")
    )
    assert f16["weights_changed"] == 0 and f16["relative_rms_change"] < 1e-4  # 16-bit storage: rounding only
    # most of the shipped tensors are Q5_0 already: re-quantizing them to Q5_0 gives them back unchanged
    assert 0 < q5["weights_changed"] < 0.2 < 0.8 < pure["weights_changed"]
    assert q5["relative_rms_change"] < pure["relative_rms_change"]


def test_unknown_variant_and_short_disk(monkeypatch):
    with pytest.raises(BadInput, match="Q3_X"):
        quant.check_variant("Q3_X")
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10, 10, 1024))
    with pytest.raises(LabsError, match="not enough disk"):
        quant.build_variant("Q5_1", force=True, progress=False)
    assert not quant.variant_path("Q5_1").with_suffix(".partial").exists()


def test_roundtrip_error_grows_as_bits_shrink():
    rt = quant.roundtrip_error("blk.3.attn_q.weight", ("F16", "Q8_0", "Q5_1", "Q4_0"))
    assert list(rt.bits_per_value) == [16, 8.5, 6, 4.5]
    assert list(rt.relative_rms_error) == sorted(rt.relative_rms_error)
    assert rt.relative_rms_error.iloc[0] < 1e-3 < rt.relative_rms_error.iloc[-1]


def test_a_participants_block_quantizer_is_judged_against_the_file_llama_cpps_quantizer_wrote():
    from labs_lib.cores import lab05

    quant.build_variant("Q4_0-PURE", progress=False)
    agreed = quant.file_agreement(["Q4_K_M", "Q4_0-PURE"], lab05.quantize_blocks, tensors_per_format=1)
    assert list(agreed.variant) == ["Q4_0-PURE"] and agreed.blocks.iloc[0] > 1000  # the original is no variant
    assert (agreed.blocks_equal == agreed.blocks).all(), agreed

    def numpy_round(weights, fmt):  # round half to even, and a scale of absmax / 8: other codes in most blocks
        blocks = np.asarray(weights, np.float32).reshape(-1, 32)
        d = np.abs(blocks).max(axis=1, keepdims=True) / 8
        codes = np.clip(np.round(blocks / np.where(d == 0, 1, d)) + 8, 0, 15).astype(np.uint8)
        return np.concatenate([d.astype(np.float16).view(np.uint8), codes[:, :16] | codes[:, 16:] << 4], 1).tobytes()

    wrong = quant.file_agreement(["Q4_0-PURE"], numpy_round, tensors_per_format=1)
    assert (wrong.blocks_equal < wrong.blocks / 2).all(), wrong
    # the round trip through the participant's functions is the round trip through llama.cpp's
    codec = quant.roundtrip_error(formats=("Q8_0", "Q4_0"), codec=(lab05.quantize_blocks, lab05.dequantize_blocks))
    assert codec.equals(quant.roundtrip_error(formats=("Q8_0", "Q4_0"))), codec


@pytest.mark.engine
def test_scorer_logprobs_equal_the_engines_own_while_generating_greedily():
    import httpx

    with LlamaCppEngine(EngineConfig(ctx=1024)) as e:
        bos, _ = e.tokenize_text(corpus_text("eval.txt"), 1)
        # the engine generates greedily from BOS, reporting the log-prob of each token it picks...
        gen = httpx.post(
            e.root_url + "/completion",
            json={
                "prompt": [bos],
                "n_predict": 24,
                "n_probs": 1,
                "temperature": 0,
                "cache_prompt": False,
                "return_tokens": True,
                "ignore_eos": True,
            },
            timeout=300,
        ).json()
        generated = gen["tokens"]
        engine_logprobs = np.array([p["logprob"] for p in gen["completion_probabilities"]])
        # ...and the scorer, forcing that same text, must report the same log-prob for every token
        scores = e.score(bos, generated)
        assert e.greedy([bos], 24) == generated
    assert len(generated) == 24
    assert np.allclose(scores.logprobs, engine_logprobs, atol=1e-4)
    assert scores.top1_ids == generated  # greedy picks the top-1 at every step


@pytest.mark.engine
def test_quality_ranks_as_measured():
    df = run_blocking(
        compare_variants(
            ["Q8_0", "Q4_0-PURE"],
            ["f16", "q4_0"],
            reference="Q8_0",
            kv_variant="Q8_0",
            settings=QuantSettings(
                eval_tokens=40, greedy_tokens=8, speed_requests=2, concurrencies=(1,), prompt_tokens=16, max_tokens=8
            ),
            progress=False,
        )
    )
    ppl = dict(zip(df.variant + "/" + df.kv_dtype, df.perplexity, strict=True))
    assert ppl["Q4_0-PURE/f16"] > ppl["Q8_0/f16"] * 1.05  # naive 4-bit, embedding included, loses measurably
    order = rank(df)
    assert [ppl[k] for k in order] == sorted(ppl.values())
    assert sorted(rank(df, "kl")) == sorted(set(ppl) - {"Q8_0/f16"})  # the reference: KL 0 against itself, not ranked
    kv = df.set_index(["variant", "kv_dtype"])
    assert kv.loc[("Q8_0", "q4_0"), "kv_MiB"] < kv.loc[("Q8_0", "f16"), "kv_MiB"] / 3
    assert kv.loc[("Q8_0", "f16"), "delta_nll"] == 0 and kv.loc[("Q8_0", "f16"), "top1_agreement"] == 1
    assert kv.loc[("Q8_0", "f16"), "kl"] == 0
    pure = kv.loc[("Q4_0-PURE", "f16")]
    assert 0 < pure.kl_ci_low <= pure.kl <= pure.kl_ci_high and pure.delta_nll_ci_low <= pure.delta_nll <= pure.delta_nll_ci_high


@pytest.mark.engine
def test_quant_cli_json():
    proc = run_cli("quant", "--variants", "Q4_0", "--kv-dtypes", "f16", "--quick", "--eval-tokens", "32", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["variant"] for r in rows] == ["Q4_K_M", "Q4_0"]  # the shipped file is the reference
    for r in rows:
        for key in (
            "file_MiB",
            "perplexity",
            "delta_nll",
            "kl",
            "kl_ci_high",
            "top1_agreement",
            "tpot_p50_ms",
            "kv_MiB",
            "rss_MiB",
        ):
            assert r[key] is not None


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--variants", "Q9_9"], "Q9_9"),
        (["--kv-dtypes", "fp8"], "fp8"),
        (["--variants", ","], "--variants"),
        (["--eval-tokens", "0"], "--eval-tokens"),
        (["--eval-tokens", "2000"], "--eval-tokens"),
    ],
)
def test_quant_cli_bad_input(args, needle):
    assert_one_line_error(run_cli("quant", *args), needle)


def test_kv_slots_within_follows_the_llamacpp_layout():
    from labs_lib.kv_math import MIB, llamacpp_layout
    from labs_lib.quant_compare import QuantSettings, kv_slots_within

    settings = QuantSettings.quick()  # 4 slots of 272 tokens
    f16_mib = llamacpp_layout("gemma-3-270m", settings.ctx(), 4).kv_bytes / MIB
    assert kv_slots_within(f16_mib, settings, "f16") == 4  # the cache holds what it was made for, no more
    # q4_0 is 18 bytes per 32 values against f16's 64: 3.56x the slots, so 14 of the same context
    assert kv_slots_within(f16_mib, settings, "q4_0") == 14 and kv_slots_within(f16_mib, settings, "q8_0") == 7
    assert kv_slots_within(0.01, settings, "f16") == 0


@pytest.mark.parametrize(
    ("recorded", "how"),
    [("configurations-vllm-quick.csv", "measured on vLLM"), ("configurations-llamacpp-quick.csv", "computed with vLLM's layout")],
)
def test_the_fp8_kv_verdict_is_vllms_fp8_measured_or_computed_never_llamacpps_q8_0(recorded, how):
    """Seed 001's fp8 KV claim: from the tokens vLLM's pool held with fp8 and with the 16-bit cache (a recorded lab 05
    run on vLLM), else vLLM's per-token bytes; llama.cpp's q8_0 (34 bytes per 32 values) is another format."""
    import pandas as pd

    from labs_lib.quant_compare import _fp8_kv_row

    results = pd.read_csv(REPO / "tests" / "fixtures" / "quant" / recorded)
    got = _fp8_kv_row(results)
    assert got["why"].startswith(how) and "q8_0 KV" not in got["computed"]
    if how.startswith("measured"):
        share = (
            results[results.kv_dtype == "f16"].kv_cache_tokens.iloc[0]
            / results[results.kv_dtype == "fp8"].kv_cache_tokens.iloc[0]
        )
        assert f"{share:.1%}" in got["computed"]
        assert got["verdict"] == ("holds" if abs(share - 0.5) <= 0.05 else "does not hold")
