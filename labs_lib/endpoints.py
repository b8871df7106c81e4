"""OpenAI-compatible endpoints: a name, a base URL, a model id and the NAME of the key's variable.

Built in: `local` (an engine the labs start: llama.cpp on CPU, vLLM on GPU), `taotoken`
(https://taotoken.net/api/v1 or $TAOTOKEN_BASE_URL, key in TAOTOKEN_API_KEY, model in TAOTOKEN_MODEL), `vllm`
(a vLLM already serving at http://localhost:8000/v1, key in VLLM_API_KEY if set), or any URL.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from .engines import make_engine
from .errors import BadInput
from .keys import auth_headers, mask, read_key

TAOTOKEN_BASE_URL = "https://taotoken.net/api/v1"
BUILTIN = ("local", "taotoken", "vllm")


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str  # what the OpenAI SDK takes: it appends /chat/completions
    model: str | None
    api_key_env: str | None = None

    @property
    def api_key(self) -> str | None:
        return read_key(self.api_key_env)

    @property
    def masked_key(self) -> str:
        return mask(self.api_key)

    @property
    def root_url(self) -> str:
        """scheme://host:port, where llama.cpp and vLLM serve /health and /metrics."""
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def is_loopback(self) -> bool:
        host = urlsplit(self.base_url).hostname or ""
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def headers(self) -> dict[str, str]:
        return auth_headers(self.api_key)

    def describe(self) -> dict:
        """For tables and results files: the key's variable and a masked key, never the key."""
        return {**asdict(self), "api_key": self.masked_key}


def check_url(url: str) -> str:
    parts = urlsplit(str(url).strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput("base URL", url, "allowed: an http:// or https:// URL with a host, e.g. http://localhost:8000/v1")
    try:
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        raise BadInput("base URL", url, "allowed: a port between 1 and 65535") from None
    return str(url).strip().rstrip("/")


def _taotoken(model: str | None, api_key_env: str | None) -> Endpoint:
    url = os.environ.get("TAOTOKEN_BASE_URL", "").strip()
    return Endpoint(
        "taotoken",
        check_url(url) if url else TAOTOKEN_BASE_URL,
        model or os.environ.get("TAOTOKEN_MODEL") or None,
        api_key_env or "TAOTOKEN_API_KEY",
    )


def _running_vllm(model: str | None, api_key_env: str | None) -> Endpoint:
    key_env = api_key_env or ("VLLM_API_KEY" if os.environ.get("VLLM_API_KEY") else None)
    return Endpoint("vllm", "http://localhost:8000/v1", model, key_env)


REMOTE = {"taotoken": _taotoken, "vllm": _running_vllm}  # servers the labs do not start


def resolve(name_or_url: str, *, model: str | None = None, api_key_env: str | None = None) -> Endpoint:
    """An endpoint by built-in name or URL (not `local`: that needs an engine, see open_endpoint)."""
    text = str(name_or_url).strip()
    if api_key_env is not None:  # a variable named explicitly must hold a key
        read_key(api_key_env, required=True)
    if text in REMOTE:
        return REMOTE[text](model, api_key_env)
    if "://" in text:
        return Endpoint("custom", check_url(text), model, api_key_env)
    raise BadInput("endpoint", name_or_url, "allowed: " + ", ".join(BUILTIN) + ", or an http(s):// base URL")


@contextlib.contextmanager
def open_endpoint(
    name_or_url: str,
    *,
    model: str | None = None,
    api_key_env: str | None = None,
    engine: str = "auto",
    engine_config=None,
    **engine_changes,
) -> Iterator[tuple[Endpoint, object]]:
    """(endpoint, engine or None). For `local`, starts an engine and stops it on exit."""
    if str(name_or_url).strip() != "local":
        yield resolve(name_or_url, model=model, api_key_env=api_key_env), None
        return
    server = make_engine(engine, engine_config, **engine_changes)
    with server:
        yield Endpoint("local", server.base_url, model or server.model_id, server.config.api_key_env), server


_LAB_STACK: contextlib.ExitStack | None = None


def lab_stack() -> contextlib.ExitStack:
    """The ExitStack a notebook's engines live on across cells (the lab's last cell closes it). Called again, as
    when a participant re-runs the cell that starts the lab's engine, it first closes the stack it gave before: one
    engine runs, not one per run of that cell (the old one would run until the kernel ends while any object still
    refers to it)."""
    global _LAB_STACK
    if _LAB_STACK is not None:
        _LAB_STACK.close()
    _LAB_STACK = contextlib.ExitStack()
    return _LAB_STACK


def endpoint_for(engine) -> Endpoint:
    """The endpoint of an engine the labs started."""
    return Endpoint("local", engine.base_url, engine.model_id, engine.config.api_key_env)
