"""Spectral update ratios ‖ΔW‖₂ / ‖W‖₂ of the TensorFlow-free writers against numpy's SVD
(`np.linalg.norm(M, 2)` of the parameter's matrix view, float64): the PyTorch and JAX
kernels on the weights and updates of real training steps (SGD with momentum, Adam, AdamW),
cold and warm-started; `jax.log_update_ratios(..., spectral=True)` read back from its event
files. The TensorFlow writers are in test_spectral_tf.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers import read_packed
from tb_wur_plugin import metadata
from tb_wur_plugin.arrays import spectral

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

from tb_wur_plugin.arrays import jax_spectral, torch_spectral  # noqa: E402
from tb_wur_plugin.jax import log_update_ratios  # noqa: E402
from tb_wur_plugin.writer import SummaryWriter  # noqa: E402

TOLERANCE = 1e-3  # the contract's: relative to numpy's SVD


def reference(weight: np.ndarray, update: np.ndarray, layout: str) -> float:
    """‖ΔW‖₂ / ‖W‖₂ of the matrix view, by numpy's SVD in float64."""
    shape = spectral.matrix_shape(weight.shape, layout)
    w = np.asarray(weight, np.float64).reshape(shape)
    u = np.asarray(update, np.float64).reshape(shape)
    return np.linalg.norm(u, 2) / np.linalg.norm(w, 2)


def relative_errors(actual, weights, updates, layout) -> np.ndarray:
    expected = [reference(w, u, layout) for w, u in zip(weights, updates)]
    return np.abs(np.asarray(actual) / np.asarray(expected) - 1)


# --- the matrix view -----------------------------------------------------------------------


def test_matrix_views():
    # PyTorch: (out, in, *kernel) -> (out, in · kernel); Keras/JAX: (*kernel, in, out)
    assert spectral.matrix_shape((16, 3, 5, 5), spectral.LEADING_FAN_OUT) == (16, 75)
    assert spectral.matrix_shape((5, 5, 3, 16), spectral.TRAILING_FAN_OUT) == (75, 16)
    assert spectral.matrix_shape((1000, 64), spectral.LEADING_FAN_OUT) == (1000, 64)
    assert spectral.matrix_shape((1000, 64), spectral.TRAILING_FAN_OUT) == (1000, 64)
    assert spectral.matrix_shape((64,), spectral.TRAILING_FAN_OUT) is None
    assert spectral.matrix_shape((), spectral.LEADING_FAN_OUT) is None
    assert spectral.oriented((3, 75)) == (75, 3)
    with pytest.raises(ValueError, match="layout"):
        spectral.matrix_shape((2, 2), "rows")


# --- PyTorch: real training steps -----------------------------------------------------------


