"""diagnose(): what went wrong, in the doctor's words.

Takes an exception the openai SDK, httpx or user code raised, an error body (dict or JSON text),
a harness record's error string, or a finish_reason, and returns a Diagnosis: a short code, the
cause, the fix, and the evidence (keys masked). `labs doctor` uses the same
vocabulary.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..redact import redact


@dataclass(frozen=True)
class Diagnosis:
    code: str
    cause: str
    fix: str
    evidence: str = ""

    def __str__(self) -> str:
        return f"[{self.code}] {self.cause} Fix: {self.fix}"


RULES: dict[str, tuple[str, str]] = {
    "no_key": (
        "the OpenAI SDK found no key (no api_key argument, OPENAI_API_KEY unset) and refused to build the client: nothing was sent.",
        'pass api_key=os.environ["YOUR_KEY_VARIABLE"] (TaoToken: TAOTOKEN_API_KEY) or export OPENAI_API_KEY before starting Python.',
    ),
    "auth": (
        "the server rejected the key (401): it is missing, wrong, revoked, or meant for another service.",
        "export the right key in the variable the client reads (no quotes, spaces or 'Bearer ' prefix) and check it in the provider's console.",
    ),
    "forbidden": (
        "the key is valid but not allowed to do this (403): the model or feature is not enabled for it.",
        "use a model the key may call, or enable it in the provider's console.",
    ),
    "connection_refused": (
        "nothing is listening at that host and port: the server is not running, or the port is wrong.",
        "start the server (labs serve, vllm serve …) and check the port in the base URL.",
    ),
    "proxy": (
        "the request went to an HTTP proxy from the environment (HTTP_PROXY/HTTPS_PROXY/ALL_PROXY) that failed or is not running.",
        "fix or unset the proxy variables, or add the host to NO_PROXY (e.g. NO_PROXY=localhost,127.0.0.1).",
    ),
    "dns": (
        "the host name in the base URL does not resolve.",
        "check the spelling of the host in the base URL and the machine's network/DNS.",
    ),
    "timeout": (
        "no answer within the client's timeout: the server is overloaded, stalled, or the request is very long.",
        "raise the timeout for long generations, lower the load, or check the server's health and logs.",
    ),
    "model_not_found": (
        "the server does not serve a model with that id (404).",
        "use an id from GET /v1/models (vLLM: the --served-model-name).",
    ),
    "base_url_path": (
        "the URL path does not exist (404): the base URL probably lacks /v1 (the SDK appends only /chat/completions).",
        "end the base URL in /v1, e.g. http://localhost:8000/v1 or https://taotoken.net/api/v1.",
    ),
    "context_exceeded": (
        "the prompt (plus max_tokens) is longer than the model's context for this request (400).",
        "shorten the prompt or lower max_tokens; or serve a longer context (--max-model-len / a larger n_ctx per slot).",
    ),
    "max_tokens": (
        "max_tokens is larger than the server allows (400).",
        "lower max_tokens to fit the model's context minus the prompt.",
    ),
    "bad_request": (
        "the server refused the request's parameters (400).",
        "read the error message: it names the field; fix that field.",
    ),
    "rate_limit": (
        "too many requests or tokens for this key right now (429).",
        "slow down, retry later with backoff, or raise the quota.",
    ),
    "server_error": ("the server failed while handling the request (5xx).", "retry once; if it persists, read the server's log."),
    "choices_missing": (
        "the response has no 'choices': it is an error body, and the code read it as a success.",
        "check resp.status / 'error' before reading choices; print the whole body.",
    ),
    "choices_empty": (
        "'choices' was empty: with include_usage the last stream chunk carries only usage.",
        "guard with `if chunk.choices:` before chunk.choices[0]; read chunk.usage from that last chunk.",
    ),
    "delta_without_text": (
        "text was added up from a stream, and a chunk carried none (delta.content is None): the first chunk names the "
        "role, the last gives the finish_reason, and neither has text.",
        "add a chunk's text only when there is some: `if chunk.choices and chunk.choices[0].delta.content:`.",
    ),
    "none_response": (
        "a helper returned None instead of a response (it caught an exception and carried on).",
        "let the exception propagate, or check for None and print the error the helper swallowed.",
    ),
    "stream_as_json": (
        "a streamed (SSE) body was parsed as one JSON document.",
        "iterate the stream (`for chunk in stream`) or send stream=False; SSE lines start with 'data: '.",
    ),
    "truncated": (
        "generation stopped at max_tokens (finish_reason 'length'): the text is cut off.",
        "raise max_tokens, or ask for a shorter answer.",
    ),
    "content_filter": (
        "the provider's content filter stopped the output (finish_reason 'content_filter').",
        "rephrase the request.",
    ),
    "stream_cut": (
        "the stream ended early (before [DONE] / the usage chunk): the server died or the connection dropped.",
        "check the server's log and health; a client timeout can also cut it.",
    ),
    "engine_memory": (
        "the engine could not allocate its weights or KV cache in the memory it may use: the context, the slots or "
        "the batch are too large for it (or gpu_memory_utilization too low).",
        "lower the context (max_model_len / n_ctx) or the slots (max_num_seqs / n_parallel), use a smaller KV dtype "
        "or model, or give the engine more memory (gpu_memory_utilization).",
    ),
    "engine_flag": (
        "the engine refused its configuration: a flag or combination it does not support (a quantized V cache without "
        "flash attention, a removed flag such as --swap-space, a quantization that does not match the weights).",
        "read the engine's own error line, then change or drop that flag.",
    ),
    "unknown": ("an error the doctor does not recognise.", "read the full message and the server's log."),
}


def proxy_for(url: str) -> str | None:
    """The proxy an HTTP client that trusts the environment would use for `url` (None: direct)."""
    parts = urlsplit(str(url))
    if not parts.hostname:
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    bypass = urllib.request.proxy_bypass_environment(host, proxies)  # type: ignore[attr-defined]  # public, untyped in typeshed
    return None if bypass else proxy


def _request_url(exc: BaseException) -> str:
    try:  # httpx raises RuntimeError when .request was never set
        request = exc.request  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return ""
    return str(getattr(request, "url", "") or "")


def _make(code: str, evidence: object) -> Diagnosis:
    cause, fix = RULES[code]
    return Diagnosis(code, cause, fix, redact(str(evidence))[:300])


def _from_status(status: int, message: str) -> str:
    low = message.lower()
    if status == 401:
        return "auth"
    if status == 403:
        return "forbidden"
    if status == 404:
        return "model_not_found" if "model" in low else "base_url_path"
    if status == 429:
        return "rate_limit"
    if status >= 500:
        return "server_error"
    if status in (400, 413, 422):
        if any(s in low for s in ("exceed_context", "context length", "context size", "maximum context", "too long", "n_ctx")):
            return "context_exceeded"
        if "max_tokens" in low or "max_completion_tokens" in low:
            return "max_tokens"
        return "bad_request"
    return "unknown"


# Phrases in an error's text -> a rule, in order: the first match wins. Engine start-up failures are
# read before any HTTP status in the text, the transport's own words after it.
ENGINE_SIGNS = (
    (
        "engine_memory",
        (
            "insufficient memory",
            "failed to allocate",
            "out of memory",
            "no available memory for the cache",
            "larger than the available kv cache",
            "less than desired cpu memory utilization",
            "less than requested memory for kv",
        ),
    ),
    ("engine_flag", ("requires flash_attn", "unrecognized arguments", "quantization method", "is not supported by")),
)
TEXT_SIGNS = (
    ("proxy", ("proxy",)),
    ("connection_refused", ("connection refused", "errno 111", "connect call failed")),
    ("dns", ("name or service not known", "getaddrinfo", "nodename nor servname", "temporary failure in name")),
    ("timeout", ("timed out", "timeout")),
    ("no_key", ("missing credentials", "api_key client option must be set")),
    ("auth", ("invalid api key", "unauthorized", "incorrect api key")),
    ("stream_cut", ("stream ended before", "incomplete chunked read", "peer closed connection", "server disconnected")),
    ("context_exceeded", ("exceed_context", "context length")),
)
STATUS_IN_TEXT = re.compile(r"\bhttp (\d{3})\b|\berror code: (\d{3})\b|status[ _]code[=: ]+(\d{3})")


def _first_sign(low: str, signs) -> str | None:
    return next((code for code, phrases in signs if any(p in low for p in phrases)), None)


def _from_text(text: str) -> str:
    low = text.lower()
    if code := _first_sign(low, ENGINE_SIGNS):
        return code
    if m := STATUS_IN_TEXT.search(low):
        return _from_status(int(next(g for g in m.groups() if g)), low)
    if code := _first_sign(low, TEXT_SIGNS):
        return code
    if "model" in low and ("not exist" in low or "not found" in low):
        return "model_not_found"
    return "unknown"


def diagnose(obj: object) -> Diagnosis:
    """Cause and fix for an exception, an error body, a record's error string, or a finish_reason."""
    if isinstance(obj, BaseException):
        return _diagnose_exception(obj)
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        message = err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)
        status = err.get("code") if isinstance(err, dict) and isinstance(err.get("code"), int) else None
        return _make(
            _from_status(status, message) if status else _from_text(message) if "error" in obj else "choices_missing",
            json.dumps(obj)[:300],
        )
    text = str(obj or "").strip()
    if text in ("length", "content_filter"):
        return _make("truncated" if text == "length" else "content_filter", f"finish_reason={text!r}")
    if text.startswith("{"):
        try:
            return diagnose(json.loads(text))
        except json.JSONDecodeError:
            pass
    return _make(_from_text(text), text)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, outermost first."""
    chain = [exc]
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
    return chain


def status_and_text(exc: BaseException) -> tuple[int | None, str]:
    """What came back from a failed call, as lab 06's `classify` reads it: the HTTP status (None when no HTTP answer
    came) and the words: the error body and message, or every exception of the chain ("Type: message | …")."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):  # openai.APIStatusError and subclasses
        body = getattr(exc, "body", None)
        return status, (json.dumps(body) if body is not None else str(exc)) + " " + str(exc)
    return None, " | ".join(f"{type(e).__name__}: {e}" for e in _chain(exc))


