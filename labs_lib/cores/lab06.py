"""Lab 06's build-its: the failure's code from an HTTP status and its message; a chat stream read whole (its
text, usage and error); and when to send a failed request again. And its fix-its: three client snippets as the
articles would have them written, each beside its fix (FIXES), which the runner puts in their cells."""

from __future__ import annotations

import json

from ..doctor.retry import retry_delay
from ..doctor.rules import diagnose
from ..paths import DATA_DIR
from ..sse import stream_text
from .base import Case, Core


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
    if status == 400 and ("context length" in low or "context size" in low or "too long" in low):
        return "context_exceeded"  # vLLM says "maximum context length", llama.cpp "the available context size"
    if "kv cache" in low or "out of memory" in low or "insufficient memory" in low:
        return "engine_memory"
    if "connection refused" in low:
        return "connection_refused"
    return "unknown"


def _classify_reference(status: int | None, message: str) -> str:
    """The doctor's code (doctor.rules.diagnose) for an HTTP status and its message, or a message alone."""
    return diagnose({"error": {"message": message, "code": status}} if status else message).code


# llama.cpp's words for two of this lab's failures, as its server (xllamacpp 2026.10.11549) answered and logged them in
# lab 06 on 2026-12-07: a prompt past a slot's 1,024 tokens, and a context too large to allocate
LLAMACPP_TOO_LONG = "request (1083 tokens) exceeds the available context size (1024 tokens), try increasing it"
LLAMACPP_NO_MEMORY = "ggml_aligned_malloc: insufficient memory (attempted to allocate 5859.75 MB)"


def _classify_cases() -> list[Case]:
    recorded = json.loads((DATA_DIR / "vllm_errors_0.33.0.json").read_text())  # vLLM's own bodies and log line
    context = recorded["context_exceeded_400"]["error"]["message"]
    return [
        Case((401, "Unauthorized"), "401 with vLLM's one-word body", "401 is the key: missing, wrong or revoked; the status says it, not the text"),
        Case((404, "The model `gpt-9` does not exist."), "404 naming a model", "a 404 that names the model: the model id is wrong (model_not_found)"),
        Case((404, "Not Found"), "404 with no model in it", "a 404 about no model: the URL's path is wrong (base_url_path: /v1 missing or doubled)"),
        Case((400, context), "vLLM's 400 for a long prompt", "a 400 is several causes: read its message ('maximum context length': context_exceeded)"),
        Case((400, LLAMACPP_TOO_LONG), "llama.cpp's 400 for a long prompt", "each engine words it its own way: llama.cpp's 'exceeds the available context size' is context_exceeded too"),
        Case((429, "Rate limit reached for requests"), "429", "429 is rate_limit: wait and retry, or lower the load"),
        Case((503, "Service Unavailable"), "503", "5xx is server_error: the server's side, not the request's"),
        Case((None, recorded["not_enough_kv_at_startup"]), "vLLM refusing to start (its log line)", "a start-up failure has no status: the engine's words ('larger than the available KV cache') say engine_memory"),
        Case((None, LLAMACPP_NO_MEMORY), "llama.cpp refusing to start (its log line)", "llama.cpp's start-up log says 'insufficient memory' where vLLM names its KV cache: engine_memory"),
        Case((None, "httpx.ConnectError: [Errno 111] Connection refused"), "no status, the transport's words", "nothing answered: connection_refused (no server on that port)"),
    ]  # fmt: skip


