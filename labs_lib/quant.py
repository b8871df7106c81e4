"""Weight variants of the shipped Gemma 3 270M, built once into the cache and reused.

The shipped file is Q4_K_M: llama.cpp's quantizer gave each tensor its own type (Q4_K, Q6_K, and the
Q5_0/Q8_0 fallbacks for rows of 640 values, which K-quants' 256-value blocks do not divide; norms F32).
It is the only copy of the model that reaches these machines, so it is **the reference**: a variant
dequantizes every tensor (gguf's dequantize) and re-quantizes it (gguf's quantize), choosing each
tensor's type by the rules of llama.cpp's `src/llama-quant.cpp` (`tensor_type` below):
- norms and other 1-D tensors stay as they are;
- the token embedding, which Gemma ties to the output layer, takes the output layer's rule: Q6_K unless
  the format is Q8_0, falling back to Q8_0 because 640 is not a multiple of 256;
- Q4_K_M gives attn_v and ffn_down of some layers (`_use_more_bits`) Q6_K;
- a type whose block does not divide a row falls back (Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0).
A "-PURE" variant (`llama-quantize --pure`) puts every matrix, the embedding included, in one format.
"F16" stores the reference's values in 16 bits: a check that the pipeline measures no loss where
there is none, not a better model. Re-quantizing already-quantized values is partly circular (a Q5_0
block re-quantizes to itself), so `change_from_reference` measures how many weights each variant
actually changed.

The metadata (262,144 tokenizer strings) is copied byte for byte with general.file_type patched,
which keeps a build to seconds instead of parsing every string.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections import Counter
from collections.abc import Callable
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
PURE = "-PURE"
VARIANTS = (ORIGINAL, *FILE_TYPE, *(f"{f}{PURE}" for f in FILE_TYPE if f.startswith("Q")))
BLOCK_CODEC_FORMATS = ("Q8_0", "Q4_0")  # the formats lab 05's participant writes a quantizer for
Quantizer = Callable[[np.ndarray, str], bytes]  # (weights, format) -> the format's bytes
Dequantizer = Callable[[bytes, str], np.ndarray]  # (bytes, format) -> float32 values
FALLBACK = {QType.Q4_K: QType.Q5_0, QType.Q5_K: QType.Q5_1, QType.Q6_K: QType.Q8_0}  # llama-quant.cpp


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


def _plan(meta, name: str) -> list[QType]:
    planned = planned_types(meta, name)
    return [QType[planned[t.name]] for t in meta.tensors]


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's choice of the layers whose attn_v and ffn_down Q4_K_M keeps in more bits."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def tensor_type(name: str, shape: tuple[int, ...], ftype: str, n_layers: int) -> QType | None:
    """The type llama.cpp's quantizer gives one tensor of this model (tied embedding, no experts, no
    imatrix) for an ftype ("Q4_0", "Q4_0-PURE", "F16", "Q4_K_M", …); None: the tensor is kept as it is.
    shape is GGUF's (ne[0] = the row length first)."""
    if len(shape) < 2 or not name.endswith("weight") or name.endswith("_norm.weight"):
        return None
    pure = ftype.endswith(PURE)
    base = ftype.removesuffix(PURE)
    if base in ("F16", "BF16", "F32"):
        return QType[base]
    t = QType.Q4_K if base == ORIGINAL else QType[base]
    if not pure:
        layer = int(name.split(".")[1]) if name.startswith("blk.") else 0
        if name in ("output.weight", "token_embd.weight"):  # Gemma ties them: the embedding takes the output rule
            t = QType.Q8_0 if shape[0] % GGML_QUANT_SIZES[t][0] else (t if t == QType.Q8_0 else QType.Q6_K)
        elif base == ORIGINAL and ("attn_v.weight" in name or "ffn_down" in name) and _use_more_bits(layer, n_layers):
            t = QType.Q6_K
    if shape[0] % GGML_QUANT_SIZES[t][0]:
        t = FALLBACK.get(t, QType.F16)
        if shape[0] % GGML_QUANT_SIZES[t][0]:
            t = QType.F16
    return t


def planned_types(meta, ftype: str) -> dict[str, str]:
    """Tensor name -> the type name llama.cpp's rules give it for ftype (kept tensors: their own type)."""
    n_layers = 1 + max((int(t.name.split(".")[1]) for t in meta.tensors if t.name.startswith("blk.")), default=0)
    planned = {}
    for t in meta.tensors:
        qt = tensor_type(t.name, t.shape, ftype, n_layers)
        planned[t.name] = t.type_name if qt is None else qt.name
    return planned


