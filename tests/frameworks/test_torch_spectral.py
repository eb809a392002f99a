"""`tb_wur_plugin.torch.watch(..., spectral=True)`: the spectral update ratios ‖ΔW‖₂ / ‖W‖₂ of
Linear, Conv2d and Embedding parameters over real training steps (SGD with momentum, Adam),
read back from the event files, against numpy's SVD of the parameters around each logged
update (PyTorch's matrix view: (out, in · prod(kernel)))."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import read_packed
from tb_wur_plugin import metadata
from tb_wur_plugin.arrays import spectral

torch = pytest.importorskip("torch")

from tb_wur_plugin.torch import watch  # noqa: E402

TOLERANCE = 1e-3  # the contract's: relative to numpy's SVD
MATRICES = ["embed/weight", "conv/weight", "head/weight"]


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(40, 12)
        self.conv = torch.nn.Conv1d(12, 16, 3, padding=1)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens).transpose(1, 2)  # (batch, 12, length)
        return self.head(torch.tanh(self.conv(h)).mean(-1))


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean((2, 3)))


def reference(before: torch.Tensor, after: torch.Tensor) -> float:
    shape = spectral.matrix_shape(tuple(before.shape), spectral.LEADING_FAN_OUT)
    w = before.double().numpy().reshape(shape)
    u = (after.double() - before.double()).numpy().reshape(shape)
    return float(np.linalg.norm(u, 2) / np.linalg.norm(w, 2))


def _train(model, optimizer, batches, logdir, every):
    """Steps under watch(spectral=True); {tag: {step: numpy reference}} of logged steps."""
    expected: dict[str, dict[int, float]] = {}
    named = dict(model.named_parameters())
    with watch(optimizer, model, logdir, every=every, spectral=True):
        for step, (x, y) in enumerate(batches):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            before = {n: p.detach().clone() for n, p in named.items()}
            optimizer.step()
            if step % every == 0:
                for name, p in named.items():
                    if p.dim() >= 2:
                        expected.setdefault(name.replace(".", "/"), {})[step] = reference(
                            before[name], p.detach())
    return expected


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_spectral_ratios_of_embedding_conv_and_linear_match_numpy(tmp_path, name):
    torch.manual_seed(0)
    model = Model()
    optimizer = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if name == "sgd"
                 else torch.optim.Adam(model.parameters(), lr=3e-3))
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 40, (8, 6), generator=generator),
                torch.randint(0, 5, (8,), generator=generator)) for _ in range(7)]
    expected = _train(model, optimizer, batches, str(tmp_path), every=2)
    run = read_packed(str(tmp_path))
    assert sorted(run.spectral) == sorted(MATRICES)  # no bias: fewer than two dimensions
    for tag, points in run.spectral.items():
        assert [s for s, _ in points] == [s for s, _ in run.ratios[tag]] == [0, 2, 4, 6]
        for step, ratio in points:
            assert float(ratio) == pytest.approx(expected[tag][step], rel=TOLERANCE), (tag, step)
    layer = next(c for c in run.contents.values() if c["kind"] == metadata.KIND_PACKED_SPECTRAL)
    assert layer["layers"][0]["description"].startswith("Spectral update ratio of ")


def test_conv2d_kernel_folds_its_spatial_and_input_dimensions(tmp_path):
    torch.manual_seed(2)
    model = ConvNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(3)
    batches = [(torch.randn(4, 3, 9, 9, generator=generator),
                torch.randint(0, 4, (4,), generator=generator)) for _ in range(3)]
    expected = _train(model, optimizer, batches, str(tmp_path), every=1)
    run = read_packed(str(tmp_path))
    assert sorted(run.spectral) == ["conv/weight", "head/weight"]
    for step, ratio in run.spectral["conv/weight"]:
        assert float(ratio) == pytest.approx(expected["conv/weight"][step], rel=TOLERANCE)


def test_a_skipped_step_is_zero_and_marked_in_both_series(tmp_path):
    """A GradScaler step that skips the update (an infinite gradient): spectral ratio 0 with
    the skipped-step marker, as the Frobenius ratios."""
    torch.manual_seed(4)
    model = torch.nn.Linear(6, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    with watch(optimizer, model, str(tmp_path), every=1, spectral=True):
        for step in range(2):
            optimizer.zero_grad()
            scaler.scale(model(torch.randn(4, 6)).pow(2).mean()).backward()
            if step == 1:
                model.weight.grad.view(-1)[0] = float("inf")
            scaler.step(optimizer)
            scaler.update()
    run = read_packed(str(tmp_path))
    points = run.spectral["weight"]
    assert [s for s, _ in points] == [0, 1] and points[0][1] > 0 and points[1] == (1, 0.0)
    assert run.skipped[-1] == (1, 1.0)


def test_spectral_off_by_default_and_bad_argument(tmp_path):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="spectral"):
        watch(optimizer, model, str(tmp_path / "bad"), spectral=1)
    with watch(optimizer, model, str(tmp_path / "run"), every=1):
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()
    run = read_packed(str(tmp_path / "run"))
    assert run.spectral == {} and sorted(run.ratios) == ["bias", "weight"]
