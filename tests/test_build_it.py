"""The build-it cells: each core's reference solution agrees with the library on every case, the usual mistakes
are caught with the hint that names them, every build-it cell in the notebooks is a skeleton of a core followed by
its check, and what the runner fills in passes that check. (Runs as written and filled in: tests/test_notebooks.py.)"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import math
import re
import textwrap
from itertools import pairwise

import numpy as np
import pytest
from conftest import REPO

from labs_lib import cores
from labs_lib.cores import lab05, lab06
from labs_lib.errors import BadInput, LabsError


@pytest.mark.parametrize("name", sorted(cores.CORES))
def test_each_solution_agrees_with_the_library_on_every_case(name, capsys):
    solution = cores.CORES[name].solution
    assert cores.check(name, solution) is solution
    assert f"agrees with the library on all {len(cores.CORES[name].cases())} cases" in capsys.readouterr().out


def _kv_query_heads(model, seq_len, bytes_per_value):
    return 2 * model.num_layers * model.num_q_heads * (model.head_dim or 0) * bytes_per_value * seq_len


def _kv_no_window(model, seq_len, bytes_per_value):
    if model.is_mla:
        return model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * bytes_per_value * seq_len
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * bytes_per_value * seq_len


def _kv_mla_as_heads(model, seq_len, bytes_per_value):
    held = sum(min(seq_len, model.sliding_window) if model.is_sliding(i) else seq_len for i in range(model.num_layers))
    return 2 * model.num_kv_heads * (model.head_dim or 128) * bytes_per_value * held


def _tpot_per_chunk(times, output_tokens):
    if not times:
        return None, None, None, []
    ttft, e2e = times[0] * 1000, times[-1] * 1000
    return ttft, (e2e - ttft) / (len(times) - 1) if len(times) > 1 else None, e2e, [(b - a) * 1000 for a, b in pairwise(times)]


def _tpot_zero_for_one_token(times, output_tokens):
    if not times:
        return None, None, None, []
    ttft, e2e = times[0] * 1000, times[-1] * 1000
    return ttft, (e2e - ttft) / max(output_tokens - 1, 1), e2e, [(b - a) * 1000 for a, b in pairwise(times)]


def _kl_no_rest(p_top, q_top):
    return sum(math.exp(lp) * (lp - q_top[t]) for t, lp in p_top.items() if t in q_top)


def _kl_reversed(p_top, q_top):
    return cores.CORES["kl_lower_bound"].reference(q_top, p_top)


def _classify_by_text_only(status, message):
    low = message.lower()
    return (
        "context_exceeded"
        if "context" in low
        else "auth"
        if "unauthorized" in low
        else "model_not_found"
        if "model" in low
        else "unknown"
    )


def _classify_every_404_a_model(status, message):
    return lab06.classify(status, message) if status != 404 else "model_not_found"


def _concurrency_by_tokens(model, pool_bytes, max_model_len, block_size, bytes_per_value):
    per_token = 2 * model.num_kv_heads * model.head_dim * bytes_per_value * model.num_layers
    return (pool_bytes // per_token) / max_model_len


def _concurrency_partial_blocks(model, pool_bytes, max_model_len, block_size, bytes_per_value):
    block_bytes = block_size * 2 * model.num_kv_heads * model.head_dim * bytes_per_value * model.num_layers
    return (pool_bytes / block_bytes) / math.ceil(max_model_len / block_size)


def _goodput_fraction(records, slo, duration_s):
    return sum(slo.met(r) for r in records) / len(records)


def _goodput_counts_failures(records, slo, duration_s):
    return sum(r.ttft_ms <= slo.ttft_ms and (r.tpot_ms or 0) <= (slo.tpot_ms or 1e18) for r in records) / duration_s


async def _loop_all_at_once(send, num_requests, concurrency):
    return await asyncio.gather(*(send(i) for i in range(num_requests)))


async def _loop_one_at_a_time(send, num_requests, concurrency):
    return [await send(i) for i in range(num_requests)]


async def _loop_in_arrival_order(send, num_requests, concurrency):
    limit, answers = asyncio.Semaphore(concurrency), []

    async def one(i):
        async with limit:
            answers.append(await send(i))

    await asyncio.gather(*(one(i) for i in range(num_requests)))
    return answers


async def _loop_static_batches(send, num_requests, concurrency):
    answers = []
    for first in range(0, num_requests, concurrency):
        answers += await asyncio.gather(*(send(i) for i in range(first, min(first + concurrency, num_requests))))
    return answers


def _kind_empty_content_is_a_token(line):
    if line.startswith("data:") and '"content"' in line:
        return "content"  # the key is there, so it counts: the role chunk's "" too
    return cores.CORES["chunk_kind"].reference(line)


def _kind_indexes_choices(line):
    if not line.startswith("data:") or line.endswith("[DONE]"):
        return cores.CORES["chunk_kind"].reference(line)
    chunk = json.loads(line[5:])
    return "content" if chunk["choices"][0].get("delta", {}).get("content") else cores.CORES["chunk_kind"].reference(line)


def _kind_parses_done(line):
    return (
        cores.CORES["chunk_kind"].reference(line)
        if not line.startswith("data:")
        else (json.loads(line[5:]) and cores.CORES["chunk_kind"].reference(line))
    )


def _to_rate(times, num_requests, rate_rps):
    return (times * (num_requests / rate_rps / times[-1])).tolist()


def _arrivals_unscaled(num_requests, rate_rps, burstiness, seed):
    gaps = np.random.default_rng(seed).gamma(burstiness, 1 / (rate_rps * burstiness), num_requests)
    return np.cumsum(gaps).tolist()  # a short run's rate is then a draw: 5 gaps can sum to half their mean


def _arrivals_first_at_zero(num_requests, rate_rps, burstiness, seed):
    gaps = np.random.default_rng(seed).gamma(burstiness, 1 / (rate_rps * burstiness), num_requests)
    return _to_rate(np.cumsum(gaps) - gaps[0], num_requests, rate_rps)  # vLLM sends the first after its own gap


def _arrivals_ignore_burstiness(num_requests, rate_rps, burstiness, seed):
    gaps = np.random.default_rng(seed).exponential(1 / rate_rps, num_requests)  # always Poisson
    return _to_rate(np.cumsum(gaps), num_requests, rate_rps)


def _arrivals_unseeded(num_requests, rate_rps, burstiness, seed):
    gaps = np.random.default_rng().gamma(burstiness, 1 / (rate_rps * burstiness), num_requests)
    return _to_rate(np.cumsum(gaps), num_requests, rate_rps)


async def _search_without_bisecting(meets, start, ceiling, max_points, resolution):
    good, bad, rate = None, None, start
    for _ in range(max_points):
        if await meets(rate):
            good = rate
        else:
            return good, rate
        if rate >= ceiling:
            break
        rate = min(2 * rate, ceiling)
    return good, bad


def _search_bisecting(times=None, count_all=True):
    async def search(meets, start, ceiling, max_points, resolution):
        good, bad, rate, tried = None, None, start, 0
        while tried < max_points or not count_all:
            tried += 1
            if await meets(rate):
                good = rate
            else:
                bad = rate
                break
            if rate >= ceiling:
                break
            rate = min(2 * rate, ceiling)
        bisections = 0
        while good is not None and bad is not None and (bisections < times if times else bad - good > resolution * good):
            if count_all and tried >= max_points:
                break
            tried, bisections = tried + 1, bisections + 1
            middle = round((good + bad) / 2, 3)
            good, bad = (middle, bad) if await meets(middle) else (good, middle)
        return good, bad

    search.__name__ = f"_search_bisecting_{times}_{count_all}"
    return search


async def _sweep_without_finally(configs, start, measure, stop):
    for config in configs:
        try:
            engine = start(config)
        except LabsError as exc:
            await measure(config, None, str(exc))
            continue
        await measure(config, engine, None)
        stop(config, engine)


async def _sweep_ends_at_a_failed_start(configs, start, measure, stop):
    for config in configs:
        engine = start(config)
        try:
            await measure(config, engine, None)
        finally:
            stop(config, engine)


async def _sweep_starts_every_engine_first(configs, start, measure, stop):
    started = []
    for config in configs:
        try:
            started.append((config, start(config)))
        except LabsError as exc:
            await measure(config, None, str(exc))
    for config, engine in started:
        try:
            await measure(config, engine, None)
        finally:
            stop(config, engine)


async def _sweep_stops_what_never_started(configs, start, measure, stop):
    for config in configs:
        engine = None
        try:
            engine = start(config)
            await measure(config, engine, None)
        except LabsError as exc:
            await measure(config, None, str(exc))
        finally:
            stop(config, engine)


def _q8_codes(weights, fmt, codes_of):
    """A Q8_0 quantizer whose codes come from codes_of(block, float32 scale); Q4_0 left right."""
    if fmt != "Q8_0":
        return lab05.quantize_blocks(weights, fmt)
    blocks = np.asarray(weights, np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / 127
    codes = codes_of(blocks, d).astype(np.int8).view(np.uint8)
    return np.concatenate([d.astype(np.float16).view(np.uint8), codes], axis=1).tobytes()


def _q8_numpy_round(weights, fmt):
    return _q8_codes(weights, fmt, lambda b, d: np.round(b * np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)))


def _q8_divides_by_zero(weights, fmt):
    with np.errstate(all="ignore"):
        return _q8_codes(weights, fmt, lambda b, d: np.nan_to_num(np.sign(b / d) * np.floor(np.abs(b / d) + 0.5), nan=-128))


def _q8_float16_scale(weights, fmt):
    def codes(b, d):
        x = (b * (np.float32(1) / d.astype(np.float16).astype(np.float32))).astype(np.float64)
        return np.sign(x) * np.floor(np.abs(x) + 0.5)

    with np.errstate(all="ignore"):
        return _q8_codes(weights, fmt, codes)


def _q4_packed(weights, fmt, scale_of, pack):
    """A Q4_0 quantizer with its scale from scale_of(blocks) and its nibbles packed by pack(codes); Q8_0 left right."""
    if fmt != "Q4_0":
        return lab05.quantize_blocks(weights, fmt)
    blocks = np.asarray(weights, np.float32).reshape(-1, 32)
    d = scale_of(blocks)
    inverse = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    codes = np.clip(np.trunc(blocks * inverse + np.float32(8.5)), 0, 15).astype(np.uint8)
    return np.concatenate([d.astype(np.float16).view(np.uint8), pack(codes)], axis=1).tobytes()


def _signed_max(blocks):
    return np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1, keepdims=True), axis=1) / -8


def _q4_pairs_packed(weights, fmt):
    return _q4_packed(weights, fmt, _signed_max, lambda c: c[:, 0::2] | (c[:, 1::2] << 4))


def _q4_absmax_scale(weights, fmt):
    return _q4_packed(weights, fmt, lambda b: np.abs(b).max(axis=1, keepdims=True) / 8, lambda c: c[:, :16] | (c[:, 16:] << 4))


def _dq8_unsigned(data, fmt):
    if fmt != "Q8_0":
        return lab05.dequantize_blocks(data, fmt)
    blocks = np.frombuffer(data, np.uint8).reshape(-1, 34)
    return (blocks[:, :2].copy().view(np.float16).astype(np.float32) * blocks[:, 2:]).reshape(-1)


def _dq4_no_offset(data, fmt):
    return lab05.dequantize_blocks(data, fmt) + (8 * _scales_per_value(data) if fmt == "Q4_0" else 0)


def _scales_per_value(data):
    blocks = np.frombuffer(data, np.uint8).reshape(-1, 18)
    return np.repeat(blocks[:, :2].copy().view(np.float16).astype(np.float32).reshape(-1), 32)


def _dq4_one_scale(data, fmt):
    if fmt != "Q4_0":
        return lab05.dequantize_blocks(data, fmt)
    first = np.frombuffer(data, np.uint8)[:2].copy().view(np.float16).astype(np.float32)[0]
    return lab05.dequantize_blocks(data, fmt) / _scales_per_value(data) * first


def _step(x_t, cache, wq, wk, wv, *, scale=True, shift=True, attend_first=False, count=True):
    """A decode step with one of the usual slips: no 1/sqrt(d), no max subtracted, attending before the new key is
    written, or the cache's length never advanced."""
    n = cache["length"]
    seen = n if attend_first and n else n + 1
    if not attend_first or n == 0:
        cache["k"][n], cache["v"][n] = x_t @ wk, x_t @ wv
    scores = cache["k"][:seen] @ (x_t @ wq) / (math.sqrt(len(x_t)) if scale else 1)
    with np.errstate(all="ignore"):
        weights = np.exp(scores - scores.max() if shift else scores)
        out = weights / weights.sum() @ cache["v"][:seen]
    if attend_first and n:
        cache["k"][n], cache["v"][n] = x_t @ wk, x_t @ wv
    cache["length"] = n + 1 if count else n
    return np.zeros_like(out) if attend_first and n == 0 else out


