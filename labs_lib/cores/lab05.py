"""Lab 05's build-its: the failure's code from an HTTP status and its message."""

from __future__ import annotations

import json

from ..doctor.rules import diagnose
from ..paths import DATA_DIR
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


CORES: dict[str, Core] = {"classify": Core(_classify_reference, _classify_cases, classify)}
