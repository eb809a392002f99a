"""The heatmap's numbers: a run's ratios as a layers × steps matrix, binned into columns,
reduced, flagged, and encoded compactly for the wire. Pure numpy, no TensorBoard.

Columns cover a step range [start, end] without gaps or overlap. When the range holds at most
`max_columns` logged steps there is one column per logged step; otherwise the range is cut
into equal-width bins of ceil((end − start + 1) / max_columns) steps.

Reductions of the ratios r logged in one column (NaN, or a negative value, in the column
makes mean_log10, max and min NaN: a broken step is never averaged away):
- ``mean_log10``: 10 ** mean(log10 r) over the finite positive r; if there are none, +inf if
  some r is +inf, else 0.
- ``max`` / ``min``: the largest / smallest r (+inf and 0 included).
- ``last``: r at the column's last logged step, whatever it is.
A column in which a layer logged nothing is missing for that layer.
"""

from __future__ import annotations

import dataclasses
import functools
import decimal
import gzip
import json
import struct

import numpy as np

REDUCTIONS = ("mean_log10", "max", "min", "last")

# Classes of a cell of a RunMatrix.
MISSING, POSITIVE, ZERO, INF, BROKEN = range(5)


@dataclasses.dataclass(frozen=True)
class RunMatrix:
    """One run's ratios: `values[i, j]` is layer `tags[i]` at `steps[j]` where `present`."""

    tags: tuple[str, ...]
    steps: np.ndarray  # int64[S], sorted, distinct
    values: np.ndarray  # float64[L, S], NaN where not present
    present: np.ndarray  # bool[L, S]
    # bool[S]: steps the optimizer skipped (the skipped-step marker was 1); None: none
    skipped: np.ndarray | None = None

    @classmethod
    def from_series(
        cls, series: list[tuple[str, np.ndarray, np.ndarray]], skipped_steps=()
    ) -> "RunMatrix":
        """From [(tag, steps, values)], in row order. Steps within a series must be distinct.
        `skipped_steps`: the steps marked skipped; those where no ratio was logged are dropped."""
        if not series:
            return cls((), np.zeros(0, np.int64), np.zeros((0, 0)), np.zeros((0, 0), bool))
        steps = np.unique(np.concatenate([s for _, s, _ in series]).astype(np.int64))
        values = np.full((len(series), len(steps)), np.nan)
        present = np.zeros((len(series), len(steps)), bool)
        for row, (_, tag_steps, tag_values) in enumerate(series):
            columns = np.searchsorted(steps, tag_steps)
            values[row, columns] = tag_values
            present[row, columns] = True
        skipped = np.isin(steps, np.asarray(skipped_steps, np.int64))
        return cls(tuple(t for t, _, _ in series), steps, values, present, skipped)

    @property
    def skipped_mask(self) -> np.ndarray:
        """bool[S]: `skipped`, all False when None."""
        return self.skipped if self.skipped is not None else np.zeros(len(self.steps), bool)

    @functools.cached_property
    def classes(self) -> np.ndarray:
        """int8[L, S]: MISSING, POSITIVE (finite > 0), ZERO, INF or BROKEN (NaN, negative)."""
        v = self.values
        with np.errstate(invalid="ignore"):
            classes = np.select(
                [~self.present, (v > 0) & (v < np.inf), v == 0, v == np.inf],
                [MISSING, POSITIVE, ZERO, INF],
                BROKEN,
            )
        return classes.astype(np.int8)

    @functools.cached_property
    def log10_positive(self) -> np.ndarray:
        """float64[L, S]: log10 of the positive finite ratios, 0 elsewhere."""
        positive = self.classes == POSITIVE
        return np.log10(np.where(positive, self.values, 1.0))

    @property
    def nbytes(self) -> int:
        """Memory held, counting the derived arrays (computed on first use)."""
        return (
            self.steps.nbytes + self.values.nbytes * 2 + self.present.nbytes * 2
            + self.skipped_mask.nbytes
        )


@dataclasses.dataclass(frozen=True)
class Columns:
    """Column k covers steps [start[k], start[k + 1] − 1] (the last one up to `end`)."""

    start: np.ndarray  # int64[C]
    end: int
    first: np.ndarray  # float64[C]: first logged step in the column, NaN if none
    last: np.ndarray  # float64[C]
    count: np.ndarray  # uint32[C]: logged steps in the column


