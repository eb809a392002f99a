"""The heatmap's wire encoding: cells as uint16 codes, and the binary `WUR1` payload that
carries them with a JSON header. Pure numpy, no TensorBoard.

A cell is a uint16 code: a special value, or a ratio to 3 significant digits,
m × 10**k with m in 100..999 and k in MIN_EXPONENT..MAX_EXPONENT. `CODES` names every
constant a decoder needs; the `/heatmap` header carries it, so that a client decodes from
the header alone.

The value of a code is the decimal number "{m}e{k}" read with correct rounding (the double
nearest to it: Python's `float("123e-7")`, JavaScript's `Number("123e-7")`), so that every
client decodes the same bits; `m * 10.0 ** k` is not that double for every code.
"""

from __future__ import annotations

import decimal
import functools
import gzip
import json
import struct
import zlib

import numpy as np

from tb_wur_plugin.judgement.threads import in_threads

CODE_MISSING, CODE_NAN, CODE_INF, CODE_ZERO, CODE_TINY, CODE_HUGE = range(6)
FIRST_VALUE_CODE = 6
MANTISSAS = 900
MIN_EXPONENT = -42  # 1.00e-40 is the smallest coded value ...
MAX_EXPONENT = 21  # ... and 9.99e+23 the largest
CODES = {
    "missing": CODE_MISSING,
    "nan": CODE_NAN,
    "inf": CODE_INF,
    "zero": CODE_ZERO,
    "tiny": CODE_TINY,
    "huge": CODE_HUGE,
    "first_value": FIRST_VALUE_CODE,
    "mantissas": MANTISSAS,
    "min_exponent": MIN_EXPONENT,
    "max_exponent": MAX_EXPONENT,
}


