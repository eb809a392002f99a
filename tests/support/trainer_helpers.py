"""Shared by the trainer-callback tests: a numpy reference of every update's ratios, taken
from the torch optimizer's own step hooks (independent of tb_wur_plugin), and the
TensorBoard read-back of a run's ratios and scalar tags in both loaders."""

from __future__ import annotations

import numpy as np
import torch

from framework_servers import both_loaders, export


class UpdateReference:
    """{tag: {step: ratio}} of every `optimizer.step()` of `model`'s trainable parameters,
    steps counted from `first_step` (or, `step_of` given, the step it returns before each
    update); `prefix` goes before each tag. `spectral`: the same of
    ‖ΔW‖₂ / ‖W‖₂ (numpy's SVD, the parameter viewed as (out, everything else)) of the
    parameters of two or more dimensions."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
                 first_step: int = 0, prefix: str = "", step_of=None) -> None:
        self.model, self.step, self.prefix, self.step_of = model, first_step, prefix, step_of
        self.updates: list[int] = []  # the step of each update
        self.ratios: dict[str, dict[int, float]] = {}
        self.spectral: dict[str, dict[int, float]] = {}
        self._before: dict[str, np.ndarray] = {}
        self._hooks = [optimizer.register_step_pre_hook(self._pre),
                       optimizer.register_step_post_hook(self._post)]

    def _params(self):
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    def _pre(self, *_):
        if self.step_of is not None:
            self.step = int(self.step_of())
        self._before = {n: p.detach().double().numpy().copy() for n, p in self._params()}

    def _post(self, *_):
        for name, p in self._params():
            before = self._before[name]
            after = p.detach().double().numpy()
            with np.errstate(divide="ignore", invalid="ignore"):  # zero biases: inf (contract)
                ratio = np.linalg.norm(after - before) / np.linalg.norm(before)
            tag = self.prefix + name.replace(".", "/")
            self.ratios.setdefault(tag, {})[self.step] = ratio
            if before.ndim >= 2:
                matrix = before.reshape(before.shape[0], -1)
                update = (after - before).reshape(matrix.shape)
                self.spectral.setdefault(tag, {})[self.step] = (
                    np.linalg.norm(update, 2) / np.linalg.norm(matrix, 2))
        self.updates.append(self.step)
        self.step += 1

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()

    def at(self, steps: list[int], spectral: bool = False) -> dict[str, dict[int, float]]:
        series = self.spectral if spectral else self.ratios
        return {tag: {s: points[s] for s in steps} for tag, points in series.items()}


def read_back(logdir: str, run: str, last_step: int) -> dict[str, tuple[dict, list[str]]]:
    """{loader: (export {tag: {step: ratio}}, the run's scalar tags)} in both loaders."""
    got = {}
    with both_loaders(logdir, {run: last_step}) as servers:
        for loader, server in servers.items():
            scalars = server.get_json("/data/plugin/scalars/tags").get(run, {})
            got[loader] = (export(server, run), sorted(scalars))
    return got


def assert_matches(got: dict[str, dict[int, float]], want: dict[str, dict[int, float]],
                   rtol: float = 1e-4) -> None:
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for tag, points in want.items():
        assert sorted(got[tag]) == sorted(points), (tag, sorted(got[tag]), sorted(points))
        steps = sorted(points)
        np.testing.assert_allclose([got[tag][s] for s in steps], [points[s] for s in steps],
                                   rtol=rtol, err_msg=tag)
