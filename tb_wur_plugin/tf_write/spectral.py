"""Spectral update ratios ‖ΔW‖₂ / ‖W‖₂ in TensorFlow, inside the traced write of `watch` and
the Keras callback: the Golub–Kahan–Lanczos iterations and stopping rule of
`tb_wur_plugin.arrays.spectral` as one `tf.while_loop` per batch of matrices of one shape,
warm-started from the previous logged step's vectors, kept per variable in non-trainable
variables (`warm_vectors`). Matrices of few columns once oriented (`spectral.uses_gram`)
take the equivalent symmetric Lanczos iterations on their Gram matrices MᵀM (σ₁ = √λ₁), as
`arrays.torch_spectral` and `arrays.jax_spectral` do: each iteration reads a columns ×
columns matrix once instead of the matrix twice, and the matrices are not stacked (copied)
into a batch."""

from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from tb_wur_plugin.arrays import spectral
from tb_wur_plugin.tf_write import tf_private

# Matrices of up to this many elements are stacked (copied) into one batch per shape;
# larger ones are iterated one at a time.
STACKED_MAX_ELEMENTS = 1 << 20


def matrix_shape(variable: Any) -> tuple[int, int] | None:
    """The matrix (`spectral.matrix_shape`, Keras's layout: (*kernel, in, out) as
    (prod(kernel) · in, out)) a variable is viewed as; None for one of fewer than two
    dimensions or of a shape not fully known (no spectral ratio)."""
    shape = variable.shape
    if not shape.is_fully_defined():
        return None
    return spectral.matrix_shape(shape.as_list(), spectral.TRAILING_FAN_OUT)


class _Vectors:
    """The warm-start vectors of the variables, created once per variable (held weakly)."""

    _lock = threading.Lock()
    _by_id: dict[int, tuple[Any, tuple[tf.Variable, tf.Variable]]] = {}

    @classmethod
    def of(cls, variable: tf.Variable, shape: tuple[int, int], dtype: tf.DType):
        with cls._lock:
            for key in [k for k, (ref, _) in cls._by_id.items() if ref() is None]:
                del cls._by_id[key]
            kept = cls._by_id.get(id(variable))
            if kept is not None and kept[0]() is variable:
                return kept[1]
            start = spectral.cold_start(spectral.oriented(shape)[1])
            with tf.init_scope():
                pair = tuple(
                    tf_private.local_variable(
                        tf.constant(start, dtype), name=f"wur_spectral_{role}"
                    )
                    for role in ("weights", "update")
                )
            cls._by_id[id(variable)] = (weakref.ref(variable), pair)
            return pair


def warm_vectors(variables: Sequence[Any]) -> list[tuple[tf.Variable, tf.Variable]]:
    """Per variable of two or more dimensions (`matrix_shape`), the two non-trainable
    variables holding the warm-start vectors of its weights and of its update (the top right
    singular vectors found at the previous logged step; a fixed pseudo-random unit vector
    before the first), made at the first call for that variable (outside any graph) and the
    same ones after."""
    pairs = []
    for variable in variables:
        shape = matrix_shape(variable)
        if shape is None:
            raise ValueError(f"{variable.name} of shape {variable.shape} is not a matrix")
        pairs.append(_Vectors.of(variable, shape, _work_dtype(variable.dtype)))
    return pairs


