"""One process of a two-process JAX run on CPU (tests/frameworks/test_jax_multiprocess.py).

argv: process_id, coordinator port, logdir, steps, spectral (0/1), out (json of the gathered
truth, written by process 0), and optionally nan_step. Two CPU devices per process; params
sharded over the four devices of the two processes with NamedSharding; optax Adam steps;
every process calls log_update_ratios, process 0 with its writer, process 1 with
writer=None.

With nan_step, the batch of that step is NaN, and every process judges while training with
stop_on={"nan"} (process 0 through its writer, process 1 through its own TrainingJudgement)
and leaves the loop once `should_stop`: a process that stopped alone would leave the other
waiting in the next step's collective. Each process saves `out.<process_id>`: its flags and
the step it stopped at.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402


def main() -> None:
    pid, port, logdir, steps, spectral, out = sys.argv[1:7]
    pid, steps, spectral = int(pid), int(steps), spectral == "1"
    nan_step = int(sys.argv[7]) if len(sys.argv) > 7 else None
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    assert jax.device_count() == 4 and jax.local_device_count() == 2

    from tb_wur_plugin.jax import log_update_ratios
    from tb_wur_plugin.writer import SummaryWriter, TrainingJudgement

    mesh = Mesh(np.array(jax.devices()).reshape(4), ("d",))
    rng = np.random.default_rng(0)  # the same values on both processes
    host = {
        "dense": {"kernel": rng.normal(size=(8, 12)).astype(np.float32),
                  "bias": rng.normal(size=(12,)).astype(np.float32)},
        "conv": {"kernel": rng.normal(size=(3, 3, 4, 8)).astype(np.float32)},
    }
    specs = {"dense": {"kernel": P(None, "d"), "bias": P("d")},
             "conv": {"kernel": P(None, None, None, "d")}}
    params = jax.tree.map(
        lambda x, s: jax.make_array_from_callback(
            x.shape, NamedSharding(mesh, s), lambda index, x=x: x[index]),
        host, specs)
    x = jnp.asarray(rng.normal(size=(16, 8)).astype(np.float32))
    broken = jnp.full_like(x, np.nan)

    def loss(p, x):
        conv = jnp.sum(p["conv"]["kernel"] ** 2) * 1e-2
        return jnp.mean(jnp.tanh(x @ p["dense"]["kernel"] + p["dense"]["bias"]) ** 2) + conv

    opt = optax.adam(1e-2)
    state = opt.init(params)

    @jax.jit
    def step_fn(p, s, x):
        g = jax.grad(loss)(p, x)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, u

    stop_on = {"nan"} if nan_step is not None else ()
    writer = SummaryWriter(logdir, stop_on=stop_on) if pid == 0 else None
    judgement = writer.judgement if writer is not None else TrainingJudgement(stop_on=stop_on)
    truth: dict[str, dict[str, dict[str, float]]] = {"frobenius": {}, "spectral": {}}
    stopped_at = None
    for step in range(steps):
        new, state, updates = step_fn(params, state, broken if step == nan_step else x)
        wrote = log_update_ratios(writer, params, updates, step, spectral=spectral,
                                  judgement=judgement)
        assert wrote is (pid == 0), (pid, wrote)
        if nan_step is None:
            _add_truth(truth, step, params, updates)
        params = new
        if judgement.should_stop:
            stopped_at = step
            break
    if nan_step is not None:
        with open(f"{out}.{pid}", "w") as f:
            json.dump({"stopped_at": stopped_at,
                       "flags": [dataclasses.asdict(flag) for flag in judgement.flags]}, f)
    if writer is not None:
        writer.close()
        if nan_step is None:
            with open(out, "w") as f:
                json.dump(truth, f)
    multihost_utils.sync_global_devices("done")
    jax.distributed.shutdown()


def _add_truth(truth: dict, step: int, params, updates) -> None:
    """The ratios and spectral ratios of the gathered full arrays (a collective: every
    process calls it)."""
    full_p = multihost_utils.process_allgather(params, tiled=True)
    full_u = multihost_utils.process_allgather(updates, tiled=True)
    for tag, p, u in (("conv/kernel", full_p["conv"]["kernel"], full_u["conv"]["kernel"]),
                      ("dense/bias", full_p["dense"]["bias"], full_u["dense"]["bias"]),
                      ("dense/kernel", full_p["dense"]["kernel"], full_u["dense"]["kernel"])):
        p, u = np.asarray(p, np.float64), np.asarray(u, np.float64)
        truth["frobenius"].setdefault(tag, {})[str(step)] = float(
            np.linalg.norm(u) / np.linalg.norm(p))
        if p.ndim >= 2:
            m_p, m_u = p.reshape(-1, p.shape[-1]), u.reshape(-1, u.shape[-1])
            truth["spectral"].setdefault(tag, {})[str(step)] = float(
                np.linalg.norm(m_u, 2) / np.linalg.norm(m_p, 2))


if __name__ == "__main__":
    main()
