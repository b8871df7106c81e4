"""ModelSpec loaders: catalogue, Hugging Face config.json, GGUF metadata."""

import json

import pytest
from conftest import FIXTURES

from labs_lib.errors import BadInput
from labs_lib.models import ModelSpec, catalogue, estimate_params, from_hf_config, load_model

CONFIGS = FIXTURES / "hf_configs"


def test_catalogue_has_at_least_20_models_with_sources():
    models = catalogue()
    assert len(models) >= 20
    for entry in models.values():
        assert entry["sources"] and entry["aliases"]


@pytest.mark.parametrize("ref", ["meta-llama/Llama-2-7b-hf", "Llama-2-7b-hf", "llama-2-7b", "LLAMA2-7B", "Llama-2-7B"])
def test_lookup_by_id_name_or_alias(ref):
    assert load_model(ref).hf_id == "meta-llama/Llama-2-7b-hf"


def test_unknown_model_is_one_line_naming_it():
    with pytest.raises(BadInput, match="gpt-9"):
        load_model("gpt-9")


@pytest.mark.parametrize(
    "name,catalogue_id",
    [
        ("llama-2-7b.json", "meta-llama/Llama-2-7b-hf"),
        ("qwen2.5-0.5b.json", "Qwen/Qwen2.5-0.5B"),
        ("qwen2.5-32b.json", "Qwen/Qwen2.5-32B"),
        ("mixtral-8x7b.json", "mistralai/Mixtral-8x7B-v0.1"),
        ("mistral-7b.json", "mistralai/Mistral-7B-v0.1"),
    ],
)
def test_hf_config_params_equal_the_published_exact_counts(name, catalogue_id):
    spec = from_hf_config(CONFIGS / name)
    assert spec.params == catalogue()[catalogue_id]["params"]
    assert spec.num_kv_heads == catalogue()[catalogue_id]["num_kv_heads"]


def test_hf_config_head_dim_is_explicit_for_gemma():
    spec = from_hf_config(CONFIGS / "gemma-2-9b.json")
    assert spec.head_dim == 256 != spec.hidden_size // spec.num_q_heads
    assert spec.sliding_layers == tuple(range(0, 42, 2))


def test_hf_config_gemma3_text_config_and_pattern():
    spec = from_hf_config(CONFIGS / "gemma-3-27b.json")
    assert spec.num_layers == 62 and spec.sliding_window == 1024
    assert [i for i in range(62) if not spec.is_sliding(i)] == list(range(5, 62, 6))
    assert spec.sliding_layers == load_model("gemma-3-27b").sliding_layers


def test_hf_config_unused_window_is_ignored():
    assert from_hf_config(CONFIGS / "qwen2.5-32b.json").sliding_layers == ()
    assert len(from_hf_config(CONFIGS / "mistral-7b.json").sliding_layers) == 32


def test_hf_config_mla():
    spec = from_hf_config(CONFIGS / "deepseek-v3.json")
    assert spec.attention == "MLA" and spec.kv_lora_rank == 512 and spec.qk_rope_head_dim == 64
    assert spec.params is None  # not a shape estimate_params knows


def test_load_model_dispatches_on_suffix():
    assert load_model(str(CONFIGS / "llama-2-7b.json")).num_layers == 32


def test_estimate_params_tied_embeddings_count_once():
    cfg = json.loads((CONFIGS / "qwen2.5-0.5b.json").read_text())
    untied = dict(cfg, tie_word_embeddings=False)
    assert estimate_params(untied) - estimate_params(cfg) == cfg["vocab_size"] * cfg["hidden_size"]


@pytest.mark.parametrize(
    "content,needle", [("{not json", "not readable"), ('{"hidden_size": 4}', "lacks"), ("[1, 2]", "JSON object")]
)
def test_bad_config_files(tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(BadInput, match=needle):
        from_hf_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(BadInput, match="existing"):
        load_model(str(tmp_path / "nope.json"))


def test_modelspec_validates():
    with pytest.raises(BadInput):
        ModelSpec("x", 0, 4, 4, 64, 256, 100)
    with pytest.raises(BadInput):
        ModelSpec("x", 2, 4, 8, 64, 256, 100)  # more KV heads than query heads
    with pytest.raises(BadInput):
        ModelSpec("x", 2, 4, 4, 64, 256, 100, sliding_layers=(5,), sliding_window=8)


# ---- GGUF metadata (the shipped model, and broken files)


def test_gguf_metadata_of_the_shipped_model():
    from labs_lib.engines.model_files import default_model_path

    spec = load_model(str(default_model_path()))
    ref = load_model("gemma-3-270m")
    for field in (
        "num_layers",
        "num_q_heads",
        "num_kv_heads",
        "head_dim",
        "hidden_size",
        "vocab_size",
        "sliding_window",
        "sliding_layers",
    ):
        assert getattr(spec, field) == getattr(ref, field), field
    assert spec.params == 268_098_176  # what llama.cpp reports for this file


def test_truncated_and_corrupt_gguf(tmp_path):
    from labs_lib.engines.model_files import default_model_path

    head = default_model_path().read_bytes()[:5000]
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(head)
    with pytest.raises(BadInput, match="truncated"):
        load_model(str(truncated))
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"NOTGGUF" + head[7:])
    with pytest.raises(BadInput, match="magic"):
        load_model(str(corrupt))
