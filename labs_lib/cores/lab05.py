"""Lab 05's build-its: llama.cpp's Q8_0 and Q4_0 blocks written and read (the mechanism: checked byte for byte
against llama.cpp's quantizer, then used for the lab's round-trip errors and bits per weight), and a lower bound
of the KL divergence from top-k log-probabilities."""

from __future__ import annotations

import math

import numpy as np
from gguf import GGMLQuantizationType as QType
from gguf.quants import dequantize, quantize

from ..quality import kl_lower_bound
from .base import Case, Core

BLOCK_VALUES = 32  # values per Q8_0 / Q4_0 block (ggml's QK8_0, QK4_0)


def quantize_blocks(weights: np.ndarray, fmt: str) -> bytes:
    """llama.cpp's bytes for `weights` (flattened row by row; a multiple of 32 values) in Q8_0 or Q4_0, one block
    of 32 values after another. Q8_0 (34 bytes a block): the scale d = absmax / 127 as a float16, then 32 int8 codes
    round(x / d), half away from zero. Q4_0 (18 bytes): d = m / -8, m the block's value of largest magnitude with
    its sign, as a float16, then 16 bytes, byte j holding the 4-bit codes of values j (low nibble) and j + 16 (high
    nibble), each code trunc(x / d + 8.5) clamped to 0..15. The codes divide by the float32 scale (times its
    inverse, as ggml does); an all-zero block has scale 0 and codes 0 (Q8_0) or 8 (Q4_0)."""
    blocks = np.asarray(weights, dtype=np.float32).reshape(-1, 32)
    if fmt == "Q8_0":
        d = np.abs(blocks).max(axis=1, keepdims=True) / 127
        inverse = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
        scaled = (blocks * inverse).astype(np.float64)  # exact: float32 values, so floor(|x| + 0.5) is C's roundf
        codes = (np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)).astype(np.int8)
        return np.concatenate([d.astype(np.float16).view(np.uint8), codes.view(np.uint8)], axis=1).tobytes()
    if fmt == "Q4_0":
        m = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1, keepdims=True), axis=1)
        d = m / -8
        inverse = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
        codes = np.clip(np.trunc(blocks * inverse + np.float32(8.5)), 0, 15).astype(np.uint8)
        packed = codes[:, :16] | (codes[:, 16:] << 4)
        return np.concatenate([d.astype(np.float16).view(np.uint8), packed], axis=1).tobytes()
    raise ValueError(f"fmt {fmt!r} is not allowed; allowed: Q8_0, Q4_0")


def dequantize_blocks(data: bytes, fmt: str) -> np.ndarray:
    """The float32 values Q8_0 or Q4_0 bytes stand for, one block after another (see quantize_blocks): scale x
    code, a Q4_0 code standing for code - 8."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if fmt == "Q8_0":
        blocks = raw.reshape(-1, 34)
        codes = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    elif fmt == "Q4_0":
        blocks = raw.reshape(-1, 18)
        packed = blocks[:, 2:]
        codes = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32) - 8
    else:
        raise ValueError(f"fmt {fmt!r} is not allowed; allowed: Q8_0, Q4_0")
    scales = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    return (scales * codes).reshape(-1)


def _quantize_reference(weights: np.ndarray, fmt: str) -> bytes:
    """gguf-py's quantizer (bit-exact with ggml-quants.c's reference rows): what builds lab 05's variants."""
    return np.asarray(quantize(np.asarray(weights, dtype=np.float32).reshape(-1, BLOCK_VALUES), QType[fmt])).tobytes()


def _dequantize_reference(data: bytes, fmt: str) -> np.ndarray:
    """gguf-py's dequantizer, what the lab reads variants with."""
    return np.asarray(dequantize(np.frombuffer(data, dtype=np.uint8), QType[fmt]), dtype=np.float32).reshape(-1)


def _block(seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(BLOCK_VALUES) * scale).astype(np.float32)


def _halves() -> np.ndarray:
    """A block whose scale is exactly 1 (absmax 127), holding values exactly halfway between two codes."""
    x = np.zeros(BLOCK_VALUES, dtype=np.float32)
    x[:6] = [127, 2.5, -2.5, 0.5, -0.5, 3.5]
    return x


def _negative_max() -> np.ndarray:
    x = _block(3)
    x[7] = -4.0  # the value of largest magnitude is negative
    return x


