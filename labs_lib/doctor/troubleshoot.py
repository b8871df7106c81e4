"""Lab 05's helper: run a call that may fail, keep what the user would see and the diagnosis."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from ..redact import redact
from .rules import Diagnosis, diagnose


@dataclass
class Outcome:
    what: str
    ok: bool
    result: object = None
    error_type: str | None = None  # the exception's class, as a traceback would name it
    error: str | None = None  # its message (keys masked)
    diagnosis: Diagnosis | None = None
    elapsed_s: float = 0.0  # how long the user waited for the answer or the error

    def row(self) -> dict:
        d = self.diagnosis
        return {
            "what": self.what,
            "outcome": "ok" if self.ok else self.error_type,
            "what the user sees": "" if self.ok else self.error,
            "doctor's code": d.code if d else "",
            "cause": d.cause if d else "",
            "fix": d.fix if d else "",
            "seconds": round(self.elapsed_s, 3),
        }


def attempt(what: str, call: Callable[[], object]) -> Outcome:
    """Run `call`; a failure is caught, kept and diagnosed (a notebook cell must not die on it)."""
    start = time.perf_counter()
    try:
        result = call()
        return Outcome(what, True, result, elapsed_s=time.perf_counter() - start)
    except Exception as exc:  # every failure the labs demonstrate is data, never a crash
        cls = type(exc)
        return Outcome(
            what,
            False,
            None,
            f"{cls.__module__}.{cls.__qualname__}",
            redact(str(exc))[:300],
            diagnose(exc),
            time.perf_counter() - start,
        )


def table(outcomes: list[Outcome]) -> pd.DataFrame:
    return pd.DataFrame([o.row() for o in outcomes])


def time_to_error_figure(outcomes: list[Outcome]):
    """How long each call took to come back, failure or not: some fail fast, a timeout costs the whole timeout."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.35 * len(outcomes) + 1.2))
    names = [o.what for o in outcomes]
    ax.barh(names, [max(o.elapsed_s * 1000, 0.1) for o in outcomes], color=["C2" if o.ok else "C3" for o in outcomes])
    for y, o in enumerate(outcomes):
        ax.text(
            max(o.elapsed_s * 1000, 0.1),
            y,
            f" {o.elapsed_s * 1000:,.0f} ms" + ("" if o.ok or o.diagnosis is None else f"  {o.diagnosis.code}"),
            va="center",
            fontsize=8,
        )
    ax.set(
        xscale="log", xlabel="ms until the answer or the error (log scale)", title="How long each failure takes to reach the user"
    )
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def unauthorized_body(base_url: str, model: str | None, wrong_key: str, timeout_s: float = 15.0) -> tuple[int | None, str]:
    """What a server answers to a chat request with a wrong key: (HTTP status, its body in one line, keys masked,
    cut to 300 characters), or (None, the transport error) when it cannot be reached."""
    import httpx

    body = {"model": model or "any", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    try:
        resp = httpx.post(
            base_url.rstrip("/") + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {wrong_key}"},
            timeout=timeout_s,
        )
    except httpx.HTTPError as exc:
        return None, redact(f"{type(exc).__name__}: {exc}")[:300]
    return resp.status_code, " ".join(redact(resp.text).split())[:300]
