"""What a GPU instance adds, checked in minutes, in two tiers; one line per check, then PASS or FAIL.

    python bench/gpu_smoke.py --tier bare [--device cuda|cpu]   # 1: a bare GPU image (PyTorch, transformers; no vLLM, no network)
    python bench/gpu_smoke.py --tier vllm [--labs]              # 2: a GPU instance after `make setup-gpu`

Tier 1 runs from the repository with PYTHONPATH=. under the image's own python (bench/gpu_smoke.sh does), with
PyTorch and transformers 4.56 or newer (TRANSFORMERS_NEEDED: StaticCache built from a config, its layers' keys and
values read after one forward pass):
the card as NVML (or PyTorch) reports it beside data/gpus.json; its device copy bandwidth beside the catalogue's
peak; the bytes of a real KV cache that transformers allocates for five architectures (MHA, GQA, tied, and two
sliding-window layouts; random weights, configs shrunk to a few layers, which leaves KV bytes per layer as they
are) equal to labs_lib.kv_math to the byte; decode tokens/s of a random-weight model against the bandwidth roof
(the memory-bound lesson, measured); lab 01's planner with the card. `--device cpu` runs the cache and decode
checks on a CPU (tests/test_gpu_smoke.py does, so they are tested where no GPU is).

Tier 2 serves the shipped model with the installed vLLM (a GPU's, or vLLM on CPU): its logged allocation against
the planner, one stream, the harness's token counts against /metrics, prompt_logprobs scoring, an fp8 KV cache
holding twice the tokens of the same pool, and with --labs labs 02-06 quick on vLLM.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from labs_lib.catalogs import catalogue_name, gpu_spec
from labs_lib.gpu import GPUReading, read_gpus
from labs_lib.kv_math import kv_cache, plan_capacity
from labs_lib.paths import PROJECT_DIR

from _common import header, verdict

# (fixture config, layers kept): enough layers to keep each sliding-window pattern (Gemma 2 alternates, Gemma 3 5:1)
ARCHITECTURES = (("llama-2-7b", 2), ("mistral-7b", 2), ("qwen2.5-0.5b", 2), ("gemma-2-9b", 4), ("gemma-3-27b", 6))
CONFIGS = PROJECT_DIR / "tests" / "fixtures" / "hf_configs"


def the_card() -> tuple[GPUReading | None, str]:
    """NVML's first GPU; on an image without the NVML bindings, PyTorch's view of it."""
    gpus, why = read_gpus()
    if gpus:
        return gpus[0], "NVML"
    try:
        import torch
    except ImportError:
        return None, f"{why}; PyTorch is not installed either"
    if not torch.cuda.is_available():
        return None, why or "no GPU"
    free, total = torch.cuda.mem_get_info()
    capability = torch.cuda.get_device_capability()
    return GPUReading(0, torch.cuda.get_device_name(), total, total - free, free, None, capability), "PyTorch (no NVML bindings)"


def device_bandwidth_gb_s(seconds: float = 3.0) -> float:
    """Device-to-device copy of a 2 GiB buffer, read + write bytes per second (10^9 B/s)."""
    import torch

    src = torch.empty(2**31 // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    copies, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        dst.copy_(src)
        copies += 1
    torch.cuda.synchronize()
    return 2 * src.numel() * 4 * copies / (time.perf_counter() - start) / 1e9


def shrunk_config(name: str, layers: int) -> Path:
    """A fixture config.json with `layers` layers and a small MLP and vocabulary (KV bytes per layer unchanged)."""
    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    text = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    text.update(num_hidden_layers=layers, intermediate_size=64, vocab_size=512)
    if "layer_types" in text:
        text["layer_types"] = text["layer_types"][:layers]
    path = Path(tempfile.mkdtemp(prefix=f"kv-{name}-")) / "config.json"
    path.write_text(json.dumps(raw))
    return path


def untrained_model(config, device: str):
    """A bf16 model of `config` with every weight 0.01: what it computes is never read, only the bytes it moves and
    allocates. transformers' random initialisation took 13 of the bare tier's 38 s on a 2-core CPU; a constant also
    leaves no subnormal values to slow a CPU's arithmetic."""
    import torch
    from transformers import AutoModelForCausalLM

    try:  # transformers 5 moved it; 4.x keeps it in modeling_utils
        from transformers.initialization import no_init_weights
    except ImportError:
        from transformers.modeling_utils import no_init_weights
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for weight in model.parameters():  # left uninitialised, as torch.empty leaves them (buffers are computed)
            weight.fill_(0.01)
    return model.to(device)


