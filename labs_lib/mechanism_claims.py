"""The articles' claims about how serving works (paged blocks against contiguous reservations, static against
continuous batching, what a decode step reads from the cache, what attention knows of order), judged by running
the labs' own mechanisms on the articles' settings: lab 01's block pool (labs_lib.paging), lab 02's attention head
(labs_lib.tiny_decoder), and the models' configurations and the planner for the claims about a model's shape or a
card. Each verdict follows from what the run computes; the settings it runs are the claim's fields in
data/claims.json."""

from __future__ import annotations

import heapq
from functools import cache

import numpy as np
import pandas as pd

from . import claims, scheduler, tiny_decoder
from .kv_math import allocation_utilization, plan_capacity
from .models import catalogue, load_model
from .paging import BlockAllocator, ContiguousAllocator, Replay, replay


def _lengths(c: dict) -> list[int]:
    """The claim's `requests` chat-like lengths (claims.example_lengths: log-normal, median 512, at most 4,096)."""
    return claims.example_lengths(0, c["requests"])


def _requests(c: dict) -> list[tuple[int, int]]:
    """The claim's request mix: claims.example_lengths' chat-like totals, each split into a prompt (its
    `prompt_share`) and at least one output token."""
    return [(int(n * c["prompt_share"]), max(1, n - int(n * c["prompt_share"]))) for n in _lengths(c)]


@cache
def _replays(requests: tuple[tuple[int, int], ...], pool_tokens: int, block_size: int, max_len: int) -> tuple[Replay, Replay]:
    """The same requests through one pool, paged and contiguous (each reserving max_len), with continuous batching."""
    num_blocks = pool_tokens // block_size
    paged = replay(BlockAllocator(num_blocks, block_size), list(requests), pool_tokens, block_size, "paged")
    contiguous = replay(
        ContiguousAllocator(num_blocks, block_size, max_len), list(requests), pool_tokens, block_size, "contiguous"
    )
    return paged, contiguous


def _pool(claim_id: str) -> tuple[dict, Replay, Replay]:
    c = claims.claim(claim_id)
    paged, contiguous = _replays(tuple(_requests(c)), c["pool_tokens"], c["block_size"], c["max_len"])
    return c, paged, contiguous


def _setting(c: dict) -> str:
    return (
        f"{c['requests']} chat-like requests (median {int(np.median(_lengths(c)))} "
        f"tokens) through a pool of {c['pool_tokens']:,} tokens in blocks of {c['block_size']}, each contiguous request "
        f"reserving {c['max_len']:,} (lab 01's replay)"
    )


def _contiguous_waste_row() -> dict:
    """Seed 003: preallocating every request to the maximum length wastes memory."""
    c = claims.claim("s003-contiguous-waste")
    lengths = _lengths(c)
    used = allocation_utilization(lengths, max_len=c["max_len"], block_size=c["block_size"])
    wasted = 1 - used["contiguous"]
    return claims.row(
        "s003-contiguous-waste",
        f"{wasted:.0%}",
        f"of the reserved slots empty (paged: {1 - used['paged']:.1%})",
        wasted > c["wasted_over"],
        f"{len(lengths)} chat-like requests (median {int(np.median(lengths))} tokens), each reserving {c['max_len']:,} "
        f"tokens: 'severe' taken as over {c['wasted_over']:.0%} of the reservation never written. Blocks of "
        f"{c['block_size']} leave only each request's last block part-empty",
    )


def _fragmentation_row() -> dict:
    """Seed 003: with contiguous reservations a new request finds no room and waits (or runs out of memory)."""
    c, paged, contiguous = _pool("s003-fragmentation-waits")
    return claims.row(
        "s003-fragmentation-waits",
        f"{contiguous.mean_running:.1f} running, against {paged.mean_running:.1f} paged",
        "requests decoding per step (mean)",
        contiguous.mean_running < paged.mean_running,
        f"{_setting(c)}: reserved, the pool admits at most {contiguous.peak_running} at once while "
        f"{contiguous.utilization:.0%} of what it hands out holds tokens, so the others wait in the queue. They wait; "
        "a server that admits against its pool, as vLLM does, does not run out of memory",
    )


def _paged_concurrency_row() -> dict:
    """Seed 000: fixed-size blocks serve more concurrent requests in the same memory."""
    c, paged, contiguous = _pool("s000-paged-more-concurrent")
    return claims.row(
        "s000-paged-more-concurrent",
        f"{paged.mean_running / contiguous.mean_running:.1f}x",
        f"requests decoding per step, paged / contiguous (peak {paged.peak_running} against {contiguous.peak_running})",
        paged.mean_running > contiguous.mean_running,
        f"{_setting(c)}. The vLLM paper reports 2-4x the throughput of FasterTransformer and Orca at the same latency "
        "(Kwon et al., SOSP 2023, abstract): more requests per step is where that comes from",
    )


