"""What every lab notebook does first, and the helpers its check cells use."""

from __future__ import annotations

import importlib
import platform
import sys

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
_misses: dict[str, int] = {}  # per exercise label, in this kernel


def check_exercise(label: str, answer: object, expected: float | str, *, rel_tol: float = 0.01, hint: str = "") -> bool | None:
    """Print whether `answer` is within rel_tol of `expected` (a name: equal, ignoring case); None when not answered.

    Hints come before answers: a first miss shows the hint only, a second the hint again, and the expected value
    is shown after two misses in this kernel or when the answer is "show"."""
    hint = f" Hint: {hint}" if hint else ""
    if answer is None:
        print(f"Exercise {label}: not answered yet: write your prediction, run the cell, compare.{hint}")
        return None
    if isinstance(answer, str) and answer.strip().lower() == SHOW:
        print(f"Exercise {label}: the measured/computed answer is {_shown(expected)}.")
        return False
    if isinstance(expected, str):
        ok = str(answer).strip().lower() == expected.lower()
    else:
        try:
            ok = abs(float(answer) - expected) <= rel_tol * abs(expected)
        except (TypeError, ValueError):
            ok = False
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


def _shown(expected: float | str) -> str:
    return expected if isinstance(expected, str) else f"{expected:,.4g}"


def reload() -> None:
    """Re-import labs_lib's modules after editing them (for participants who change the library)."""
    for name, module in list(sys.modules.items()):
        if name == "labs_lib" or name.startswith("labs_lib."):
            importlib.reload(module)
