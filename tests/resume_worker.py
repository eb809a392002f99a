"""The PyTorch half of test_resume: train with `watch`, checkpoint, and (run as a script, in a
new process) resume from the checkpoint with `watch(first_step=None)`.

    python resume_worker.py RUN_DIR CHECKPOINT STEPS EVERY OUT_JSON

loads the model and optimizer from CHECKPOINT, trains STEPS more steps watched into RUN_DIR,
and writes to OUT_JSON {"first_step": .., "steps": .., "ratios": {tag: {step: ratio}}}, the
reference ratios (weights copied around each logged step) of the steps it logged.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import torch

from tb_wur_plugin.torch import watch


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def train(model, optimizer, steps: int, every: int, first: int, seed: int) -> dict:
    """`steps` steps from step `first`; {tag: {step: ratio}} of the steps logged by `every`
    (numpy float64 norms of weights copied around the step)."""
    generator = torch.Generator().manual_seed(seed)
    ratios: dict[str, dict[int, float]] = {}
    for step in range(first, first + steps):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        model(torch.randn(8, 4, generator=generator)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % every:
            continue
        for name, p in model.named_parameters():
            old = before[name].numpy().astype(np.float64)
            new = p.detach().numpy().astype(np.float64)
            ratios.setdefault(name.replace(".", "/"), {})[step] = float(
                np.linalg.norm(new - old) / np.linalg.norm(old)
            )
    return ratios


def save(model, optimizer, path: str) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def resume(run_dir: str, checkpoint: str, steps: int, every: int) -> dict:
    model, optimizer = model_and_optimizer()
    state = torch.load(checkpoint)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    handle = watch(optimizer, model, run_dir, every=every)  # first_step=None
    first = handle.steps
    ratios = train(model, optimizer, steps, every, first, seed=1)
    handle.remove()
    return {"first_step": first, "steps": handle.steps, "ratios": ratios}


if __name__ == "__main__":
    run_dir, checkpoint, steps, every, out = sys.argv[1:]
    result = resume(run_dir, checkpoint, int(steps), int(every))
    with open(out, "w") as f:
        json.dump(result, f)
