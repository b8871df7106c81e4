"""API keys: read from environment variables only, shown only masked."""

from __future__ import annotations

import os
import re

from .errors import BadInput

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def mask(key: str | None) -> str:
    """`sk-…abcd`: enough to recognise a key, never enough to use it."""
    if not key:
        return "(none)"
    key = key.strip()
    if len(key) <= 8:
        return "…" + key[-2:]
    prefix = key[:3] if key[:3].lower() in ("sk-", "rk-", "pk-") else key[:2]
    return f"{prefix}…{key[-4:]}"


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
    return value
