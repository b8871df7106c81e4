"""Weight variants of the shipped Gemma 3 270M, built once into the cache and reused.

The shipped file is Q4_K_M (a mix of Q4_K, Q5_0, Q6_K, Q8_0 and F32 tensors). A variant dequantizes
every tensor (gguf's dequantize) and re-quantizes each 2-D weight to one format (gguf's quantize);
1-D tensors (norms) stay F32. So "F16" holds Q4_K_M's quality at 16-bit storage cost: it is the
reference the other variants are compared with, not the original bf16 model.

The metadata (262,144 tokenizer strings) is copied byte for byte with general.file_type patched,
which keeps a build to seconds instead of parsing every string.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QType
from gguf.quants import dequantize, quantize

from .engines.model_files import default_model_path
from .errors import BadInput, LabsError
from .gguf_meta import read_gguf_meta
from .paths import cache_dir

ORIGINAL = "Q4_K_M"
FILE_TYPE = {"F16": 1, "BF16": 32, "Q8_0": 7, "Q5_1": 9, "Q5_0": 8, "Q4_1": 3, "Q4_0": 2}  # llama_ftype values
VARIANTS = (ORIGINAL, *FILE_TYPE)


@dataclass(frozen=True)
class Variant:
    name: str
    path: Path
    file_bytes: int
    tensor_types: dict[str, int]  # ggml type -> number of tensors
    build_s: float | None = None  # None: reused from the cache (or the original)

    @property
    def bits_per_weight(self) -> float:
        meta = read_gguf_meta(self.path)
        return 8 * meta.tensor_bytes / meta.n_params


def check_variant(name: str) -> str:
    key = str(name).strip().upper()
    if key not in VARIANTS:
        raise BadInput("variant", name, "allowed: " + ", ".join(VARIANTS))
    return key


def variant_path(name: str) -> Path:
    name = check_variant(name)
    if name == ORIGINAL:
        return default_model_path()
    return cache_dir() / "variants" / f"gemma-3-270m-{name.lower()}.gguf"


def _target(shape: tuple[int, ...], source_type: str, target: QType) -> QType:
    if len(shape) < 2:  # norms and other vectors stay F32, as llama.cpp's quantize keeps them
        return QType.F32
    return target if shape[0] % GGML_QUANT_SIZES[target][0] == 0 else QType.F16


def _pad(n: int, align: int) -> int:
    return -(-n // align) * align


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def _expected_bytes(meta, target: QType) -> int:
    total = 0
    for t in meta.tensors:
        qt = _target(t.shape, t.type_name, target)
        bv, bb = GGML_QUANT_SIZES[qt]
        total += _pad(t.n_elements // bv * bb, meta.alignment)
    return total


def _check_room(meta, target: QType, folder: Path) -> None:
    import psutil

    need_disk = _expected_bytes(meta, target) + meta.data_start
    free_disk = shutil.disk_usage(folder).free
    if free_disk < need_disk * 1.1:
        raise LabsError(
            f"not enough disk to build {target.name}: it needs {need_disk / 2**20:,.0f} MiB in {folder}, "
            f"{free_disk / 2**20:,.0f} MiB are free"
        )
    largest = max(t.n_elements for t in meta.tensors)
    need_ram = largest * 4 * 4  # dequantized float32 and the quantizer's working copies
    free_ram = psutil.virtual_memory().available
    if free_ram < need_ram + 512 * 2**20:
        raise LabsError(
            f"not enough memory to build {target.name}: about {need_ram / 2**30:.1f} GiB needed, "
            f"{free_ram / 2**30:.1f} GiB available"
        )


def _convert(raw: np.ndarray, source: QType, target: QType, row_length: int) -> bytes:
    if source == QType.F32:
        x = raw.view(np.float32).reshape(-1, row_length)
    elif source == QType.F16:
        x = raw.view(np.float16).reshape(-1, row_length).astype(np.float32)
    else:
        row_bytes = row_length // GGML_QUANT_SIZES[source][0] * GGML_QUANT_SIZES[source][1]
        x = np.asarray(dequantize(raw.reshape(-1, row_bytes), source), dtype=np.float32).reshape(-1, row_length)
    if target == QType.F32:
        return x.astype(np.float32).tobytes()
    if target == QType.F16:
        return x.astype(np.float16).tobytes()
    return np.asarray(quantize(x, target)).tobytes()


def build_variant(name: str, *, source: Path | None = None, force: bool = False, progress: bool = True) -> Variant:
    """The variant's GGUF in the cache: reused when present and complete, else built (seconds)."""
    from tqdm.auto import tqdm

    name = check_variant(name)
    path = variant_path(name)
    if name == ORIGINAL:
        return describe(name, path)
    source = source or default_model_path()
    meta = read_gguf_meta(source)
    target = QType[name]
    expected = meta.data_start + _expected_bytes(meta, target)
    if path.exists() and not force and path.stat().st_size >= expected - meta.alignment * len(meta.tensors):
        try:
            return describe(name, path)
        except BadInput:
            pass  # a broken earlier copy: rebuild
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_room(meta, target, path.parent)
    started = time.perf_counter()
    raw = np.memmap(source, dtype=np.uint8, mode="r")
    tmp = path.with_suffix(".partial")
    kv = bytearray(raw[meta.kv_span[0] : meta.kv_span[1]])
    ft = meta.value_offsets["general.file_type"] - meta.kv_span[0]
    kv[ft : ft + 4] = struct.pack("<I", FILE_TYPE[name])
    plan, offset, infos = [], 0, []
    for t in meta.tensors:
        qt = _target(t.shape, t.type_name, target)
        bv, bb = GGML_QUANT_SIZES[qt]
        nbytes = t.n_elements // bv * bb
        infos.append(
            _string(t.name)
            + struct.pack("<I", len(t.shape))
            + b"".join(struct.pack("<Q", d) for d in t.shape)
            + struct.pack("<IQ", int(qt), offset)
        )
        plan.append((t, qt, nbytes))
        offset += _pad(nbytes, meta.alignment)
    try:
        with tmp.open("wb") as out:
            out.write(b"GGUF" + struct.pack("<IQQ", 3, len(meta.tensors), len(meta.value_offsets)))
            out.write(kv)
            for info in infos:
                out.write(info)
            out.write(b"\0" * (_pad(out.tell(), meta.alignment) - out.tell()))
            for t, qt, nbytes in tqdm(plan, desc=f"build {name}", unit="tensor", disable=not progress, leave=False):
                start = meta.data_start + t.offset
                data = _convert(np.asarray(raw[start : start + t.n_bytes]), QType[t.type_name], qt, t.shape[0])
                if len(data) != nbytes:
                    raise LabsError(f"building {name}: tensor {t.name} came out {len(data)} bytes, expected {nbytes}")
                out.write(data)
                out.write(b"\0" * (_pad(nbytes, meta.alignment) - nbytes))
        os.replace(tmp, path)  # a build interrupted half-way leaves no half file behind
    finally:
        tmp.unlink(missing_ok=True)
    v = describe(name, path)
    return Variant(v.name, v.path, v.file_bytes, v.tensor_types, time.perf_counter() - started)