def _pad(n: int, align: int) -> int:
    return -(-n // align) * align


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def _expected_bytes(meta, plan: list[QType]) -> int:
    total = 0
    for t, qt in zip(meta.tensors, plan, strict=True):
        bv, bb = GGML_QUANT_SIZES[qt]
        total += _pad(t.n_elements // bv * bb, meta.alignment)
    return total


def _check_room(meta, name: str, plan: list[QType], folder: Path) -> None:
    import psutil

    need_disk = _expected_bytes(meta, plan) + meta.data_start
    free_disk = shutil.disk_usage(folder).free
    if free_disk < need_disk * 1.1:
        raise LabsError(
            f"not enough disk to build {name}: it needs {need_disk / 2**20:,.0f} MiB in {folder}, "
            f"{free_disk / 2**20:,.0f} MiB are free"
        )
    largest = max(t.n_elements for t in meta.tensors)
    need_ram = largest * 4 * 4  # dequantized float32 and the quantizer's working copies
    free_ram = psutil.virtual_memory().available
    if free_ram < need_ram + 512 * 2**20:
        raise LabsError(
            f"not enough memory to build {name}: about {need_ram / 2**30:.1f} GiB needed, {free_ram / 2**30:.1f} GiB available"
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
    from .progress import bar as tqdm

    name = check_variant(name)
    path = variant_path(name)
    if name == ORIGINAL:
        return describe(name, path)
    source = source or default_model_path()
    meta = read_gguf_meta(source)
    types = _plan(meta, name)
    expected = meta.data_start + _expected_bytes(meta, types)
    if path.exists() and not force and path.stat().st_size >= expected - meta.alignment * len(meta.tensors):
        try:
            return describe(name, path)
        except BadInput:
            pass  # a broken earlier copy: rebuild
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_room(meta, name, types, path.parent)
    started = time.perf_counter()
    raw = np.memmap(source, dtype=np.uint8, mode="r")
    tmp = path.with_suffix(f".{os.getpid()}.partial")  # two processes building the same variant write apart
    kv = bytearray(raw[meta.kv_span[0] : meta.kv_span[1]])
    ft = meta.value_offsets["general.file_type"] - meta.kv_span[0]
    kv[ft : ft + 4] = struct.pack("<I", FILE_TYPE[name.removesuffix(PURE)])
    plan, offset, infos = [], 0, []
    for t, qt in zip(meta.tensors, types, strict=True):
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


def _dequantized(raw: np.ndarray, meta, t) -> np.ndarray:
    """Tensor `t` of the file mapped as `raw`, as a flat float32 array."""
    start = meta.data_start + t.offset
    block = np.asarray(raw[start : start + t.n_bytes])
    return np.frombuffer(_convert(block, QType[t.type_name], QType.F32, t.shape[0]), dtype=np.float32)


def change_from_reference(name: str) -> dict[str, float]:
    """How much a variant changed the reference's weights: the share of weights moved by more than 16-bit
    rounding (a relative 2^-11, so storing in F16 counts as no change) and the relative RMS of the change
    (‖variant − reference‖ / ‖reference‖ over every weight). A format that re-quantizes a block to itself
    changes nothing there; the measured quality loss is then a lower bound of what the format would cost
    starting from the original 16-bit weights. Cached beside the variant."""
    import json

    name = check_variant(name)
    path = variant_path(name)
    if name == ORIGINAL:
        return {"weights_changed": 0.0, "relative_rms_change": 0.0}
    # the file's size and time, and the version of the definition above (2: the 16-bit rounding threshold)
    stamp = f"v2:{path.stat().st_size}:{path.stat().st_mtime_ns}"
    sidecar = path.with_suffix(".change.json")
    if sidecar.exists():
        saved = json.loads(sidecar.read_text())
        if saved.get("stamp") == stamp:
            return saved["change"]
    ref_meta, var_meta = read_gguf_meta(variant_path(ORIGINAL)), read_gguf_meta(path)
    ref_raw = np.memmap(variant_path(ORIGINAL), dtype=np.uint8, mode="r")
    var_raw = np.memmap(path, dtype=np.uint8, mode="r")
    changed = total = 0
    diff_sq = ref_sq = 0.0
    for ref_t, var_t in zip(ref_meta.tensors, var_meta.tensors, strict=True):
        a, b = _dequantized(ref_raw, ref_meta, ref_t), _dequantized(var_raw, var_meta, var_t)
        changed += int(np.count_nonzero(np.abs(b - a) > np.abs(a) * 2.0**-11))
        total += a.size
        diff_sq += float(np.sum((b.astype(np.float64) - a) ** 2))
        ref_sq += float(np.sum(a.astype(np.float64) ** 2))
    change = {"weights_changed": changed / total, "relative_rms_change": (diff_sq / ref_sq) ** 0.5}
    sidecar.write_text(json.dumps({"stamp": stamp, "change": change}))
    return change


def variants_table(names: list[str], *, build: bool = True, progress: bool = True) -> pd.DataFrame:
    """File size, bits per weight, tensor-type mix and change from the reference of each variant (built
    when missing)."""
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
                **{k: float(f"{x:.3g}") for k, x in change_from_reference(v.name).items()},
                "build_s": round(v.build_s, 1) if v.build_s is not None else None,
                "path": str(v.path),
            }
        )
    return pd.DataFrame(rows)


def roundtrip_error(
    tensor: str = "blk.0.ffn_down.weight",
    formats: tuple[str, ...] = ("F16", "Q8_0", "Q5_0", "Q4_1", "Q4_0"),
    source: Path | None = None,
    codec: tuple[Quantizer, Dequantizer] | None = None,
) -> pd.DataFrame:
    """One real weight tensor of the shipped model, quantized to each format and back: bits per value
    (block scales included: the bytes written x 8 / values) and the relative RMS error of the round trip.
    `codec` (a quantizer and a dequantizer) does the formats of BLOCK_CODEC_FORMATS; gguf's does the rest."""
    source = source or default_model_path()
    meta = read_gguf_meta(source)
    found = next((t for t in meta.tensors if t.name == tensor), None)
    if found is None:
        raise BadInput(
            "tensor", tensor, "allowed: a tensor name of the model, e.g. " + ", ".join(t.name for t in meta.tensors[:3])
        )
    original = _dequantized(np.memmap(source, dtype=np.uint8, mode="r"), meta, found).reshape(-1, found.shape[0])
    rows = []
    for name in formats:
        qt = QType[name]
        if qt == QType.F16:
            back = original.astype(np.float16).astype(np.float32)
            bits = 16.0
        elif codec is not None and name in BLOCK_CODEC_FORMATS:
            data = codec[0](original, name)
            back = np.asarray(codec[1](data, name), dtype=np.float32).reshape(original.shape)
            bits = 8 * len(data) / original.size
        else:
            back = np.asarray(dequantize(np.asarray(quantize(original, qt)), qt), dtype=np.float32).reshape(original.shape)
            bits = 8 * GGML_QUANT_SIZES[qt][1] / GGML_QUANT_SIZES[qt][0]
        err = np.sqrt(np.mean((back - original) ** 2)) / np.sqrt(np.mean(original**2))
        rows.append({"format": name, "bits_per_value": bits, "relative_rms_error": float(err)})
    return pd.DataFrame(rows).assign(tensor=tensor, shape=str(found.shape), stored_as=found.type_name)


def file_agreement(names: list[str], quantize_fn: Quantizer, tensors_per_format: int = 3) -> pd.DataFrame:
    """Whether `quantize_fn` writes what llama.cpp's quantizer wrote: for each built variant among `names`, the
    smallest `tensors_per_format` matrices its file stores in each format of BLOCK_CODEC_FORMATS, the reference's
    values (what the variant was built from) quantized by `quantize_fn` and compared with the file, block by block.
    A variant not built yet is skipped."""
    reference_path = default_model_path()
    reference = read_gguf_meta(reference_path)
    by_name = {t.name: t for t in reference.tensors}
    reference_raw = np.memmap(reference_path, dtype=np.uint8, mode="r")
    rows = []
    for name in names:
        path = variant_path(name)
        if name == ORIGINAL or not path.exists():
            continue
        meta = read_gguf_meta(path)
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        for fmt in BLOCK_CODEC_FORMATS:
            chosen = sorted((t for t in meta.tensors if t.type_name == fmt), key=lambda t: t.n_elements)
            for t in chosen[:tensors_per_format]:
                start = meta.data_start + t.offset
                theirs = np.asarray(raw[start : start + t.n_bytes]).reshape(-1, GGML_QUANT_SIZES[QType[fmt]][1])
                mine = np.frombuffer(quantize_fn(_dequantized(reference_raw, reference, by_name[t.name]), fmt), np.uint8)
                same = int((mine.reshape(theirs.shape) == theirs).all(axis=1).sum()) if mine.size == theirs.size else 0
                rows.append({"variant": name, "tensor": t.name, "format": fmt, "blocks": len(theirs), "blocks_equal": same})
    return pd.DataFrame(rows, columns=["variant", "tensor", "format", "blocks", "blocks_equal"])