def _waiting_first(running, waiting, max_num_seqs, budget):
    from labs_lib.scheduler import schedule_step

    return schedule_step([], waiting + running, max_num_seqs, budget)


def _cap_on_new_only(running, waiting, max_num_seqs, budget):
    out, left = [], budget
    for rid, need in running + waiting[:max_num_seqs]:
        if left:
            out.append((rid, min(need, left)))
            left -= out[-1][1]
    return out


def _no_chunked_prefill(running, waiting, max_num_seqs, budget):
    out, left = [], budget
    for rid, need in running + waiting:
        if need <= left and len(out) < max_num_seqs:
            out.append((rid, need))
            left -= need
    return out


def _lists_zero_tokens(running, waiting, max_num_seqs, budget):
    out, left = [], budget
    for rid, need in (running + waiting)[:max_num_seqs]:
        out.append((rid, min(need, left)))
        left -= out[-1][1]
    return out


def _stream_reader(*, space: bool = False, past_done: bool = False, index_choices: bool = False):
    """A stream reader with one of the usual slips: `data: ` with its space required, reading on past [DONE],
    choices[0] taken on every chunk."""

    def read(lines):
        text, usage, prefix = "", None, "data: " if space else "data:"
        for line in lines:
            payload = line.removeprefix(prefix).strip() if line.startswith(prefix) else None
            if payload == "[DONE]" and not past_done:
                break
            if payload is None or payload == "[DONE]":
                continue
            event = json.loads(payload)
            if event.get("choices") or index_choices:
                text += event["choices"][0]["delta"].get("content") or ""
            usage = event.get("usage") or usage
        return text, usage, None

    return read