def make_columns(steps: np.ndarray, start: int, end: int, max_columns: int) -> Columns:
    """Columns over [start, end] for the logged `steps` (sorted, distinct)."""
    inside = steps[(steps >= start) & (steps <= end)]
    if len(inside) <= max_columns:
        bounds = inside.copy()
        if len(bounds):
            bounds[0] = start
        else:
            bounds = np.array([start], np.int64)
    else:
        width = -(-(end - start + 1) // max_columns)
        bounds = np.arange(start, end + 1, width, dtype=np.int64)
    limits = np.searchsorted(inside, np.append(bounds, end + 1))
    count = np.diff(limits).astype(np.uint32)
    filled = count > 0
    first = np.full(len(bounds), np.nan)
    last = np.full(len(bounds), np.nan)
    first[filled] = inside[limits[:-1][filled]]
    last[filled] = inside[limits[1:][filled] - 1]
    return Columns(bounds, end, first, last, count)


def skipped_per_column(matrix: RunMatrix, columns: Columns) -> np.ndarray:
    """uint32[C]: how many of each column's logged steps the optimizer skipped."""
    skipped = matrix.steps[matrix.skipped_mask]
    limits = np.searchsorted(skipped, np.append(columns.start, columns.end + 1))
    return np.diff(limits).astype(np.uint32)


def reduce_columns(
    matrix: RunMatrix, columns: Columns, reduction: str
) -> tuple[np.ndarray, np.ndarray]:
    """(values float64[L, C], missing bool[L, C]) of `matrix` reduced into `columns`."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {REDUCTIONS}")
    n_layers, n_columns = len(matrix.tags), len(columns.start)
    edges = np.searchsorted(matrix.steps, np.append(columns.start, columns.end + 1))
    lo, hi = edges[:-1], edges[1:]
    nonempty = hi > lo
    base, stop = lo[0], hi[-1]
    reduced = int(np.searchsorted(lo, stop))  # columns that start before the range ends

    def per_column(array: np.ndarray, ufunc: np.ufunc, neutral) -> np.ndarray:
        """ufunc over each column's steps [lo, hi) of `array` ([L, S]); `neutral` if none."""
        out = np.full((n_layers, n_columns), neutral, array.dtype)
        if stop > base:
            out[:, :reduced] = ufunc.reduceat(array[:, base:stop], lo[:reduced] - base, axis=1)
        out[:, ~nonempty] = neutral
        return out

    classes = matrix.classes
    count = {
        c: per_column((classes == c).astype(np.int32), np.add, 0)
        for c in (POSITIVE, ZERO, INF, BROKEN)
    }
    missing = (count[POSITIVE] + count[ZERO] + count[INF] + count[BROKEN]) == 0
    v = matrix.values
    if reduction == "last":
        index = np.where(matrix.present, np.arange(v.shape[1]), -1)
        last_index = np.maximum.accumulate(index, axis=1)[:, np.maximum(hi - 1, 0)]
        out = np.take_along_axis(v, np.maximum(last_index, 0), axis=1)
        return np.where(missing, np.nan, out), missing
    positive = count[POSITIVE] > 0
    if reduction == "mean_log10":
        logs = per_column(matrix.log10_positive, np.add, 0.0)
        out = np.where(
            positive,
            10.0 ** (logs / np.maximum(count[POSITIVE], 1)),
            np.where(count[INF] > 0, np.inf, 0.0),
        )
    elif reduction == "max":
        largest = per_column(np.where(classes == POSITIVE, v, 0.0), np.maximum, 0.0)
        out = np.where(count[INF] > 0, np.inf, largest)
    else:  # min
        smallest = per_column(np.where(classes == POSITIVE, v, np.inf), np.minimum, np.inf)
        out = np.where(count[ZERO] > 0, 0.0, smallest)
    out = np.where(count[BROKEN] > 0, np.nan, out)
    return np.where(missing, np.nan, out), missing


# --- flags ------------------------------------------------------------------------------


def flag_layers(matrix: RunMatrix, low: float, high: float) -> list[dict]:
    """The layers whose ratio left [low, high] at some logged step, worst first.

    Zero (nothing moved) counts as below the band. +inf (a zero weight that moved) and NaN
    (not finite) are reported separately and are not out of band. Steps the optimizer
    skipped (every ratio 0 by design) are not judged: `out_of_band_fraction` is over the
    other logged steps, and `skipped_steps` counts them.
    """
    flagged = []
    v, p = matrix.values, matrix.present
    skipped = p & matrix.skipped_mask
    judged = p & ~skipped
    with np.errstate(invalid="ignore"):
        finite = judged & np.isfinite(v) & (v >= 0)
        below = finite & (v < low)
        above = finite & (v > high)
        broken = p & ~(v >= 0)
        infinite = p & (v == np.inf)
    steps = matrix.steps
    for row, tag in enumerate(matrix.tags):
        logged = int(p[row].sum())
        n_judged = int(judged[row].sum())
        out = below[row] | above[row]
        if not (out.any() or broken[row].any() or infinite[row].any()):
            continue
        out_steps = steps[out]
        flagged.append(
            {
                "tag": tag,
                "logged_steps": logged,
                "skipped_steps": int(skipped[row].sum()),
                "out_of_band_fraction": float(out.sum() / n_judged) if n_judged else 0.0,
                "below_steps": int(below[row].sum()),
                "above_steps": int(above[row].sum()),
                "first_out_of_band_step": int(out_steps[0]) if len(out_steps) else None,
                "last_out_of_band_step": int(out_steps[-1]) if len(out_steps) else None,
                "nan_steps": int(broken[row].sum()),
                "first_nan_step": _first(steps[broken[row]]),
                "inf_steps": int(infinite[row].sum()),
                "first_inf_step": _first(steps[infinite[row]]),
            }
        )
    # layers gone NaN first, then the most often out of band
    flagged.sort(key=lambda f: (f["nan_steps"] == 0, -f["out_of_band_fraction"], f["tag"]))
    return flagged


def _first(steps: np.ndarray) -> int | None:
    return int(steps[0]) if len(steps) else None


# --- wire encoding ----------------------------------------------------------------------

# A cell is a uint16 code: a special value, or a ratio to 3 significant digits,
# m × 10**k with m in 100..999 and k in MIN_EXPONENT..MAX_EXPONENT.
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
}


