"""A model per card that makes the lessons visible on a GPU: chosen by `make setup-gpu` (`labs workshop-model
--download`), downloaded once into the cache and recorded there; labs 02-05 serve it on vLLM on a GPU when their
model is left at None, and say which model they use and why.

On a GPU the shipped Gemma 3 270M never fills a pool (lab 04's preemption cannot appear), its decode is bound by
kernel launches rather than memory (lab 03's roofline), and bf16 against fp8 (lab 05) vanishes in noise. A 7B model
in bf16 shows all three where it fits with room for a KV pool (40 GiB cards and up); on 15-24 GiB cards a 1.5B
model leaves that room. Both are Apache-2.0 and ungated: no token, no licence to accept.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import LabsError
from .paths import cache_dir

GIB = 2**30


@dataclass(frozen=True)
class WorkshopModel:
    repo: str  # the Hugging Face id
    download_gb: float  # its safetensors, 10^9 bytes (Hugging Face's file listings, December 2026)
    why: str  # the card's reason, one line


# (the least card memory in GiB, bf16 needed, the model): the first whose conditions the card meets
CHOICES: tuple[tuple[float, bool, WorkshopModel], ...] = (
    (
        40.0,
        True,
        WorkshopModel(
            "Qwen/Qwen2.5-7B-Instruct",
            15.2,
            "7.6B parameters in bf16 (15.2 GB) leave a KV pool of tens of GiB to fill, and each decode step reads 15 GB",
        ),
    ),
    (
        14.0,
        False,
        WorkshopModel(
            "Qwen/Qwen2.5-1.5B-Instruct",
            3.1,
            "1.5B parameters (3.1 GB; float16 on a card without bf16) leave this card room for a pool it can fill",
        ),
    ),
)


def choose(memory_total_bytes: int, compute_capability: tuple[int, int] | None) -> WorkshopModel | None:
    """The workshop model for a card of this memory and compute capability (bf16 from 8.0), or None (too small:
    the shipped model stays)."""
    has_bf16 = compute_capability is None or tuple(compute_capability) >= (8, 0)
    for least_gib, needs_bf16, model in CHOICES:
        if memory_total_bytes >= least_gib * GIB and (has_bf16 or not needs_bf16):
            return model
    return None


def record_path() -> Path:
    return cache_dir() / "workshop_model.json"


def recorded() -> dict | None:
    """What `labs workshop-model --download` recorded: repo, path (a local folder vLLM serves), card; None if
    nothing was recorded or its folder is gone."""
    path = record_path()
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and Path(str(found.get("path", ""))).is_dir() else None


def record(model: WorkshopModel, folder: Path, card: str) -> dict:
    entry = {**asdict(model), "path": str(folder), "card": card}
    record_path().write_text(json.dumps(entry, indent=1) + "\n")
    return entry


def download(model: WorkshopModel, card: str) -> dict:
    """The model's config, tokenizer and safetensors into the cache (once: a second call finds them), with
    huggingface_hub's progress bars; recorded for the labs. One line (LabsError) when the hub cannot be reached."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise LabsError("huggingface_hub is not installed: make setup-gpu installs it with vLLM") from None
    folder = cache_dir() / "models" / model.repo.replace("/", "--")
    patterns = ["*.json", "*.safetensors", "tokenizer*", "*.txt", "*.model"]
    try:
        snapshot_download(model.repo, local_dir=str(folder), allow_patterns=patterns)
    except Exception as exc:  # the hub unreachable, a network error: huggingface_hub's own exception tree
        raise LabsError(
            f"downloading {model.repo} failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}); the labs use "
            "the shipped model until `labs workshop-model --download` succeeds"
        ) from None
    return record(model, folder, card)


def for_labs(on_gpu: bool) -> tuple[str | None, str]:
    """(the model a lab serves when its model is left at None, why in one line): the recorded workshop model's
    folder on a GPU, else None (the shipped Gemma 3 270M)."""
    if not on_gpu:
        return None, "the shipped Gemma 3 270M (on a CPU the workshop model would take minutes a request)"
    found = recorded()
    if found is None:
        return None, "the shipped Gemma 3 270M: no workshop model recorded (make setup-gpu downloads one for this card)"
    return found["path"], f"the workshop model {found['repo']} for the {found['card']}: {found['why']}"