def _retry_every_failure(status, retries_done, retry_after_s=None):
    return None if retries_done >= 2 else 0.5 * 2**retries_done


def _retry_only_5xx(status, retries_done, retry_after_s=None):
    if retries_done >= 2 or (status is not None and status < 500):
        return None
    return 0.5 * 2**retries_done


def _retry_without_a_cap(status, retries_done, retry_after_s=None):
    if status is not None and status not in (408, 409, 429) and status < 500:
        return None
    return retry_after_s or 0.5 * 2**retries_done


MISTAKES = [  # (core, a wrong function, what the hint must name)
    ("schedule_step", _waiting_first, "the running requests first"),
    ("schedule_step", _cap_on_new_only, "running ones included"),
    ("schedule_step", _no_chunked_prefill, "chunked prefill"),
    ("schedule_step", _lists_zero_tokens, "the short one behind it waits"),
    ("decode_step", lambda *a: _step(*a, scale=False), "softmax(K q / sqrt(d)) V"),
    ("decode_step", lambda *a: _step(*a, shift=False), "subtract the largest score"),
    ("decode_step", lambda *a: _step(*a, attend_first=True), "then attend"),
    ("decode_step", lambda *a: _step(*a, count=False), "add 1 to length"),
    ("quantize_blocks", _q8_numpy_round, "half away from zero"),
    ("quantize_blocks", _q8_divides_by_zero, "no division by zero"),
    ("quantize_blocks", _q8_float16_scale, "the float32 scale"),
    ("quantize_blocks", _q4_pairs_packed, "not values 2j and 2j + 1"),
    ("quantize_blocks", _q4_absmax_scale, "m / -8"),
    ("dequantize_blocks", _dq8_unsigned, "signed int8"),
    ("dequantize_blocks", _dq4_no_offset, "code - 8"),
    ("dequantize_blocks", _dq4_one_scale, "its own scale"),
    ("kv_bytes_per_sequence", _kv_query_heads, "not the query heads"),
    ("kv_bytes_per_sequence", _kv_no_window, "sliding layer"),
    ("kv_bytes_per_sequence", _kv_mla_as_heads, "MLA keeps one latent"),
    ("max_concurrency", _concurrency_by_tokens, "ceil(max_model_len / block_size)"),
    ("max_concurrency", _concurrency_partial_blocks, "pool_bytes // block_bytes"),
    ("goodput", _goodput_fraction, "per second of the run"),
    ("goodput", _goodput_counts_failures, "a failed request never counts"),
    ("metrics_from_times", _tpot_per_chunk, "output tokens - 1, not by chunks"),
    ("metrics_from_times", _tpot_zero_for_one_token, "TPOT is None"),
    ("kl_lower_bound", _kl_no_rest, "rest"),
    ("kl_lower_bound", _kl_reversed, "weighted by the reference P"),
    ("classify", _classify_by_text_only, "a 404 about no model"),
    ("classify", _classify_every_404_a_model, "the URL's path is wrong"),
    ("stream_text", _stream_reader(index_choices=True), "choices[0] would raise IndexError"),
    ("stream_text", _stream_reader(past_done=True), "nothing after it is the reply"),
    ("stream_text", _stream_reader(space=True), "the space after `data:` is optional"),
    ("retry_delay", _retry_every_failure, "a wrong key stays wrong"),
    ("retry_delay", _retry_only_5xx, "a rate limit passes"),
    ("retry_delay", _retry_without_a_cap, "the SDK's default is two retries"),
    ("closed_loop", _loop_all_at_once, "one user sends one request at a time"),
    ("closed_loop", _loop_one_at_a_time, "the users send at the same time"),
    ("closed_loop", _loop_in_arrival_order, "whatever order the answers arrive in"),
    ("closed_loop", _loop_static_batches, "static batching"),
    ("chunk_kind", _kind_empty_content_is_a_token, "empty content is not a token"),
    ("chunk_kind", _kind_indexes_choices, "indexing choices[0] raises"),
    ("chunk_kind", _kind_parses_done, "`[DONE]` is not JSON"),
    ("arrival_times_s", _arrivals_unscaled, "scaled so that the last is at n / rate"),
    ("arrival_times_s", _arrivals_first_at_zero, "the first request waits its own"),
    ("arrival_times_s", _arrivals_ignore_burstiness, "shape = burstiness sets the spread"),
    ("arrival_times_s", _arrivals_unseeded, "the same seed, the same times"),
    ("bracket", _search_without_bisecting, "then bisect"),
    ("bracket", _search_bisecting(count_all=False), "count every measurement"),
    ("bracket", _search_bisecting(times=2), "not a fixed number of times"),
    ("sweep_loop", _sweep_without_finally, "(try/finally)"),
    ("sweep_loop", _sweep_ends_at_a_failed_start, "then the next configuration"),
    ("sweep_loop", _sweep_starts_every_engine_first, "one engine at a time"),
    ("sweep_loop", _sweep_stops_what_never_started, "it has nothing to stop"),
]