class TorchNet(torch.nn.Module):
    """Embedding, Conv2d and square and rectangular Linear layers (random-init square
    matrices have σ₂/σ₁ near 1: the hard case of power iteration)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(300, 32)
        self.conv = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.square = torch.nn.Linear(256, 256)
        self.head = torch.nn.Linear(256, 10)

    def forward(self, tokens):
        h = self.embed(tokens)[:, None]  # [B, 1, 8, 32]
        h = torch.relu(self.conv(h)).mean(1).reshape(len(tokens), 256)
        return self.head(torch.tanh(self.square(h)))


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_torch_kernel_on_training_steps(optimizer):
    torch.manual_seed(0)
    net = TorchNet()
    make = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1),
    }[optimizer]
    opt = make(net.parameters())
    named = [(n.replace(".", "/"), p) for n, p in net.named_parameters() if p.ndim >= 2]
    state = spectral.SpectralState()
    generator = torch.Generator().manual_seed(1)
    worst = 0.0
    for step in range(9):
        tokens = torch.randint(0, 300, (16, 8), generator=generator)
        labels = torch.randint(0, 10, (16,), generator=generator)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(tokens), labels).backward()
        before = [p.detach().clone() for _, p in named]
        opt.step()
        if step % 4:
            continue
        updates = [p.detach() - b for b, (_, p) in zip(before, named)]
        ratios = torch_spectral.spectral_ratios([t for t, _ in named], before, updates, state)
        errors = relative_errors(ratios, [b.numpy() for b in before],
                                 [u.numpy() for u in updates], spectral.LEADING_FAN_OUT)
        worst = max(worst, errors.max())
        assert len(state) == 2 * len(named)  # a weights and an update vector each
    assert worst <= TOLERANCE


def test_torch_kernel_cold_and_warm_start(monkeypatch):
    """A random square matrix (σ₂/σ₁ ≈ 0.99) from a cold start; then, warm-started from the
    vector it found (plus the cold start vector: `spectral.warm_start`), the same matrix
    again takes at most half the rounds. (Too many columns for the Gram matrix.)"""
    rng = np.random.default_rng(3)
    matrix = torch.tensor(rng.standard_normal((600, 600)), dtype=torch.float32)
    assert not spectral.uses_gram(tuple(matrix.shape))
    expected = np.linalg.norm(matrix.double().numpy(), 2)
    rounds = []
    top = spectral.bidiagonal_top
    monkeypatch.setattr(spectral, "bidiagonal_top",
                        lambda a, b: rounds.append(a.shape[1]) or top(a, b))
    state = spectral.SpectralState()
    (cold,) = torch_spectral.top_singular_values([matrix], [("m", "weights")], state)
    cold_rounds, rounds[:] = len(rounds), []
    (warm,) = torch_spectral.top_singular_values([matrix], [("m", "weights")], state)
    assert abs(cold / expected - 1) <= TOLERANCE and abs(warm / expected - 1) <= TOLERANCE
    assert len(rounds) <= cold_rounds // 2
    # a shape that changed starts cold
    assert state.get(("m", "weights"), (600, 600)) is not None
    assert state.get(("m", "weights"), (600, 599)) is None


def test_torch_kernel_tall_matrices_on_their_gram_matrix(monkeypatch):
    """Tall matrices (an embedding, a feed-forward kernel taken transposed) go through the
    Gram matrix's Lanczos iterations: σ₁ within the tolerance of numpy's SVD for a
    near-degenerate top, a rank-deficient update (rows not updated) and a zero matrix; a
    warm start takes at most half the cold start's rounds; wide and square ones do not."""
    assert spectral.uses_gram((1024, 256)) and spectral.uses_gram((384, 384))
    assert spectral.uses_gram((2048, 1024))
    assert not spectral.uses_gram((1000, 1000)) and not spectral.uses_gram((1500, 800))
    assert not spectral.uses_gram((8192, 2048))  # too many columns
    rounds = []
    top = spectral.tridiagonal_top
    monkeypatch.setattr(spectral, "tridiagonal_top",
                        lambda a, b: rounds.append(a.shape[1]) or top(a, b))
    rng = np.random.default_rng(4)
    random = rng.standard_normal((1024, 256))  # σ₂/σ₁ ≈ 0.98
    sparse = np.zeros((1024, 256))
    sparse[rng.choice(1024, 40, replace=False)] = rng.standard_normal((40, 256)) * 1e-3
    matrices = [torch.tensor(m, dtype=torch.float32) for m in (random, sparse, 0 * random)]
    keys = [("random", "weights"), ("sparse", "update"), ("zero", "update")]
    expected = [np.linalg.norm(m.double().numpy(), 2) for m in matrices]
    state = spectral.SpectralState()
    cold = torch_spectral.top_singular_values(matrices, keys, state)
    cold_rounds, rounds[:] = len(rounds), []
    warm = torch_spectral.top_singular_values(matrices, keys, state)
    for got in (cold, warm):
        np.testing.assert_allclose(got[:2], expected[:2], rtol=TOLERANCE)
        assert got[2] == 0.0
    assert cold_rounds > 1 and len(rounds) <= cold_rounds // 2
    ratios = torch_spectral.spectral_ratios(  # (256, 1024) in PyTorch's layout: transposed
        ["ff"], [matrices[0].T.contiguous()], [matrices[1].T.contiguous()], state)
    assert rounds and ratios[0] == pytest.approx(expected[1] / expected[0], rel=TOLERANCE)