def _quantize_cases() -> list[Case]:
    zeros = np.zeros(BLOCK_VALUES, dtype=np.float32)
    return [
        Case((np.linspace(-1, 1, 32, dtype=np.float32), "Q8_0"), "Q8_0, one block from -1 to 1", "a Q8_0 block is the scale (absmax / 127) as a little-endian float16, then 32 int8 codes: 34 bytes"),
        Case((_halves(), "Q8_0"), "Q8_0, values exactly halfway (scale 1: 2.5, -2.5, 0.5 …)", "C's roundf rounds half away from zero (2.5 -> 3, -2.5 -> -3); np.round rounds half to even (2.5 -> 2)"),
        Case((np.concatenate([zeros, _block(1)]), "Q8_0"), "Q8_0, an all-zero block then a random one", "an all-zero block has scale 0 and codes 0: no division by zero (NaN codes), and each block its own scale"),
        Case((_block(15, 0.02), "Q8_0"), "Q8_0, a block of small weights (std 0.02, as in a model)", "the codes use the float32 scale (x times 1 / d), not the float16 one stored"),
        Case((_negative_max(), "Q4_0"), "Q4_0, a block whose largest value in magnitude is negative (-4)", "after the float16 scale, byte j holds value j's code in its low nibble and value j + 16's in its high nibble (not values 2j and 2j + 1)"),
        Case((_block(4), "Q4_0"), "Q4_0, a random block whose largest value in magnitude is positive", "Q4_0's scale is m / -8, m the value of largest magnitude with its sign (here a negative scale): m gets code 0 and the other end stops at 7 x |d|; absmax / 8 is right only when m is negative"),
        Case((zeros, "Q4_0"), "Q4_0, an all-zero block", "scale 0, and every code trunc(0 + 8.5) = 8: the bytes after the scale are 0x88"),
        Case((np.stack([_block(5), _block(6), _block(7), _block(8)]).reshape(2, 64), "Q4_0"), "Q4_0, a 2 x 64 matrix", "the values are taken row by row, 32 at a time: 4 blocks of 18 bytes"),
    ]  # fmt: skip


def _dequantize_cases() -> list[Case]:
    q8, q4 = (lambda x: _quantize_reference(x, "Q8_0")), (lambda x: _quantize_reference(x, "Q4_0"))
    return [
        Case((q8(np.linspace(0, 1, 32, dtype=np.float32)), "Q8_0"), "Q8_0, one block from 0 to 1", "the first 2 bytes are the scale, a little-endian float16; each value is scale x code"),
        Case((q8(np.linspace(-1, 1, 32, dtype=np.float32)), "Q8_0"), "Q8_0 with negative codes", "Q8_0's codes are signed int8: the byte 0xff is -1, not 255"),
        Case((q4(_block(4)), "Q4_0"), "Q4_0, one block", "a 4-bit code 0..15 stands for code - 8 (-8..7), times the scale"),
        Case((q4(_negative_max()), "Q4_0"), "Q4_0, a block with a negative scale", "byte j: the low nibble is value j, the high nibble value j + 16"),
        Case((q4(np.concatenate([_block(5), _block(6, 0.01)])), "Q4_0"), "two Q4_0 blocks, scales 100 times apart", "each 18-byte block has its own scale"),
    ]  # fmt: skip


def _kl_cases() -> list[Case]:
    ln = math.log
    return [
        Case(({0: ln(0.7), 1: ln(0.2)}, {0: ln(0.7), 1: ln(0.2)}), "the same distribution twice", "KL(P || P) = 0"),
        Case(({0: ln(0.9), 1: ln(0.1)}, {0: ln(0.5), 1: ln(0.5)}), "the whole distribution reported, P sure and Q unsure", "KL(P || Q) = sum p (log p - log q): weighted by the reference P, not by Q"),
        Case(({0: ln(0.7), 1: ln(0.2)}, {0: ln(0.5), 1: ln(0.3)}), "two tokens reported by both", "the inputs are log-probabilities; what neither reported is one 'rest' bucket, 1 - sum p against 1 - sum q"),
        Case(({0: ln(0.9)}, {0: ln(0.6), 2: ln(0.3)}), "a token only Q reported", "only tokens both reported keep their own terms; token 2 goes in the rest bucket"),
        Case(({0: 0.0}, {0: ln(0.8)}), "P puts all its mass on one token", "a rest of 0 adds nothing (0 log 0 = 0)"),
    ]  # fmt: skip


CORES: dict[str, Core] = {
    "quantize_blocks": Core(_quantize_reference, _quantize_cases, quantize_blocks, "import numpy as np"),
    "dequantize_blocks": Core(_dequantize_reference, _dequantize_cases, dequantize_blocks, "import numpy as np"),
    "kl_lower_bound": Core(kl_lower_bound, _kl_cases, kl_lower_bound, "import math\n\nimport numpy as np"),
}