def encode_cells(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """uint16 codes of `values`; ratios rounded to 3 significant digits, ties away from zero
    (as JavaScript's toPrecision(3) rounds the exact value)."""
    codes = np.full(values.shape, CODE_NAN, np.uint16)
    with np.errstate(invalid="ignore", divide="ignore"):
        codes[values == 0] = CODE_ZERO
        codes[values == np.inf] = CODE_INF
        positive = (values > 0) & np.isfinite(values)
        v = values[positive]
        exponent = np.floor(np.log10(v)).astype(np.int64) - 2
        scaled = v / 10.0 ** exponent.astype(np.float64)
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


def decode_cells(codes: np.ndarray) -> np.ndarray:
    """float64 values of `codes` (the inverse of `encode_cells` up to rounding); missing is
    NaN, tiny 0 and huge +inf, for tests and the headless report."""
    index = codes.astype(np.int64) - FIRST_VALUE_CODE
    mantissa = index % MANTISSAS + 100
    exponent = index // MANTISSAS + MIN_EXPONENT
    values = mantissa * 10.0 ** exponent.astype(np.float64)
    special = {CODE_MISSING: np.nan, CODE_NAN: np.nan, CODE_INF: np.inf, CODE_ZERO: 0.0,
               CODE_TINY: 0.0, CODE_HUGE: np.inf}
    for code, value in special.items():
        values[codes == code] = value
    return values


def _exact_three_digits(value: float) -> tuple[int, int]:
    exact = decimal.Decimal(value)
    exponent = exact.adjusted() - 2
    mantissa = int(exact.scaleb(-exponent).quantize(1, rounding=decimal.ROUND_HALF_UP))
    return mantissa, exponent


def pack(header: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """The gzip-compressed binary response: b"WUR1", uint32 header length, JSON header
    (padded to 8 bytes) naming each array's dtype, offset and length, then the arrays
    (little-endian, each at an offset that is a multiple of 8). A uint16 array is sent as
    "uint16_planes": all its high bytes, then all its low bytes (it compresses better)."""
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
    return gzip.compress(body, compresslevel=6, mtime=0)


def unpack(payload: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """The inverse of `pack`, compressed or not (for tests and clients written in Python)."""
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
