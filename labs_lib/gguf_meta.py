"""Read a GGUF file's metadata and tensor table without loading its arrays.

`gguf.GGUFReader` parses every array element (262,144 tokenizer strings for Gemma): ~15 s
here. This reader skips arrays it is not asked for and takes well under a second. Type
codes and block sizes come from the `gguf` package, so they follow the format's owners.
Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from .errors import BadInput

_SCALAR = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
_MAX_KEEP_ARRAY = 4096  # longer arrays (vocabularies) are skipped, only their length kept


@dataclass
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length
    type_name: str
    n_elements: int
    n_bytes: int
    offset: int = 0  # from the start of the data section


@dataclass
class GGUFMeta:
    path: Path
    version: int
    fields: dict[str, Any]  # values as the file holds them: int, float, str, bool or lists of those
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensors: list[GGUFTensor] = field(default_factory=list)
    kv_span: tuple[int, int] = (0, 0)  # byte range of the key/value section
    value_offsets: dict[str, int] = field(default_factory=dict)  # where each scalar value starts in the file
    alignment: int = 32
    data_start: int = 0  # where tensor data begins

    @property
    def architecture(self) -> str:
        return str(self.fields.get("general.architecture", ""))

    def arch_field(self, key: str, default: Any = None) -> Any:
        return self.fields.get(f"{self.architecture}.{key}", default)

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)


class _Cursor:
    def __init__(self, data: bytes, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise BadInput("GGUF file", str(self.path), "the file is truncated or corrupt; allowed: a complete GGUF v2/v3 file")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        length = int(self.unpack("<Q"))
        return self.take(length).decode("utf-8", errors="replace")

    def value(self, vtype: GGUFValueType, keep: bool = True) -> object:
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype == GGUFValueType.ARRAY:
            etype = GGUFValueType(self.unpack("<I"))
            count = int(self.unpack("<Q"))
            if etype in _SCALAR and not (keep and count <= _MAX_KEEP_ARRAY):
                self.take(struct.calcsize(_SCALAR[etype]) * count)
                return _Skipped(count)
            items = [self.value(etype, keep=keep and count <= _MAX_KEEP_ARRAY) for _ in range(count)]
            return items if keep and count <= _MAX_KEEP_ARRAY else _Skipped(count)
        return self.unpack(_SCALAR[vtype])


@dataclass
class _Skipped:
    length: int


def read_gguf_meta(path: str | Path, *, header_bytes: int = 64 * 1024 * 1024) -> GGUFMeta:
    """Parse the header, key/value metadata and tensor table of a GGUF file."""
    path = Path(path)
    if not path.is_file():
        raise BadInput("GGUF file", str(path), "allowed: a path to an existing .gguf file")
    with path.open("rb") as handle:
        data = handle.read(header_bytes)
    cur = _Cursor(data, path)
    if cur.take(4) != b"GGUF":
        raise BadInput("GGUF file", str(path), "it does not start with the GGUF magic; allowed: a GGUF model file")
    try:
        version = int(cur.unpack("<I"))
        n_tensors = int(cur.unpack("<Q"))
        n_kv = int(cur.unpack("<Q"))
        if version not in (2, 3) or n_kv > 100_000 or n_tensors > 1_000_000:
            raise ValueError
        fields: dict[str, Any] = {}
        lengths: dict[str, int] = {}
        offsets: dict[str, int] = {}
        kv_start = cur.pos
        for _ in range(n_kv):
            key = cur.string()
            vtype = GGUFValueType(cur.unpack("<I"))
            offsets[key] = cur.pos
            value = cur.value(vtype)
            if isinstance(value, _Skipped):
                lengths[key] = value.length
            else:
                fields[key] = value
                if isinstance(value, list):
                    lengths[key] = len(value)
        kv_end = cur.pos
        tensors = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = int(cur.unpack("<I"))
            shape = tuple(int(cur.unpack("<Q")) for _ in range(n_dims))
            qtype = GGMLQuantizationType(cur.unpack("<I"))
            offset = int(cur.unpack("<Q"))
            n_elements = 1
            for dim in shape:
                n_elements *= dim
            block_values, block_bytes = GGML_QUANT_SIZES[qtype]
            tensors.append(GGUFTensor(name, shape, qtype.name, n_elements, n_elements // block_values * block_bytes, offset))
        alignment = int(fields.get("general.alignment", 32))
        data_start = -(-cur.pos // alignment) * alignment
    except BadInput:
        raise
    except (ValueError, KeyError, struct.error):
        raise BadInput("GGUF file", str(path), "its header is not valid GGUF; allowed: a GGUF v2/v3 model file") from None
    return GGUFMeta(
        path=path,
        version=version,
        fields=fields,
        array_lengths=lengths,
        tensors=tensors,
        kv_span=(kv_start, kv_end),
        value_offsets=offsets,
        alignment=alignment,
        data_start=data_start,
    )