@pytest.mark.parametrize("direct", [True, False], ids=["decomposed", "iterated"])
def test_torch_kernel_conventions_and_small_matrices(direct, monkeypatch):
    """The conventions on small matrices, decomposed at once (the CPU's way for them,
    `spectral.decomposed_on_cpu`) and by the iterations (a GPU's way)."""
    if not direct:
        monkeypatch.setattr(spectral, "DIRECT_MAX_COLUMNS", 0)
    state = spectral.SpectralState()
    w = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    rank_one = torch.outer(torch.arange(1.0, 7.0), torch.ones(4)) * 1e-3  # breaks down at k=1
    cases = {
        "zero_update": (w, torch.zeros_like(w), 0.0),
        "zero_weights": (torch.zeros_like(w), w, math.inf),
        "nan_update": (w, torch.full_like(w, math.nan), math.nan),
        "rank_one": (w, rank_one, reference(w.numpy(), rank_one.numpy(), "leading")),
        # 2 x 7, 1 x 5: exact at the Krylov limit (taken with no more columns than rows)
        "wide": (torch.randn(2, 7), torch.randn(2, 7), None),
        "row": (torch.randn(1, 5), torch.randn(1, 5), None),
        "conv": (torch.randn(8, 3, 3, 3), torch.randn(8, 3, 3, 3) * 1e-2, None),
    }
    tags = list(cases)
    ratios = torch_spectral.spectral_ratios(
        tags, [c[0] for c in cases.values()], [c[1] for c in cases.values()], state)
    for tag, ratio, (weight, update, expected) in zip(tags, ratios, cases.values()):
        if expected is None:
            expected = reference(weight.numpy(), update.numpy(), "leading")
        if math.isnan(expected):
            assert math.isnan(ratio), tag
        elif expected in (0.0, math.inf):
            assert ratio == expected, tag
        else:
            assert ratio == pytest.approx(expected, rel=TOLERANCE), tag
    assert state.get(("nan_update", "update"), (6, 4)) is None  # not kept where not finite
    with pytest.raises(ValueError, match="not a matrix"):
        torch_spectral.spectral_ratios(["b"], [torch.ones(3)], [torch.ones(3)], state)


def test_torch_kernel_decomposes_small_matrices_on_the_cpu(monkeypatch):
    """Matrices of at most DIRECT_MAX_COLUMNS columns once oriented (tall, wide, square, a
    convolution's, float32 and float64, several of one shape) take the decomposition, one
    more column the iterations: σ₁ within the tolerance of numpy's SVD either way, and each
    finite matrix's top vector kept for the next logged step."""
    calls = []
    for name in ("_gram_eigh", "_gram_lanczos", "_lanczos"):
        original = getattr(torch_spectral, name)
        monkeypatch.setattr(torch_spectral, name, lambda *a, _f=original, _n=name: (
            calls.append((_n, tuple(a[0].shape))) or _f(*a)))
    limit = spectral.DIRECT_MAX_COLUMNS
    generator = torch.Generator().manual_seed(7)
    shapes = [(limit, limit), (300, limit), (limit, 300), (16, 3, 3, 3), (5, 2)]
    matrices = [torch.randn(*shape, generator=generator) for shape in shapes]
    matrices += [torch.randn(300, limit, generator=generator, dtype=torch.float64),
                 torch.randn(300, limit, generator=generator)]  # a second of one shape
    updates = [m * 1e-3 + 1e-4 * torch.randn(m.shape, generator=generator, dtype=m.dtype)
               for m in matrices]
    tags = [f"m{i}" for i in range(len(matrices))]
    state = spectral.SpectralState()
    ratios = torch_spectral.spectral_ratios(tags, matrices, updates, state)
    np.testing.assert_allclose(
        ratios, [reference(w.numpy(), u.numpy(), "leading") for w, u in zip(matrices, updates)],
        rtol=TOLERANCE)
    assert {name for name, _ in calls} == {"_gram_eigh"}, calls
    assert len(calls) == 5  # one decomposition per shape and dtype, weights and updates together
    assert len(state) == 2 * len(matrices)
    calls.clear()
    wider = torch.randn(limit + 1, limit + 1, generator=generator)
    (ratio,) = torch_spectral.spectral_ratios(["wider"], [wider], [wider * 1e-3 + 1e-4],
                                              spectral.SpectralState())
    assert ratio == pytest.approx(reference(wider.numpy(), (wider * 1e-3 + 1e-4).numpy(),
                                            "leading"), rel=TOLERANCE)
    assert [name for name, _ in calls] == ["_gram_lanczos"], calls