@pytest.mark.parametrize("name,wrong,hint", MISTAKES, ids=[f"{m[0]}-{m[1].__name__}-{i}" for i, m in enumerate(MISTAKES)])
def test_a_usual_mistake_is_caught_and_named_and_the_lab_goes_on_with_the_library(name, wrong, hint, capsys):
    assert cores.check(name, wrong) is cores.CORES[name].reference
    out = capsys.readouterr().out
    assert (f"{name}: differs on" in out or "raised" in out) and hint in out and "the library's" in out, out


def test_unwritten_and_crashing_cells_are_verdicts_not_tracebacks(capsys):
    def unwritten(*args):
        raise NotImplementedError

    def crashes(*args):
        return 1 / 0

    reference = cores.CORES["metrics_from_times"].reference
    assert cores.check("metrics_from_times", unwritten) is reference
    assert cores.check("metrics_from_times", crashes) is reference
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("metrics_from_times: not written yet.")
    assert "raised ZeroDivisionError: division by zero" in out[1]
    with pytest.raises(BadInput, match="'kv_bytes' is not allowed"):
        cores.check("kv_bytes", unwritten)


def test_the_closed_loop_check_takes_any_correct_design_and_refuses_a_plain_def(capsys):
    """A semaphore over one task per request is a closed loop too (the refill waits a turn of the event loop);
    a plain `def` that never awaits is a one-line verdict."""

    async def semaphore_per_request(send, num_requests, concurrency):
        limit = asyncio.Semaphore(concurrency)

        async def one(i):
            async with limit:
                return await send(i)

        return await asyncio.gather(*(one(i) for i in range(num_requests)))

    def not_async(send, num_requests, concurrency):
        return []

    assert cores.check("closed_loop", semaphore_per_request) is semaphore_per_request
    assert cores.check("closed_loop", not_async) is cores.CORES["closed_loop"].reference
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("closed_loop: agrees with the library on all 5 cases"), out
    assert "raised TypeError: it returned without awaiting: write it as `async def`" in out[1], out