def allocated_kv_bytes(config_path: Path, max_len: int, batch: int, device: str) -> int:
    """Bytes of the keys and values transformers' StaticCache allocates in one real forward pass (random weights)."""
    import torch
    from transformers import AutoConfig, StaticCache

    config = AutoConfig.from_pretrained(config_path.parent)
    model = untrained_model(config, device)
    cache = StaticCache(config=config, max_cache_len=max_len)
    with torch.no_grad():
        model(
            input_ids=torch.zeros((batch, 1), dtype=torch.long, device=device),
            past_key_values=cache,
            cache_position=torch.tensor([0], device=device),
        )
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def decode_tokens_per_s(device: str, layers: int, steps: int = 64) -> tuple[float, int]:
    """(decode tokens/s of a random-weight Llama-2-7B-shaped model with `layers` layers at batch 1, the bytes of
    weights and KV a step reads: every weight but an untied input embedding, of which one row)."""
    import torch
    from transformers import AutoConfig, StaticCache

    raw = json.loads((CONFIGS / "llama-2-7b.json").read_text()) | {"num_hidden_layers": layers}
    path = Path(tempfile.mkdtemp(prefix="decode-")) / "config.json"
    path.write_text(json.dumps(raw))
    config = AutoConfig.from_pretrained(path.parent)
    model = untrained_model(config, device).eval()
    # a step reads every weight but the input embedding, of which it reads one row (unless it is tied to the output head)
    embedding = model.get_input_embeddings().weight
    tied = embedding.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if not tied:
        weight_bytes -= embedding.numel() * embedding.element_size() - embedding.shape[1] * embedding.element_size()
    cache = StaticCache(config=config, max_cache_len=steps + 8)
    token = torch.zeros((1, 1), dtype=torch.long, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        for warm in range(4):
            model(input_ids=token, past_key_values=cache, cache_position=torch.tensor([warm], device=device))
        sync()
        start = time.perf_counter()
        for pos in range(4, 4 + steps):
            token = (
                model(input_ids=token, past_key_values=cache, cache_position=torch.tensor([pos], device=device))
                .logits[:, -1:]
                .argmax(-1)
            )
        sync()
    tokens_per_s = steps / (time.perf_counter() - start)
    return tokens_per_s, weight_bytes + kv_cache(str(path), 4 + steps // 2, 1, "bf16").kv_bytes


def cpu_decode_layers() -> int:
    """Layers of the decode model on a CPU: enough that a step reads CACHE_MULTIPLE x the last-level cache (a
    Llama-2-7B layer is 405 MB in bf16, its output head 262 MB: from the catalogue's exact parameter count), so decode
    reads DRAM as the measured roof does; one layer fits in a 480-MiB L3 and ran faster than DRAM allows."""
    from labs_lib.kv_math import weight_bytes
    from labs_lib.models import load_model
    from labs_lib.roofline import CACHE_MULTIPLE, last_level_cache_bytes

    llama = load_model("llama-2-7b")
    model_bytes = weight_bytes(llama, "bf16")
    head_bytes = model_bytes / llama.params * llama.vocab_size * llama.hidden_size  # as big as the input embedding
    layer_bytes = (model_bytes - 2 * head_bytes) / llama.num_layers  # the final norm's 4,096 weights left in
    return max(1, math.ceil((CACHE_MULTIPLE * last_level_cache_bytes() - head_bytes) / layer_bytes))


TRANSFORMERS_NEEDED = (4, 56)  # StaticCache(config=, max_cache_len=) and cache.layers[i].keys / .values


def transformers_too_old(version: str) -> str | None:
    """One line when this transformers cannot run tier 1's cache checks, naming it and what is needed; else None."""
    numbers = [int(part) for part in version.split(".")[:2] if part.isdigit()]
    if len(numbers) == 2 and tuple(numbers) >= TRANSFORMERS_NEEDED:
        return None
    need = ".".join(map(str, TRANSFORMERS_NEEDED))
    return f"tier 1 needs transformers {need} or newer (its StaticCache layers); this image has {version}: pip install 'transformers>={need}'"


def tier_bare(device: str) -> dict[str, bool]:
    from labs_lib.roofline import measure_bandwidth

    checks: dict[str, bool] = {}
    if device == "cuda":
        card, source = the_card()
        if card is None:
            print(f"{source}: nothing to check without a GPU (--device cpu runs the cache and decode checks on this CPU)")
            return {}
        name = catalogue_name(card.name)
        print(f"{source}: {card.name}, {card.memory_total_bytes / 2**30:.2f} GiB, compute capability {card.compute_capability}")
        measured = device_bandwidth_gb_s()
        checks["the card is in data/gpus.json"] = name is not None
        if name:
            entry = gpu_spec(name)
            reported = card.memory_total_bytes / 2**30
            checks[f"catalogue memory {entry['memory_gib']} GiB within 1% of the card's {reported:.2f} GiB"] = (
                abs(entry["memory_gib"] - reported) <= 0.01 * reported
            )
            print(
                f"device copy bandwidth {measured:,.0f} GB/s = {measured / entry['bandwidth_gb_per_s']:.0%} of the catalogue's peak"
            )
            checks["copy bandwidth between 50% and 100% of the catalogue's peak"] = (
                0.5 <= measured / entry["bandwidth_gb_per_s"] <= 1.0
            )
            plan = plan_capacity("llama-3.1-8b", 8192, gpu=name)
            print(
                f"lab 01's planner on {name}: {plan.kv_cache_tokens:,} KV tokens, {plan.max_concurrency:.1f} x 8,192-token requests"
            )
            checks["lab 01's planner plans the card"] = plan.fits_one_request
        bandwidths = [measured * 1e9]
    else:  # this machine's DRAM read bandwidth, before and after the decode run (a busy machine drifts)
        bandwidths = [measure_bandwidth(buffer_mib=256).bytes_per_s]
    try:  # the cache and decode checks build models with transformers
        import transformers

        problem = transformers_too_old(transformers.__version__)
    except ImportError:
        problem = "tier 1 needs transformers (and PyTorch): this python has no transformers"
    if problem:
        print(problem)
        return {**checks, "transformers is new enough for tier 1": False}
    max_len, batch = 8192, 2
    for name, layers in ARCHITECTURES:
        path = shrunk_config(name, layers)
        got, want = allocated_kv_bytes(path, max_len, batch, device), kv_cache(str(path), max_len, batch, "bf16").kv_bytes
        print(f"{name} ({layers} layers) KV cache on {device}: transformers allocated {got:,} B, kv_math {want:,} B")
        checks[f"{name}: kv_math equals the allocated cache to the byte"] = got == want
    tokens_per_s, bytes_per_step = decode_tokens_per_s(device, layers=8 if device == "cuda" else cpu_decode_layers())
    if device == "cpu":
        bandwidths.append(measure_bandwidth(buffer_mib=256).bytes_per_s)
    roof = max(bandwidths) / bytes_per_step
    print(
        f"decode at batch 1 on {device}: {tokens_per_s:,.1f} tokens/s, the bandwidth roof {roof:,.1f} ({tokens_per_s / roof:.0%})"
    )
    # on a CPU the roof is itself measured (numpy's summing reads, +-3% between runs; torch's decode reached 65% of it
    # on the Intel machines); a GPU's roof is the catalogue's peak
    checks["decode stays under the bandwidth roof (memory-bound; up to 5% over it)"] = 0.02 < tokens_per_s / roof <= 1.05
    return checks


def tier_vllm(labs: bool) -> dict[str, bool]:
    from labs_lib.endpoints import endpoint_for
    from labs_lib.engines import EngineConfig, make_engine
    from labs_lib.engines.metrics import delta, scrape, token_counts
    from labs_lib.prompts import PromptFactory, corpus_text
    from labs_lib.timing import RequestSpec, measure

    checks: dict[str, bool] = {}
    config = EngineConfig(max_model_len=2048, parallel=4, kv_cache_gib=1)
    with make_engine("vllm", config) as engine:
        a = engine.allocation
        print(
            f"{engine.install.describe()} on {engine.device}: started in {engine.started_s:.0f} s; {engine.allocation_lines()[0]}"
        )
        block = 128 if engine.device == "cpu" else 16
        plan = plan_capacity("gemma-3-270m", 2048, block_size=block, available_kv_gib=a.available_kv_gib or 1)
        checks[f"the planner's KV tokens within 1% of vLLM's ({plan.kv_cache_tokens:,} vs {a.kv_cache_tokens:,})"] = (
            abs(plan.kv_cache_tokens - a.kv_cache_tokens) <= 0.01 * a.kv_cache_tokens
        )
        endpoint = endpoint_for(engine)
        before = scrape(engine.root_url, endpoint.headers())
        records = [measure(endpoint, RequestSpec(p, 16, ignore_eos=True))[0] for p in PromptFactory(None, seed=3).prompts(2, 64)]
        counted = token_counts(delta(before, scrape(engine.root_url, endpoint.headers())), engine)
        print(
            f"one stream: TTFT {records[0].ttft_ms:.0f} ms, TPOT {records[0].tpot_ms:.1f} ms, {records[0].output_tokens} tokens"
        )
        checks["streams complete"] = all(r.ok for r in records)
        checks["the harness's output tokens equal /metrics'"] = counted["output_tokens"] == sum(r.output_tokens for r in records)
        bos, ids = engine.tokenize_text(corpus_text("eval.txt"), 128)
        scores = engine.score(bos, ids)
        print(f"prompt_logprobs: perplexity {scores.perplexity:.1f} over {len(scores.token_ids)} tokens of data/texts/eval.txt")
        checks["prompt_logprobs scores every token"] = len(scores.token_ids) == len(ids) and 1 < scores.perplexity < 200
        bf16_tokens = a.kv_cache_tokens
    with make_engine("vllm", config.with_(kv_cache_dtype="fp8")) as fp8:
        ratio = fp8.allocation.kv_cache_tokens / bf16_tokens
        print(f"fp8 KV: {fp8.allocation.kv_cache_tokens:,} tokens in the same pool ({ratio:.2f}x bf16's)")
        checks["an fp8 KV cache holds twice the tokens (within 2%)"] = abs(ratio - 2) <= 0.04
    if labs:
        from labs_lib import runner

        out = Path(tempfile.mkdtemp(prefix="gpu-smoke-labs-"))
        for result in runner.run_series(runner.discover(), engine="vllm", quick=True, out_dir=out, progress=False):
            print(f"{result.name}: {result.status} in {result.wall_s:.0f} s")
            checks[f"{result.name} quick on vLLM"] = result.status == "ok"
    return checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=["bare", "vllm"], default="bare")
    parser.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda", help="tier bare: where the cache and decode checks run"
    )
    parser.add_argument("--labs", action="store_true", help="tier vllm: also labs 02-06 quick on vLLM")
    args = parser.parse_args()
    header(f"GPU smoke check, tier {args.tier}")
    checks = tier_bare(args.device) if args.tier == "bare" else tier_vllm(args.labs)
    return verdict(checks) if checks else 0  # no GPU: said so, nothing checked, no verdict


if __name__ == "__main__":
    raise SystemExit(main())
