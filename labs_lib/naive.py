"""The source articles' timing snippets, replayed as written so they can be compared with the harness.
Each function reproduces what its snippet would print.

Seeds 000, 001, 002 and 004 stream and ask for no usage chunk: they are applied to the harness's own
recorded stream with that chunk taken out (`as_the_seed_receives`), so the differences are the methods,
not the network. Seed 003 sends no `"stream": true`: it is replayed with its own unstreamed request
(experiments.unstreamed_requests) and `seed003_unstreamed`.

A trace is [(seconds after sending, SSE line), ...] of the non-empty lines (StreamTimer keep_trace),
and end_s is when the stream closed.
"""

from __future__ import annotations

from .sse import payload


def _data(line: str) -> dict | None:
    try:
        obj = payload(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def as_the_seed_receives(trace: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """The stream without the usage-only chunk (empty `choices`, a `usage`): servers send it only when the
    request asks (stream_options.include_usage), as the harness does and no seed does."""
    kept = []
    for t, line in trace:
        obj = _data(line)
        if obj is not None and not obj.get("choices") and obj.get("usage"):
            continue
        kept.append((t, line))
    return kept


def seed000_len_over_1_5(trace: list[tuple[float, str]], end_s: float) -> dict:
    """Seed 000: TTFT at the first chunk with content (right); tokens = len(text) / 1.5 (wrong);
    TPS = tokens / (end - first). It indexes chunk.choices[0] on every chunk, so with
    include_usage its loop raises IndexError on the usage-only chunk: it only works without it."""
    first, text = None, ""
    for t, line in trace:
        obj = _data(line)
        if not obj or not obj.get("choices"):
            continue
        content = (obj["choices"][0].get("delta") or {}).get("content")
        if content:
            first = t if first is None else first
            text += content
    if first is None:
        return {"ttft_ms": None, "output_tokens": None, "decode_tokens_per_s": None}
    tokens = len(text) / 1.5
    return {
        "ttft_ms": first * 1000,
        "output_tokens": tokens,
        "decode_tokens_per_s": tokens / (end_s - first) if end_s > first else None,
    }


def seed001_first_chunk(trace: list[tuple[float, str]], end_s: float) -> dict:
    """Seed 001: TTFT at the first chunk whatever it holds (the role-only chunk counts); no tokens."""
    first = trace[0][0] if trace else None
    return {"ttft_ms": first * 1000 if first is not None else None, "output_tokens": None, "decode_tokens_per_s": None}


def seed002_data_lines(trace: list[tuple[float, str]], end_s: float) -> dict:
    """Seed 002: TTFT at the first `data:` line; each `data:` line except [DONE] counts as a token
    (the role chunk and the finish chunk included)."""
    lines = [(t, ln) for t, ln in trace if ln.startswith("data: ") and "[DONE]" not in ln]
    if not lines:
        return {"ttft_ms": None, "output_tokens": None, "decode_tokens_per_s": None}
    first = lines[0][0]
    return {
        "ttft_ms": first * 1000,
        "output_tokens": len(lines),
        "decode_tokens_per_s": len(lines) / end_s if end_s else None,
    }  # its throughput divides by the whole request


def seed003_unstreamed(lines: list[tuple[float, bytes]], end_s: float) -> dict:
    """Seed 003: its request has no "stream": true, so the server sends the whole answer as one JSON body.
    It times the first line aiohttp yields (the body: TTFT = E2E), counts every line as a token (aiohttp yields
    b"\\n"-ended lines, always truthy) and reports tokens / total time. `lines` are (seconds after sending, line)."""
    if not lines:
        return {"ttft_ms": None, "output_tokens": None, "decode_tokens_per_s": None, "end_ms": None}
    tokens = len(lines)
    return {
        "ttft_ms": lines[0][0] * 1000,
        "output_tokens": tokens,
        "decode_tokens_per_s": tokens / end_s if end_s else None,
        "end_ms": end_s * 1000,  # when the body was complete: the first line came this close to it
    }


def seed004_lines_tpot(trace: list[tuple[float, str]], end_s: float) -> dict:
    """Seed 004: TTFT at the first non-empty line; TPOT = (end - first) / (lines - 1), every
    non-empty line a token ([DONE], the role and the finish chunk included)."""
    if not trace:
        return {"ttft_ms": None, "output_tokens": None, "decode_tokens_per_s": None}
    first, count = trace[0][0], len(trace)
    tpot_s = (end_s - first) / max(count - 1, 1)
    return {"ttft_ms": first * 1000, "output_tokens": count, "decode_tokens_per_s": 1 / tpot_s if tpot_s > 0 else None}


# the streamed snippets, applied to as_the_seed_receives(trace); seed 003 has its own request
METHODS = {
    "seed 000: len(text)/1.5": seed000_len_over_1_5,
    "seed 001: first chunk": seed001_first_chunk,
    "seed 002: data lines": seed002_data_lines,
    "seed 004: lines, TPOT": seed004_lines_tpot,
}