@pytest.mark.parametrize("name", ["kv_bytes_per_sequence", "BlockAllocator", "closed_loop"])
def test_with_calls_noted_a_kept_function_notes_each_later_call_and_works_as_before(name, tmp_path, monkeypatch, capsys):
    """$LABS_CORE_CALLS, how the notebook tests see which functions a filled-in lab ran on: the function a check keeps
    (a plain function, a class, an async function) notes each call made after the check and none of the check's own,
    and answers as it did; unset, the check returns the function itself."""
    core = cores.CORES[name]
    assert cores.check(name, core.reference) is core.reference  # a participant's run: nothing in between
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv(cores.base.CALLS_VARIABLE, str(calls))
    kept = cores.check(name, core.reference)
    assert kept is not core.reference and not calls.exists()  # the check's own calls are not the lab's
    assert (kept.__name__, cores.whose(kept)) == (core.reference.__name__, cores.whose(core.reference))
    for n, case in enumerate(core.cases(), start=1):
        assert cores.base.same(core.call(kept, case.args), core.call(core.reference, case.args)), case.holds
        assert calls.read_text().split() == [name] * n
    assert "agrees with the library" in capsys.readouterr().out


def _code_lines(source: str) -> int:
    """Lines a participant writes for one solution: its body's code, without the docstrings, comments and blank lines
    (a class's method signatures count)."""

    def body(node) -> set[int]:
        statements = node.body[1:] if ast.get_docstring(node) is not None else node.body
        lines: set[int] = set()
        for statement in statements:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines |= {statement.lineno} | body(statement)
            else:
                lines |= set(range(statement.lineno, statement.end_lineno + 1))
        return lines

    text = textwrap.dedent(source)
    kept = body(ast.parse(text).body[0])
    return sum(
        1 for i, line in enumerate(text.splitlines(), 1) if i in kept and line.strip() and not line.strip().startswith("#")
    )