def _continuous_needs_paging_row() -> dict:
    """Seed 003: continuous batching over contiguous memory loses much of its effect."""
    c, paged, contiguous = _pool("s003-continuous-needs-paging")
    slower = contiguous.steps / paged.steps
    return claims.row(
        "s003-continuous-needs-paging",
        f"{slower:.1f}x",
        "the decode steps to finish every request, contiguous / paged (both batching continuously)",
        slower > 1 + c["margin"],
        f"{_setting(c)}: the scheduler refills a slot as soon as a request ends either way, but reserved memory lets "
        f"only {contiguous.peak_running} run at once, against {paged.peak_running} paged ({paged.preemptions} "
        "preemptions paid for that)",
    )


def _block_table_row() -> dict:
    """Seed 003: a request's blocks need not be adjacent; its block table maps them."""
    c = claims.claim("s003-block-table")
    pool = BlockAllocator(c["pool_tokens"] // c["block_size"], c["block_size"])
    for rid, (prompt, _) in enumerate(_requests(c)):
        if not pool.allocate(rid, prompt):
            break
        if rid % 2:  # every other request finishes at once, leaving holes the next ones take
            pool.free(rid)
    tables = list(pool.block_tables.values())
    # one run of adjacent ids, in either order, is what contiguous allocation would have given
    scattered = sum(max(t) - min(t) + 1 != len(t) for t in tables if len(t) > 1)
    return claims.row(
        "s003-block-table",
        f"{scattered} of {sum(len(t) > 1 for t in tables)}",
        "requests whose blocks are not adjacent",
        scattered > 0,
        f"lab 01's BlockAllocator, {c['requests']} requests admitted and every other one finished at once, "
        f"{len(tables)} left: a request takes any "
        "free block, and attention reads its K and V through the block table (vLLM's block_table, the page table "
        "of the analogy)",
    )


def _batching_runs(c: dict) -> dict[str, float]:
    """The claim's output lengths on `slots` slots: decode steps, and the share of slot-steps that decode a token,
    batched statically (groups of `slots` start together, each group lasting its longest) and continuously (a
    slot takes the next request the step its last one ends)."""
    return _batched(c["requests"], c["slots"])


@cache
def _batched(requests: int, slots: int) -> dict[str, float]:
    """_batching_runs, once per setting (four claims share one)."""
    outputs = claims.example_lengths(0, requests)
    static_steps = sum(max(outputs[i : i + slots]) for i in range(0, len(outputs), slots))
    free_at = [0] * slots  # the step each slot is next free
    for n in outputs:
        heapq.heappush(free_at, heapq.heappop(free_at) + n)
    continuous_steps = max(free_at)
    work = sum(outputs)
    return {
        "static_steps": static_steps,
        "continuous_steps": continuous_steps,
        "static_used": work / (slots * static_steps),
        "continuous_used": work / (slots * continuous_steps),
    }


def _batching_rows() -> list[dict]:
    """Seeds 002, 003 and 000 on static against continuous batching, from one run of each on the same requests."""
    rows = []
    for cid in ("s002-static-padding", "s003-static-tail", "s003-continuous-refill", "s000-continuous-utilization"):
        c = claims.claim(cid)
        run = _batching_runs(c)
        setting = (
            f"{c['requests']} requests of chat-like output lengths (median {int(np.median(_lengths(c)))}) on {c['slots']} slots"
        )
        if cid == "s002-static-padding":
            rows.append(
                claims.row(
                    cid,
                    f"{run['static_used']:.0%}",
                    "of slot-steps decoding a real token, static",
                    run["static_used"] < c["collapse_below"],
                    f"{setting}: 'collapses' taken as under {c['collapse_below']:.0%}; continuous batching keeps "
                    f"{run['continuous_used']:.0%} busy on the same requests",
                )
            )
        elif cid == "s003-static-tail":
            idle, idle_cont = 1 - run["static_used"], 1 - run["continuous_used"]
            rows.append(
                claims.row(
                    cid,
                    f"{idle:.0%} idle, against {idle_cont:.0%}",
                    "of slot-steps, static against continuous",
                    idle > 2 * idle_cont,
                    f"{setting}: in a static batch the short requests' slots wait for its longest; continuously, "
                    "slots idle only at the very end, when no request is left to take",
                )
            )
        else:
            faster = run["static_steps"] / run["continuous_steps"]
            rows.append(
                claims.row(
                    cid,
                    f"{faster:.2f}x"
                    if cid == "s003-continuous-refill"
                    else f"{run['continuous_used']:.0%} against {run['static_used']:.0%}",
                    "static steps / continuous steps" if cid == "s003-continuous-refill" else "slot-steps busy",
                    faster > 1,
                    f"{setting}: a slot freed at the end of a step takes the next waiting request in the next one "
                    "(lab 04's scheduler does the same, under a token budget)",
                )
            )
    return rows


def worst_decode_gap_s(c: dict, token_budget: int) -> float:
    """The longest step the running decodes wait through while a long prompt is prefilled, by lab 04's scheduler
    (schedule_step: decodes first, then the prompt within the step's token budget) and a step cost calibrated from
    one user's TTFT and TPOT (scheduler.StepCost)."""
    cost = scheduler.StepCost.calibrated(c["tpot_ms"], c["ttft_ms"], c["calibration_prompt_tokens"])
    decodes = [(rid, 1) for rid in range(c["decoding"])]
    left, started, worst = c["prompt_tokens"], False, 0.0
    while left:
        prompt = [(-1, left)]
        step = scheduler.schedule_step(
            decodes + (prompt if started else []), [] if started else prompt, c["max_num_seqs"], token_budget
        )
        left -= dict(step).get(-1, 0)
        started = started or -1 in dict(step)
        worst = max(worst, cost.seconds(sum(n for _, n in step)))
    return worst


def _chunked_prefill_row() -> dict:
    """Seed 002: chunked prefill splits a long prefill and schedules it with the decodes, so it does not block them."""
    c = claims.claim("s002-chunked-prefill")
    whole = worst_decode_gap_s(c, c["prompt_tokens"] + c["decoding"])
    chunked = worst_decode_gap_s(c, c["token_budget"])
    return claims.row(
        "s002-chunked-prefill",
        f"{1000 * whole:,.0f} ms whole, {1000 * chunked:,.0f} ms in chunks of {c['token_budget']}",
        f"the longest wait between two tokens of {c['decoding']} running requests",
        whole > c["blocks_over"] * chunked,
        f"lab 04's scheduler with a {c['prompt_tokens']:,}-token prompt arriving: in one step, every running request "
        f"waits for the whole prefill; in chunks, at most one chunk per step ('blocks' taken as over {c['blocks_over']}x "
        f"the chunked wait). Step cost from lab 02's one-user TTFT {c['ttft_ms']} ms and TPOT {c['tpot_ms']} ms "
        "(2-core CPU, llama.cpp); vLLM V1 chunks prefills by default (max_num_batched_tokens per step)",
    )


def _cached_decode_rows() -> list[dict]:
    """Seeds 003 and 002 on what a decode step with a cache computes, by lab 02's attention head: the cached steps
    (one new query against every cached K and V) against causal attention over the whole sequence."""
    c = claims.claim("s003-decode-q-only")
    head = tiny_decoder.TinyHead.random(c["d_model"])
    x = tiny_decoder.tokens(c["tokens"], c["d_model"])
    full = tiny_decoder.causal_attention(x, head)
    decoded, held = tiny_decoder.decode(tiny_decoder.decode_step, x, head)
    same = float(np.abs(decoded - full).max())
    # the last step with its earliest cached token dropped: attention needs every earlier K and V, not the newest only
    cache_ = tiny_decoder.new_cache(len(x), x.shape[1])
    for x_t in x[:-1]:
        tiny_decoder.decode_step(x_t, cache_, head.wq, head.wk, head.wv)
    cache_["k"], cache_["v"], cache_["length"] = cache_["k"][1:], cache_["v"][1:], cache_["length"] - 1
    dropped = float(np.abs(tiny_decoder.decode_step(x[-1], cache_, head.wq, head.wk, head.wv) - full[-1]).max())
    tolerance = c["tolerance"]
    d = claims.claim("s002-attends-all")
    return [
        claims.row(
            "s003-decode-q-only",
            f"{same:.1e}",
            "largest difference from full attention",
            same < tolerance and held == list(range(1, len(x) + 1)),
            f"lab 02's head ({c['d_model']} wide, {c['tokens']} tokens): each cached step projects one token's q, k and "
            "v, appends k and v, and attends q over the cache; the outputs equal attention computed over the whole "
            f"sequence at once (within {tolerance:g})",
        ),
        claims.row(
            "s002-attends-all",
            f"{dropped:.1e}",
            "the last output's change with its earliest K and V dropped",
            dropped > d["tolerance"],
            "the step still reads every cached K and V (they are read, not recomputed: 重新拿来 is a read); drop one "
            f"and the output moves by more than {d['tolerance']:g}. A sliding-window layer is the exception: it reads "
            "only its window",
        ),
    ]


def _order_row() -> dict:
    """Seed 004: self-attention cannot tell order, so positions are added. Permute the tokens and compare."""
    c = claims.claim("s004-order-blind")
    head = tiny_decoder.TinyHead.random(c["d_model"])
    x = tiny_decoder.tokens(c["tokens"], c["d_model"])
    order = np.random.default_rng(2).permutation(len(x))
    moved = {
        causal: float(
            np.abs(
                tiny_decoder.attention(x[order], head, causal=causal) - tiny_decoder.attention(x, head, causal=causal)[order]
            ).max()
        )
        for causal in (False, True)
    }
    blind, causal_blind = moved[False] < c["tolerance"], moved[True] < c["tolerance"]
    return claims.row(
        "s004-order-blind",
        f"unmasked {moved[False]:.1e}, causal {moved[True]:.1e}",
        "largest change when the tokens are shuffled (outputs shuffled back)",
        True if blind and causal_blind else (None if blind else False),
        "attention over every token gives each token the same output in any order: it cannot tell order, hence "
        "positional encodings. A decoder's causal mask already breaks that symmetry (token i sees i tokens), and "
        "decoders trained with no positional encoding still learn positions (Haviv et al., Findings of EMNLP 2022)",
    )


def _model_shape_rows() -> list[dict]:
    """Seed 004's "4096 dimensions" and seed 000's "all of Llama 2/3 and Mistral use GQA", from the configurations."""
    e = claims.claim("s004-embedding-4096")
    g = claims.claim("s000-gqa-families")
    specs = {hf_id: load_model(hf_id) for hf_id in catalogue()}
    widths = {hf_id.split("/")[1]: s.hidden_size for hf_id, s in specs.items() if hf_id.split("/")[1] in e["models"]}
    family = {hf_id.split("/")[1]: s for hf_id, s in specs.items() if hf_id.split("/")[1].startswith(tuple(g["families"]))}
    mha = [name for name, s in family.items() if s.num_kv_heads == s.num_q_heads]
    return [
        claims.row(
            "s004-embedding-4096",
            ", ".join(f"{n} {w:,}" for n, w in widths.items()),
            "hidden size",
            e["value"] in widths.values(),
            "each token's vector is as wide as the model's hidden size (its config.json's hidden_size): "
            + (
                f"{e['value']:,} for {', '.join(n for n, w in widths.items() if w == e['value'])}"
                if e["value"] in widths.values()
                else f"none of these 7-8B models is {e['value']:,} wide"
            ),
        ),
        claims.row(
            "s000-gqa-families",
            f"MHA: {', '.join(mha)}" if mha else "all GQA",
            f"of {len(family)} models of {', '.join(g['families'])}",
            not mha,
            "read from each model's config.json (num_key_value_heads against num_attention_heads): GQA in "
            f"{', '.join(n for n in family if n not in mha) or 'none'}. The quality half holds by the GQA paper's own finding: "
            "uptrained GQA 'achieves quality close to multi-head attention' (Ainslie et al., EMNLP 2023, abstract)",
        ),
    ]


def _card_rows() -> list[dict]:
    """Seed 004's 7B on a 24 GB card: 'crashed at the 200th token' before tuning, a steady 4K context after."""
    c = claims.claim("s004-crash-at-200")
    plan = plan_capacity(c["model"], c["max_model_len"], gpu=c["gpu"], weight_dtype="fp16", kv_dtype="fp16")
    k = claims.claim("s004-4k-steady")
    four_k = plan_capacity(k["model"], k["value"], gpu=k["gpu"], weight_dtype="fp16", kv_dtype="fp16")
    name = load_model(c["model"]).name
    return [
        claims.row(
            "s004-crash-at-200",
            f"{plan.kv_cache_tokens:,}",
            f"tokens of KV pool ({name} fp16 on an {c['gpu']}, vLLM's default fraction)",
            plan.kv_cache_tokens < c["value"],
            f"the weights leave room for {plan.kv_cache_tokens:,} tokens of cache: a crash at token {c['value']} is not "
            "the cache running out (vLLM sizes its pool at start and refuses to start rather than fail mid-reply); "
            "something else ended that run, which the article does not show",
        ),
        claims.row(
            "s004-4k-steady",
            f"{four_k.max_concurrency:.1f}",
            f"requests of {k['value']:,} tokens at once ({name} fp16 on an {k['gpu']})",
            four_k.fits_one_request,
            "lab 01's planner: a 4K context fits this card with fp16 weights and cache, no quantization needed",
        ),
    ]


def _tp_row() -> dict:
    """Seed 003: an out-of-memory error at start-up: check tensor_parallel_size against the cards."""
    c = claims.claim("s003-oom-check-tp")
    spec = load_model(c["model"])
    fits = {
        tp: plan_capacity(spec, c["max_model_len"], gpu=c["gpu"], tp=tp, kv_dtype="bf16", weight_dtype="bf16")
        for tp in range(1, c["gpus"] + 1)
        if c["gpus"] % tp == 0
    }
    short = [tp for tp, plan in fits.items() if not plan.fits_one_request]
    return claims.row(
        "s003-oom-check-tp",
        ", ".join(f"tp {tp}: {plan.max_concurrency:.1f}" for tp, plan in fits.items()),
        f"requests of {c['max_model_len']:,} tokens that fit ({spec.name} bf16 on {c['gpus']} {c['gpu']})",
        bool(short) and fits[c["gpus"]].fits_one_request,
        f"with tensor_parallel_size below the card count each rank holds 1/tp of the weights: at tp {', '.join(map(str, short))} "
        "the weights on each card leave no room for one request's cache, or do not fit at all: an out-of-memory error at "
        "start; at tp equal to the cards it fits"
        if short
        else "every tensor_parallel_size fits this model here: a start-up shortage is not the parallel size",
    )


def _utilization_band_row() -> dict:
    """Seed 003: below 0.85 throughput drops markedly (the pool it leaves), above 0.95 the risk of OOM rises."""
    c = claims.claim("s003-util-band")
    low, default = c["value"]
    drops = {}
    for gpu in c["gpus"]:
        tokens = [
            plan_capacity(c["model"], c["max_model_len"], gpu=gpu, kv_dtype="bf16", gpu_memory_utilization=u).kv_cache_tokens
            for u in (low, default)
        ]
        drops[gpu] = 1 - tokens[0] / tokens[1]
    marked = [g for g, d in drops.items() if d > c["marked_over"]]
    return claims.row(
        "s003-util-band",
        ", ".join(f"{g} -{d:.0%}" for g, d in drops.items()),
        f"KV pool at {low} against {default} ({load_model(c['model']).name}, lab 01's planner)",
        len(marked) == len(drops) or (None if marked else False),
        f"the fraction sizes the pool after the weights, so the same step costs a small card more of its pool: "
        f"'markedly' taken as over {c['marked_over']:.0%}. Throughput falls only where the pool, not the batch cap, "
        "limits the requests running; above 0.95 vLLM refuses to start when other processes hold the difference "
        "(free memory must cover total x fraction) rather than running out later",
    )


def _awq_blocks_row() -> dict:
    """Seed 001: 4-bit weights leave more KV blocks (the speed half is lab 05's s004-smaller-weights-faster)."""
    c = claims.claim("s001-awq-more-blocks")
    m = claims.awq_memory(c["model"], c["gpu"])
    ratio = m["kv_pool_bytes_awq"] / m["kv_pool_bytes_fp16"]
    return claims.row(
        "s001-awq-more-blocks",
        f"{ratio:.2f}x",
        f"KV pool, AWQ 4-bit / fp16 ({load_model(c['model']).name} on an {c['gpu']})",
        ratio > 1,
        "vLLM reserves the same share of the card either way, so every byte the weights give up goes to the KV pool. "
        "Faster is a measurement: lab 05 times decode with the smaller weights (seed 004's claim of the same)",
    )


def mechanism_claims_table() -> pd.DataFrame:
    """The articles' claims about paging, batching, the cached decode step, attention and a model's shape."""
    return pd.DataFrame(
        [
            _contiguous_waste_row(),
            _fragmentation_row(),
            _paged_concurrency_row(),
            _continuous_needs_paging_row(),
            _block_table_row(),
            *_batching_rows(),
            _chunked_prefill_row(),
            *_cached_decode_rows(),
            _order_row(),
            *_model_shape_rows(),
            *_card_rows(),
            _tp_row(),
            _utilization_band_row(),
            _awq_blocks_row(),
        ]
    )
