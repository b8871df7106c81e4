"""Errors that reach a person as one line.

Every check of user input (CLI flags, library arguments, notebook parameters) raises
`BadInput`, whose message names the bad value and what is allowed. The CLI turns it into
exit status 2; notebooks show it as one line (see `labs_lib.notebook.setup`).
"""

from __future__ import annotations

import re

# a value that looks like an API key is never echoed whole, even in an error about itself
KEY_LIKE = re.compile(r"\b(sk|rk|pk)-[A-Za-z0-9_\-]{8,}|\bBearer\s+\S{8,}|^[A-Za-z0-9_\-]{32,}$", re.IGNORECASE)


def shown(value: object) -> str:
    """repr(value), with any key-like part masked to its first 3 and last 4 characters."""
    if isinstance(value, str) and KEY_LIKE.search(value.strip()):
        return repr(KEY_LIKE.sub(lambda m: m.group(0)[:3] + "…" + m.group(0)[-4:], value.strip())) + " (masked: it looks like a key)"
    return repr(value)


class LabsError(Exception):
    """An error whose message is meant to be read by a person, in one line."""


class BadInput(LabsError, ValueError):
    """A value a user supplied is not allowed."""

    def __init__(self, what: str, value: object, allowed: str):
        self.what, self.value, self.allowed = what, value, allowed
        super().__init__(f"{what}: {shown(value)} is not allowed; {allowed}")


class EngineError(LabsError):
    """An engine failed to start or stopped answering; the message carries its own words."""


def positive_int(what: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """`value` as an int in [minimum, maximum], or BadInput."""
    allowed = f"allowed: an integer >= {minimum}" + (f" and <= {maximum:,}" if maximum is not None else "")
    if isinstance(value, bool):
        raise BadInput(what, value, allowed)
    try:
        number = int(value)  # type: ignore[arg-type]
        if isinstance(value, float) and number != value:
            raise ValueError
        if isinstance(value, str) and value.strip() != str(number):
            raise ValueError
    except (TypeError, ValueError):
        raise BadInput(what, value, allowed) from None
    if number < minimum or (maximum is not None and number > maximum):
        raise BadInput(what, value, allowed)
    return number


def fraction(what: str, value: object, *, low: float = 0.0, high: float = 1.0) -> float:
    """`value` as a float in (low, high], or BadInput."""
    allowed = f"allowed: a number > {low:g} and <= {high:g}"
    if isinstance(value, bool):
        raise BadInput(what, value, allowed)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BadInput(what, value, allowed) from None
    if not (low < number <= high):
        raise BadInput(what, value, allowed)
    return number


def positive_number(what: str, value: object) -> float:
    """`value` as a float > 0, or BadInput."""
    allowed = "allowed: a number > 0"
    if isinstance(value, bool):
        raise BadInput(what, value, allowed)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BadInput(what, value, allowed) from None
    if not number > 0 or number == float("inf"):
        raise BadInput(what, value, allowed)
    return number


def choice(what: str, value: object, allowed: list[str] | tuple[str, ...]) -> str:
    """`value` if it is one of `allowed` (case-insensitive), else BadInput."""
    text = str(value).strip()
    for option in allowed:
        if text.lower() == option.lower():
            return option
    raise BadInput(what, value, "allowed: " + ", ".join(allowed))