def test_each_lab_has_three_build_its_and_the_series_150_lines_to_write():
    """At least three build-its in each lab with them (the appendix, 07, has none) and at least 150 lines to write
    across the series, counted as the reference solutions' code lines."""
    assert sorted(cores.BY_LAB) == sorted({p.name[:2] for p in (REPO / "notebooks").glob("*.ipynb")} - {"07"})
    assert all(len(lab) >= 3 for lab in cores.BY_LAB.values()), {k: list(v) for k, v in cores.BY_LAB.items()}
    written = {name: _code_lines(inspect.getsource(core.solution)) for name, core in cores.CORES.items()}
    assert sum(written.values()) >= 150, written
    assert _code_lines('def f(x):\n    """Doc."""\n    # why\n\n    return x\n') == 1


def run_as_a_cell(source: str, namespace: dict) -> None:
    """exec as a kernel runs a cell: without this file's `from __future__ import annotations` (exec would inherit it,
    and annotations naming what the cell does not import would pass here and fail in the notebook)."""
    exec(compile(source, "<cell>", "exec", dont_inherit=True), namespace)


def _build_it_cells() -> list[tuple[str, list[dict], int]]:
    found = []
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        found += [(path.stem, cells, i) for i, c in enumerate(cells) if cores.TAG in c["metadata"].get("tags", [])]
    return found


