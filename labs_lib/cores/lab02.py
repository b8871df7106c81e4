"""Lab 02's build-its: what each line of a stream is, the metrics of one stream from its token times, and a decode
step with a KV cache (the mechanism: then timed against decoding without one)."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from ..sse import chunk_kind as library_chunk_kind
from ..timing import metrics_from_times
from ..tiny_decoder import TinyHead, causal_attention, decode, decode_step, tokens
from .base import Case, Core


def _chunk_cases() -> list[Case]:
    return [
        Case(('data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',), "a role chunk with empty content", "the first chunk may carry only the role; empty content is not a token (TTFT does not end here)"),
        Case(('data: {"choices":[{"index":0,"delta":{"content":" Paris"},"finish_reason":null}]}',), "a token", "a chunk whose delta has non-empty content is a token-bearing chunk"),
        Case(('data:{"choices":[{"index":0,"delta":{"content":"!"}}]}',), "no space after data:", "the space after `data:` is optional in SSE: strip what follows the colon"),
        Case(('data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}',), "the finish chunk", "the last choice chunk says why it stopped and carries no text: finish, not a token"),
        Case(('data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":64,"total_tokens":73}}',), "the usage chunk (empty choices)", "with include_usage the last chunk has an empty `choices` list: indexing choices[0] raises here"),
        Case(("data: [DONE]",), "the end of the stream", "`[DONE]` is not JSON: test for it before parsing"),
        Case((": keep-alive",), "an SSE comment", "a line that does not start with `data:` is not an event: other"),
        Case(("",), "the blank line between events", "events are separated by blank lines: other, not an error"),
    ]  # fmt: skip


def chunk_kind(line: str) -> str:
    """What one line of a streamed chat completion is: "role", "content", "finish", "usage", "[DONE]" or "other"."""
    if not line.startswith("data:"):
        return "other"  # blank lines between events, comments (`: keep-alive`), other SSE fields
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return "[DONE]"
    try:
        chunk = json.loads(data)
    except ValueError:
        return "other"
    if not isinstance(chunk, dict):
        return "other"
    if not chunk.get("choices"):  # include_usage's last chunk: no choices, the server's token counts
        return "usage" if chunk.get("usage") else "other"
    choice = chunk["choices"][0]
    delta = choice.get("delta") or {}
    if delta.get("content"):
        return "content"
    if choice.get("finish_reason"):
        return "finish"
    return "role" if delta.get("role") else "other"


def _timing_cases() -> list[Case]:
    return [
        Case(([0.2, 0.25, 0.3, 0.35], 4), "four one-token chunks", "TTFT is the first token's time, E2E the last's; times are seconds, the metrics milliseconds"),
        Case(([0.5, 0.6, 0.9], 7), "seven tokens in three chunks", "TPOT divides the decode time by output tokens - 1, not by chunks; ITL is one gap per pair of chunks"),
        Case(([0.1, 0.15, 0.5, 0.55], 4), "a stall between chunks 2 and 3", "ITL keeps each gap (the 350 ms stall shows); TPOT is their mean"),
        Case(([0.3], 1), "one token", "one token has no decode interval: TPOT is None (undefined), not 0; ITL is empty"),
        Case(([], None), "no token (a failed request)", "nothing arrived: None for each time, and no ITL"),
    ]  # fmt: skip


def _drive_decode(step: Callable, args: tuple) -> str:
    """Decode random tokens one at a time with `step` (args: tokens, d_model, seed, the tokens' scale) from an
    empty cache, and say whether every output is full causal attention's and how the cache filled."""
    n_tokens, d_model, seed, scale = args
    head, x = TinyHead.random(d_model, seed), tokens(n_tokens, d_model, seed + 1, scale)
    outputs, held = decode(step, x, head)
    want = causal_attention(x, head)
    wrong = [i for i in range(n_tokens) if not np.allclose(outputs[i], want[i], rtol=1e-4, atol=1e-5)]
    verdict = (
        f"every output matches causal attention ({n_tokens} positions)"
        if not wrong
        else f"position {wrong[0]} differs from causal attention"
    )
    return f"{verdict}; cache length after each step: {', '.join(map(str, held))}"


def _decode_cases() -> list[Case]:
    return [
        Case((1, 8, 0, 1.0), "the first token", "write the new token's key and value in row `length`, add 1 to length, then attend: the first token attends to itself alone (its output is its value)"),
        Case((6, 8, 1, 1.0), "six tokens, d_model 8", "each step writes one key and one value in row `length`, adds 1 to length, and attends the new query over rows 0 … length - 1: softmax(K q / sqrt(d)) V"),
        Case((5, 64, 2, 1.0), "five tokens, d_model 64", "the scores are divided by sqrt(d_model) (8 here) before the softmax"),
        Case((4, 16, 3, 40.0), "large activations (scores in the thousands)", "subtract the largest score before exp: the softmax is the same, and exp(1000) overflows to inf (nan outputs)"),
    ]  # fmt: skip


CORES: dict[str, Core] = {
    "chunk_kind": Core(library_chunk_kind, _chunk_cases, chunk_kind, "import json"),
    "metrics_from_times": Core(metrics_from_times, _timing_cases, metrics_from_times, "from itertools import pairwise"),
    "decode_step": Core(decode_step, _decode_cases, decode_step, "import math\n\nimport numpy as np", _drive_decode),
}
