"""Spectral update ratios ‖ΔW‖₂ / ‖W‖₂ of JAX arrays, on their device: the Golub–Kahan–Lanczos
iterations of `arrays.spectral`, batched over the matrices of one shape, one jitted call per
round of iterations, warm-started from a `spectral.SpectralState`; matrices of few columns
(`spectral.uses_gram`) by the equivalent symmetric Lanczos iterations on their Gram
matrices MᵀM (σ₁ = √λ₁); on the CPU those of fewer still (`spectral.decomposed_on_cpu`)
by one eigendecomposition of their Gram matrices. Used by `tb_wur_plugin.jax` and the Keras
JAX backend. Imports no TensorFlow module."""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tb_wur_plugin.arrays import spectral
from tb_wur_plugin.arrays.jax_math import work
from tb_wur_plugin.arrays.numpy_math import ratios_from_norms

# Matrices of up to this many elements are stacked (copied) into one batch per shape;
# larger ones are iterated one at a time.
STACKED_MAX_ELEMENTS = 1 << 20

WEIGHTS, UPDATE = "weights", "update"


def spectral_ratios(
    tags: Sequence[str],
    weights: Sequence[jax.Array],
    updates: Sequence[jax.Array],
    state: spectral.SpectralState,
    layout: str = spectral.TRAILING_FAN_OUT,
) -> np.ndarray:
    """‖ΔW‖₂ / ‖W‖₂ of each parameter, W viewed as a matrix (`spectral.matrix_shape`).

    Args:
      tags: the parameters' tags (the keys of their warm-start vectors in `state`).
      weights: the parameters before the update, each of two or more dimensions.
      updates: their updates ΔW (an optax update), of the same shapes.
      state: the warm-start vectors, read and updated.
      layout: `spectral.TRAILING_FAN_OUT` (flax and Keras kernels, the default) or
        `LEADING_FAN_OUT`.

    Returns:
      float64[n]: the ratios, with the protocol's conventions (0 when ΔW = 0, +inf when
      W = 0 ≠ ΔW, NaN when either is not finite).

    Raises:
      ValueError: a parameter has fewer than two dimensions, or an update another shape.
    """
    matrices, keys = [], []
    for tag, weight, update in zip(tags, weights, updates):
        if np.shape(weight) != np.shape(update):
            raise ValueError(f"the update of {tag!r} has shape {np.shape(update)}, "
                             f"the parameter {np.shape(weight)}")
        shape = spectral.matrix_shape(np.shape(weight), layout)
        if shape is None:
            raise ValueError(f"{tag!r} of shape {np.shape(weight)} is not a matrix")
        for role, array in ((WEIGHTS, weight), (UPDATE, update)):
            matrices.append((array, shape))  # a view of `shape`, `oriented` when stacked
            keys.append((tag, role))
    norms = top_singular_values(matrices, keys, state)
    return ratios_from_norms(norms[1::2], norms[0::2])


def top_singular_values(
    matrices: Sequence[tuple[jax.Array, tuple[int, int]]], keys: Sequence[tuple[str, str]],
    state: spectral.SpectralState,
) -> np.ndarray:
    """σ₁ of each (array, matrix shape) pair (float64[n]), those of one shape and dtype
    together, each warm-started from its vector in `state` under its key, which is then
    replaced by the new one (kept only where σ₁ is finite)."""
    sigmas = np.zeros(len(matrices))
    groups: dict[tuple, list[int]] = {}
    for i, (array, shape) in enumerate(matrices):
        if int(np.prod(shape)) > STACKED_MAX_ELEMENTS:
            groups[("alone", i)] = [i]
        else:
            groups.setdefault((shape, jnp.result_type(array)), []).append(i)
    for indices in groups.values():
        shape = matrices[indices[0]][1]
        oriented = spectral.oriented(shape)
        starts = [state.get(keys[i], oriented) for i in indices]
        if spectral.uses_gram(oriented):
            grams = _grams([matrices[i][0] for i in indices], shape)
            on_cpu = all(device.platform == "cpu" for device in grams.devices())
            decomposed = (_gram_eigh(grams) if on_cpu and spectral.decomposed_on_cpu(oriented)
                          else None)
            values, vectors = decomposed or _gram_lanczos(grams, oriented[0], starts)
        else:
            batch = _stacked([matrices[i][0] for i in indices], shape)
            values, vectors = _lanczos(batch, starts)
        for j, i in enumerate(indices):
            sigmas[i] = values[j]
            if np.isfinite(values[j]):
                state.put(keys[i], oriented, vectors[j])
    return sigmas


@functools.partial(jax.jit, static_argnames="shape")
def _stacked(arrays: list[jax.Array], shape: tuple[int, int]) -> jax.Array:
    """The arrays as matrices of `shape`, `spectral.oriented`, stacked [b, rows, columns]."""
    matrices = [work(a).reshape(shape) for a in arrays]
    if shape[1] > shape[0]:
        matrices = [matrix.T for matrix in matrices]
    return jnp.stack(matrices)


