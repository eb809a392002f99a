"""Spectral update ratios ‖ΔW‖₂ / ‖W‖₂, the part every framework shares: the matrix view of
a parameter, the stopping rule, and the small bidiagonal problem solved on the host (numpy).

The largest singular value σ₁ of each matrix is found by Golub–Kahan–Lanczos
bidiagonalisation (a Krylov acceleration of power iteration on MᵀM) with full
reorthogonalisation, started from the top right singular vector the previous logged step
found for the same parameter plus the cold start vector (a warm start, see `cold_start`; the
fixed pseudo-random cold start vector alone the first time).
After k iterations M V_k = U_k B_k with B_k upper bidiagonal (diagonal α, superdiagonal β);
the largest singular value of B_k is a lower bound of σ₁ that grows with k. The iterations
run in rounds of ROUND; after each round the estimate is compared with the previous round's,
and the iterations stop once every matrix of the batch grew by at most INCREMENT_TOLERANCE
relative over a whole round (or its Krylov space is exhausted: k = min(m, n), where the
estimate is exact, or MAX_ITERATIONS). Plain power iteration converges as (σ₂/σ₁)^(2k),
far too slowly for the near-degenerate tops of trained weights and of Adam's updates; the
Krylov estimate converges much faster, and the rule above keeps it within 1e-3 of numpy's
SVD on trained weights and updates (tests/write/test_spectral.py).

Each framework's kernel (`torch_spectral`, `jax_spectral`, `tf_write.spectral`) runs the
iterations on the matrices' device; only α and β (two floats per matrix and iteration) come
to the host here. On the CPU the PyTorch and JAX kernels take a matrix of few columns
(`decomposed_on_cpu`) without iterations: one eigendecomposition of its Gram matrix. Imports
numpy only.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

# Iterations between two convergence checks (one host transfer of α, β each).
ROUND = 4
# Stop when every estimate grew by at most this, relative, over the last round.
INCREMENT_TOLERANCE = 3e-5
# The most iterations (Krylov dimension) per matrix and logged step.
MAX_ITERATIONS = 64

# Parameter layouts: where a parameter's fan-out dimension is.
# PyTorch: (out, in, *kernel) -> (out, in · prod(kernel)).
LEADING_FAN_OUT = "leading"
# Keras, TensorFlow, flax: (*kernel, in, out) -> (prod(kernel) · in, out), the transpose of
# fan-out × fan-in (the spectral norm is the same).
TRAILING_FAN_OUT = "trailing"
LAYOUTS = (LEADING_FAN_OUT, TRAILING_FAN_OUT)

# Oriented matrices (rows >= columns) of at most GRAM_COLUMNS columns, or of at most
# GRAM_TALL_COLUMNS columns and at least twice as many rows, are iterated on their Gram
# matrix MᵀM (its product costs ~ rows · columns² once; each iteration then saves a pass
# over the matrix).
GRAM_COLUMNS = 512
GRAM_TALL_COLUMNS = 1024

# Gram iterations: a residual smaller than this times the largest Rayleigh quotient so far
# ends the basis (an invariant subspace, to working precision: the remaining vector is
# rounding noise that no longer orthogonalises, and would add spurious eigenvalues above
# λ₁). Dropping it changes the eigenvalues by at most that much (Weyl), σ₁ by half.
GRAM_BREAKDOWN = 1e-4

# On the CPU, matrices of at most this many columns once oriented are not iterated: their
# Gram matrices are decomposed at once (`decomposed_on_cpu`).
DIRECT_MAX_COLUMNS = 64

# The seed of the start vector of a cold start.
COLD_START_SEED = 20231

def matrix_shape(shape: Sequence[int], layout: str) -> tuple[int, int] | None:
    """The shape of the matrix a parameter of `shape` is viewed as, or None for a parameter
    of fewer than two dimensions (no spectral ratio).

    Args:
      shape: the parameter's shape.
      layout: `LEADING_FAN_OUT` (PyTorch) or `TRAILING_FAN_OUT` (Keras, TensorFlow, JAX).

    Returns:
      (rows, columns) of the matrix, or None.

    Raises:
      ValueError: `layout` is not one of `LAYOUTS`.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    dims = [int(d) for d in shape]
    if len(dims) < 2:
        return None
    if layout == LEADING_FAN_OUT:
        return dims[0], int(np.prod(dims[1:]))
    return int(np.prod(dims[:-1])), dims[-1]


def oriented(shape: Sequence[int]) -> tuple[int, int]:
    """The shape the iterations take a matrix of `shape` in: transposed when it has more
    columns than rows, so that the right vectors span the smaller dimension (after
    `columns` iterations the Krylov space is all of it, and the estimate exact)."""
    rows, columns = int(shape[0]), int(shape[1])
    return (columns, rows) if columns > rows else (rows, columns)


def decomposed_on_cpu(shape: Sequence[int]) -> bool:
    """Whether, on the CPU, an oriented matrix (`oriented`) of `shape` takes no iterations:
    its Gram matrix (`uses_gram`) decomposed at once, σ₁ = √λ₁ to the precision of the
    decomposition. For so few columns one decomposition costs less there than the
    iterations' dozens of small ops a round (benchmarks/RESULTS.md, "Small matrices on the
    CPU")."""
    return int(shape[1]) <= DIRECT_MAX_COLUMNS