def spectral_ratios(
    before: Sequence[tf.Tensor],
    after: Sequence[tf.Tensor | tf.Variable],
    changes: Sequence[tf.Tensor | None],
    vectors: Sequence[tuple[tf.Variable, tf.Variable]],
) -> tf.Tensor:
    """‖ΔW‖₂ / ‖W‖₂ of each pair, W = `before[i]` viewed as a matrix (`matrix_shape`), ΔW =
    `changes[i]` where given, else `after[i]` − `before[i]`; the warm-start `vectors`
    (`warm_vectors`) are read, and replaced by the new ones where finite.

    Args:
      before: the values before the update, each of two or more dimensions (static shape).
      after: the values after it, tensors or variables.
      changes: per pair, Δw (or −Δw) or None.
      vectors: per pair, its (weights, update) warm-start vector variables.

    Returns:
      float64[n]: the ratios, with the protocol's conventions (0 when ΔW = 0, +inf when
      W = 0 ≠ ΔW, NaN when either is not finite).
    """
    matrices, transposed, vectors_of = [], [], []
    for old, new, change, (weight_vector, update_vector) in zip(before, after, changes, vectors):
        shape = spectral.matrix_shape(old.shape.as_list(), spectral.TRAILING_FAN_OUT)
        work = _work_dtype(old.dtype)
        weights = tf.cast(old, work)
        if change is None:
            update = tf.cast(new.value() if isinstance(new, tf.Variable) else new, work) - weights
        else:
            update = tf.cast(change, work)
        for matrix, vector in ((weights, weight_vector), (update, update_vector)):
            matrices.append(tf.reshape(matrix, shape))
            transposed.append(shape[1] > shape[0])  # `spectral.oriented`
            vectors_of.append(vector)
    # Those iterated on their Gram matrices go together by the Gram matrices' shape (the
    # matrices are not copied, and the Krylov limit depends on the columns only).
    groups: dict[tuple, list[int]] = {}
    for i, matrix in enumerate(matrices):
        oriented = spectral.oriented(matrix.shape.as_list())
        if spectral.uses_gram(oriented):
            groups.setdefault(("gram", oriented[1], matrix.dtype), []).append(i)
        elif matrix.shape.num_elements() > STACKED_MAX_ELEMENTS:
            groups[("alone", i)] = [i]
        else:
            groups.setdefault((tuple(matrix.shape.as_list()), matrix.dtype), []).append(i)
    sigmas: list[Any] = [None] * len(matrices)
    assigns = []
    for key, indices in groups.items():
        start = tf.stack([vectors_of[i].read_value() for i in indices])
        start = spectral.warm_start(
            start, tf.constant(spectral.cold_start(start.shape[1]), start.dtype)[None])
        if key[0] == "gram":
            grams = tf.stack([_gram(matrices[i], transposed[i]) for i in indices])
            sigma, top = _gram_lanczos(grams, start)
        else:
            batch = tf.stack([tf.transpose(matrices[i]) if transposed[i] else matrices[i]
                              for i in indices])
            sigma, top = _lanczos(batch, start)
        for j, i in enumerate(indices):
            sigmas[i] = sigma[j]
            assigns.append(vectors_of[i].assign(
                tf.where(tf.math.is_finite(sigma[j]), top[j], vectors_of[i].read_value()),
                read_value=False,
            ))
    with tf.control_dependencies(assigns):
        norms = tf.identity(tf.stack(sigmas))
    weights, updates = norms[0::2], norms[1::2]
    ratio = tf.where(tf.math.equal(updates, 0), tf.zeros_like(updates), updates / weights)
    finite = tf.math.is_finite(weights) & tf.math.is_finite(updates)
    return tf.where(finite, ratio, tf.fill(tf.shape(ratio), tf.constant(np.nan, tf.float64)))


def _work_dtype(dtype: tf.DType) -> tf.DType:
    return tf.float64 if dtype.base_dtype == tf.float64 else tf.float32


def _gram(matrix: tf.Tensor, transposed: bool) -> tf.Tensor:
    """The Gram matrix MᵀM of `matrix` `spectral.oriented` (MMᵀ of `matrix` when
    `transposed`), without a transposed copy."""
    return tf.matmul(matrix, matrix, transpose_a=not transposed, transpose_b=transposed)


