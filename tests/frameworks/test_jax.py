"""tb_wur_plugin.jax against a numpy reference, read back through the plugin's export in
both loaders of the real `tensorboard`."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import NamedTuple

import numpy as np
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

from framework_servers import assert_ratios_match, both_loaders, export  # noqa: E402
from tb_wur_plugin import metadata  # noqa: E402
from tb_wur_plugin.arrays import numpy_math  # noqa: E402
from tb_wur_plugin.jax import log_update_ratios, pytree_tags, update_ratios  # noqa: E402
from tb_wur_plugin.writer import SummaryWriter  # noqa: E402

STEPS = 7
EVERY = 3


class Dense(NamedTuple):
    kernel: jax.Array
    bias: jax.Array


def _init(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "encoder": [
            Dense(jax.random.normal(k1, (4, 8)) * 0.5, jnp.zeros(8)),
            Dense(jax.random.normal(k2, (8, 8)) * 0.3, jnp.zeros(8)),
        ],
        "head": {"w": jax.random.normal(k3, (8, 2)) * 0.2},
    }


TAGS = ["encoder/0/kernel", "encoder/0/bias", "encoder/1/kernel", "encoder/1/bias", "head/w"]


def _loss(params, x):
    for layer in params["encoder"]:
        x = jnp.tanh(x @ layer.kernel + layer.bias)
    return jnp.mean((x @ params["head"]["w"]) ** 2)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Adam on a nested pytree with lists, logged every EVERY steps with histograms; the
    reference: ‖u‖/‖p‖ in float64 of the updates, and ‖after − before‖/‖before‖ of copies of
    the weights before and after each step."""
    logdir = str(tmp_path_factory.mktemp("jax_runs"))
    optimizer = optax.adam(1e-2)
    params = _init(jax.random.PRNGKey(0))
    opt_state = optimizer.init(params)

    @jax.jit
    def train_step(params, opt_state, x):
        grads = jax.grad(_loss)(params, x)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, updates

    ratios, moved, hists = {}, {}, {}
    with SummaryWriter(os.path.join(logdir, "adam")) as writer:
        for step in range(STEPS):
            x = jax.random.normal(jax.random.PRNGKey(step + 1), (16, 4))
            new_params, opt_state, updates = train_step(params, opt_state, x)
            written = log_update_ratios(writer, params, updates, step, every=EVERY,
                                        histograms=True, learning_rate=1e-2)
            assert written == (step % EVERY == 0)
            if written:
                for tag, p, u, after in zip(TAGS, jax.tree_util.tree_leaves(params),
                                            jax.tree_util.tree_leaves(updates),
                                            jax.tree_util.tree_leaves(new_params)):
                    p, u, after = np.asarray(p), np.asarray(u), np.asarray(after)
                    norm = np.linalg.norm(p.astype(np.float64))
                    with np.errstate(divide="ignore", invalid="ignore"):
                        ratios.setdefault(tag, {})[step] = float(
                            np.linalg.norm(u.astype(np.float64)) / norm)
                        moved.setdefault(tag, {})[step] = float(
                            np.linalg.norm(after.astype(np.float64) - p) / norm)
                        hists.setdefault(tag, {})[step] = numpy_math.bucket_counts(
                            np.abs(np.where(u == 0, 0, u / p))).tolist()
            params = new_params
    with both_loaders(logdir, {"adam": 6}) as servers:
        yield servers, ratios, moved, hists


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_ratios_read_back_as_the_reference(served, loader):
    servers, ratios, moved, _ = served
    got = export(servers[loader], "adam")
    assert_ratios_match(got, ratios)
    finite = {t: {s: r for s, r in steps.items() if math.isfinite(r)} for t, steps in moved.items()}
    got_finite = {t: {s: r for s, r in got[t].items() if s in finite[t]} for t in got}
    assert_ratios_match(got_finite, finite, rtol=1e-3)  # the weights moved by the update


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_histograms_descriptions_learning_rate(served, loader):
    servers, _, _, hists = served
    server = servers[loader]
    run = server.get_json("/data/plugin/wur/runs")["runs"][0]
    assert [layer["tag"] for layer in run["layers"]] == TAGS
    assert run["layers"][2]["description"] == (
        "Weight-update ratio of encoder/1/kernel: shape [8, 8], float32")
    assert run["has_learning_rate"] and run["skipped_steps"] == 0
    for tag in TAGS:
        got = server.get_json(f"/data/plugin/wur/histograms?run=adam&tag={tag}")
        assert got["steps"] == [0, 3, 6]
        assert got["counts"] == [hists[tag][s] for s in got["steps"]]


