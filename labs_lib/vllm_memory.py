"""What vLLM takes from a card before its KV pool, estimated part by part, with the spread it can honestly claim.

vLLM (0.32, V1; vllm/v1/worker/gpu_worker.py, determine_available_memory) measures at start-up:
  KV pool = total x gpu_memory_utilization - weights - non-torch memory - activation peak - CUDA-graph estimate.
The activation peak is that of `profile_run` (vllm/v1/worker/gpu_model_runner.py): one dummy forward pass of
max_num_batched_tokens tokens, then a dummy sampler run on the logits of max_num_seqs requests (top-k and top-p
set, so the PyTorch sampler sorts). The planner cannot measure; it estimates each part from the model's shape
and from published start-up profiles (cited beside each constant), and gives the low and high ends, not one
number. Units: bytes per rank unless a name says GiB.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .models import ModelSpec

GIB = 1024**3

NON_TORCH_GIB = (0.16, 0.35, 1.79)
"""Low, central, high, one GPU: CUDA context, cuBLAS workspaces and other memory outside PyTorch's allocator.
Published profiles: 0.16 GiB (vllm#12126, H100), 0.20 (vllm#14447), 0.33 (vllm#14452, RTX 5090), 0.35
(vllm#10517, Llama-3.1-8B, RTX 3090), 1.79 (vllm#10511, Meta-Llama-3-8B, H100)."""
TP_COMM_GIB = 1.79
"""Extra non-torch memory per rank when tensor parallel (NCCL and custom all-reduce buffers): vllm#10511 logs
Meta-Llama-3-8B on H100s with 1.79 GiB at TP 1 and 3.58 GiB per rank at TP 2."""
CUDAGRAPH_GIB = (0.5, 0.7, 1.5)
"""Low, central, high. vLLM estimates CUDA-graph memory before sizing the pool (default since 0.21,
VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS); published estimates: 0.73 GiB (vllm#39559, "Estimated CUDA graph memory:
0.73 GiB total", 51 piecewise and 35 full sizes) and 0.64 GiB (granite-switch#128, "Graph capturing took 0.64 GiB"),
both for 3-4B models. It grows with layers and capture sizes, hence the wide high end. --enforce-eager: none."""
SAMPLER_BYTES_PER_LOGIT = (8, 40)
"""The dummy sampler run per (request, vocabulary entry), low and high: fp32 logits and probabilities (8, a sampler
that does not sort); 40, what vllm#10511's profiles imply: Meta-Llama-3-8B's activation peak is 1.26 GiB at TP 1
and at TP 2, so it is a tensor TP does not split, and 256 requests x 128,256 logits x 40 bytes = 1.22 GiB (logits,
probabilities, log-probabilities and a sort's values and int64 indices)."""
ACTIVATION_BYTES = 2  # bf16/fp16 activations


@dataclass(frozen=True)
class StartupOverhead:
    """vLLM's non-KV memory beyond the weights, per rank, estimated: each part, and the low/high total."""

    non_torch_bytes: int  # central; the ends below
    non_torch_low_bytes: int
    non_torch_high_bytes: int
    forward_peak_bytes: int  # the dummy forward of max_num_batched_tokens (MLP input, gate/up and activation outputs)
    sampler_peak_bytes: int  # the dummy sampler on max_num_seqs rows of logits
    activation_low_bytes: int  # max(forward, the sampler's low end): the two peaks one after the other
    activation_high_bytes: int  # forward + the sampler's high end: the two peaks fully overlapping
    cudagraph_bytes: int  # central estimate; 0 with enforce_eager
    central_bytes: int  # non-torch + the activation midway between its ends + graphs, central estimates
    low_bytes: int  # the low ends of non-torch, activation and graphs
    high_bytes: int  # their high ends
    ffn_width: int | None  # the MLP width the forward estimate used (derived from the parameter count)
    note: str

    def to_dict(self) -> dict:
        return asdict(self)


def ffn_width(spec: ModelSpec) -> int | None:
    """The MLP's intermediate size implied by the exact parameter count of a dense model (gated MLP: 3 x hidden x
    width per layer), with tied or untied embeddings: the candidate within 2 of a multiple of 64 (norms and
    biases add less than that). None when the count is rounded, the model has experts, or MLA."""
    if not spec.params or spec.is_mla or not spec.head_dim:
        return None
    q, kv = spec.num_q_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    attention = spec.hidden_size * (2 * q + 2 * kv)
    for embeddings in (2, 1):  # untied input embedding and LM head, then tied
        rest = spec.params - embeddings * spec.vocab_size * spec.hidden_size - spec.num_layers * attention
        width = rest / (3 * spec.num_layers * spec.hidden_size)
        nearest = round(width / 64) * 64
        if nearest > 0 and 0 <= width - nearest < 2:
            return nearest
    return None


def startup_overhead(
    spec: ModelSpec, *, tp: int, max_num_batched_tokens: int, max_num_seqs: int, cuda_graphs: bool = True
) -> StartupOverhead:
    """The estimate for one rank of `spec` served with these step budgets (vLLM's defaults for the card, or given)."""
    width = ffn_width(spec)
    note = ""
    if width is None:
        width = 4 * spec.hidden_size
        note = (
            f"{spec.name}: MLP width not derivable from its catalogue entry (experts, MLA or a rounded count); 4 x hidden assumed"
        )
    tokens = max_num_batched_tokens
    forward = tokens * (2 * spec.hidden_size + 3 * -(-width // tp)) * ACTIVATION_BYTES
    logits = min(max_num_seqs, tokens) * spec.vocab_size  # vLLM gathers the full vocabulary's logits on rank 0
    sampler_low, sampler_high = (logits * b for b in SAMPLER_BYTES_PER_LOGIT)
    comm = TP_COMM_GIB if tp > 1 else 0.0
    non_torch = [int((g + comm) * GIB) for g in NON_TORCH_GIB]
    graphs = [int(g * GIB) for g in CUDAGRAPH_GIB] if cuda_graphs else [0, 0, 0]
    activation = (max(forward, sampler_low), forward + sampler_high)
    return StartupOverhead(
        non_torch_bytes=non_torch[1],
        non_torch_low_bytes=non_torch[0],
        non_torch_high_bytes=non_torch[2],
        forward_peak_bytes=forward,
        sampler_peak_bytes=sampler_high,
        activation_low_bytes=activation[0],
        activation_high_bytes=activation[1],
        cudagraph_bytes=graphs[1],
        central_bytes=non_torch[1] + sum(activation) // 2 + graphs[1],
        low_bytes=non_torch[0] + activation[0] + graphs[0],
        high_bytes=non_torch[2] + activation[1] + graphs[2],
        ffn_width=width if not note else None,
        note=note,
    )


def against_published(path: Path | None = None) -> list[dict]:
    """Each published start-up profile (data/vllm_startup_profiles.json) beside this module's estimate for its model
    and step budgets (no CUDA graphs: V0 did not count them): activation and non-torch memory, GiB, and whether
    the published figure lies inside the estimate's range."""
    from .models import load_model
    from .paths import DATA_DIR

    profiles = json.loads((path or DATA_DIR / "vllm_startup_profiles.json").read_text())["profiles"]
    rows = []
    for p in profiles:
        est = startup_overhead(
            load_model(p["model"]),
            tp=p["tp"],
            max_num_batched_tokens=p["max_num_batched_tokens"],
            max_num_seqs=p["max_num_seqs"],
            cuda_graphs=False,
        )
        act_low, act_high = est.activation_low_bytes / GIB, est.activation_high_bytes / GIB
        torch_low, torch_high = (
            round(est.non_torch_low_bytes / GIB, 2),
            round(est.non_torch_high_bytes / GIB, 2),
        )  # as vLLM prints
        rows.append(
            {
                "source": "vllm#" + p["source"].rsplit("/", 1)[1],
                "tp": p["tp"],
                "tokens": p["max_num_batched_tokens"],
                "activation logged": p["activation_gib"],
                "activation estimated": f"{act_low:.2f} to {act_high:.2f}",
                "activation inside": act_low <= p["activation_gib"] <= act_high,
                "non-torch logged": p["non_torch_gib"],
                "non-torch estimated": f"{torch_low:.2f} to {torch_high:.2f}",
                "non-torch inside": torch_low <= p["non_torch_gib"] <= torch_high,
            }
        )
    return rows