def test_torch_kernel_iterates_where_the_decomposition_fails(monkeypatch):
    """Where LAPACK's decomposition does not converge (`torch.linalg.LinAlgError`), the
    iterations take the batch: σ₁ still within the tolerance, no error."""
    def fails(*args, **kwargs):
        raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")

    monkeypatch.setattr(torch.linalg, "eigh", fails)
    generator = torch.Generator().manual_seed(8)
    weight = torch.randn(40, 20, generator=generator)
    update = weight * 1e-3 + 1e-4 * torch.randn(40, 20, generator=generator)
    (ratio,) = torch_spectral.spectral_ratios(["w"], [weight], [update], spectral.SpectralState())
    assert ratio == pytest.approx(reference(weight.numpy(), update.numpy(), "leading"),
                                  rel=TOLERANCE)


def test_torch_kernel_16_bit_and_large_matrices():
    """bfloat16 parameters in float32; a matrix above STACKED_MAX_ELEMENTS on its own."""
    generator = torch.Generator().manual_seed(5)
    small = torch.randn(64, 48, generator=generator).to(torch.bfloat16)
    large = torch.randn(1100, 1000, generator=generator) * 0.02
    ratios = torch_spectral.spectral_ratios(
        ["small", "large"], [small, large], [small * 0.01 + 0.001, large.square()],
        spectral.SpectralState(),
    )
    expected = [reference(small.float().numpy(), (small * 0.01 + 0.001).float().numpy(),
                          "leading"),
                reference(large.numpy(), large.square().numpy(), "leading")]
    np.testing.assert_allclose(ratios, expected, rtol=TOLERANCE)


# --- JAX ------------------------------------------------------------------------------------


def _jax_model(seed: int):
    rng = np.random.default_rng(seed)
    return {
        "embed": jnp.asarray(rng.standard_normal((200, 16)) * 0.1, jnp.float32),
        "conv": jnp.asarray(rng.standard_normal((3, 3, 1, 8)) * 0.3, jnp.float32),
        "square": {"kernel": jnp.asarray(rng.standard_normal((128, 128)) / 11, jnp.float32),
                   "bias": jnp.zeros(128)},
        "head": jnp.asarray(rng.standard_normal((128, 5)) * 0.1, jnp.float32),
    }


