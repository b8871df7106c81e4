"""Keys never reach a person whole: one pattern for what looks like a key, one mask, one redactor.

Every text the labs show or save that may carry a credential (error messages, the doctor's
evidence, diagnoses, results files) goes through `redact`. Besides the pattern, it masks every key
this process has read from the environment (`remember`, called by keys.read_key), whatever its shape:
the tool knows the key it sent, so a server that echoes it back is masked too.
"""

from __future__ import annotations

import re

# sk-…/rk-…/pk-… keys, "Bearer <token>", and long token-like runs that contain a digit (hex or base64url keys).
KEY_LIKE = re.compile(
    r"\b(?:sk|rk|pk)-[A-Za-z0-9_\-]{6,}"
    r"|\bBearer\s+[^\s\"',;}]+"
    r"|(?<![A-Za-z0-9_\-./])(?=[A-Za-z_\-]*\d)[A-Za-z0-9_\-]{32,}(?![A-Za-z0-9_\-./])",
    re.IGNORECASE,
)
_known: set[str] = set()


def mask(key: str | None) -> str:
    """`sk-…abcd`: enough to recognise a key, never enough to use it."""
    if not key:
        return "(none)"
    key = key.strip()
    if key.lower().startswith("bearer "):
        return "Bearer " + mask(key[7:])
    if len(key) <= 8:
        return "…" + key[-2:]
    prefix = key[:3] if key[:3].lower() in ("sk-", "rk-", "pk-") else key[:2]
    return f"{prefix}…{key[-4:]}"


def remember(key: str | None) -> None:
    """Mask this exact value wherever `redact` sees it from now on (keys shorter than 6 characters excepted)."""
    key = (key or "").strip()
    if key.lower().startswith("bearer "):  # a whole header value: the token alone may be echoed too
        remember(key[7:])
    if len(key) >= 6:
        _known.add(key)


def redact(text: object) -> str:
    """`text` with every key-like part and every remembered key masked."""
    out = str(text)
    for key in sorted(_known, key=len, reverse=True):
        if key in out:
            out = out.replace(key, mask(key))
    return KEY_LIKE.sub(lambda m: mask(m.group(0)), out)


def looks_like_key(text: object) -> bool:
    return isinstance(text, str) and (bool(KEY_LIKE.search(text.strip())) or any(k in text for k in _known))