def _gram_lanczos(grams: tf.Tensor, start: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """As `_lanczos`, by symmetric Lanczos iterations (full reorthogonalisation) on the Gram
    matrices `grams` [b, n, n] of oriented matrices (`spectral.oriented`), from the start
    vectors `start` [b, n] (the same Krylov space as the matrices' iterations, the same
    stopping rule): σ₁ = √λ₁ (float64[b]) and the top eigenvectors ([b, n]). A residual
    below `spectral.GRAM_BREAKDOWN` times the largest Rayleigh quotient so far ends a
    matrix's basis (its later vectors are zero)."""
    b, _, n = grams.shape.as_list()
    limit = spectral.krylov_limit(n, n)  # oriented: as many rows as columns, or more
    dtype = grams.dtype
    start = start / _safe(tf.norm(start, axis=1, keepdims=True))
    basis = tf.concat([start[:, None], tf.zeros([b, limit, n], dtype)], 1)
    slots = tf.range(limit + 1)

    def body(j, basis, alphas, betas, scale, previous, done):
        row = tf.cast(tf.equal(slots, j), dtype)  # the one-hot slot j of the basis
        v_j = tf.gather(basis, j, axis=1)
        w = tf.matmul(v_j[:, None], grams)[:, 0]  # (vᵀG)ᵀ = Gv: G is symmetric
        alpha = tf.reduce_sum(w * v_j, axis=1, keepdims=True)
        scale = tf.maximum(scale, alpha)  # the largest Rayleigh quotient so far
        w = _orthogonalised(w, basis[:, : j + 1])  # the vectors so far
        beta = tf.norm(w, axis=1, keepdims=True)
        beta = tf.where(beta > spectral.GRAM_BREAKDOWN * scale, beta, tf.zeros_like(beta))
        basis = basis + tf.roll(row, 1, 0)[None, :, None] * (w / _safe(beta))[:, None]
        alphas = alphas + row[None, :limit] * alpha
        betas = betas + row[None, :limit] * beta
        j = j + 1

        def check():
            sigma, _ = _tridiagonal_top(alphas, betas, j, vectors=False)
            settled = (sigma - previous <= spectral.INCREMENT_TOLERANCE * sigma) | (
                tf.equal(sigma, 0) | ~tf.math.is_finite(sigma))
            return sigma, tf.reduce_all(settled) | (j >= limit)

        previous, done = tf.cond(
            tf.equal(j % spectral.ROUND, 0) | (j >= limit), check, lambda: (previous, done)
        )
        return j, basis, alphas, betas, scale, previous, done

    carry = (
        tf.constant(0), basis, tf.zeros([b, limit], dtype), tf.zeros([b, limit], dtype),
        tf.zeros([b, 1], dtype), tf.zeros([b], tf.float64), tf.constant(False),
    )
    j, basis, alphas, betas, *_ = tf.while_loop(
        lambda j, *rest: ~rest[-1], body, carry, maximum_iterations=limit
    )
    sigma, y = _tridiagonal_top(alphas, betas, j)
    top = tf.einsum("bk,bkn->bn", tf.cast(y, dtype), basis[:, :limit])
    return sigma, top / _safe(tf.norm(top, axis=1, keepdims=True))


def _tridiagonal_top(
    alphas: tf.Tensor, betas: tf.Tensor, k: tf.Tensor, vectors: bool = True,
) -> tuple[tf.Tensor, tf.Tensor | None]:
    """√ of the largest eigenvalue, clipped at 0 (float64[b]), of the k × k symmetric
    tridiagonal T_k (diagonal α_0..k−1, off-diagonal β_0..k−2; `alphas` and `betas`
    [b, limit], k ≥ 1 a scalar tensor), NaN where T_k is not finite; and with `vectors`
    its unit eigenvector ([b, limit], zero beyond k), else None."""
    diagonal = tf.cast(alphas[:, :k], tf.float64)
    off = tf.cast(betas[:, : k - 1], tf.float64)
    finite = tf.reduce_all(tf.math.is_finite(diagonal), 1) & tf.reduce_all(
        tf.math.is_finite(off), 1)
    diagonal = tf.where(finite[:, None], diagonal, 0.0)
    off = tf.where(finite[:, None], off, 0.0)
    matrices = (tf.linalg.diag(diagonal)
                + tf.linalg.diag(off, k=1, num_rows=k, num_cols=k)
                + tf.linalg.diag(off, k=-1, num_rows=k, num_cols=k))
    if vectors:
        values, eigenvectors = tf.linalg.eigh(matrices)  # ascending
    else:
        values, eigenvectors = tf.linalg.eigvalsh(matrices), None
    sigma = tf.where(finite, tf.sqrt(tf.maximum(values[:, -1], 0.0)),
                     tf.constant(np.nan, tf.float64))
    if eigenvectors is None:
        return sigma, None
    vector = tf.pad(eigenvectors[:, :, -1], [[0, 0], [0, tf.shape(alphas)[1] - k]])
    return sigma, tf.where(finite[:, None], vector, 0.0)


def _lanczos(batch: tf.Tensor, start: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """σ₁ (float64[b]) and the top right singular vectors ([b, n]) of the matrices `batch`
    [b, m, n] (static shape), from the start vectors `start` [b, n], by the iterations and
    stopping rule of `arrays.spectral`."""
    b, m, n = batch.shape.as_list()
    limit = spectral.krylov_limit(m, n)
    dtype = batch.dtype
    start = start / _safe(tf.norm(start, axis=1, keepdims=True))
    right = tf.concat([start[:, None], tf.zeros([b, limit, n], dtype)], 1)
    slots = tf.range(limit + 1)

    def body(j, right, left, alphas, betas, beta, u_previous, previous, done):
        row = tf.cast(tf.equal(slots, j), dtype)  # the one-hot slot j of the bases
        v_j = tf.einsum("bkn,k->bn", right, row)
        u = tf.einsum("bmn,bn->bm", batch, v_j) - beta * u_previous
        u = _orthogonalised(u, left)
        alpha = tf.norm(u, axis=1, keepdims=True)
        u = u / _safe(alpha)
        left = left + row[None, :limit, None] * u[:, None]
        v = tf.einsum("bmn,bm->bn", batch, u) - alpha * v_j
        v = _orthogonalised(v, right)
        beta = tf.norm(v, axis=1, keepdims=True)
        right = right + tf.roll(row, 1, 0)[None, :, None] * (v / _safe(beta))[:, None]
        alphas = alphas + row[None, :limit] * alpha
        betas = betas + row[None, :limit] * beta
        j = j + 1

        def check():
            sigma, _ = _bidiagonal_top(alphas, betas, j, limit)
            settled = (sigma - previous <= spectral.INCREMENT_TOLERANCE * sigma) | (
                tf.equal(sigma, 0) | ~tf.math.is_finite(sigma))
            return sigma, tf.reduce_all(settled) | (j >= limit)

        previous, done = tf.cond(
            tf.equal(j % spectral.ROUND, 0) | (j >= limit), check, lambda: (previous, done)
        )
        return j, right, left, alphas, betas, beta, u, previous, done

    carry = (
        tf.constant(0), right, tf.zeros([b, limit, m], dtype), tf.zeros([b, limit], dtype),
        tf.zeros([b, limit], dtype), tf.zeros([b, 1], dtype), tf.zeros([b, m], dtype),
        tf.zeros([b], tf.float64), tf.constant(False),
    )
    j, right, _, alphas, betas, *_ = tf.while_loop(
        lambda j, *rest: ~rest[-1], body, carry, maximum_iterations=limit
    )
    sigma, y = _bidiagonal_top(alphas, betas, j, limit)
    top = tf.einsum("bk,bkn->bn", tf.cast(y, dtype), right[:, :limit])
    return sigma, top / _safe(tf.norm(top, axis=1, keepdims=True))


def _bidiagonal_top(
    alphas: tf.Tensor, betas: tf.Tensor, k: tf.Tensor, limit: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """The largest singular value (float64[b]) and its right singular vector ([b, limit],
    zero beyond k) of the k × k upper bidiagonal B_k (diagonal α_0..k−1, superdiagonal
    β_0..k−2), padded with zeros to limit × limit; NaN where B_k is not finite."""
    index = tf.range(limit)
    diagonal = tf.where(index < k, tf.cast(alphas, tf.float64), 0.0)
    upper = tf.where(index < k - 1, tf.cast(betas, tf.float64), 0.0)
    finite = tf.reduce_all(tf.math.is_finite(diagonal), 1) & tf.reduce_all(
        tf.math.is_finite(upper), 1)
    diagonal = tf.where(finite[:, None], diagonal, 0.0)
    upper = tf.where(finite[:, None], upper, 0.0)
    matrices = tf.linalg.diag(diagonal) + tf.linalg.diag(
        upper[:, : limit - 1], k=1, num_rows=limit, num_cols=limit)
    values, _, right = tf.linalg.svd(matrices)
    sigma = tf.where(finite, values[:, 0], tf.constant(np.nan, tf.float64))
    return sigma, tf.where(finite[:, None], right[:, :, 0], 0.0)


def _orthogonalised(x: tf.Tensor, basis: tf.Tensor) -> tf.Tensor:
    """`x` [b, d] less its components along the orthonormal (or zero) rows of `basis`
    [b, k, d], by classical Gram–Schmidt twice."""
    for _ in range(2):
        x = x - tf.matmul(tf.matmul(x[:, None], basis, transpose_b=True), basis)[:, 0]
    return x


def _safe(norm: tf.Tensor) -> tf.Tensor:
    return tf.where(norm > 0, norm, tf.ones_like(norm))