@functools.partial(jax.jit, static_argnames="shape")
def _grams(arrays: list[jax.Array], shape: tuple[int, int]) -> jax.Array:
    """The Gram matrices MᵀM [b, n, n] of the arrays viewed as matrices of `shape`,
    `spectral.oriented` (MMᵀ of the matrix as viewed when it has more columns than rows)."""
    matrices = [work(a).reshape(shape) for a in arrays]
    if shape[1] > shape[0]:
        return jnp.stack([m @ m.T for m in matrices])
    return jnp.stack([m.T @ m for m in matrices])


def _gram_eigh(grams: jax.Array) -> tuple[np.ndarray, jax.Array] | None:
    """σ₁ (float64[b]) and the top right singular vectors ([b, n]) of matrices M from their
    Gram matrices `grams` [b, n, n] = MᵀM, by one symmetric eigendecomposition of the batch
    (`_top_eigenpairs`); None where it did not converge for a finite one (LAPACK's failure
    reads as NaNs: the iterations are taken instead)."""
    sigma, vectors, converged = _top_eigenpairs(grams)
    return (np.asarray(sigma, np.float64), vectors) if bool(converged) else None


@jax.jit
def _top_eigenpairs(grams: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """σ₁ = √λ₁ ([b]) and the top eigenvectors ([b, n]) of the Gram matrices `grams`
    [b, n, n] (NaN, and a zero vector, where a Gram matrix is not finite), and whether the
    decomposition converged for every finite one."""
    finite = jnp.isfinite(grams).all(axis=(1, 2))
    values, vectors = jnp.linalg.eigh(jnp.where(finite[:, None, None], grams, 0.0))
    top = values[:, -1]
    sigma = jnp.where(finite, jnp.sqrt(jnp.maximum(top, 0.0)), jnp.nan)
    converged = jnp.all(~finite | jnp.isfinite(top))
    return sigma, jnp.where(finite[:, None], vectors[..., -1], 0.0), converged


def _start(starts: list, n: int, dtype) -> jax.Array:
    """The start vectors [b, n] (not normalised): warm where given, else the cold one."""
    cold = jnp.asarray(spectral.cold_start(n), dtype)
    return jnp.stack([
        cold if s is None else spectral.warm_start(jnp.asarray(s, dtype), cold)
        for s in starts
    ])


def _gram_lanczos(grams: jax.Array, rows: int, starts: list) -> tuple[np.ndarray, jax.Array]:
    """As `_lanczos`, by symmetric Lanczos iterations (full reorthogonalisation) on the
    Gram matrices `grams` [b, n, n] of matrices of `rows` rows: σ₁ = √λ₁."""
    _, _, n = grams.shape
    limit = spectral.krylov_limit(rows, n)

    def estimate(alphas, betas):
        eigenvalue, y = spectral.tridiagonal_top(alphas, betas)
        return np.sqrt(np.maximum(eigenvalue, 0.0)), y  # NaN stays NaN

    carry = _gram_initial(_start(starts, n, grams.dtype), limit)
    return _iterated(grams, carry, limit, _gram_round, lambda c: (c[1], c[2]), estimate)


def _iterated(operand: jax.Array, carry: tuple, limit: int, run_round, coefficients,
              estimate) -> tuple[np.ndarray, jax.Array]:
    """Rounds of iterations (`run_round(operand, carry, k, count)`) until the stopping rule
    of `arrays.spectral`: after each, the α and β so far (`coefficients(carry)`, [b, limit]
    each) come to the host and `estimate(α, β)` gives σ₁ and the top vector's coordinates
    in the basis `carry[0]`. Returns σ₁ (float64[b]) and the unit top vectors [b, n]."""
    b = carry[0].shape[0]
    previous = np.zeros(b)
    k = 0
    while True:
        count = min(spectral.ROUND, limit - k)
        carry = run_round(operand, carry, k, count)
        k += count
        alphas, betas = jax.device_get(tuple(c[:, :k] for c in coefficients(carry)))
        sigma, y = estimate(alphas, betas)
        if k >= limit or spectral.converged(previous, sigma):
            break
        previous = sigma
    padded = np.zeros((b, limit + 1))
    padded[:, :k] = y
    return sigma, _combined(carry[0], jnp.asarray(padded, carry[0].dtype))


@functools.partial(jax.jit, static_argnames="limit")
def _gram_initial(start: jax.Array, limit: int) -> tuple:
    """The carry of the Gram iterations: the basis V [b, limit + 1, n] holding the
    normalised start vectors, α and β [b, limit]."""
    b, n = start.shape
    start = start / _safe(jnp.linalg.norm(start, axis=1, keepdims=True))
    basis = jnp.zeros((b, limit + 1, n), start.dtype).at[:, 0].set(start)
    return basis, jnp.zeros((b, limit), start.dtype), jnp.zeros((b, limit), start.dtype)


@functools.partial(jax.jit, static_argnames="count")
def _gram_round(grams: jax.Array, carry: tuple, k: int, count: int) -> tuple:
    """`count` symmetric Lanczos iterations from iteration `k` on (full reorthogonalisation
    against the whole padded basis: its rows not filled yet are zero)."""

    def iteration(j, carry):
        basis, alphas, betas = carry
        w = jnp.einsum("bmn,bn->bm", grams, basis[:, j])
        alphas = alphas.at[:, j].set(jnp.sum(w * basis[:, j], axis=1))
        scale = jnp.max(alphas, axis=1, keepdims=True)  # the largest Rayleigh quotient
        w = _orthogonalised(w, basis)
        beta = jnp.linalg.norm(w, axis=1, keepdims=True)
        beta = jnp.where(beta > spectral.GRAM_BREAKDOWN * scale, beta, 0.0)
        basis = basis.at[:, j + 1].set(jnp.where(beta > 0, w / _safe(beta), 0.0))
        return basis, alphas, betas.at[:, j].set(beta[:, 0])

    return jax.lax.fori_loop(k, k + count, iteration, carry)


def _lanczos(batch: jax.Array, starts: list) -> tuple[np.ndarray, jax.Array]:
    """σ₁ (float64[b]) and the top right singular vectors ([b, n], on the device) of the
    matrices `batch` [b, m, n], by the iterations and stopping rule of `arrays.spectral`."""
    _, m, n = batch.shape
    limit = spectral.krylov_limit(m, n)
    carry = _initial(batch, _start(starts, n, batch.dtype), limit)
    return _iterated(batch, carry, limit, _round, lambda c: (c[2], c[3]),
                     spectral.bidiagonal_top)


@functools.partial(jax.jit, static_argnames="limit")
def _initial(batch: jax.Array, start: jax.Array, limit: int) -> tuple:
    """The iterations' carry: the right basis V [b, limit + 1, n] holding the normalised
    start vectors, the left basis U [b, limit, m], α and β [b, limit], the last β [b, 1] and
    the last u [b, m]."""
    b, m, n = batch.shape
    start = start / _safe(jnp.linalg.norm(start, axis=1, keepdims=True))
    right = jnp.zeros((b, limit + 1, n), batch.dtype).at[:, 0].set(start)
    return (right, jnp.zeros((b, limit, m), batch.dtype), jnp.zeros((b, limit), batch.dtype),
            jnp.zeros((b, limit), batch.dtype), jnp.zeros((b, 1), batch.dtype),
            jnp.zeros((b, m), batch.dtype))


@functools.partial(jax.jit, static_argnames="count")
def _round(batch: jax.Array, carry: tuple, k: int, count: int) -> tuple:
    """`count` iterations from iteration `k` on (full reorthogonalisation against the whole
    padded bases: their rows not filled yet are zero)."""

    def iteration(j, carry):
        right, left, alphas, betas, beta, u_previous = carry
        u = jnp.einsum("bmn,bn->bm", batch, right[:, j]) - beta * u_previous
        u = _orthogonalised(u, left)
        alpha = jnp.linalg.norm(u, axis=1, keepdims=True)
        u = u / _safe(alpha)
        left = left.at[:, j].set(u)
        v = jnp.einsum("bmn,bm->bn", batch, u) - alpha * right[:, j]
        v = _orthogonalised(v, right)
        beta = jnp.linalg.norm(v, axis=1, keepdims=True)
        right = right.at[:, j + 1].set(v / _safe(beta))
        alphas = alphas.at[:, j].set(alpha[:, 0])
        betas = betas.at[:, j].set(beta[:, 0])
        return right, left, alphas, betas, beta, u

    return jax.lax.fori_loop(k, k + count, iteration, carry)


@jax.jit
def _combined(right: jax.Array, y: jax.Array) -> jax.Array:
    top = jnp.einsum("bk,bkn->bn", y, right)
    return top / _safe(jnp.linalg.norm(top, axis=1, keepdims=True))


def _orthogonalised(x: jax.Array, basis: jax.Array) -> jax.Array:
    """`x` [b, d] less its components along the orthonormal (or zero) rows of `basis`
    [b, k, d], by classical Gram–Schmidt twice."""
    for _ in range(2):
        x = x - jnp.einsum("bkd,bk->bd", basis, jnp.einsum("bkd,bd->bk", basis, x))
    return x


def _safe(norm: jax.Array) -> jax.Array:
    return jnp.where(norm > 0, norm, jnp.ones_like(norm))
