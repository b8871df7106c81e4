"""The one reader of server-sent events (SSE) as OpenAI-compatible servers stream them.

A stream is lines; an event's payload follows `data:` (with or without a space), and the stream
ends with `data: [DONE]`. Lines may end in CRLF; comment lines (`: keep-alive`) and other
fields are not data. `split_lines` serves the timing hot path (bytes from network reads);
`payload` and `events` serve everything else.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

DONE = "[DONE]"


def split_lines(partial: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """(complete lines, the unfinished rest) of `partial + data`, as one network read delivers them."""
    lines = (partial + data).split(b"\n") if partial else data.split(b"\n")
    rest = lines.pop()
    return lines, rest


def data_bytes(raw: bytes) -> bytes | None:
    """The payload of a `data:` line (surrounding whitespace and CR removed), else None."""
    if raw[:5] != b"data:":
        return None
    return raw[5:].strip()


def payload(line: str | bytes) -> object | None:
    """A `data:` line's JSON value, DONE for `[DONE]`, None for other lines; ValueError when the payload is not JSON."""
    raw = line.encode() if isinstance(line, str) else line
    data = data_bytes(raw)
    if data is None:
        return None
    if data == b"[DONE]":
        return DONE
    return orjson.loads(data)


def chunk_kind(line: str | bytes) -> str:
    """What one SSE line of a chat stream is: role, content, finish, usage, [DONE] or other (lab 02's anatomy)."""
    try:
        obj = payload(line)
    except ValueError:
        return "other"
    if obj == DONE:
        return "[DONE]"
    if not isinstance(obj, dict):
        return "other"
    if not obj.get("choices"):
        return "usage" if obj.get("usage") else "other"
    c0 = obj["choices"][0]
    delta = c0.get("delta") or {}
    if delta.get("content"):
        return "content"
    if c0.get("finish_reason"):
        return "finish"
    return "role" if delta.get("role") else "other"


def events(lines: Iterable[str | bytes]) -> Iterator[object]:
    """Every data payload of a stream of lines, in order (DONE included); unparseable payloads are skipped."""
    for line in lines:
        try:
            value = payload(line)
        except ValueError:
            continue
        if value is not None:
            yield value


def stream_text(lines: Iterable[str | bytes]) -> tuple[str, dict | None, str | None]:
    """A chat stream read whole: (the reply's text, the usage chunk's counts or None, the server's error message or
    None). Only `data:` lines carry events and the stream ends at [DONE]; the role chunk's delta has no content and
    the usage chunk has no choices, so neither carries text; an error event ends the reply."""
    text: list[str] = []
    usage = None
    for event in events(lines):
        if event == DONE:
            break
        if not isinstance(event, dict):
            continue
        if event.get("error"):
            err = event["error"]
            return "".join(text), usage, str(err.get("message", err) if isinstance(err, dict) else err)
        choices = event.get("choices") or []
        if choices:
            text.append((choices[0].get("delta") or {}).get("content") or "")
        if event.get("usage"):
            usage = event["usage"]
    return "".join(text), usage, None
