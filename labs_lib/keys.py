"""API keys: read from environment variables only, shown only masked (labs_lib.redact)."""

from __future__ import annotations

import os
import re

from .errors import BadInput
from .redact import mask, remember

__all__ = ["auth_headers", "mask", "read_key"]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def read_key(env_name: str | None, *, required: bool = False) -> str | None:
    """The key held by environment variable `env_name` (None when unset and not required)."""
    if env_name is None:
        return None
    if not ENV_NAME.match(env_name):
        raise BadInput("key variable", env_name, "allowed: an environment variable NAME (letters, digits, _), not the key itself")
    value = os.environ.get(env_name)
    if value is None or not value.strip():
        if required:
            raise BadInput("key variable", env_name, f"it is not set or empty; allowed: export {env_name}=<your key> first")
        return None
    remember(value)
    return value


def auth_headers(key: str | None) -> dict[str, str]:
    """The Authorization header an OpenAI-compatible server expects (none without a key)."""
    return {"Authorization": f"Bearer {key.strip()}"} if key else {}