def uses_gram(shape: Sequence[int]) -> bool:
    """Whether an oriented matrix (`oriented`) of `shape` is iterated on its Gram matrix
    MᵀM (columns × columns): symmetric Lanczos iterations from the same start vector span
    the same Krylov space as the bidiagonalisation's, and the largest eigenvalue of MᵀM
    is σ₁², so the iterations and the stopping rule are the same; each iteration reads
    the columns × columns Gram matrix once instead of the matrix twice."""
    rows, columns = int(shape[0]), int(shape[1])
    return columns <= GRAM_COLUMNS or (columns <= GRAM_TALL_COLUMNS and rows >= 2 * columns)


def krylov_limit(rows: int, columns: int) -> int:
    """The most iterations for an oriented matrix (`oriented`) of this shape:
    MAX_ITERATIONS, or `columns` (the whole space: the estimate is then exact)."""
    return max(1, min(MAX_ITERATIONS, columns))


def cold_start(columns: int) -> np.ndarray:
    """The start vector of a matrix with no earlier vector: a fixed pseudo-random unit vector
    (float64[columns]), not orthogonal to any given direction but with probability 0."""
    vector = np.random.default_rng(COLD_START_SEED).standard_normal(columns)
    return vector / np.linalg.norm(vector)


def warm_start(previous, cold):
    """The start vector of a warm start, before normalisation: the previous logged step's
    top right singular vector plus the cold start vector (both unit vectors; numpy, torch,
    TensorFlow or JAX arrays alike). Where two top singular values are close the top vectors
    of consecutive logged steps may swap, and the previous vector alone would hold too little
    of the new top vector (the estimate would stall at the second singular value); with the
    cold start vector added it holds about as much of it as a cold start does."""
    return previous + cold


def _banded(alphas: np.ndarray, betas: np.ndarray, symmetric: bool):
    """The b matrices k × k with diagonal `alphas` and superdiagonal the first k − 1 of
    `betas` (and subdiagonal too when `symmetric`), float64, zero where not all finite; and
    which were finite (bool[b])."""
    alphas = np.asarray(alphas, np.float64)
    betas = np.asarray(betas, np.float64)
    b, k = alphas.shape
    finite = np.isfinite(alphas).all(1) & np.isfinite(betas[:, : k - 1]).all(1)
    matrices = np.zeros((b, k, k))
    index = np.arange(k)
    off = np.where(finite[:, None], betas[:, : k - 1], 0.0)
    matrices[:, index, index] = np.where(finite[:, None], alphas, 0.0)
    matrices[:, index[:-1], index[1:]] = off
    if symmetric:
        matrices[:, index[1:], index[:-1]] = off
    return matrices, finite


def bidiagonal_top(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest singular value of each B_k and its right singular vector.

    Args:
      alphas: float[b, k], the diagonals of the b bidiagonal matrices B_k.
      betas: float[b, k], their superdiagonals (the first k − 1 are used).

    Returns:
      (float64[b] largest singular values, float64[b, k] their right singular vectors);
      NaN and zeros for a B_k that is not finite.
    """
    matrices, finite = _banded(alphas, betas, symmetric=False)
    _, values, right = np.linalg.svd(matrices)
    top = np.where(finite, values[:, 0], np.nan)
    return top, np.where(finite[:, None], right[:, 0, :], 0.0)


def tridiagonal_top(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest eigenvalue of each symmetric tridiagonal T_k (the Lanczos matrix of a Gram
    matrix MᵀM) and its eigenvector.

    Args:
      alphas: float[b, k], the diagonals of the b matrices T_k.
      betas: float[b, k], their off-diagonals (the first k − 1 are used).

    Returns:
      (float64[b] largest eigenvalues, float64[b, k] their unit eigenvectors); NaN and
      zeros for a T_k that is not finite.
    """
    matrices, finite = _banded(alphas, betas, symmetric=True)
    values, vectors = np.linalg.eigh(matrices)  # ascending
    top = np.where(finite, values[:, -1], np.nan)
    return top, np.where(finite[:, None], vectors[:, :, -1], 0.0)


def settled(previous: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Which estimates have settled (bool[b]): grew by at most INCREMENT_TOLERANCE
    (relative) since the previous round, or are 0 or not finite."""
    grown = (current - previous <= INCREMENT_TOLERANCE * current) | (current == 0)
    return grown | ~np.isfinite(current)


def converged(previous: np.ndarray, current: np.ndarray) -> bool:
    """Whether every estimate has settled (`settled`)."""
    return bool(np.all(settled(previous, current)))


class SpectralState:
    """The warm-start vectors of a writer's spectral ratios, kept between logged steps: per
    key (a parameter's tag and role, "weights" or "update") the top right singular vector
    found at the previous logged step, on the framework's device, with the matrix shape it
    belongs to (a parameter whose shape changed starts cold)."""

    def __init__(self) -> None:
        self._vectors: dict[tuple[str, str], tuple[tuple[int, int], object]] = {}

    def get(self, key: tuple[str, str], shape: tuple[int, int]) -> object | None:
        """The vector kept for `key` when it belongs to a matrix of `shape`, else None."""
        kept = self._vectors.get(key)
        if kept is None or kept[0] != shape:
            return None
        return kept[1]

    def put(self, key: tuple[str, str], shape: tuple[int, int], vector: object) -> None:
        """Keep `vector` (the top right singular vector of the matrix of `shape`) for `key`."""
        self._vectors[key] = (shape, vector)

    def __len__(self) -> int:
        return len(self._vectors)

