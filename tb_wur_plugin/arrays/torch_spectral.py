"""Spectral update ratios ‖ΔW‖₂ / ‖W‖₂ of PyTorch tensors, on their device: the
Golub–Kahan–Lanczos iterations of `arrays.spectral`, batched over the matrices of one shape
(`torch.bmm`), warm-started from a `spectral.SpectralState`. Used by `tb_wur_plugin.torch`
and the Keras PyTorch backend. Imports no TensorFlow module.

Matrices of few columns once oriented (`spectral.uses_gram`) take the equivalent symmetric Lanczos
iterations on their Gram matrix MᵀM (n × n, one matrix product each), whose largest
eigenvalue is σ₁²: the same Krylov space from the same start vector, so the same
iterations and stopping rule, but each iteration reads an n × n matrix once instead of an
m × n matrix twice, and the matrices are not stacked (copied) into a batch.
(benchmarks/RESULTS.md, "Spectral update ratios".)

On the CPU, matrices of few columns (`spectral.decomposed_on_cpu`) take neither: their Gram
matrices are decomposed at once (`torch.linalg.eigh`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from tb_wur_plugin.arrays import spectral
from tb_wur_plugin.arrays.numpy_math import ratios_from_norms

# Matrices of up to this many elements are stacked (copied) into one batch per shape;
# larger ones are iterated one at a time, without a copy.
STACKED_MAX_ELEMENTS = 1 << 20

WEIGHTS, UPDATE = "weights", "update"


def spectral_ratios(
    tags: Sequence[str],
    weights: Sequence[torch.Tensor],
    updates: Sequence[torch.Tensor],
    state: spectral.SpectralState,
    layout: str = spectral.LEADING_FAN_OUT,
) -> np.ndarray:
    """‖ΔW‖₂ / ‖W‖₂ of each parameter, W viewed as a matrix (`spectral.matrix_shape`).

    Args:
      tags: the parameters' tags (the keys of their warm-start vectors in `state`).
      weights: the parameters before the update, each of two or more dimensions.
      updates: their updates ΔW, of the same shapes.
      state: the warm-start vectors, read and updated.
      layout: `spectral.LEADING_FAN_OUT` (PyTorch's layout) or `TRAILING_FAN_OUT` (Keras).

    Returns:
      float64[n]: the ratios, with the protocol's conventions (0 when ΔW = 0, +inf when
      W = 0 ≠ ΔW, NaN when either is not finite).

    Raises:
      ValueError: a parameter has fewer than two dimensions, or an update another shape.
    """
    matrices, keys = [], []
    for tag, weight, update in zip(tags, weights, updates):
        if weight.shape != update.shape:
            raise ValueError(f"the update of {tag!r} has shape {tuple(update.shape)}, "
                             f"the parameter {tuple(weight.shape)}")
        shape = spectral.matrix_shape(weight.shape, layout)
        if shape is None:
            raise ValueError(f"{tag!r} of shape {tuple(weight.shape)} is not a matrix")
        for role, tensor in ((WEIGHTS, weight), (UPDATE, update)):
            matrix = _work(tensor.detach()).reshape(shape)
            matrices.append(matrix.mT if shape[1] > shape[0] else matrix)  # `oriented`
            keys.append((tag, role))
    norms = top_singular_values(matrices, keys, state)
    return ratios_from_norms(norms[1::2], norms[0::2])


def top_singular_values(
    matrices: Sequence[torch.Tensor], keys: Sequence[tuple[str, str]],
    state: spectral.SpectralState,
) -> np.ndarray:
    """σ₁ of each matrix (float64[n]; each with no more columns than rows:
    `spectral.oriented`), those of one shape, dtype and device together, each
    warm-started from its vector in `state` under its key, which is then replaced by the
    new one (kept only where σ₁ is finite)."""
    sigmas = np.zeros(len(matrices))
    groups: dict[tuple, list[int]] = {}
    for i, matrix in enumerate(matrices):
        if matrix.numel() > STACKED_MAX_ELEMENTS:
            groups[("alone", i)] = [i]
        else:
            groups.setdefault((tuple(matrix.shape), matrix.dtype, matrix.device), []).append(i)
    for indices in groups.values():
        shape = tuple(matrices[indices[0]].shape)
        starts = [state.get(keys[i], shape) for i in indices]
        if spectral.uses_gram(shape):  # the Gram matrices, stacked; no copy of the matrices
            grams = torch.stack([matrices[i].mT @ matrices[i] for i in indices])
            decomposed = (_gram_eigh(grams) if grams.device.type == "cpu"
                          and spectral.decomposed_on_cpu(shape) else None)
            values, vectors = decomposed or _gram_lanczos(grams, shape[0], starts)
        else:
            batch = (matrices[indices[0]][None] if len(indices) == 1
                     else torch.stack([matrices[i] for i in indices]))
            values, vectors = _lanczos(batch, starts)
        for j, i in enumerate(indices):
            sigmas[i] = values[j]
            if np.isfinite(values[j]):
                state.put(keys[i], shape, vectors[j])
    return sigmas


def _work(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float()


def _start(batch: torch.Tensor, starts: list[torch.Tensor | None]) -> torch.Tensor:
    """The unit start vectors [b, n] of the matrices `batch` [b, m, n] (or of their Gram
    matrices [b, n, n]): warm where given."""
    like = dict(dtype=batch.dtype, device=batch.device)
    cold = torch.as_tensor(spectral.cold_start(batch.shape[2]), **like)
    start = torch.stack([
        cold if s is None else spectral.warm_start(s.to(**like), cold) for s in starts
    ])
    return start / _safe(torch.linalg.vector_norm(start, dim=1, keepdim=True))


def _gram_eigh(gram: torch.Tensor) -> tuple[np.ndarray, torch.Tensor] | None:
    """σ₁ (float64[b]) and the top right singular vectors ([b, n]) of matrices M from their
    Gram matrices `gram` [b, n, n] = MᵀM, by one symmetric eigendecomposition of the batch:
    σ₁ = √λ₁ (NaN, and a zero vector, where a Gram matrix is not finite); None where the
    decomposition did not converge (LAPACK's error: the iterations are taken instead)."""
    finite = torch.isfinite(gram).flatten(1).all(1)
    try:
        values, vectors = torch.linalg.eigh(torch.where(finite[:, None, None], gram, 0.0))
    except torch.linalg.LinAlgError:
        return None
    sigmas = values[:, -1].clamp_min(0.0).sqrt().to(torch.float64).numpy()
    sigmas[~finite.numpy()] = np.nan
    return sigmas, torch.where(finite[:, None], vectors[..., -1], 0.0)


def _gram_lanczos(
    gram: torch.Tensor, rows: int, starts: list[torch.Tensor | None]
) -> tuple[np.ndarray, torch.Tensor]:
    """As `_lanczos`, by symmetric Lanczos iterations (full reorthogonalisation) on the
    Gram matrices `gram` [b, n, n] = MᵀM of matrices M of `rows` rows: σ₁ = √λ₁. A matrix
    whose estimate has settled (`spectral.settled`) leaves the batch after its round."""
    b, _, n = gram.shape
    limit = spectral.krylov_limit(rows, n)
    like = dict(dtype=gram.dtype, device=gram.device)
    basis = torch.zeros(b, limit + 1, n, **like)  # V
    basis[:, 0] = _start(gram, starts)
    sigmas, tops = np.zeros(b), torch.zeros(b, n, **like)
    active = np.arange(b)  # the batch's rows: which matrices are still iterated
    diagonal = upper = torch.zeros(b, 0, **like)
    scale = torch.zeros(b, 1, **like)  # the largest Rayleigh quotient so far
    previous = np.zeros(b)
    k = 0
    while True:
        alphas, betas = [], []
        for _ in range(min(spectral.ROUND, limit - k)):
            w = torch.bmm(gram, basis[:, k, :, None])[..., 0]
            alphas.append((w * basis[:, k]).sum(1, keepdim=True))
            scale = torch.maximum(scale, alphas[-1])
            w = _orthogonalised(w, basis[:, : k + 1])
            beta = torch.linalg.vector_norm(w, dim=1, keepdim=True)
            beta = torch.where(beta > spectral.GRAM_BREAKDOWN * scale, beta, 0.0)
            betas.append(beta)
            basis[:, k + 1] = torch.where(beta > 0, w / _safe(beta), 0.0)
            k += 1
        diagonal = torch.cat([diagonal, *alphas], 1)
        upper = torch.cat([upper, *betas], 1)
        eigenvalue, y = spectral.tridiagonal_top(diagonal.cpu().numpy(), upper.cpu().numpy())
        sigma = np.sqrt(np.maximum(eigenvalue, 0.0))  # NaN stays NaN
        done = spectral.settled(previous, sigma) | (k >= limit)
        if done.any():
            finished = np.flatnonzero(done)
            index = torch.as_tensor(finished, device=gram.device)
            top = torch.einsum("bk,bkn->bn", torch.as_tensor(y[finished], **like),
                               basis[index, :k])
            sigmas[active[finished]] = sigma[finished]
            tops[torch.as_tensor(active[finished], device=gram.device)] = top / _safe(
                torch.linalg.vector_norm(top, dim=1, keepdim=True))
            kept = np.flatnonzero(~done)
            if not kept.size:
                return sigmas, tops
            index = torch.as_tensor(kept, device=gram.device)
            gram, basis, diagonal, upper, scale = (
                t[index] for t in (gram, basis, diagonal, upper, scale))
            active, sigma = active[kept], sigma[kept]
        previous = sigma


def _lanczos(
    batch: torch.Tensor, starts: list[torch.Tensor | None]
) -> tuple[np.ndarray, torch.Tensor]:
    """σ₁ (float64[b]) and the top right singular vectors ([b, n], on the device) of the
    matrices `batch` [b, m, n], by the iterations and stopping rule of `arrays.spectral`."""
    b, m, n = batch.shape
    limit = spectral.krylov_limit(m, n)
    like = dict(dtype=batch.dtype, device=batch.device)
    start = _start(batch, starts)
    right = torch.zeros(b, limit + 1, n, **like)  # V: the right Krylov basis
    left = torch.zeros(b, limit, m, **like)  # U
    right[:, 0] = start
    alphas, betas = [], []
    beta = torch.zeros(b, 1, **like)
    u_previous = torch.zeros(b, m, **like)
    previous = np.zeros(b)
    k = 0
    while True:
        for _ in range(min(spectral.ROUND, limit - k)):
            u = torch.bmm(batch, right[:, k, :, None])[..., 0] - beta * u_previous
            u = _orthogonalised(u, left[:, :k])
            alpha = torch.linalg.vector_norm(u, dim=1, keepdim=True)
            u = u / _safe(alpha)
            left[:, k] = u
            v = torch.bmm(u[:, None], batch)[:, 0] - alpha * right[:, k]  # (uᵀM)ᵀ = Mᵀu
            v = _orthogonalised(v, right[:, : k + 1])
            beta = torch.linalg.vector_norm(v, dim=1, keepdim=True)
            right[:, k + 1] = v / _safe(beta)
            u_previous = u
            alphas.append(alpha)
            betas.append(beta)
            k += 1
        diagonal = torch.cat(alphas, 1).cpu().numpy()
        upper = torch.cat(betas, 1).cpu().numpy()
        sigma, y = spectral.bidiagonal_top(diagonal, upper)
        if k >= limit or spectral.converged(previous, sigma):
            break
        previous = sigma
    top = torch.einsum("bk,bkn->bn", torch.as_tensor(y, **like), right[:, :k])
    return sigma, top / _safe(torch.linalg.vector_norm(top, dim=1, keepdim=True))


def _orthogonalised(x: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """`x` [b, d] less its components along the orthonormal rows of `basis` [b, k, d], by
    classical Gram–Schmidt twice (full reorthogonalisation)."""
    if basis.shape[1] == 0:
        return x
    for _ in range(2):
        x = x - torch.bmm(basis.transpose(1, 2), torch.bmm(basis, x[..., None]))[..., 0]
    return x


def _safe(norm: torch.Tensor) -> torch.Tensor:
    """`norm` where positive, else 1 (a zero vector stays zero, not NaN)."""
    return torch.where(norm > 0, norm, torch.ones_like(norm))
