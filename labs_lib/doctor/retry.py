"""When a failed request is worth sending again, and how long to wait first: the OpenAI Python SDK's rule (openai
3.57's `_base_client.py`, `_should_retry` and `_calculate_retry_timeout`), without the SDK's random 0-25% cut
(so a run can be checked), and the loop that applies a rule to a real call."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .troubleshoot import Outcome, attempt

RETRIED_STATUSES = (408, 409, 429)  # a request timeout, a lock timeout, a rate limit; and every 5xx
FIRST_DELAY_S = 0.5  # INITIAL_RETRY_DELAY
MAX_DELAY_S = 8.0  # MAX_RETRY_DELAY
MAX_RETRY_AFTER_S = 120.0  # MAX_RETRY_AFTER_DELAY: a server asking for a longer wait is not retried
MAX_RETRIES = 2  # DEFAULT_MAX_RETRIES


def retry_delay(status: int | None, retries_done: int, retry_after_s: float | None = None) -> float | None:
    """Seconds to wait before sending a failed request again, or None: do not send it again. `status` is the HTTP
    status that came back (None: no answer, a refused connection or a timeout); `retries_done` how many retries
    were already sent; `retry_after_s` the server's Retry-After, if it sent one."""
    if retries_done >= MAX_RETRIES:
        return None
    if retry_after_s is not None and retry_after_s > MAX_RETRY_AFTER_S:
        return None
    if status is not None and status not in RETRIED_STATUSES and status < 500:
        return None  # the request's own fault (a key, a path, a parameter): the same request gets the same answer
    if retry_after_s is not None and retry_after_s > 0:
        return retry_after_s
    return min(FIRST_DELAY_S * 2.0**retries_done, MAX_DELAY_S)


@dataclass
class Retried:
    """A call sent until it succeeded or `rule` said stop: every attempt's outcome, and the seconds slept between."""

    outcomes: list[Outcome]
    waited_s: float

    def row(self) -> dict:
        last = self.outcomes[-1]
        return {
            "what": last.what,
            "attempts": len(self.outcomes),
            "statuses": ", ".join(str(o.status or ("ok" if o.ok else "no answer")) for o in self.outcomes),
            "waited s": round(self.waited_s, 2),
            "total s": round(self.waited_s + sum(o.elapsed_s for o in self.outcomes), 2),
            "outcome": "ok" if last.ok else last.error_type,
        }


def retrying(what: str, call: Callable[[], object], rule: Callable[..., float | None] = retry_delay) -> Retried:
    """Send `call` (a client with max_retries=0), and again after each failure for as long as `rule(status,
    retries_done)` gives a delay; each failure is an Outcome, as `attempt` records it."""
    outcomes, waited_s = [attempt(what, call)], 0.0
    while not outcomes[-1].ok:
        delay_s = rule(outcomes[-1].status, len(outcomes) - 1)
        if delay_s is None:
            break
        time.sleep(delay_s)  # the wait is the lesson: retries cost the user this time
        waited_s += delay_s
        outcomes.append(attempt(what, call))
    return Retried(outcomes, waited_s)