# --- without servers ---------------------------------------------------------------------------


@dataclasses.dataclass
class Block:
    scale: jax.Array
    shift: jax.Array


jax.tree_util.register_dataclass(Block, data_fields=["scale", "shift"], meta_fields=[])


def test_tags_are_the_pytree_paths():
    tree = {"a": [jnp.ones(1), (jnp.ones(1), {"b": jnp.ones(1)})],
            "dense": Dense(jnp.ones(1), jnp.ones(1)), "norm": Block(jnp.ones(1), jnp.ones(1))}
    assert pytree_tags(tree) == [
        "a/0", "a/1/0", "a/1/1/b", "dense/kernel", "dense/bias", "norm/scale", "norm/shift"]
    assert pytree_tags({10: jnp.ones(1), 2: [jnp.ones(1)]}) == ["2/0", "10"]
    assert pytree_tags(jnp.ones(2)) == ["params"]
    assert pytree_tags({"a/b": jnp.ones(1), "a": {"b": jnp.ones(1)}}) == ["a/b", "a/b_1"]


def test_conventions():
    ratios = update_ratios(
        {"zero_moved": jnp.zeros(3), "zero_still": jnp.zeros(3), "nan": jnp.array([1.0, jnp.nan]),
         "inf_update": jnp.ones(2), "huge": jnp.full(4, 1e30), "tiny": jnp.full(4, 1e-30),
         "empty": jnp.ones((0,)), "count": jnp.array(3)},
        {"zero_moved": jnp.ones(3), "zero_still": jnp.zeros(3), "nan": jnp.ones(2),
         "inf_update": jnp.array([1.0, jnp.inf]), "huge": jnp.full(4, 1e27),
         "tiny": jnp.full(4, 1e-33), "empty": jnp.ones((0,)), "count": jnp.array(1)},
    )
    assert list(ratios) == ["empty", "huge", "inf_update", "nan", "tiny", "zero_moved",
                            "zero_still"]  # integer leaves left out
    assert ratios["zero_moved"] == math.inf and ratios["zero_still"] == 0.0
    assert ratios["empty"] == 0.0
    assert math.isnan(ratios["nan"]) and math.isnan(ratios["inf_update"])
    assert ratios["huge"] == pytest.approx(1e-3, rel=1e-6)
    assert ratios["tiny"] == pytest.approx(1e-3, rel=1e-6)


def test_large_leaves_of_any_magnitude():
    """Leaves above ONE_PASS_MIN_ELEMENTS take one pass first; where that sum overflowed,
    underflowed or is not finite, the scaled sums give the conventions of small leaves."""
    from tb_wur_plugin.arrays import jax_math

    n = jax_math.ONE_PASS_MIN_ELEMENTS + 1
    params = {"huge": jnp.full(n, 1e30), "tiny": jnp.full(n, 1e-30), "zero_moved": jnp.zeros(n),
              "zero_still": jnp.zeros(n), "nan": jnp.ones(n).at[7].set(jnp.nan),
              "plain": jnp.full(n, 2.0), "sub_safe": jnp.full(n, 1e-17)}
    updates = {"huge": jnp.full(n, 1e27), "tiny": jnp.full(n, 1e-33), "zero_moved": jnp.ones(n),
               "zero_still": jnp.zeros(n), "nan": jnp.ones(n), "plain": jnp.full(n, 2e-3),
               "sub_safe": jnp.full(n, 1e-20)}
    ratios = update_ratios(params, updates)
    for tag in ("huge", "tiny", "plain", "sub_safe"):
        assert ratios[tag] == pytest.approx(1e-3, rel=1e-6), tag
    assert ratios["zero_moved"] == math.inf and ratios["zero_still"] == 0.0
    assert math.isnan(ratios["nan"])


