"""The training half of test_resume: train, checkpoint, and (run as a script, in a new
process) resume from the checkpoint.

    python resume_worker.py RUN_DIR CHECKPOINT STEPS EVERY OUT_JSON
    python resume_worker.py --keras LOG_DIR MODEL.keras STEPS EVERY OUT_JSON

PyTorch: loads the model and optimizer from CHECKPOINT and trains STEPS more steps watched
(`watch(first_step=None)`) into RUN_DIR. Keras (`--keras`): loads MODEL.keras with
`keras.saving.load_model` (weights and optimizer, `optimizer.iterations` included) and fits
STEPS more steps with a new `WeightUpdateRatioCallback` into LOG_DIR. Both write to OUT_JSON
{"first_step": .., "steps": .., "ratios": {tag: {step: ratio}}}, the reference ratios
(weights copied around each logged step) of the steps they logged.
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


KERAS_BATCH = 8


def keras_model():
    """A small functional Keras model compiled with Adam.

    Functional, with named layers, so that its variables' paths (the logged tags) are the
    same after `keras.saving.load_model`: a `Sequential` built at construction gets the
    model's name in them ("sequential/dense/kernel"), its loaded copy does not
    ("dense/kernel"; test_resume shows it).
    """
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,), name="x")
    hidden = keras.layers.Dense(6, activation="tanh", name="hidden")(inputs)
    outputs = keras.layers.Dense(2, name="out")(hidden)
    model = keras.Model(inputs, outputs, name="net")
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    return model


def keras_fit(model, log_dir: str, steps: int, every: int, seed: int) -> dict:
    """`steps` optimizer steps of `model.fit` with a `WeightUpdateRatioCallback` into
    `log_dir`; {tag: {step: ratio}} of the steps it logs by `every` (numpy float64 norms of
    the weights copied around each of those steps)."""
    import keras

    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    ratios: dict[str, dict[int, float]] = {}

    class Reference(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.step = int(self.model.optimizer.iterations)
            self.before = {v.path: np.array(v.numpy(), np.float64)
                           for v in self.model.trainable_variables}

        def on_train_batch_end(self, batch, logs=None):
            assert int(self.model.optimizer.iterations) == self.step + 1
            if self.step % every:
                return
            for v in self.model.trainable_variables:
                old = self.before[v.path]
                with np.errstate(divide="ignore"):  # +inf for a zero bias, as the contract
                    ratios.setdefault(v.path, {})[self.step] = float(
                        np.linalg.norm(np.array(v.numpy(), np.float64) - old)
                        / np.linalg.norm(old)
                    )

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((steps * KERAS_BATCH, 4)).astype("float32")
    y = rng.standard_normal((steps * KERAS_BATCH, 2)).astype("float32")
    model.fit(x, y, batch_size=KERAS_BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[WeightUpdateRatioCallback(log_dir, update_freq=every), Reference()])
    return ratios


def keras_resume(log_dir: str, path: str, steps: int, every: int) -> dict:
    import keras

    model = keras.saving.load_model(path)
    first = int(model.optimizer.iterations)
    ratios = keras_fit(model, log_dir, steps, every, seed=1)
    return {"first_step": first, "steps": int(model.optimizer.iterations), "ratios": ratios}


if __name__ == "__main__":
    if sys.argv[1] == "--keras":
        log_dir, path, steps, every, out = sys.argv[2:]
        result = keras_resume(log_dir, path, int(steps), int(every))
    else:
        run_dir, checkpoint, steps, every, out = sys.argv[1:]
        result = resume(run_dir, checkpoint, int(steps), int(every))
    with open(out, "w") as f:
        json.dump(result, f)