def _jax_loss(params, tokens, labels):
    h = params["embed"][tokens][..., None]  # [B, 8, 16, 1] NHWC
    h = jax.lax.conv_general_dilated(h, params["conv"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = jnp.tanh(h.mean(-1).reshape(len(tokens), 128) @ params["square"]["kernel"]
                 + params["square"]["bias"])
    return optax.softmax_cross_entropy_with_integer_labels(h @ params["head"], labels).mean()


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_log_update_ratios_spectral(tmp_path, optimizer):
    """`log_update_ratios(..., spectral=True)` against numpy's SVD on every logged step
    (the first cold, the later ones warm-started from the writer's vectors), read back from
    the event files: one spectral series per leaf of two or more dimensions, at the steps of
    the ratios, with the same skipped-step marker."""
    params = _jax_model(0)
    opt = {"sgd": optax.sgd(0.05, momentum=0.9), "adamw": optax.adamw(3e-3)}[optimizer]
    opt_state = opt.init(params)

    @jax.jit
    def train_step(params, opt_state, tokens, labels):
        grads = jax.grad(_jax_loss)(params, tokens, labels)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, updates

    rng = np.random.default_rng(1)
    expected: dict[str, dict[int, float]] = {}
    matrices = {"embed": ("embed",), "conv": ("conv",), "square/kernel": ("square", "kernel"),
                "head": ("head",)}
    with SummaryWriter(str(tmp_path)) as writer:
        for step in range(10):
            tokens = jnp.asarray(rng.integers(0, 200, (8, 8)))
            labels = jnp.asarray(rng.integers(0, 5, 8))
            new, opt_state, updates = train_step(params, opt_state, tokens, labels)
            if log_update_ratios(writer, params, updates, step, every=3, spectral=True):
                for tag, path in matrices.items():
                    p, u = params, updates
                    for key in path:
                        p, u = p[key], u[key]
                    expected.setdefault(tag, {})[step] = reference(
                        np.asarray(p), np.asarray(u), spectral.TRAILING_FAN_OUT)
            params = new
        # a zero update: ratio 0 and the step marked skipped in both series
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        log_update_ratios(writer, params, zeros, 12, spectral=True)
    run = read_packed(str(tmp_path))
    assert sorted(run.spectral) == sorted(matrices)  # no bias
    for tag, points in run.spectral.items():
        assert [s for s, _ in points] == [s for s, _ in run.ratios[tag]] == [0, 3, 6, 9, 12]
        for step, ratio in points[:-1]:
            assert float(ratio) == pytest.approx(expected[tag][step], rel=TOLERANCE), (tag, step)
        assert points[-1] == (12, 0.0)
        layer = next(c for c in run.contents.values()
                     if c["kind"] == metadata.KIND_PACKED_SPECTRAL)
        assert layer["layers"][0]["description"].startswith("Spectral update ratio of ")
    assert run.skipped[-1] == (12, 1.0)


def test_log_update_ratios_spectral_off_and_bad_argument(tmp_path):
    params = _jax_model(2)
    updates = jax.tree_util.tree_map(lambda x: x * 1e-3, params)
    with SummaryWriter(str(tmp_path)) as writer:
        log_update_ratios(writer, params, updates, 0)
        with pytest.raises(TypeError, match="spectral"):
            log_update_ratios(writer, params, updates, 1, spectral=1)
    run = read_packed(str(tmp_path))
    assert run.spectral == {} and len(run.ratios) == 5


def test_jax_kernel_cold_start_on_an_adam_update():
    """A random square kernel and one Adam update (which looks random too), cold."""
    params = {"w": jnp.asarray(np.random.default_rng(4).standard_normal((256, 256)) / 16,
                               jnp.float32)}
    opt = optax.adam(1e-3)
    grads = {"w": jnp.asarray(np.random.default_rng(5).standard_normal((256, 256)),
                              jnp.float32)}
    updates, _ = opt.update(grads, opt.init(params), params)
    ratios = jax_spectral.spectral_ratios(
        ["w"], [params["w"]], [updates["w"]], spectral.SpectralState())
    assert ratios[0] == pytest.approx(
        reference(np.asarray(params["w"]), np.asarray(updates["w"]), "trailing"),
        rel=TOLERANCE)


def test_jax_kernel_decomposes_small_matrices_on_the_cpu(monkeypatch):
    """As the PyTorch kernel: at most DIRECT_MAX_COLUMNS columns once oriented decomposed at
    once, one more iterated; σ₁ within the tolerance of numpy's SVD, 0 for a zero update,
    NaN for a NaN one."""
    calls = []
    for name in ("_gram_eigh", "_gram_lanczos", "_lanczos"):
        original = getattr(jax_spectral, name)
        monkeypatch.setattr(jax_spectral, name, lambda *a, _f=original, _n=name: (
            calls.append(_n) or _f(*a)))
    limit = spectral.DIRECT_MAX_COLUMNS
    rng = np.random.default_rng(9)
    shapes = [(limit, limit), (300, limit), (limit, 300), (3, 3, 2, 8), (5, 2)]
    weights = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    updates = [(w * 1e-3 + 1e-4 * rng.standard_normal(w.shape)).astype(np.float32)
               for w in weights]
    weights += [weights[0], weights[0]]
    updates += [np.zeros_like(weights[0]), np.full_like(weights[0], np.nan)]
    tags = [f"m{i}" for i in range(len(weights))]
    ratios = jax_spectral.spectral_ratios(
        tags, [jnp.asarray(w) for w in weights], [jnp.asarray(u) for u in updates],
        spectral.SpectralState())
    np.testing.assert_allclose(ratios[:-2], [reference(w, u, "trailing") for w, u in
                                             zip(weights[:-2], updates[:-2])], rtol=TOLERANCE)
    assert ratios[-2] == 0.0 and np.isnan(ratios[-1])
    assert set(calls) == {"_gram_eigh"}, calls
    calls.clear()
    wider = rng.standard_normal((limit + 1, limit + 1)).astype(np.float32)
    (ratio,) = jax_spectral.spectral_ratios(["wider"], [jnp.asarray(wider)],
                                            [jnp.asarray(wider * 1e-3 + 1e-4)],
                                            spectral.SpectralState())
    assert ratio == pytest.approx(reference(wider, wider * 1e-3 + 1e-4, "trailing"),
                                  rel=TOLERANCE)
    assert calls == ["_gram_lanczos"], calls


def test_jax_kernel_iterates_where_the_decomposition_fails(monkeypatch):
    """Where the decomposition of a finite Gram matrix gives NaNs (how jaxlib reports that
    LAPACK did not converge), the iterations take the batch: σ₁ within the tolerance."""
    monkeypatch.setattr(jnp.linalg, "eigh", lambda a, **kwargs: (
        jnp.full(a.shape[:-1], jnp.nan, a.dtype), jnp.full(a.shape, jnp.nan, a.dtype)))
    rng = np.random.default_rng(10)
    weight = rng.standard_normal((41, 23)).astype(np.float32)  # a shape traced nowhere else
    update = (weight * 1e-3 + 1e-4).astype(np.float32)
    (ratio,) = jax_spectral.spectral_ratios(["w"], [jnp.asarray(weight)], [jnp.asarray(update)],
                                            spectral.SpectralState())
    assert ratio == pytest.approx(reference(weight, update, "trailing"), rel=TOLERANCE)


@pytest.mark.parametrize("kernel", ["torch", "jax"])
def test_gram_iterations_stop_at_an_invariant_subspace(kernel, monkeypatch):
    """Rank-one and rank-two matrices (the update of a one-channel convolution, of a layer
    fed one example): the Gram iterations find the invariant subspace after one or two
    iterations (`spectral.GRAM_BREAKDOWN` ends the basis there): σ₁ within the tolerance,
    cold and warm. (Without the guard, the noise direction that one-channel convolution's
    rank-one SGD update leaves in test_log_update_ratios_spectral[sgd] put σ₁ 2.3× high.)"""
    rng = np.random.default_rng(6)
    cases = []
    for rows, columns in ((9, 8), (27, 8), (200, 16), (64, 64)) * 3:
        rank = len(cases) % 2 + 1
        matrix = sum(np.outer(rng.standard_normal(rows), rng.standard_normal(columns)) * 1e-3
                     for _ in range(rank))
        cases.append(matrix.astype(np.float32))
    assert all(spectral.uses_gram(m.shape) for m in cases)
    expected = [np.linalg.norm(m.astype(np.float64), 2) for m in cases]
    keys = [(str(i), "update") for i in range(len(cases))]
    state = spectral.SpectralState()
    # the iterations, also where the CPU would decompose these small matrices at once
    monkeypatch.setattr(spectral, "DIRECT_MAX_COLUMNS", 0)
    for scale in (1.0, 1.5):  # cold, then warm (the same directions, another size)
        if kernel == "torch":
            got = torch_spectral.top_singular_values(
                [torch.tensor(m * scale) for m in cases], keys, state)
        else:
            got = jax_spectral.top_singular_values(
                [(jnp.asarray(m * scale), m.shape) for m in cases], keys, state)
        np.testing.assert_allclose(got, np.multiply(expected, scale), rtol=TOLERANCE)