def test_histogram_buckets_at_and_next_to_every_edge():
    """The jitted bucketing puts every value where the numpy reference's comparisons with the
    edges put it: each edge, its float32 neighbours, values within 1e-6 of it, and the
    special values (±0, subnormals, +inf, NaN, negatives, below and above the edges)."""
    from tb_wur_plugin.arrays import jax_math

    edges = metadata.HISTOGRAM_EDGES.astype(np.float32)
    tiny = np.float32(1e-45)  # subnormal
    values = np.concatenate([
        edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf)),
        edges * np.float32(1 + 1e-6), edges * np.float32(1 - 1e-6),
        [0.0, -0.0, tiny, np.inf, np.nan, -1.0, 1e-30, 1e30, np.finfo(np.float32).max],
    ]).astype(np.float32)
    got = np.asarray(jax.jit(jax_math.bucket_counts)(jnp.asarray(values)))
    np.testing.assert_array_equal(got, numpy_math.bucket_counts(values))
    for value in values:  # one at a time: each lands in its own bucket
        one = np.asarray(jax.jit(jax_math.bucket_counts)(jnp.asarray([value])))
        np.testing.assert_array_equal(one, numpy_math.bucket_counts(np.asarray([value])),
                                      err_msg=repr(value))


def test_a_large_leaf_matches_float64():
    rng = np.random.default_rng(0)
    p = rng.normal(size=(1000, 1000)).astype(np.float32) + 3
    u = (rng.normal(size=p.shape) * 1e-3).astype(np.float32)
    want = np.linalg.norm(u.astype(np.float64)) / np.linalg.norm(p.astype(np.float64))
    assert update_ratios({"w": p}, {"w": u})["w"] == pytest.approx(want, rel=1e-6)


def test_skipped_updates_are_marked(tmp_path):
    from helpers import read_events

    params = {"w": jnp.ones(3)}
    with SummaryWriter(str(tmp_path)) as writer:
        log_update_ratios(writer, params, {"w": jnp.zeros(3)}, 0)  # as apply_if_finite skips
        log_update_ratios(writer, params, {"w": jnp.ones(3)}, 1)
    marker = read_events(str(tmp_path))[metadata.SKIPPED_STEP_TAG]
    assert [(s, float(v)) for s, v, _ in marker] == [(0, 1.0), (1, 0.0)]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="structure"):
        update_ratios({"a": jnp.ones(2)}, {"b": jnp.ones(2)})
    with pytest.raises(ValueError, match="shape"):
        update_ratios({"a": jnp.ones(2)}, {"a": jnp.ones(3)})
    with pytest.raises(ValueError, match="reserved"):
        update_ratios({"_wur": {"x": jnp.ones(2)}}, {"_wur": {"x": jnp.ones(2)}})
    with SummaryWriter(str(tmp_path)) as writer:
        with pytest.raises(ValueError, match="every"):
            log_update_ratios(writer, {"a": jnp.ones(2)}, {"a": jnp.ones(2)}, 0, every=0)
        with pytest.raises(TypeError, match="writer"):
            log_update_ratios(str(tmp_path), {"a": jnp.ones(2)}, {"a": jnp.ones(2)}, 0)
        # nothing to log (issue 23): refused, as SummaryWriter.add_ratios refuses {}, on
        # a step to log only
        for params in ({}, {"count": jnp.array(3)}, None):
            with pytest.raises(ValueError, match="no floating-point leaf"):
                log_update_ratios(writer, params, params, 0)
            assert log_update_ratios(writer, params, params, 1, every=2) is False


def test_the_same_structure_with_other_leaves_is_worked_out_again():
    """What a structure's leaves give (tags, which are floating-point, their shapes) is
    kept per structure, shapes and dtypes: a leaf that changes dtype or shape is seen."""
    p = {"a": jnp.ones(2), "b": jnp.array([1, 2])}
    assert list(update_ratios(p, {"a": jnp.ones(2), "b": jnp.array([0, 0])})) == ["a"]
    p = {"a": jnp.ones(2), "b": jnp.array([1.0, 2.0])}  # b now floating-point
    assert list(update_ratios(p, {"a": jnp.ones(2), "b": jnp.ones(2)})) == ["a", "b"]
    with pytest.raises(ValueError, match="the update of 'b' has shape"):
        update_ratios(p, {"a": jnp.ones(2), "b": jnp.ones(3)})
    p = {"a": jnp.ones(3), "b": jnp.array([1.0, 2.0])}  # a's shape changed
    assert update_ratios(p, {"a": jnp.ones(3), "b": jnp.ones(2)})["a"] == pytest.approx(1.0)
    for _ in range(2):  # refused each time, not only when first seen
        with pytest.raises(ValueError, match="reserved"):
            update_ratios({"_wur": {"x": jnp.ones(2)}}, {"_wur": {"x": jnp.ones(2)}})