def _stream_cases() -> list[Case]:
    recorded = json.loads((DATA_DIR / "recorded_streams.json").read_text())  # real streams, line by line
    lines = recorded["llamacpp_chat"]["lines"]  # role chunk, 11 content chunks, finish, usage (no choices), [DONE]
    role, first, finish, usage, done = lines[0], lines[1], lines[-3], lines[-2], lines[-1]
    wire = [part for line in lines for part in (line, "")]  # on the wire every event ends with a blank line
    return [
        Case(([first, done],), "one content chunk, then [DONE]", "the text is the `content` of `choices[0].delta`, after `data: `"),
        Case(([role, first, done],), "the role chunk first (its content is null)", "the first chunk names the role and has `content: null`: it adds no text (None is not a string)"),
        Case(([first, finish, usage, done],), "the usage chunk: `choices` is empty", "the usage chunk has `choices: []`: choices[0] would raise IndexError (section 6's second failure); take its `usage`"),
        Case((wire,), "the recorded stream as it arrives (blank lines between events)", "only lines that start with `data:` are events; a blank line ends an event"),
        Case(([": keep-alive", "data:" + first.removeprefix("data: "), done],), "a comment line, and `data:` with no space", "a line starting with `:` is a comment; the space after `data:` is optional"),
        Case(([first, done, first],), "a line after [DONE]", "[DONE] ends the stream: nothing after it is the reply"),
        Case(([role, first, *recorded["vllm_generation_error"]["lines"]],), "vLLM's error event mid-stream", "an event with `error` instead of `choices` is the server failing: return its message"),
    ]  # fmt: skip


def _retry_cases() -> list[Case]:
    return [
        Case((503, 0), "a 503, first retry", "5xx is the server's side: worth another try, after 0.5 s"),
        Case((503, 1), "a 503, second retry", "each retry waits twice as long as the one before (0.5 s, then 1 s)"),
        Case((503, 2), "a 503 after two retries", "the SDK's default is two retries: after them, give up (None)"),
        Case((401, 0), "a 401", "a wrong key stays wrong: a 4xx is the request's fault, so never send it again (None)"),
        Case((400, 0), "a 400 (a prompt too long)", "the same request gets the same 400: do not retry"),
        Case((429, 0), "a 429 (rate limit)", "a rate limit passes: 429 is the 4xx that is retried"),
        Case(
            (408, 0),
            "a 408 (the server's request timeout)",
            "408 and 409 are retried too: a timeout or a lock on the server's side",
        ),
        Case(
            (None, 0),
            "no answer (a refused connection or a timeout)",
            "no status came back: the connection may work next time, so retry",
        ),
        Case((429, 0, 3.0), "a 429 asking to wait 3 s (Retry-After)", "a server that says how long to wait is obeyed"),
        Case(
            (429, 0, 600.0),
            "a 429 asking to wait 10 minutes",
            "a wait over 2 minutes is not retried: the user would rather see the error",
        ),
    ]


CORES: dict[str, Core] = {
    "classify": Core(_classify_reference, _classify_cases, classify),
    "stream_text": Core(
        stream_text, _stream_cases, stream_text, "from collections.abc import Iterable\n\nfrom labs_lib.sse import DONE, events"
    ),
    "retry_delay": Core(
        retry_delay,
        _retry_cases,
        retry_delay,
        "from labs_lib.doctor.retry import FIRST_DELAY_S, MAX_DELAY_S, MAX_RETRIES, MAX_RETRY_AFTER_S, RETRIED_STATUSES",
    ),
}


# Each fix-it cell's function, fixed: the cell as a participant leaves it once the snippet works. The names the
# snippets use (openai, os, good, client, chat, P) are the notebook's.
FIXES: dict[str, str] = {
    "snippet_key": """def snippet_key():
    # Seed 001's advice for a local server: api_key="EMPTY", "the local service does not check it".
    key = os.environ["LAB06_API_KEY"]  # this server checks its key: read it from the environment, never write it here
    c = openai.OpenAI(base_url=good.base_url, api_key=key, max_retries=0)
    reply = c.chat.completions.create(model=good.model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=8)
    return reply.choices[0].message.content""",
    "snippet_stream": """def snippet_stream():
    # A stream read chunk by chunk, with the token counts asked for at its end.
    stream = chat(client(), stream=True, stream_options={"include_usage": True})
    text = ""
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:  # the usage chunk has no choices; a role chunk no text
            text += chunk.choices[0].delta.content
    return text""",
    "snippet_long_document": """def snippet_long_document():
    # A document summarized: sent whole, whatever its length.
    words = ("word " * (2 * P.ctx_per_request)).split()
    fits = " ".join(words[: P.ctx_per_request // 2])  # the context holds prompt and reply: send what fits
    reply = chat(client(), messages=[{"role": "user", "content": "Summarize: " + fits}])
    return reply.choices[0].message.content""",
}