def _diagnose_exception(exc: BaseException) -> Diagnosis:
    name = type(exc).__name__
    text = f"{name}: {exc}"
    status, words = status_and_text(exc)
    if status is not None:
        body = getattr(exc, "body", None)
        message = json.dumps(body) if body is not None else str(exc)
        return _make(_from_status(status, words), f"{name} {status}: {message}")
    if isinstance(exc, KeyError) and exc.args and exc.args[0] == "choices":
        return _make("choices_missing", text)
    if isinstance(exc, IndexError):
        return _make("choices_empty", text)
    if isinstance(exc, TypeError) and "NoneType" in str(exc) and "concatenate" in str(exc):
        return _make("delta_without_text", text)
    if isinstance(exc, AttributeError) and "NoneType" in str(exc):
        return _make("none_response", text)
    if isinstance(exc, json.JSONDecodeError) or (isinstance(exc, ValueError) and "data:" in str(getattr(exc, "doc", ""))):
        return _make("stream_as_json", text)
    chain, full = _chain(exc), words
    if "Timeout" in name or any("Timeout" in type(e).__name__ for e in chain):
        return _make("timeout", full)
    if any("Proxy" in type(e).__name__ for e in chain):
        return _make("proxy", full)
    code = _from_text(full)
    url = next((u for u in map(_request_url, chain) if u), "")
    if code in ("connection_refused", "dns", "unknown") and url and (proxy := proxy_for(url)):
        # "Connection refused" then comes from the proxy, not from the server
        return _make("proxy", f"{full} (the request went through the proxy {proxy})")
    return _make(code, full)
