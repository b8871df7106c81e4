"""Errors that reach a person as one line.

Every check of user input (CLI flags, library arguments, notebook parameters) raises
`BadInput`, whose message names the bad value and what is allowed. The CLI turns it into
exit status 2; notebooks show it as one line (see `labs_lib.notebook.setup`).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

from .redact import looks_like_key, redact


def shown(value: object) -> str:
    """repr(value), with every key-like part masked (labs_lib.redact)."""
    if looks_like_key(value):
        return repr(redact(str(value).strip())) + " (masked: it looks like a key)"
    return repr(value)


class LabsError(Exception):
    """An error whose message is meant to be read by a person, in one line."""


class BadInput(LabsError, ValueError):
    """A value a user supplied is not allowed."""

    def __init__(self, what: str, value: object, allowed: str):
        self.what, self.value, self.allowed = what, value, allowed
        super().__init__(f"{what}: {shown(value)} is not allowed; {allowed}")


def read_user_file(path: str | os.PathLike, what: str, allowed: str) -> str:
    """The text of a file a user named, or BadInput: missing -> "allowed: a path to an existing {allowed}"."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise BadInput(what, str(path), f"allowed: a path to an existing {allowed}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(what, str(path), f"it is not a readable text file ({type(exc).__name__}); allowed: {allowed}") from None


MIN_FREE_BYTES = 1 << 20  # less than this where results go: "the disk is full", said before any work starts


def writable_path(what: str, path: str | os.PathLike, *, folder: bool = False) -> Path:
    """`path` checked before any engine starts: a results file (or, folder=True, a folder for them) that can
    be written, on a disk with room. A missing parent folder is created; nothing else is written."""
    p = Path(path).expanduser()
    kind = "a folder" if folder else "a file path"
    if not folder and p.is_dir():
        raise BadInput(what, str(p), f"it is a directory; allowed: {kind} in a writable folder")
    if folder and p.exists() and not p.is_dir():
        raise BadInput(what, str(p), f"it is a file; allowed: {kind} (existing or new) in a writable place")
    where = p if folder else p.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
        if not folder and p.exists():
            with p.open("a"):
                pass
    except OSError as exc:
        reason = "read-only file system" if exc.errno == errno.EROFS else (exc.strerror or type(exc).__name__).lower()
        raise BadInput(what, str(p), f"it cannot be written ({reason}); allowed: {kind} in a writable folder") from None
    stat = os.statvfs(where)
    free = stat.f_bavail * stat.f_frsize
    if free < MIN_FREE_BYTES:
        raise BadInput(what, str(p), f"the disk holding it is full ({free:,} bytes free); allowed: a place with room")
    return p


class ResultsNotSaved(LabsError):
    """Writing a result failed (disk full, file system gone read-only); what was written before is kept."""


class EngineError(LabsError):
    """An engine failed to start or stopped answering; the message carries its own words."""


def positive_int(what: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    """`value` as an int in [minimum, maximum], or BadInput."""
    allowed = f"allowed: an integer >= {minimum}" + (f" and <= {maximum:,}" if maximum is not None else "")
    if isinstance(value, bool):
        raise BadInput(what, value, allowed)
    try:
        number = int(value)
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
