"""Build-it cells: the participant writes a lesson's core function, and `check` compares it with the library's on
cases chosen to catch the usual mistakes, explaining the first that differs (CS231n's skeleton and check). The
library keeps the reference ("write it here, keep it in the library"): the runner puts each reference's source in
its cell for CI and `make run`, and `labs run --as-written` runs the cells as the notebook has them.

A build-it cell is a code cell tagged `build-it` that defines one function named in CORES; its check cell is
`name = build_it.check("name", name)`, which returns the function the lab goes on with: the participant's when it
agrees on every case, else the library's (the lab never stops on an unwritten cell)."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .doctor.rules import diagnose
from .errors import BadInput, EngineError
from .kv_math import GIB, kv_cache, plan_capacity
from .load import SLO, closed_loop, summarize
from .models import ModelSpec, load_model
from .paths import DATA_DIR
from .quality import Scores, kl_lower_bound
from .sweep import sweep_loop
from .sweep_views import on_front
from .timing import RequestRecord, metrics_from_times

TAG = "build-it"
REL_TOL = 1e-6


@dataclass(frozen=True)
class Case:
    """One call of the function: its arguments, what the case holds, and the mistake it catches."""

    args: tuple
    holds: str
    why: str


@dataclass(frozen=True)
class Core:
    """A lesson's core: the library's answer (`reference`), the cases, and the function whose source goes in the
    cell when the runner fills it in (`solution`, with the `imports` it needs)."""

    reference: Callable
    cases: Callable[[], list[Case]]
    solution: Callable
    imports: str = ""
    run: Callable[[Callable, tuple], Any] | None = None  # how a case calls a function (None: function(*args))

    def call(self, function: Callable, args: tuple) -> Any:
        """What `function` gives for one case's arguments: its result, or what `run` observed of it."""
        return self.run(function, args) if self.run else function(*args)


def kv_bytes_per_sequence(model: ModelSpec, seq_len: int, bytes_per_value: float) -> float:
    """KV bytes one sequence of seq_len tokens keeps on one device. Every layer keeps K and V for each token it
    attends to (a sliding layer: at most the last sliding_window tokens), num_kv_heads x head_dim values each; an
    MLA layer keeps one latent of kv_lora_rank + qk_rope_head_dim values per token instead."""
    if model.is_mla:
        per_token_per_layer = ((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)) * bytes_per_value
    else:
        per_token_per_layer = 2 * model.num_kv_heads * (model.head_dim or 0) * bytes_per_value
    total = 0.0
    for layer in range(model.num_layers):
        held = min(seq_len, model.sliding_window or seq_len) if model.is_sliding(layer) else seq_len
        total += held * per_token_per_layer
    return total


def _kv_reference(model: ModelSpec, seq_len: int, bytes_per_value: float) -> float:
    """kv_cache()'s bytes per sequence (lab 01's calculator), for a cache of 1 or 2 bytes per value."""
    return kv_cache(model, seq_len, 1, {1: "fp8", 2: "fp16"}[int(bytes_per_value)]).kv_bytes_per_sequence


def _kv_cases() -> list[Case]:
    m = load_model
    return [
        Case((m("llama-2-7b"), 4096, 2), "Llama-2-7B (MHA), 4,096 tokens, fp16", "per token per layer: K and V, each num_kv_heads x head_dim values"),
        Case((m("llama-3.1-8b"), 4096, 2), "Llama-3.1-8B (GQA), 4,096 tokens, fp16", "GQA caches the KV heads (8), not the query heads (32)"),
        Case((m("llama-3.1-8b"), 4096, 1), "Llama-3.1-8B, fp8", "bytes_per_value scales every value"),
        Case((m("gemma-3-270m"), 256, 2), "Gemma-3-270M (MQA), 256 tokens (inside its window)", "head_dim is the config's (256), not hidden_size / num_q_heads (160)"),
        Case((m("gemma-3-270m"), 8192, 2), "Gemma-3-270M, 8,192 tokens", "a sliding layer (15 of 18 here) keeps at most sliding_window (512) tokens"),
        Case((m("deepseek-v3"), 4096, 2), "DeepSeek-V3 (MLA), 4,096 tokens", "MLA keeps one latent of kv_lora_rank + qk_rope_head_dim values per token and layer: no heads, no separate K and V"),
    ]  # fmt: skip


