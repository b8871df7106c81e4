"""What every lab's build-its share: a core (the library's answer, the cases, the solution the runner fills in) and
the comparison of a participant's function with it, case by case (CS231n's skeleton and check)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

REL_TOL = 1e-6
# A file where each accepted function notes its name whenever the lab calls it after its check, one line a call: how
# the tests show that a filled-in lab runs on the participant's code. Unset (a participant's run), nothing is noted.
CALLS_VARIABLE = "LABS_CORE_CALLS"


@dataclass(frozen=True)
class Case:
    """One call of the function: its arguments, what the case holds, and the mistake it catches."""

    args: tuple
    holds: str
    why: str


@dataclass(frozen=True)
class Core:
    """A lesson's core: the library's answer (`reference`), the cases, and the function whose source goes in the
    cell when the runner fills it in (`solution`, with the `imports` it needs)."""

    reference: Callable
    cases: Callable[[], list[Case]]
    solution: Callable
    imports: str = ""
    run: Callable[[Callable, tuple], Any] | None = None  # how a case calls a function (None: function(*args))

    def call(self, function: Callable, args: tuple) -> Any:
        """What `function` gives for one case's arguments: its result, or what `run` observed of it."""
        return self.run(function, args) if self.run else function(*args)


def same(got: Any, want: Any) -> bool:
    """Equal: bytes and strings exactly, numbers within REL_TOL (and 1e-9 absolute), element by element inside
    tuples, lists and arrays (of the same shape), key by key inside dicts."""
    if want is None or got is None:
        return got is None and want is None
    if isinstance(want, (str, bytes)):
        return type(got) is type(want) and got == want
    if isinstance(want, dict):  # a usage object: the same keys, each value the same
        return isinstance(got, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    if isinstance(want, np.ndarray):
        got = np.asarray(got, dtype=float) if isinstance(got, (np.ndarray, list, tuple)) else None
        return got is not None and got.shape == want.shape and bool(np.allclose(got, want, rtol=REL_TOL, atol=1e-9))
    if isinstance(want, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(want) and all(map(same, got, want))
    try:
        return math.isclose(float(got), float(want), rel_tol=REL_TOL, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def shown(value: Any) -> str:
    if isinstance(value, bytes):  # a quantized block: its length and its bytes in hex, the first 40
        more = " …" if len(value) > 40 else ""
        return f"{len(value)} bytes: {value[:40].hex(' ')}{more}"
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape}: " + np.array2string(value, precision=4, threshold=12)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(shown(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return f"{value:,.6g}" if isinstance(value, float) else repr(value)


def verdict(name: str, core: Core, candidate: Callable) -> Callable:
    """Run `candidate` on every case of core `name` and print the verdict: not written yet, the first case that
    differs (what it holds, both answers, the mistake it catches), or agreement on all of them. Returns the
    function the lab goes on with: `candidate` when it agrees on every case, else the library's reference."""
    cases = core.cases()
    for case in cases:
        want = core.call(core.reference, case.args)
        try:
            got = core.call(candidate, case.args)
        except NotImplementedError:
            print(f"{name}: not written yet. Write it in the cell above and run both cells; the lab goes on with the library's.")
            return core.reference
        except Exception as exc:  # the participant's code: any error is a verdict, shown in one line
            print(f"{name}: {case.holds}: raised {type(exc).__name__}: {exc}.")
            print(f"  Hint: {case.why}. The lab goes on with the library's; fix the cell and run both cells again.")
            return core.reference
        if not same(got, want):
            print(f"{name}: differs on {case.holds}: yours {shown(got)}, the library's {shown(want)}.")
            print(f"  Hint: {case.why}. The lab goes on with the library's; fix the cell and run both cells again.")
            return core.reference
    print(f"{name}: agrees with the library on all {len(cases)} cases ({'; '.join(c.holds for c in cases)}).")
    return noted(name, candidate)


def noted(name: str, function: Callable) -> Callable:
    """`function` itself, or where $LABS_CORE_CALLS names a file, the same function (class: a subclass) appending
    `name` to that file at each call (instantiation) before running as it would."""
    path = os.environ.get(CALLS_VARIABLE)
    if not path:
        return function

    def note() -> None:
        with open(path, "a") as calls:
            calls.write(name + "\n")

    wrapper: Callable
    if inspect.isclass(function):
        cls: Any = function

        class Noted(cls):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                note()
                super().__init__(*args, **kwargs)

        Noted.__name__, Noted.__qualname__, Noted.__module__ = cls.__name__, cls.__qualname__, cls.__module__
        return Noted
    if inspect.iscoroutinefunction(function):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            note()
            return await function(*args, **kwargs)

    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            note()
            return function(*args, **kwargs)

    return functools.wraps(function)(wrapper)


PROBE_LIMIT_S = 60.0  # the probe's requests take a few hundred event-loop turns: milliseconds, even on a busy machine


def run_apart(drive: Callable[[], Any]) -> Any:
    """Run the coroutine drive() makes on an event loop of its own, in a thread (a notebook's loop is running)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, drive()).result()


async def awaited(running: Any, what: str) -> Any:
    """Await what the participant's async function returned, within PROBE_LIMIT_S; a plain function is a verdict."""
    if not inspect.isawaitable(running):
        raise TypeError(f"it returned without awaiting: write it as `async def` and `await {what}`")
    try:
        return await asyncio.wait_for(running, PROBE_LIMIT_S)
    except TimeoutError:
        raise TimeoutError(f"not done after {PROBE_LIMIT_S:.0f} s: does it wait for something that never comes?") from None
