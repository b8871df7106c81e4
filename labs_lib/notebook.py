"""What every lab notebook does first, and the helpers its check cells use."""

from __future__ import annotations

import importlib
import platform
import re
import sys
from dataclasses import dataclass
from typing import Any

from .engines.vllm import find_vllm
from .errors import LabsError

VERSIONED = ("labs_lib", "numpy", "pandas", "matplotlib", "xllamacpp", "openai", "httpx", "vllm", "torch")


def versions(packages: tuple[str, ...] = VERSIONED) -> dict[str, str]:
    """Installed versions of the packages a lab depends on ("-" when absent)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = version(name.replace("_", "-")) if name != "labs_lib" else version("labs_lib")
        except PackageNotFoundError:
            out[name] = "-"
    return out


def _one_line_error(shell, etype, value, tb, tb_offset=None):
    """IPython handler for LabsError: the message alone, no traceback; the cell still fails."""
    print(f"{etype.__name__}: {value}", file=sys.stderr)
    return None


def setup(lab: str) -> None:
    """Print versions, show LabsError as one line, set plot defaults."""
    import matplotlib as mpl

    mpl.rcParams.update({"figure.dpi": 90, "axes.spines.top": False, "axes.spines.right": False})
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            shell.set_custom_exc((LabsError,), _one_line_error)
    except ImportError:
        pass
    found = versions()
    print(f"LLM Inference Labs — lab {lab}")
    print("  " + "  ".join(f"{k} {v}" for k, v in found.items() if v != "-"))
    served_by = find_vllm()
    if served_by is not None and found.get("vllm") == "-":  # vLLM runs from its own environment, not this kernel's
        found["vllm"] = found["torch"] = "in its own venv"
        print(f"  vLLM engine: {served_by.describe()}")
    missing = [k for k, v in found.items() if v == "-"]
    if missing:
        print("  not installed (fine on CPU): " + ", ".join(missing))


SHOW = "show"  # the answer that asks for the expected value
# an exercise's or a design task's unanswered line: `answer_2 = None  # …`, `design = None`, `design_strict = None`,
# or as ruff formats one whose comment is long: `answer_q7 = (\n    None  # …\n)`
UNANSWERED = re.compile(r"^((answer_\w+|design\w*) = (?:\(\s*)?)None\b", re.MULTILINE)


def show_answers(cells: list[dict]) -> int:
    """For a reference run (`labs run`, CI): every unanswered exercise and design task in these notebook cells
    (as nbformat reads them) asks for the answer instead, so each check prints what was measured and the
    explanation after it. Returns how many lines changed."""
    changed = 0
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        source, n = UNANSWERED.subn(rf'\g<1>"{SHOW}"', source)
        if n:
            cell["source"], changed = source, changed + n
    return changed


_misses: dict[str, int] = {}  # per exercise label, in this kernel
_predictions: dict[str, object] = {}  # per exercise label: what was written before the run


def predict(label: str, prediction: object) -> None:
    """A section's prediction cell, written where its question is asked and before it runs: a value or
    (value, "why"). `takeaway` sets it beside what the section then measures; an exercise's (label "1", "2" …) is
    set beside its answer by `check_exercise`."""
    _predictions[str(label)] = prediction
    if prediction is None:
        print('No prediction yet: write (value, "why") and run this cell before the section runs.')
    elif not (isinstance(prediction, tuple) and len(prediction) == 2 and str(prediction[1]).strip()):
        print('Recorded, without a reason: write (value, "why"); the why is what the section tests.')
    else:
        print("Prediction recorded, with its reason.")


def takeaway(label: str, measured: float, what: str, *, computed: bool = False) -> None:
    """A section's last line: what this run measured (`what` names it, with its unit) — or, `computed`, worked out
    from formulas and the catalogue, nothing measured —, beside the prediction written for `label` before the
    section ran."""
    kind = "computed" if computed else "measured"
    print(f"{kind.capitalize()} in this run: {what} = {measured:,.4g}.")
    print(f"  {_against_prediction(_predictions.get(str(label)), measured, kind)}")


def inline_question(label: str, answer: object, reference: str, names: dict[str, tuple[str, ...]]) -> None:
    """An inline question (CS231n's): the participant's one or two sentences in `answer`, then the reference answer
    and what a good answer names, each idea marked as found in theirs (any of its words) or not. Unanswered: the
    question waits; "show": the reference alone."""
    if answer is None or not str(answer).strip():
        print(f"Question {label}: not answered yet: write one or two sentences in the answer line, then run this cell.")
        return
    if not asked_to_show(answer):
        text = str(answer).lower()
        marks = [
            f"{idea}: {'yours names it' if any(w.lower() in text for w in words) else 'not in yours'}"
            for idea, words in names.items()
        ]
        print(f"Question {label}: a good answer names " + "; ".join(marks) + ".")
    print(f"  Reference answer ({label}): {reference}")


def check_exercise(
    label: str,
    answer: object,
    expected: float | str | tuple[float, float] | list[str],
    *,
    rel_tol: float = 0.01,
    hint: str = "",
    prediction: object = None,
    interval_is: str = "",
) -> bool | None:
    """Print whether `answer` matches `expected`; None when not answered. `expected` is a number (within rel_tol),
    a name (equal, ignoring case), an interval (low, high) — anything inside counts; `interval_is` says what it is
    ("the measured 95% interval", "the planner's range") —, or a list of names (any of them counts: e.g. every
    variant the measurement cannot tell apart).

    Hints come before answers: a first miss shows the hint only, a second the hint again, and the expected value
    is shown after two misses in this kernel or when the answer is "show".

    `prediction` (by default the one `predict` recorded for this label in its section) is what the participant wrote
    before running the lab; once the exercise is answered correctly (or shown), a second line compares it with
    the measurement."""
    hint = f" Hint: {hint}" if hint else ""
    target = Interval(float(expected[0]), float(expected[1]), interval_is) if isinstance(expected, tuple) else expected
    prediction = _predictions.get(label) if prediction is None else prediction
    prediction = None if asked_to_show(prediction) else prediction  # "show" asks for the answer; it predicts nothing
    verdict = _check(label, answer, target, rel_tol, hint)
    if verdict is not None and (verdict or _misses.get(label, 0) >= 2 or asked_to_show(answer)):
        print(f"  {_against_prediction(prediction, target)}")
    return verdict


@dataclass(frozen=True)
class Interval:
    """An exercise's expected interval: anything from low to high counts; `what` says what the interval is."""

    low: float
    high: float
    what: str = ""


def asked_to_show(answer: object) -> bool:
    """Whether an exercise's or a design task's answer is "show" (asking for the expected one)."""
    return isinstance(answer, str) and answer.strip().lower() == SHOW


def _against_prediction(prediction: Any, expected, kind: str = "measured") -> str:
    if prediction is None:
        return "No prediction written before the run: predicting first is the point."
    if isinstance(prediction, tuple) and len(prediction) == 2:  # (value, why)
        value, why = prediction
        return f"{_against_prediction(value, expected, kind)} Your reason then: {str(why).strip()!r}: does the run bear it out?"
    if _matches(prediction, expected, 0.0):
        return f"Your prediction before the run, {prediction!r}, was right."
    try:
        value = float(prediction)
        target = float(expected)
    except (TypeError, ValueError):
        return f"Your prediction before the run was {prediction!r}; the run says {_shown(expected)}."
    ratio = value / target if target else float("inf")
    return f"Your prediction before the run was {value:,.4g}: {ratio:,.2f}x the {kind} {_shown(expected)}."


def _check(label: str, answer: object, expected, rel_tol: float, hint: str) -> bool | None:
    if answer is None:
        print(f"Exercise {label}: not answered yet: answer from what the run measured, then run this cell.{hint}")
        return None
    if asked_to_show(answer):
        print(f"Exercise {label}: the answer, from this run, is {_shown(expected)}.")
        return False
    ok = _matches(answer, expected, rel_tol)
    if ok:
        print(f"Exercise {label}: correct ({answer!r}; expected {_shown(expected)}).")
        _misses.pop(label, None)
        return True
    _misses[label] = _misses.get(label, 0) + 1
    if _misses[label] >= 2:
        print(f"Exercise {label}: not quite: {answer!r}. The answer is {_shown(expected)}.{hint}")
    else:
        print(f'Exercise {label}: not quite: {answer!r}.{hint} Try again (or answer "{SHOW}" to see it).')
    return False


def _matches(answer: object, expected, rel_tol: float) -> bool:
    if isinstance(expected, list):
        return any(_matches(answer, e, rel_tol) for e in expected)
    if isinstance(expected, str):
        return str(answer).strip().lower() == expected.lower()
    try:
        value = float(answer)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    if isinstance(expected, Interval):
        return expected.low <= value <= expected.high
    return abs(value - expected) <= rel_tol * abs(expected)


def _shown(expected) -> str:
    if isinstance(expected, list):
        return "any of " + ", ".join(map(str, expected))
    if isinstance(expected, Interval):
        return f"anything in [{expected.low:,.4g}, {expected.high:,.4g}]" + (f" ({expected.what})" if expected.what else "")
    return expected if isinstance(expected, str) else f"{expected:,.4g}"


def reload() -> None:
    """Re-import labs_lib's modules after editing them (for participants who change the library)."""
    for name, module in list(sys.modules.items()):
        if name == "labs_lib" or name.startswith("labs_lib."):
            importlib.reload(module)