def test_writer_none_on_process_zero_is_refused():
    # writer=None is for the other processes of a multi-process run (tests/frameworks/test_jax_multiprocess.py)
    with pytest.raises(ValueError, match="process 0"):
        log_update_ratios(None, {"a": jnp.ones(2)}, {"a": jnp.ones(2)}, 0)


def _mlp_steps(optimizer, steps, frozen_from=None):
    """Yields (step, params, updates) of `optimizer` on the MLP of `_init` and a fixed batch;
    from step `frozen_from` on, the updates of encoder/1 are zeros (a group frozen by
    mistake, e.g. a mask that drops it)."""
    params = _init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (16, 4))
    state = optimizer.init(params)

    @jax.jit
    def train_step(params, state):
        grads = jax.grad(_loss)(params, x)
        updates, state = optimizer.update(grads, state, params)
        return updates, state

    for step in range(steps):
        updates, state = train_step(params, state)
        if frozen_from is not None and step >= frozen_from:
            updates["encoder"][1] = jax.tree.map(jnp.zeros_like, updates["encoder"][1])
        yield step, params, updates
        params = optax.apply_updates(params, updates)


def test_stop_on_stops_at_the_step_the_report_first_flags(tmp_path, caplog):
    """A group frozen from step 6: not_moving fires at step 10, the fifth judged step of
    the streak (patience 5), since step 6; Frobenius and spectral; the loop stops there,
    with the flags `tb-wur report` gives the written run."""
    from training_flags import fired, reported

    seen = []
    writer = SummaryWriter(str(tmp_path / "run"), stop_on={"not_moving"}, on_flag=seen.append)
    stopped_at = None
    with caplog.at_level("WARNING", logger="tb_wur_plugin"), writer:
        for step, params, updates in _mlp_steps(optax.sgd(0.05), 40, frozen_from=6):
            log_update_ratios(writer, params, updates, step, spectral=True)
            if writer.should_stop:
                stopped_at = step
                break
    assert stopped_at == 10
    assert seen == writer.flags
    assert {(f.tag, f.reason, f.since, f.step) for f in writer.flags} == {
        ("encoder/1/kernel", "not_moving", 6, 10), ("encoder/1/bias", "not_moving", 6, 10)}
    assert {f.metric for f in writer.flags if f.tag == "encoder/1/kernel"} == {
        "frobenius", "spectral"}
    assert fired(writer.flags) == reported(str(tmp_path), "run", ("frobenius", "spectral"))
    told = [r.getMessage() for r in caplog.records if r.name == "tb_wur_plugin"]
    assert len(told) == len(writer.flags)
    assert told[0].startswith("WUR step 10: encoder/1/kernel: not moving")


def test_a_healthy_run_with_warm_up_and_cosine_decay_to_zero_fires_nothing(tmp_path):
    """AdamW with linear warm-up and a cosine decay to a learning rate of 0: the ratios rise,
    then fall to 0 together (the run stops as a whole: converged, not a layer gone wrong)."""
    from training_flags import reported

    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 10, 80, end_value=0.0)
    with SummaryWriter(str(tmp_path / "run"), stop_on={"nan", "not_moving"}) as writer:
        for step, params, updates in _mlp_steps(optax.adamw(schedule), 81):
            log_update_ratios(writer, params, updates, step, spectral=True)
    assert writer.flags == [] and not writer.should_stop
    assert reported(str(tmp_path), "run", ("frobenius", "spectral")) == set()


def test_judgement_arguments(tmp_path):
    from tb_wur_plugin.writer import TrainingJudgement

    params = {"a": jnp.ones(2)}
    with SummaryWriter(str(tmp_path)) as writer:
        with pytest.raises(TypeError, match="TrainingJudgement"):
            log_update_ratios(writer, params, params, 0, judgement=writer)
        with pytest.raises(ValueError, match="judges what it writes"):
            log_update_ratios(writer, params, params, 0, judgement=TrainingJudgement())
        assert log_update_ratios(writer, params, params, 0, judgement=writer.judgement)