def test_every_core_has_one_skeleton_cell_followed_by_its_check(capsys):
    cells = _build_it_cells()
    names = [cores.defined_in("".join(c[i]["source"])) for _, c, i in cells]
    assert sorted(names) == sorted(cores.CORES), names  # each core once, and no cell defines something else
    for (lab, nb, i), name in zip(cells, names, strict=True):
        assert name in cores.BY_LAB[lab[:2]], (lab, name)  # its reference sits in labs_lib/cores/labNN.py
        skeleton = "".join(nb[i]["source"])
        assert "YOUR CODE HERE" in skeleton and "raise NotImplementedError" in skeleton, lab
        namespace: dict = {}
        run_as_a_cell(skeleton, namespace)  # the skeleton runs, and its function says it is unwritten
        reference = cores.CORES[name].reference
        case = cores.CORES[name].cases()[0]
        with pytest.raises(NotImplementedError):
            cores.CORES[name].call(namespace[name], case.args)
        # run as written, its check says so in one line and the lab goes on with the library's
        assert cores.check(name, namespace[name]) is reference
        assert capsys.readouterr().out.startswith(f"{name}: not written yet."), lab
        # the participant's signature starts as the reference's does (the check calls it with the cases' arguments)
        params = list(inspect.signature(namespace[name]).parameters)
        assert params[: len(case.args)] == list(inspect.signature(reference).parameters)[: len(case.args)], (lab, params)
        check = next(c for c in nb[i + 1 :] if c["cell_type"] == "code")
        assert f'{name} = cores.check("{name}", {name})' in "".join(check["source"]), lab


def test_what_the_runner_fills_in_passes_the_check(capsys):
    for lab, nb, i in _build_it_cells():
        cells = [json.loads(json.dumps(nb[i]))]
        [name] = cores.fill_in(cells)
        namespace: dict = {}
        run_as_a_cell(cells[0]["source"], namespace)
        assert cores.check(name, namespace[name]) is namespace[name], lab
    assert "differs" not in capsys.readouterr().out


def test_a_build_it_cell_that_defines_no_core_is_refused():
    cell = {"cell_type": "code", "metadata": {"tags": [cores.TAG]}, "source": "def my_timer(times):\n    pass\n"}
    with pytest.raises(BadInput, match="def my_timer"):
        cores.fill_in([cell])


def test_each_notebook_points_at_its_own_cores_and_the_appendix_by_its_file():
    """The import cell names the module holding the lab's references (one step from notebook to cores), and a
    lesson's pointer to the appendix names the appendix's own notebook file."""
    appendix = next((REPO / "notebooks").glob("*_articles_checked.ipynb"))
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        source = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        named = set(re.findall(r"labs_lib/cores/lab(\d\d)\.py", source))
        if path.name[:2] in cores.BY_LAB:
            assert named == {path.name[:2]}, (path.name, named)
        for number, file in re.findall(r"\*(\d\d) The articles, checked\* \(`notebooks/([\w.]+)`\)", source):
            assert (number, file) == (appendix.name[:2], appendix.name), path.name
        if "The articles, checked" in source and path != appendix:
            assert f"`notebooks/{appendix.name}`" in source, path.name


def test_the_runner_fills_each_fix_it_cell_with_its_fix():
    """Lab 06's fix-it cells: each defines one snippet of cores.FIXES, which fill_in puts in its place (so the run
    CI makes takes the fixed path); a fix-it cell defining no known snippet is refused in one line."""
    path = next((REPO / "notebooks").glob("06_*.ipynb"))
    cells = json.loads(path.read_text())["cells"]
    fix_its = [c for c in cells if cores.FIX_TAG in c["metadata"].get("tags", [])]
    written = {cores.snippet_in("".join(c["source"])): "".join(c["source"]) for c in fix_its}
    assert sorted(written) == sorted(cores.FIXES) and all(written[n] != cores.FIXES[n] for n in written)
    filled = cores.fill_in(cells)
    assert set(cores.FIXES) <= set(filled)
    assert {"".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in fix_its} == set(cores.FIXES.values())
    with pytest.raises(BadInput, match="fix-it cell"):
        cores.fill_in([{"cell_type": "code", "metadata": {"tags": [cores.FIX_TAG]}, "source": "def other():\n    pass"}])


def test_whose_reads_as_a_pronoun_in_every_lab():
    """cores.whose() says "yours" or "the library's": a pronoun, so the labs print it after the function's name
    ("closed_loop (yours)"), never before it ("yours closed_loop" is how lab 06 printed it)."""
    misused = [
        (nb.name, found.group(0))
        for nb in sorted((REPO / "notebooks").glob("*.ipynb"))
        for cell in json.loads(nb.read_text())["cells"]
        for found in re.finditer(r"\{cores\.whose\([^)]*\)\} [A-Za-z_]\w*", "".join(cell["source"]))
    ]
    assert not misused, misused