def encode_cells(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """The codes of heatmap cells.

    Ratios are rounded to 3 significant digits, ties away from zero (as JavaScript's
    toPrecision(3) rounds the exact value); a positive ratio below 1.00e-40 is CODE_TINY, a
    finite one that rounds to 1.00e24 or more CODE_HUGE; NaN and negative values are
    CODE_NAN.

    Args:
        values: float64 cells.
        missing: bool, the shape of `values`: cells where nothing was logged (CODE_MISSING,
            whatever the value).

    Returns:
        uint16 codes, the shape of `values`.
    """
    codes = np.empty(values.size, np.uint16)
    flat_values, flat_missing = values.reshape(-1), missing.reshape(-1)
    for start in range(0, values.size, _BLOCK_CELLS):  # each block's temporaries in cache
        block = slice(start, start + _BLOCK_CELLS)
        codes[block] = _encode_block(flat_values[block], flat_missing[block])
    return codes.reshape(values.shape)


# encode_cells takes this many cells at a time
_BLOCK_CELLS = 1 << 15


def _encode_block(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """`encode_cells` of flat `values` and `missing`."""
    codes = np.full(values.shape, CODE_NAN, np.uint16)
    with np.errstate(invalid="ignore", divide="ignore"):
        codes[values == 0] = CODE_ZERO
        codes[values == np.inf] = CODE_INF
        positive = (values > 0) & np.isfinite(values)
        v = values[positive]
        exponent = np.floor(np.log10(v)).astype(np.int64) - 2
        scaled = v / _powers_of_ten()[exponent - _LEAST_POWER]
        mantissa = np.floor(scaled + 0.5).astype(np.int64)
        near_tie = np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6
        for i in np.flatnonzero(near_tie):
            mantissa[i], exponent[i] = _exact_three_digits(float(v[i]))
        carry = mantissa >= 1000
        mantissa[carry] //= 10
        exponent[carry] += 1
        low = mantissa < 100
        mantissa[low] *= 10
        exponent[low] -= 1
    coded = FIRST_VALUE_CODE + (exponent - MIN_EXPONENT) * MANTISSAS + (mantissa - 100)
    coded = np.where(exponent < MIN_EXPONENT, CODE_TINY, coded)
    coded = np.where(exponent > MAX_EXPONENT, CODE_HUGE, coded)
    codes[positive] = coded.astype(np.uint16)
    codes[missing] = CODE_MISSING
    return codes


# the exponent (minus 2) of a positive finite float64's leading digit: -326 ... 306
_LEAST_POWER = -326


@functools.cache
def _powers_of_ten() -> np.ndarray:
    """float64: 10.0 ** k for k = _LEAST_POWER, ..., 308 (what `10.0 ** k` computes)."""
    return 10.0 ** np.arange(_LEAST_POWER, 309).astype(np.float64)


def held_arrays(held) -> tuple[np.ndarray, np.ndarray]:
    """The wire arrays of a run's held cells (`heatmap.Held`).

    Returns:
        (uint32[3n]: per run of held cells its layer row, first column and number of
        columns; float64[n]: the logged step whose ratio those cells hold).
    """
    runs = np.stack([held.rows, held.first, held.count], axis=1).astype(np.uint32)
    return runs.ravel(), held.step.astype(np.float64)


def decode_cells(codes: np.ndarray) -> np.ndarray:
    """The values of `codes`, the inverse of `encode_cells` up to its rounding (for tests
    and clients written in Python): a value code's value is the decimal "{m}e{k}" read with
    correct rounding (see the module docstring).

    Args:
        codes: codes made by `encode_cells`.

    Returns:
        float64 values, the shape of `codes`: missing and nan are NaN, tiny 0, huge +inf.
    """
    return _code_values()[np.asarray(codes, np.uint16)]


@functools.cache
def _code_values() -> np.ndarray:
    """float64[65536]: the value of every uint16 code (NaN past the last value code)."""
    values = np.full(1 << 16, np.nan)
    for code, value in ((CODE_MISSING, np.nan), (CODE_NAN, np.nan), (CODE_INF, np.inf),
                        (CODE_ZERO, 0.0), (CODE_TINY, 0.0), (CODE_HUGE, np.inf)):
        values[code] = value
    exponents = range(MIN_EXPONENT, MAX_EXPONENT + 1)
    decimals = [float(f"{m}e{k}") for k in exponents for m in range(100, 100 + MANTISSAS)]
    values[FIRST_VALUE_CODE:FIRST_VALUE_CODE + len(decimals)] = decimals
    values.flags.writeable = False
    return values


def _exact_three_digits(value: float) -> tuple[int, int]:
    exact = decimal.Decimal(value)
    exponent = exact.adjusted() - 2
    mantissa = int(exact.scaleb(-exponent).quantize(1, rounding=decimal.ROUND_HALF_UP))
    return mantissa, exponent


# gzip's fastest level: on heatmaps of 2 M cells a third of level 6's time (and less than
# level 3's, TensorBoard's own), for 1-3 % more bytes (`benchmarks/RESULTS.md`)
COMPRESSION_LEVEL = 1


def pack(header: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """The gzip-compressed binary payload of `header` and `arrays`.

    Layout: b"WUR1", the uint32 header length, the JSON header (padded with spaces to 8
    bytes) with an added key "arrays" naming each array's dtype, offset and length, then the
    arrays (little-endian, each at an offset that is a multiple of 8). A uint16 array is sent
    as dtype "uint16_planes": all its high bytes, then all its low bytes (it compresses
    better).

    Args:
        header: JSON-serialisable, finite numbers only, without a key "arrays".
        arrays: the arrays by name, each sent flattened (row-major).

    Returns:
        The payload, gzip-compressed.

    Raises:
        ValueError: `header` holds a non-finite number.
    """
    layout, chunks, offset = {}, [], 0
    for name, array in arrays.items():
        flat = np.ascontiguousarray(array).ravel()
        dtype = flat.dtype.name
        if dtype == "uint16":
            data = np.concatenate([(flat >> 8).astype(np.uint8), (flat & 0xFF).astype(np.uint8)])
            data, dtype = data.tobytes(), "uint16_planes"
        else:
            data = flat.astype(flat.dtype.newbyteorder("<")).tobytes()
        layout[name] = {"dtype": dtype, "offset": offset, "length": int(flat.size)}
        padding = -len(data) % 8
        chunks.append(data + b"\0" * padding)
        offset += len(data) + padding
    text = json.dumps({**header, "arrays": layout}, allow_nan=False).encode("utf-8")
    text += b" " * (-(len(text) + 8) % 8)
    body = b"WUR1" + struct.pack("<I", len(text)) + text + b"".join(chunks)
    return gzip_in_threads(body)


# gzip_in_threads deflates pieces of this many bytes apart
_PIECE_BYTES = 1 << 20
# A gzip member's header: no name, mtime 0, the fastest level's flag, OS unknown (RFC 1952).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"


def gzip_in_threads(data: bytes) -> bytes:
    """`data` as one gzip member (what `gzip.compress` makes, at COMPRESSION_LEVEL), its
    pieces of _PIECE_BYTES deflated by threads (judgement.threads; zlib runs outside the
    GIL).

    Each piece but the last ends with a sync flush (an empty stored block: the next piece's
    blocks start on a byte), so that the pieces' deflate streams, one after the other, are
    one stream; each piece is compressed without the previous one's last 32 KB as its
    dictionary (a few bytes more per piece).

    Args:
        data: the bytes to compress.

    Returns:
        The gzip member, read back by any gzip reader (`gzip.decompress`, a browser's
        `Content-Encoding: gzip`).
    """
    view = memoryview(data)
    starts = range(0, max(len(data), 1), _PIECE_BYTES)

    def deflate(start: int) -> bytes:
        compressor = zlib.compressobj(COMPRESSION_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        last = start + _PIECE_BYTES >= len(data)
        return compressor.compress(view[start:start + _PIECE_BYTES]) + compressor.flush(
            zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)

    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return b"".join([_GZIP_HEADER, *in_threads(deflate, starts), trailer])


def unpack(payload: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """The inverse of `pack` (for tests and clients written in Python).

    Args:
        payload: a payload made by `pack`, gzip-compressed or not.

    Returns:
        (header without its "arrays" key, the arrays by name, flat).

    Raises:
        ValueError: `payload` is not a WUR1 payload.
    """
    body = gzip.decompress(payload) if payload[:2] == b"\x1f\x8b" else payload
    if body[:4] != b"WUR1":
        raise ValueError("not a WUR1 payload")
    (length,) = struct.unpack("<I", body[4:8])
    header = json.loads(body[8 : 8 + length])
    base = 8 + length
    arrays = {}
    for name, spec in header.pop("arrays").items():
        start, n = base + spec["offset"], spec["length"]
        if spec["dtype"] == "uint16_planes":
            planes = np.frombuffer(body, np.uint8, 2 * n, start).astype(np.uint16)
            arrays[name] = (planes[:n] << 8) | planes[n:]
        else:
            arrays[name] = np.frombuffer(body, np.dtype(spec["dtype"]).newbyteorder("<"), n, start)
    return header, arrays