def describe(name: str, path: Path) -> Variant:
    meta = read_gguf_meta(path)
    return Variant(name, path, path.stat().st_size, dict(Counter(t.type_name for t in meta.tensors)))


def variants_table(names: list[str], *, build: bool = True, progress: bool = True) -> pd.DataFrame:
    """File size, bits per weight and tensor-type mix of each variant (built when missing)."""
    rows = []
    for name in names:
        v = build_variant(name, progress=progress) if build else describe(name, variant_path(name))
        meta = read_gguf_meta(v.path)
        rows.append(
            {
                "variant": v.name,
                "file_MiB": round(v.file_bytes / 2**20, 1),
                "bits_per_weight": round(8 * meta.tensor_bytes / meta.n_params, 3),
                "tensor types": ", ".join(f"{k}x{n}" for k, n in sorted(v.tensor_types.items())),
                "build_s": round(v.build_s, 1) if v.build_s is not None else None,
                "path": str(v.path),
            }
        )
    return pd.DataFrame(rows)


def roundtrip_error(
    tensor: str = "blk.0.ffn_down.weight",
    formats: tuple[str, ...] = ("F16", "Q8_0", "Q5_0", "Q4_1", "Q4_0"),
    source: Path | None = None,
) -> pd.DataFrame:
    """One real weight tensor of the shipped model, quantized to each format and back: bits per value
    (block scales included) and the relative RMS error of the round trip."""
    source = source or default_model_path()
    meta = read_gguf_meta(source)
    found = next((t for t in meta.tensors if t.name == tensor), None)
    if found is None:
        raise BadInput(
            "tensor", tensor, "allowed: a tensor name of the model, e.g. " + ", ".join(t.name for t in meta.tensors[:3])
        )
    raw = np.memmap(source, dtype=np.uint8, mode="r")
    start = meta.data_start + found.offset
    original = np.frombuffer(
        _convert(np.asarray(raw[start : start + found.n_bytes]), QType[found.type_name], QType.F32, found.shape[0]),
        dtype=np.float32,
    ).reshape(-1, found.shape[0])
    rows = []
    for name in formats:
        qt = QType[name]
        if qt == QType.F16:
            back = original.astype(np.float16).astype(np.float32)
        else:
            back = np.asarray(dequantize(np.asarray(quantize(original, qt)), qt), dtype=np.float32).reshape(original.shape)
        bv, bb = GGML_QUANT_SIZES[qt]
        err = np.sqrt(np.mean((back - original) ** 2)) / np.sqrt(np.mean(original**2))
        rows.append({"format": name, "bits_per_value": 8 * bb / bv, "relative_rms_error": float(err)})
    return pd.DataFrame(rows).assign(tensor=tensor, shape=str(found.shape), stored_as=found.type_name)