def max_concurrency(model: ModelSpec, pool_bytes: int, max_model_len: int, block_size: int, bytes_per_value: float) -> float:
    """Requests of max_model_len tokens a paged KV pool of pool_bytes holds at once, for a model whose every layer
    attends to the whole context: the pool is cut into blocks of block_size tokens of every layer (a partial block
    is no block), and a request takes whole blocks (its last one partly filled)."""
    block_bytes = block_size * 2 * model.num_kv_heads * (model.head_dim or 0) * bytes_per_value * model.num_layers
    num_blocks = pool_bytes // block_bytes
    blocks_per_request = math.ceil(max_model_len / block_size)
    return num_blocks / blocks_per_request


def _concurrency_reference(
    model: ModelSpec, pool_bytes: int, max_model_len: int, block_size: int, bytes_per_value: float
) -> float:
    """plan_capacity()'s blocks in the pool / blocks per request (lab 01's planner, vLLM's count), unrounded."""
    kv_dtype = {1: "fp8", 2: "bf16"}[int(bytes_per_value)]
    plan = plan_capacity(model, max_model_len, kv_dtype=kv_dtype, block_size=block_size, available_kv_gib=pool_bytes / GIB)
    return plan.num_blocks / plan.blocks_per_request


def _concurrency_cases() -> list[Case]:
    llama3, llama2 = load_model("llama-3.1-8b"), load_model("llama-2-7b")
    return [
        Case((llama3, 8 * GIB, 8192, 16, 2), "Llama-3.1-8B, an 8 GiB pool, 8,192 tokens, blocks of 16, bf16", "blocks in the pool (one block: block_size tokens of every layer's K and V) / blocks one request takes"),
        Case((llama3, 8 * GIB, 8200, 16, 2), "the same at 8,200 tokens (not a multiple of 16)", "a request's last, partly filled block is a whole block: ceil(max_model_len / block_size), not tokens / max_model_len"),
        Case((llama3, 8 * GIB, 8192, 16, 1), "the same in fp8", "one byte per value: twice the blocks in the same pool"),
        Case((llama3, 8 * GIB + 100 * 1024, 8192, 16, 2), "a pool 100 KiB over 8 GiB (a block here is 2 MiB)", "a partial block in the pool is no block: pool_bytes // block_bytes"),
        Case((llama2, 8 * GIB, 4096, 16, 2), "Llama-2-7B (MHA: 32 KV heads), 4,096 tokens", "the KV heads set the block's bytes: MHA caches as many as it has query heads"),
        Case((llama3, GIB // 2, 8192, 16, 2), "a 0.5 GiB pool", "under one request (vLLM refuses to start), the ratio is still what it is: 0.5"),
        Case((llama3, 8 * GIB, 8200, 32, 2), "8,200 tokens in blocks of 32", "a bigger block wastes more of the last one: 257 blocks per request, not 256.25"),
    ]  # fmt: skip


def perplexity(logprobs: list[float]) -> float:
    """exp of the mean negative log-likelihood per token; logprobs are natural-log probabilities of each token."""
    return math.exp(-sum(logprobs) / len(logprobs))


def _perplexity_reference(logprobs: list[float]) -> float:
    """quality.Scores.perplexity, the figure lab 04 reports for each variant."""
    ids = list(range(len(logprobs)))
    return Scores(token_ids=ids, logprobs=np.asarray(logprobs, dtype=float), top1_ids=ids).perplexity


def _perplexity_cases() -> list[Case]:
    ln = math.log
    return [
        Case(([ln(0.5)],), "one token at p = 0.5", "perplexity = exp(-log p) for one token, natural logs: p = 0.5 is a fair coin's 2"),
        Case(([ln(0.5)] * 4,), "four tokens at p = 0.5", "the mean over tokens, not the sum: the text's length must not change the figure (still 2)"),
        Case(([ln(0.25), 0.0],), "p = 0.25, then a certain token", "a geometric mean: exp of the mean NLL (2), not the mean of 1/p (2.5)"),
        Case(([ln(0.9)] * 3,), "a confident model (p = 0.9)", "a model sure of every token tends to 1; no model goes below it"),
        Case(([ln(1e-9), 0.0],), "one very unlikely token among two", "one token the model thought nearly impossible dominates: exp(20.7 / 2)"),
    ]  # fmt: skip


def goodput(records: list[RequestRecord], slo: SLO, duration_s: float) -> float:
    """Requests per second of the run that met every limit of `slo` (None: no limit); a failed request never counts;
    a one-token reply (no TPOT) meets a TPOT limit, as `vllm bench serve` counts it."""
    good = 0
    for r in records:
        tpot = 0.0 if r.tpot_ms is None and (r.output_tokens or 0) <= 1 else r.tpot_ms
        limits = ((slo.ttft_ms, r.ttft_ms), (slo.tpot_ms, tpot), (slo.e2e_ms, r.e2e_ms))
        if r.ok and all(limit is None or (value is not None and value <= limit) for limit, value in limits):
            good += 1
    return good / duration_s


def _goodput_reference(records: list[RequestRecord], slo: SLO, duration_s: float) -> float | None:
    """load.summarize()'s goodput: the figure sweeps and lab 03's tables report."""
    return summarize(records, duration_s, slo).goodput


def _record(ttft_ms: float, tpot_ms: float | None, e2e_ms: float, error: str | None = None) -> RequestRecord:
    return RequestRecord(ttft_ms=ttft_ms, tpot_ms=tpot_ms, e2e_ms=e2e_ms, output_tokens=8 if tpot_ms else 1, error=error)


def _goodput_cases() -> list[Case]:
    fast = [_record(100, 20, 240) for _ in range(4)]
    slo = SLO(ttft_ms=200, tpot_ms=25)
    return [
        Case((fast, slo, 2.0), "4 requests within the SLO in 2 s", "goodput: requests meeting the SLO per second of the run (not a fraction, not a count)"),
        Case(([*fast[:3], _record(300, 20, 440)], slo, 2.0), "one of 4 over the TTFT limit", "a request counts only if it meets every limit"),
        Case(([*fast[:3], _record(90, 15, 200, error="HTTP 500")], slo, 2.0), "a fast request that failed", "a failed request never counts, however fast its numbers"),
        Case(([*fast[:3], _record(300, 20, 440)], SLO(tpot_ms=25), 2.0), "no TTFT limit (None)", "a limit of None is no limit"),
        Case(([*fast[:3], _record(100, None, 100)], slo, 2.0), "a one-token request (no TPOT) under a TPOT limit", "one token has no time between tokens: it meets any TPOT limit, as `vllm bench serve` counts it (TPOT 0)"),
        Case(([*fast[:3], _record(200, 25, 375)], slo, 2.0), "a request exactly at both limits", "at the limit meets it (<=)"),
    ]  # fmt: skip


PROBE_LIMIT_S = 60.0  # the probe's requests take a few hundred event-loop turns: milliseconds, even on a busy machine


def _run_apart(drive: Callable[[], Any]) -> Any:
    """Run the coroutine drive() makes on an event loop of its own, in a thread (a notebook's loop is running)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, drive()).result()


async def _awaited(running: Any, what: str) -> Any:
    """Await what the participant's async function returned, within PROBE_LIMIT_S; a plain function is a verdict."""
    if not inspect.isawaitable(running):
        raise TypeError(f"it returned without awaiting: write it as `async def` and `await {what}`")
    try:
        return await asyncio.wait_for(running, PROBE_LIMIT_S)
    except TimeoutError:
        raise TimeoutError(f"not done after {PROBE_LIMIT_S:.0f} s: does it wait for something that never comes?") from None


def _drive_closed_loop(load_generator: Callable, args: tuple) -> str:
    """Run a closed_loop over a probe send whose request i takes durations[i] event-loop turns (args: durations,
    concurrency), on an event loop of its own (a notebook's is already running). Returns what the probe saw: the
    answers, the sends, the most in flight, and whether the users kept every slot busy while requests waited (a
    refill takes a few turns: more than four idle slot-turns per request is an engine left waiting)."""
    durations, concurrency = args
    seen = {"sends": 0, "in_flight": 0, "peak": 0, "idle_slot_turns": 0}

    async def send(i: int) -> str:
        if not 0 <= i < len(durations):
            raise IndexError(f"send({i}): there are {len(durations)} requests, 0 … {len(durations) - 1}")
        seen["sends"] += 1
        seen["in_flight"] += 1
        seen["peak"] = max(seen["peak"], seen["in_flight"])
        for _ in range(durations[i]):
            await asyncio.sleep(0)  # one turn of the event loop: the other requests in flight move on
        seen["in_flight"] -= 1
        return f"answer {i}"

    async def clock() -> None:  # each turn: the slots left free while a request waits to be sent
        while True:
            usable = min(concurrency, len(durations) - seen["sends"] + seen["in_flight"])
            seen["idle_slot_turns"] += max(0, usable - seen["in_flight"])
            await asyncio.sleep(0)

    async def drive() -> Any:
        ticking = asyncio.create_task(clock())
        try:
            return await _awaited(load_generator(send, len(durations), concurrency), "send(i)")
        finally:
            ticking.cancel()

    answers = _run_apart(drive)
    in_order = isinstance(answers, (list, tuple)) and list(answers) == [f"answer {i}" for i in range(len(durations))]
    busy = seen["idle_slot_turns"] <= 4 * len(durations)
    return (
        f"{'answers in request order' if in_order else f'answers {answers!r}'}; {seen['sends']} sends; "
        f"at most {seen['peak']} in flight; slots kept busy: {'yes' if busy else 'no'}"
    )


def _closed_loop_cases() -> list[Case]:
    return [
        Case(((4, 4, 4, 4), 1), "4 requests, one user", "concurrency caps what is in flight: one user sends one request at a time, not all at once"),
        Case(((5, 5, 5), 8), "3 requests, 8 users", "the users send at the same time: all 3 requests in flight together, each sent once (no send(3))"),
        Case(((30, 20, 10, 5), 4), "4 requests answered in reverse order", "answers[i] is request i's answer, whatever order the answers arrive in"),
        Case(((200, 5, 5, 5, 5, 5, 5, 5, 5, 5), 4), "one long request among nine short ones, 4 users", "a user sends its next request the moment its answer arrives; waiting for a whole batch (static batching) leaves the engine idle behind the long one"),
        Case(((6, 9, 4, 7, 5, 8, 3, 6), 2), "8 requests of mixed lengths, 2 users", "at most `concurrency` in flight and refilled at once, each request sent once, answers in request order"),
    ]  # fmt: skip


class _Interrupted(BaseException):
    """Kernel -> Interrupt in the sweep-loop probe: a BaseException as KeyboardInterrupt is (`except Exception` does
    not catch it), but one asyncio hands back like any other rather than stopping its event loop with it."""


class _ProbeEngine:
    """What the sweep-loop probe's start returns: an engine that is running until stopped."""

    def __init__(self, config: str) -> None:
        self.config, self.running = config, True


def _drive_sweep_loop(loop: Callable, args: tuple) -> str:
    """Run a sweep_loop over probe callbacks (args: the configurations, those that do not start, the one whose
    measurement is interrupted) and return what happened, in order: each start, measurement and stop, a start that
    raised, an engine started while another still ran, an engine left running, an interrupt that got out."""
    configs, refused, interrupted = args
    events: list[str] = []
    engines: list[_ProbeEngine] = []

    def start(config: str) -> _ProbeEngine:
        if config in refused:
            events.append(f"start {config}: refused")
            raise EngineError(f"{config} did not start")
        events.append(f"start {config}" + "".join(f" (while {e.config} runs)" for e in engines if e.running))
        engines.append(_ProbeEngine(config))
        return engines[-1]

    async def measure(config: str, engine: _ProbeEngine | None, error: str | None) -> None:
        events.append(f"measure {config}" if error is None else f"record {config} as failed ({error})")
        await asyncio.sleep(0)
        if config == interrupted:
            raise _Interrupted

    def stop(config: str, engine: _ProbeEngine | None) -> None:
        if not isinstance(engine, _ProbeEngine):
            events.append(f"stop {config}: {engine!r} is no engine")
            return
        events.append(f"stop {config}")
        engine.running = False

    async def drive() -> None:
        try:
            await _awaited(loop(list(configs), start, measure, stop), "measure(config, engine, error)")
        except EngineError as exc:
            events.append(f"the sweep ended: {exc}")
        except _Interrupted:
            events.append("interrupted")

    _run_apart(drive)
    events += [f"{e.config} left running" for e in engines if e.running]
    return "; ".join(events) or "nothing"


def _sweep_loop_cases() -> list[Case]:
    return [
        Case((("A", "B"), (), None), "two configurations", "one engine at a time: start, measure, stop, then the next configuration (two engines at once share the device)"),
        Case((("A", "B", "C"), ("B",), None), "B's engine does not start", "an engine that does not start is a failed row, measure(config, None, reason), then the next configuration; it has nothing to stop"),
        Case((("A", "B"), (), "A"), "Kernel -> Interrupt while A is measured", "always stop: an interrupted (or failed) measurement still stops its engine (try/finally), and the interrupt is not swallowed"),
        Case(((), (), None), "no configuration left (a resumed sweep that is done)", "nothing to start"),
    ]  # fmt: skip


def _timing_cases() -> list[Case]:
    return [
        Case(([0.2, 0.25, 0.3, 0.35], 4), "four one-token chunks", "TTFT is the first token's time, E2E the last's; times are seconds, the metrics milliseconds"),
        Case(([0.5, 0.6, 0.9], 7), "seven tokens in three chunks", "TPOT divides the decode time by output tokens - 1, not by chunks; ITL is one gap per pair of chunks"),
        Case(([0.1, 0.15, 0.5, 0.55], 4), "a stall between chunks 2 and 3", "ITL keeps each gap (the 350 ms stall shows); TPOT is their mean"),
        Case(([0.3], 1), "one token", "one token has no decode interval: TPOT is None (undefined), not 0; ITL is empty"),
        Case(([], None), "no token (a failed request)", "nothing arrived: None for each time, and no ITL"),
    ]  # fmt: skip


def _kl_cases() -> list[Case]:
    ln = math.log
    return [
        Case(({0: ln(0.7), 1: ln(0.2)}, {0: ln(0.7), 1: ln(0.2)}), "the same distribution twice", "KL(P || P) = 0"),
        Case(({0: ln(0.9), 1: ln(0.1)}, {0: ln(0.5), 1: ln(0.5)}), "the whole distribution reported, P sure and Q unsure", "KL(P || Q) = sum p (log p - log q): weighted by the reference P, not by Q"),
        Case(({0: ln(0.7), 1: ln(0.2)}, {0: ln(0.5), 1: ln(0.3)}), "two tokens reported by both", "the inputs are log-probabilities; what neither reported is one 'rest' bucket, 1 - sum p against 1 - sum q"),
        Case(({0: ln(0.9)}, {0: ln(0.6), 2: ln(0.3)}), "a token only Q reported", "only tokens both reported keep their own terms; token 2 goes in the rest bucket"),
        Case(({0: 0.0}, {0: ln(0.8)}), "P puts all its mass on one token", "a rest of 0 adds nothing (0 log 0 = 0)"),
    ]  # fmt: skip


def _front_cases() -> list[Case]:
    return [
        Case(([10.0, 20.0, 30.0], [100.0, 80.0, 50.0]), "three points trading one axis for the other", "a point leaves the front only when another beats it on both axes: a trade-off keeps all three"),
        Case(([10.0, 20.0, 15.0], [100.0, 80.0, 70.0]), "(15, 70) beside (20, 80)", "(20, 80) beats (15, 70) on both axes: higher is better on both"),
        Case(([10.0, 10.0], [100.0, 90.0]), "(10, 100) and (10, 90)", "equal on one axis and worse on the other is beaten (>= on both, > on one)"),
        Case(([10.0, 10.0], [100.0, 100.0]), "the same point twice", "equal points do not beat each other: both stay on the front"),
        Case(([5.0], [5.0]), "one point", "a point alone is on the front (it does not beat itself)"),
    ]  # fmt: skip


def classify(status: int | None, message: str) -> str:
    """The failure's code from an HTTP status and its message; status None: no HTTP answer came, only words (a
    transport error, an engine's log). The status first; its message where one status has several causes."""
    low = message.lower()
    if status == 401:
        return "auth"
    if status == 404:
        return "model_not_found" if "model" in low else "base_url_path"
    if status == 429:
        return "rate_limit"
    if status is not None and status >= 500:
        return "server_error"
    if status == 400 and ("context length" in low or "too long" in low):
        return "context_exceeded"
    if "kv cache" in low or "out of memory" in low:
        return "engine_memory"
    if "connection refused" in low:
        return "connection_refused"
    return "unknown"


def _classify_reference(status: int | None, message: str) -> str:
    """The doctor's code (doctor.rules.diagnose) for an HTTP status and its message, or a message alone."""
    return diagnose({"error": {"message": message, "code": status}} if status else message).code


def _classify_cases() -> list[Case]:
    recorded = json.loads((DATA_DIR / "vllm_errors_0.33.0.json").read_text())  # vLLM's own bodies and log line
    context = recorded["context_exceeded_400"]["error"]["message"]
    return [
        Case((401, "Unauthorized"), "401 with vLLM's one-word body", "401 is the key: missing, wrong or revoked; the status says it, not the text"),
        Case((404, "The model `gpt-9` does not exist."), "404 naming a model", "a 404 that names the model: the model id is wrong (model_not_found)"),
        Case((404, "Not Found"), "404 with no model in it", "a 404 about no model: the URL's path is wrong (base_url_path: /v1 missing or doubled)"),
        Case((400, context), "vLLM's 400 for a long prompt", "a 400 is several causes: read its message ('maximum context length': context_exceeded)"),
        Case((429, "Rate limit reached for requests"), "429", "429 is rate_limit: wait and retry, or lower the load"),
        Case((503, "Service Unavailable"), "503", "5xx is server_error: the server's side, not the request's"),
        Case((None, recorded["not_enough_kv_at_startup"]), "vLLM refusing to start (its log line)", "a start-up failure has no status: the engine's words ('larger than the available KV cache') say engine_memory"),
        Case((None, "httpx.ConnectError: [Errno 111] Connection refused"), "no status, the transport's words", "nothing answered: connection_refused (no server on that port)"),
    ]  # fmt: skip


CORES: dict[str, Core] = {
    "kv_bytes_per_sequence": Core(_kv_reference, _kv_cases, kv_bytes_per_sequence, "from labs_lib.models import ModelSpec"),
    "metrics_from_times": Core(metrics_from_times, _timing_cases, metrics_from_times, "from itertools import pairwise"),
    "max_concurrency": Core(
        _concurrency_reference, _concurrency_cases, max_concurrency, "import math\n\nfrom labs_lib.models import ModelSpec"
    ),
    "kl_lower_bound": Core(kl_lower_bound, _kl_cases, kl_lower_bound, "import math\n\nimport numpy as np"),
    "perplexity": Core(_perplexity_reference, _perplexity_cases, perplexity, "import math"),
    "on_front": Core(on_front, _front_cases, on_front),
    "goodput": Core(
        _goodput_reference, _goodput_cases, goodput, "from labs_lib.load import SLO\nfrom labs_lib.timing import RequestRecord"
    ),
    "classify": Core(_classify_reference, _classify_cases, classify),
    "closed_loop": Core(
        closed_loop,
        _closed_loop_cases,
        closed_loop,
        "import asyncio\nfrom collections.abc import Awaitable, Callable\nfrom typing import Any",
        _drive_closed_loop,
    ),
    "sweep_loop": Core(
        sweep_loop,
        _sweep_loop_cases,
        sweep_loop,
        "from collections.abc import Callable\n\nfrom labs_lib.errors import LabsError",
        _drive_sweep_loop,
    ),
}


def _core(name: str) -> Core:
    if name not in CORES:
        raise BadInput("build-it function", name, "allowed: " + ", ".join(CORES))
    return CORES[name]


def _same(got: Any, want: Any) -> bool:
    """Equal, numbers within REL_TOL (and 1e-9 absolute), element by element inside tuples and lists."""
    if want is None or got is None:
        return got is None and want is None
    if isinstance(want, str):
        return got == want
    if isinstance(want, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(want) and all(map(_same, got, want))
    try:
        return math.isclose(float(got), float(want), rel_tol=REL_TOL, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_shown(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return f"{value:,.6g}" if isinstance(value, float) else repr(value)


def check(name: str, candidate: Callable) -> Callable:
    """Run `candidate` on every case of core `name` and print the verdict: not written yet, the first case that
    differs (what it holds, both answers, the mistake it catches), or agreement on all of them. Returns the
    function the lab goes on with: `candidate` when it agrees on every case, else the library's reference."""
    core = _core(name)
    cases = core.cases()
    for case in cases:
        want = core.call(core.reference, case.args)
        try:
            got = core.call(candidate, case.args)
        except NotImplementedError:
            print(f"{name}: not written yet. Write it in the cell above and run both cells; the lab goes on with the library's.")
            return core.reference
        except Exception as exc:  # the participant's code: any error is a verdict, shown in one line
            print(f"{name}: {case.holds}: raised {type(exc).__name__}: {exc}. The lab goes on with the library's.")
            return core.reference
        if not _same(got, want):
            print(f"{name}: differs on {case.holds}: yours {_shown(got)}, the library's {_shown(want)}.")
            print(f"  Hint: {case.why}. The lab goes on with the library's; fix the cell and run both cells again.")
            return core.reference
    print(f"{name}: agrees with the library on all {len(cases)} cases ({'; '.join(c.holds for c in cases)}).")
    return candidate


def whose(function: Callable) -> str:
    """ "yours" for a function a notebook defined (the participant's, once check() kept it), else "the library's"."""
    return "yours" if function.__module__ == "__main__" else "the library's"


def solution_source(name: str) -> str:
    """The cell a runner puts in place of the build-it cell: the reference's imports and source."""
    core = _core(name)
    source = inspect.getsource(core.solution)
    return f"{core.imports}\n\n\n{source}".strip() if core.imports else source.strip()


def defined_in(source: str) -> str | None:
    """The core a build-it cell's source defines (its first `def NAME(` or `async def NAME(` among CORES), or None."""
    for line in source.splitlines():
        if line.startswith(("def ", "async def ")):
            name = line.removeprefix("async ")[4:].split("(", 1)[0].strip()
            if name in CORES:
                return name
    return None


def fill_in(cells: list[dict]) -> list[str]:
    """Put each build-it cell's reference in place of what it holds (notebook cells, as nbformat reads them);
    returns the cores filled in. A build-it cell that defines no core is refused."""
    filled = []
    for cell in cells:
        if TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        name = defined_in(source)
        if name is None:
            raise BadInput(
                "build-it cell",
                source.splitlines()[0] if source else "(empty)",
                "allowed: a cell defining one of " + ", ".join(CORES),
            )
        cell["source"] = solution_source(name)
        filled.append(name)
    return filled
