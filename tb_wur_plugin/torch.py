"""Weight-update ratios of PyTorch training, logged from the optimizer's step hooks.

    from tb_wur_plugin.torch import watch

    handle = watch(optimizer, model, "logs/run1", every=100)
    for x, y in loader:            # the loop does not change
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    handle.remove()

Steps are counted from `first_step`: the first `optimizer.step()` after the `watch` call is
step `first_step`, by default the number of updates the optimizer's (restored) state counts,
so that a run resumed from a checkpoint continues its steps (a step the
`torch.amp.GradScaler` skips is counted too, see `watch`). At the steps that are multiples of
`every` the step pre-hook copies the parameters (on their device) and the post-hook
writes ‖w_after − w_before‖₂ / ‖w_before‖₂ of each parameter of `model` that requires grad;
on the other steps the hooks compare an integer and return. Each logged step is judged as it
is written, as `tb-wur report` judges a run: `handle.flags`, and with `stop_on` a
`handle.should_stop` for the loop to act on (`watch`). No TensorFlow is imported.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import numpy as np
import torch

from tb_wur_plugin import metadata
from tb_wur_plugin.arrays import torch_math, torch_spectral
from tb_wur_plugin.arrays.numpy_math import ratios_from_norms
from tb_wur_plugin.arrays.spectral import LEADING_FAN_OUT, SpectralState
from tb_wur_plugin.event_write import (
    LoggedStep,
    LoggedStepWriter,
    SummaryWriter,
    TrainingJudgement,
    changed_settings,
    check_target,
    judgement_settings,
    open_target,
    run_claims,
    run_dir_of,
    watch_arguments,
)
from tb_wur_plugin.judgement.online import Flag
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE
from tb_wur_plugin.torch_internals import grad_scaler, ranks, shards

__all__ = ["watch", "WatchHandle"]


def watch(
    optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
    model: torch.nn.Module,
    log_dir_or_writer: Any,
    every: int = 100,
    histograms: bool = False,
    first_step: int | None = None,
    spectral: bool = False,
    on_flag: Callable[[Flag], Any] | None = None,
    stop_on: Iterable[str] = (),
    patience: int = DEFAULT_PATIENCE,
    low: float | None = None,
    high: float | None = None,
) -> "WatchHandle":
    """Log the weight-update ratio of every parameter of `model` that requires grad, at
    every `every`-th `optimizer.step()` call, with no change to the training loop.

    A step is one `optimizer.step()` call (gradient accumulation: micro-batches between two
    calls are one step); the first one after this call is step `first_step`, and the steps
    that are multiples of `every` are logged (0, every, 2·every, ... from a fresh start).
    The parameters are looked up (`model.named_parameters()`) at each logged step; tag =
    the parameter's name with '.' replaced by '/'. On a logged step the pre-hook copies the
    parameters on their device (one copy of the weights, in float32 for 16-bit ones; kept
    while the handle is active and overwritten at the next logged step, so that it is
    allocated once while the parameters' shapes, dtypes and devices stay; `remove()` frees
    it) and the post-hook takes the norms there (float32 norms of chunks of 32,768 elements,
    65,536 on a GPU, summed in float64; a sum that may have overflowed or underflowed is
    taken again exactly) and copies 2 floats per parameter to the host; the learning rate
    of the first parameter group is written beside them. The other steps cost an integer
    comparison per hook.

    Several optimizers (a list or tuple of two or more, e.g. a GAN's generator and critic,
    or Lightning's manual optimization): one run, one step count over all their `step()`
    calls (the first call of any of them is step `first_step`, as Lightning's
    `trainer.global_step` counts them). Optimizer i logs the parameters of `model` it
    updates, tags prefixed `optimizer_<i>/`, at its first update at or after each multiple
    of `every` (so each optimizer logs once per `every` steps although the steps of one
    optimizer need not be multiples of `every`); the learning rate written is optimizer 0's.

    `torch.amp.GradScaler`: a `scaler.step(optimizer)` that skips `optimizer.step()`
    (non-finite gradients) is counted as a step; if logged, it is written as ratio 0 for
    every parameter with the skipped-step marker, as the TensorFlow path writes a step the
    loss scaler skips. (While a handle is active, `GradScaler.step` is wrapped to see this.)
    Fused optimizers (`fused=True`), which GradScaler always steps, skip the update
    themselves: their ratios are 0, and marked skipped, as any step that changes nothing.

    Acting while training: every logged step is judged as it is written, with the report's
    default judgement (`patience`; with `low`/`high` also the band rule), as `tb-wur report`
    would judge the steps logged so far: each flag (`tb_wur_plugin.Flag`) fires once per
    layer, reason and metric (the spectral ratios are judged too), at the logged step at
    which the report would first give it, is logged once to the `logging` logger
    `tb_wur_plugin` at WARNING ("WUR step S: TAG: TEXT"), passed to `on_flag`, and listed
    in `handle.flags`; `handle.should_stop` becomes True once a flag whose reason is in
    `stop_on` fires, for the loop to act on (`if handle.should_stop: break`). A
    `tb_wur_plugin.writer.SummaryWriter` passed in judges with its own settings
    (`SummaryWriter(..., on_flag=, stop_on=, patience=, low=, high=)`, its `flags` and
    `should_stop` are the handle's): give them to the writer, not to `watch`.

    Distributed: call `watch` on every rank with the same arguments; `watch` agrees on the
    first step over all ranks (one collective); only rank 0 opens a file and writes, the
    ratios (and histograms) are those of the full parameters, and every rank judges the
    same ratios, so that every rank fires the same flags and sees `should_stop` at the
    same logged step (a rank that stopped alone would leave the others waiting in their
    next collective). DistributedDataParallel (every rank holds the same weights): rank 0
    takes the ratios from its own copy, and each logged step one `all_reduce` of a few
    numbers a parameter (on the parameters' device) brings them to the other ranks, which
    copy no weights. Sharded models (FSDP2 `fully_shard`, FSDP1 with either
    `use_orig_params`, DTensor tensor parallel, their combinations such as FSDP x TP and
    HSDP): each logged step every rank takes its counted shards' sums of squares (and
    histogram counts), reduced in one `all_reduce` over all ranks, and every rank takes the
    ratios from the reduced norms. Other steps call no collective. Every rank must
    therefore step the same optimizer steps (a logged step at which the ranks' counts
    differ raises a `RuntimeError`); a rank whose GradScaler skips a logged step while
    another does not still joins that step's `all_reduce` (its ΔW is 0), so the ranks never
    wait on each other. Tags drop FSDP1's `_fsdp_wrapped_module.`, DDP's leading `module.`
    and `torch.compile`'s `_orig_mod.`.

    Resuming: with `first_step=None` a run resumed from a checkpoint in a new process
    (`model.load_state_dict`, `optimizer.load_state_dict`, then `watch`) continues its
    steps where the first process stopped, as long as the optimizer counts its updates in
    its state (Adam, AdamW, Adagrad, RMSprop, NAdam, RAdam, ...: the largest per-parameter
    `state[p]["step"]`). SGD keeps no count: pass `first_step` (e.g. a step saved with the
    checkpoint; a warning says so when the optimizer holds state but no count). Under a
    `GradScaler` the optimizer does not count the steps it skips, but the handle does: save
    `handle.steps` with the checkpoint and pass it as `first_step`.

    One run directory, one handle: while a handle is active, another `watch` writing the
    same run directory in this process raises a `RuntimeError` (two step counters in one run
    would log steps twice, and TensorBoard's loaders would drop some). The run directory of
    a writer passed in is its logdir, so passing one writer (or two writers of one
    directory) to two active handles raises too; `remove()` frees the directory. Watch the
    two optimizers of a GAN with one handle (`watch([critic, generator], model, ...)`), or
    each model into its own run directory ("logs/gan/generator", "logs/gan/critic").

    Args:
      optimizer: any `torch.optim.Optimizer`, or a list or tuple of them (see Several
        optimizers).
      model: the `torch.nn.Module` whose parameters to log.
      log_dir_or_writer: a logdir path (events go into a new file there), a
        `tb_wur_plugin.writer.SummaryWriter`, or a `torch.utils.tensorboard.SummaryWriter`
        (events go into its event file).
      every: log every `every`-th step (a positive integer).
      histograms: also write each parameter's histogram of elementwise ratios
        |Δw_i| / |w_i| (bucketed on the parameters' device).
      first_step: the step of the first `optimizer.step()` after this call (an int >= 0),
        or None (default): the number of updates the optimizer's state counts (see
        Resuming; several optimizers: the sum of their counts), 0 for a fresh optimizer
        or one that keeps no count.
      spectral: also write, on logged steps, the spectral update ratio ‖ΔW‖₂ / ‖W‖₂
        (largest singular values) of each parameter of two or more dimensions, viewed as
        the matrix (out, in · prod(kernel)) (`metric="spectral"`, same steps and
        skipped-step marker): Lanczos iterations on the parameters' device (`W` before
        the update; matrices of at most 512 columns, or 1024 with twice as many rows,
        through their Gram matrices MᵀM, others through one more temporary copy),
        warm-started from the previous logged step's vectors, which the handle keeps.
        Not for sharded models.
      on_flag: called with each `Flag` as it fires (after it is logged), on every rank;
        None: the flags are only logged and listed.
      stop_on: reasons (`tb_wur_plugin.judgement.reasons.NAMES`, e.g. {"nan",
        "not_moving"}) whose first flag sets `handle.should_stop`; default none.
      patience: judged steps in a row that make a streak flag (an int >= 1), as the
        report's `--patience`.
      low, high: an explicit band (the report's `--low`/`--high`): the band rule on top of
        the default judgement; both None (default): the default judgement only.

    Returns:
      A `WatchHandle`; `handle.remove()` stops logging and closes a writer `watch` opened
      (flushes one passed in). Each logged step is flushed to the file when written.
      `handle.flags` and `handle.should_stop` stay readable after `remove()`.

    Raises:
      TypeError: an argument of the wrong type (`first_step`: not an int or None;
        `on_flag` not callable; `stop_on` a single string or not strings).
      ValueError: `every` < 1, `first_step` < 0, a parameter's tag is in the plugin's
        reserved namespace, no optimizer or one twice in the sequence, a sharded model
        (FSDP, DTensor) with `spectral=True` or with several optimizers, `stop_on` names an
        unknown reason, `patience` < 1, a bad band, or a
        `tb_wur_plugin.writer.SummaryWriter` passed in together with `on_flag`, `stop_on`,
        `patience`, `low` or `high` other than their defaults (give them to the writer).
      RuntimeError: another active handle (or Keras `WeightUpdateRatioCallback`) of this
        process writes the same run directory.

    Warns:
      UserWarning: (once per handle) the model has no parameter that requires grad, at
        this call or at a logged step: nothing is logged for it, rather than an empty run in
        silence. Parameters unfrozen later are logged from the next logged step.
      UserWarning: `first_step=None` and the optimizer holds state (e.g. SGD's momentum
        buffers, restored or from earlier steps) but no count of its updates: steps are
        counted from 0.
    """
    optimizers = _optimizers_of(optimizer)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    every, histograms, spectral = watch_arguments(every, histograms, spectral)
    if first_step is not None:
        if isinstance(first_step, bool) or not isinstance(first_step, (int, np.integer)):
            raise TypeError(f"first_step must be an int >= 0 or None, got {first_step!r}")
        if first_step < 0:
            raise ValueError(f"first_step must be >= 0, got {first_step}")
        first_step = int(first_step)
    check_target(log_dir_or_writer)
    settings = judgement_settings(on_flag, stop_on, patience, low, high)
    if isinstance(log_dir_or_writer, SummaryWriter):
        _check_writer_judges(settings)
    explicit = first_step is not None
    if first_step is None:
        first_step = 0
        for o in optimizers:  # a loop: the warning's stacklevel counts no generator frame
            first_step += _restored_step(o, stacklevel=3)
    distributed = _distributed()
    sharded = distributed and shards.is_sharded(model)
    if sharded and spectral:
        raise ValueError(
            "watch(spectral=True) does not support sharded models (FSDP, DTensor): the "
            "spectral norm of a sharded matrix needs distributed matrix products; pass "
            "spectral=False, or watch an unsharded (e.g. DDP) model"
        )
    if sharded and len(optimizers) > 1:
        raise ValueError(
            "watch with several optimizers does not support sharded models (FSDP, "
            "DTensor): watch each optimizer into its own run directory"
        )
    if distributed:  # every rank counts the same steps (one collective, here only)
        _entries_of(model, sharded, None)  # a reserved tag raises on every rank, before it
        first_step = shards.agreed_steps(first_step, explicit, every, _device_of(model))
    watched = [_Watched(o, i, len(optimizers), first_step, every)
               for i, o in enumerate(optimizers)]
    shared = distributed and not sharded  # rank 0's ratios reach the other ranks
    if _rank() != 0:  # judges what rank 0 writes, writes nothing
        judgement = (log_dir_or_writer.judgement if isinstance(log_dir_or_writer, SummaryWriter)
                     else TrainingJudgement(**settings))
        return WatchHandle(watched, model, LoggedStepWriter(None, judgement), False, every,
                           histograms, first_step, sharded, spectral, shared)
    entries = [e for w in watched for e in _entries_of(model, sharded, w)]  # tags valid
    run_dir = run_dir_of(log_dir_or_writer)
    run_claims.check(run_dir)  # before a file is opened
    writer, owned = open_target(log_dir_or_writer, **settings)
    handle = WatchHandle(watched, model, LoggedStepWriter(writer), owned, every, histograms,
                         first_step, sharded, spectral, shared)
    try:
        handle._claim = run_claims.claim(
            run_dir, handle, "tb_wur_plugin.torch.watch handle",
            "Call remove() on the first handle", lambda h: h.active,
        )
    except RuntimeError:  # claimed by another thread since the check
        handle.remove()
        raise
    if not entries:
        handle._nothing_to_log(stacklevel=3)  # the caller's line
    return handle


def _check_writer_judges(settings: dict[str, Any]) -> None:
    """Raise unless the judgement settings given to `watch` with a `SummaryWriter` passed
    in are the defaults: the writer judges with its own.

    Raises:
      ValueError: a setting other than its default (the message names them).
    """
    given = changed_settings(settings)
    if given:
        raise ValueError(
            f"watch: {', '.join(given)} given with a tb_wur_plugin SummaryWriter, which judges "
            "with its own settings: give them to the writer, SummaryWriter(logdir, "
            f"{', '.join(f'{name}=...' for name in given)}), or pass a log directory to watch"
        )


class _Entry(NamedTuple):
    tag: str
    tensor: torch.Tensor  # the parameter itself, read under torch.no_grad() only
    shape: tuple[int, ...]
    dtype: str


class _Pending(NamedTuple):
    step: int
    entries: list[Any]  # _Entry, or shards.Piece when sharded
    before: list[Any]  # copies in the work dtype (sharded: None for the parts not counted)
    learning_rate: float | None


class _Watched:
    """One optimizer of a handle: its index, the next step it logs, its logged step in
    progress, and (of several optimizers) the parameters it updates and their tag prefix."""

    def __init__(self, optimizer: torch.optim.Optimizer, index: int, count: int,
                 first_step: int, every: int) -> None:
        self.optimizer = optimizer
        self.index = index
        self.next = -(-first_step // every) * every  # the next step to log from
        self.pending: _Pending | None = None
        # the last logged step's copies, overwritten by the next one's (`torch_math.snapshot`)
        self.kept: list[torch.Tensor] = []
        self.prefix = f"optimizer_{index}/" if count > 1 else ""
        self.updates: set[int] | None = None  # ids of its parameters (several optimizers)
        if count > 1:
            self.updates = {id(p) for g in optimizer.param_groups for p in g["params"]}


class WatchHandle:
    """What `watch` returns: `remove()` stops logging and frees the run directory. Also a
    context manager (removed on exit). `steps` is the step of the next `optimizer.step()`
    (of any of the optimizers): `first_step` plus the steps counted so far. `flags` and
    `should_stop`: the judgement while training (`watch`), alike on every rank. The
    handles of the ranks other than 0 write nothing: of a sharded model they take part in
    the logged steps' reduction of the norms, of an unsharded one they receive rank 0's
    ratios; both judge them."""

    def __init__(self, watched: list[_Watched], model: torch.nn.Module,
                 step_writer: LoggedStepWriter, owns_writer: bool, every: int,
                 histograms: bool, first_step: int = 0, sharded: bool = False,
                 spectral: bool = False, shared: bool = False) -> None:
        self.steps = first_step
        self._sharded = sharded
        self._spectral = SpectralState() if spectral else None  # the warm-start vectors
        self._model = model
        self._step_writer = step_writer
        self._writer = step_writer.writer  # None on the ranks other than 0
        # whether this rank computes the ratios: rank 0, and every rank of a sharded model
        self._computes = self._writer is not None or sharded
        # an unsharded distributed model: rank 0 shares its ratios with the other ranks
        self._shared = shared
        self._device = _device_of(model)  # where that collective runs
        self._owns_writer = owns_writer
        self._every = every
        self._histograms = histograms
        self._claim: str | None = None  # the run directory's key in `run_claims`
        self._warned_nothing = False
        self._watched: list[_Watched] = watched  # the optimizers whose steps it hooks
        self._hooks = []
        for watched in self._watched:
            self._hooks += [
                watched.optimizer.register_step_pre_hook(
                    functools.partial(self._pre_step, watched)),
                watched.optimizer.register_step_post_hook(
                    functools.partial(self._post_step, watched)),
            ]
            grad_scaler.notify_skipped_steps(
                watched.optimizer, self, lambda: self.steps,
                functools.partial(self._skipped_step, watched.optimizer))

    @property
    def active(self) -> bool:
        """False once removed."""
        return bool(self._hooks)

    @property
    def flags(self) -> list[Flag]:
        """Every flag fired so far, in order (`tb_wur_plugin.Flag`), the same on every rank."""
        return self._step_writer.judgement.flags

    @property
    def should_stop(self) -> bool:
        """True once a flag whose reason is in `stop_on` has fired: at the same logged step
        on every rank."""
        return self._step_writer.judgement.should_stop

    def remove(self) -> None:
        """Stop logging (idempotent); free the copy of the weights kept between logged
        steps; close the writer `watch` opened, flush one passed in."""
        if not self._hooks:
            return
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        for watched in self._watched:
            watched.pending = None
            watched.kept = []
            grad_scaler.stop_notifying(watched.optimizer, self)
        if self._writer is None:  # a rank other than 0
            return
        try:
            if self._owns_writer:
                self._writer.close()
            elif not self._writer.closed:
                self._writer.flush()
        finally:
            run_claims.release(self._claim, self)
            self._claim = None

    def __enter__(self) -> "WatchHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def _nothing_to_log(self, stacklevel: int = 2) -> None:
        """Warn, once per handle (on rank 0), that the model has no parameter to log."""
        if self._warned_nothing or self._writer is None:
            return
        self._warned_nothing = True
        warnings.warn(
            "tb_wur_plugin.torch.watch: the model has no parameter that requires grad (all "
            "frozen, requires_grad=False, or none at all), so no ratio is logged until one "
            "does",
            UserWarning,
            stacklevel=stacklevel,
        )

    # --- hooks ---------------------------------------------------------------------------

    def _pre_step(self, watched: _Watched, optimizer, args, kwargs) -> None:
        step = self.steps
        self.steps = step + 1
        if step >= watched.next:
            self._begin(watched, step)

    def _post_step(self, watched: _Watched, optimizer, args, kwargs) -> None:
        if watched.pending is None:
            return
        pending, watched.pending = watched.pending, None
        if pending.step == self.steps - 1:  # else: that step raised, this is a later one
            self._record(pending)

    def _skipped_step(self, optimizer: torch.optim.Optimizer) -> None:
        """A `GradScaler.step(optimizer)` that did not call `optimizer.step()`."""
        if not self.active:
            return
        watched = next(w for w in self._watched if w.optimizer is optimizer)
        step = self.steps
        self.steps = step + 1
        if step < watched.next:
            return
        watched.next = self._next_logged(step)
        entries = _entries_of(self._model, self._sharded, watched)
        if not entries:
            self._nothing_to_log()
            return
        learning_rate = self._learning_rate(watched)
        if self._sharded:
            self._record_sharded(step, entries, None, learning_rate)
            return
        if not self._computes:
            self._write(self._received(step, entries))
            return
        self._write(LoggedStep(
            step,
            entries,
            np.zeros(len(entries)),
            spectral=None if self._spectral is None else {
                i: 0.0 for i, e in enumerate(entries) if len(e.shape) >= 2},
            histograms=[_zero_counts(e.tensor.numel()) for e in entries]
            if self._histograms else None,
            learning_rate=learning_rate,
        ))

    # --- a logged step -------------------------------------------------------------------

    def _next_logged(self, step: int) -> int:
        """The step to log from after logging `step`: the next multiple of `every`."""
        return (step // self._every + 1) * self._every

    @staticmethod
    def _learning_rate(watched: _Watched) -> float | None:
        """The learning rate to write beside a logged step: optimizer 0's only."""
        return _learning_rate(watched.optimizer) if watched.index == 0 else None

    def _begin(self, watched: _Watched, step: int) -> None:
        watched.next = self._next_logged(step)
        entries = _entries_of(self._model, self._sharded, watched)
        if not entries:
            self._nothing_to_log()
            return
        if not self._computes:  # receives rank 0's ratios after the update
            watched.pending = _Pending(step, entries, [], None)
            return
        with torch.no_grad():
            if self._sharded:  # copies of the parts this rank counts
                live = _live(entries)
                watched.kept = torch_math.snapshot([entries[i].tensor for i in live],
                                                   watched.kept)
                before: list[Any] = [None] * len(entries)
                for i, copy in zip(live, watched.kept):
                    before[i] = copy
            else:
                watched.kept = torch_math.snapshot([e.tensor for e in entries], watched.kept)
                before = watched.kept
        watched.pending = _Pending(step, entries, before, self._learning_rate(watched))

    def _record(self, pending: _Pending) -> None:
        if self._sharded:
            self._record_sharded(pending.step, pending.entries, pending.before,
                                 pending.learning_rate)
            return
        if not self._computes:
            self._write(self._received(pending.step, pending.entries))
            return
        entries, before = pending.entries, pending.before
        update_norms = np.zeros(len(entries))
        weight_norms = np.zeros(len(entries))
        counts: list[Any] = [None] * len(entries)
        matrices: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (i, W, −ΔW)
        with torch.no_grad():
            for indices in _by_device(entries):
                # all of them: the snapshot itself, whose stacks are reduced a stack at a time
                olds = before if len(indices) == len(before) else [before[i] for i in indices]
                news = [torch_math.work(entries[i].tensor) for i in indices]
                if self._histograms:
                    device_counts = torch_math.elementwise_counts_of(olds, news)
                # olds := w_before − w_after = −Δw
                weight_norms[indices], update_norms[indices] = torch_math.update_norms(olds, news)
                if self._spectral is not None:
                    matrices.extend((i, olds[k] + news[k], olds[k]) for k, i in enumerate(indices)
                                    if len(entries[i].shape) >= 2)
                if self._histograms:
                    for i, c in zip(indices, torch.stack(device_counts).cpu().numpy()):
                        counts[i] = c
        spectral = None
        if matrices:
            with torch.no_grad():
                values = torch_spectral.spectral_ratios(
                    [entries[i].tag for i, _, _ in matrices], [w for _, w, _ in matrices],
                    [u for _, _, u in matrices], self._spectral, LEADING_FAN_OUT)
            spectral = {i: float(v) for (i, _, _), v in zip(matrices, values)}
            matrices.clear()
        self._write(LoggedStep(
            pending.step,
            entries,
            ratios_from_norms(update_norms, weight_norms),
            spectral=spectral,
            histograms=counts if self._histograms else None,
            learning_rate=pending.learning_rate,
        ))

    def _record_sharded(self, step: int, entries: list[Any], before: list[Any] | None,
                        learning_rate: float | None) -> None:
        """A logged step of a sharded model, on every rank: the sums of squares of this
        rank's counted parts, reduced over all ranks (`shards.reduce_norms`); every rank
        takes the ratios from them, rank 0 writes them, the others judge them. `before` is
        None where this rank's GradScaler skipped the update (ΔW = 0)."""
        n = len(entries)
        device = entries[0].tensor.device
        weight_sums = torch.zeros(n, dtype=torch.float64, device=device)
        update_sums = torch.zeros(n, dtype=torch.float64, device=device)
        counts = None
        if self._histograms:
            counts = torch.zeros((n, metadata.NUM_BUCKETS), dtype=torch.int64, device=device)
        skipped = before is None
        with torch.no_grad():
            news = [torch_math.work(e.tensor) for e in entries]
            live = _live(entries)
            for indices in _by_device([entries[i] for i in live]):
                indices = [live[k] for k in indices]
                index = torch.tensor(indices, device=device)
                if skipped:
                    weight_sums[index] = torch_math.sums_of_squares(
                        [news[i] for i in indices]).to(device)
                    if counts is not None:
                        for i in indices:
                            counts[i, metadata.ZERO_BUCKET] = news[i].numel()
                    continue
                olds = [before[i] for i in indices]
                if counts is not None:
                    for i in indices:
                        counts[i] = torch_math.elementwise_counts(before[i], news[i]).to(device)
                sums = torch_math.subtract_with_sums(olds, [news[i] for i in indices])  # := −Δw
                weight_sums[index] = sums[0].to(device)
                update_sums[index] = sums[1].to(device)

            def weight_of(i: int) -> torch.Tensor:
                return news[i] if skipped or before[i] is None else before[i] + news[i]

            def update_of(i: int) -> torch.Tensor:
                return news[i][:0] if skipped or before[i] is None else before[i]

            reduced = shards.reduce_norms(step, entries, weight_sums, update_sums,
                                          counts, skipped, weight_of, update_of)
        if reduced.all_skipped:  # as a step every rank's GradScaler skipped, unsharded
            ratios = np.zeros(n)
        else:
            ratios = ratios_from_norms(reduced.update_norms, reduced.weight_norms)
        self._write(LoggedStep(
            step, entries, ratios, histograms=reduced.counts, learning_rate=learning_rate,
            skipped=True if reduced.all_skipped else None,
        ))

    def _write(self, logged: LoggedStep) -> None:
        """Write a logged step (`LoggedStepWriter.write`) and flush it to the file; on the
        ranks other than 0, judge it only. Of an unsharded distributed model, rank 0 first
        shares it with the other ranks (`_received`)."""
        if self._shared and self._computes:
            self._share(logged)
        self._step_writer.write(logged)
        if self._writer is not None:
            self._writer.flush()

    # --- an unsharded distributed model: rank 0's ratios on every rank --------------------

    def _matrices(self, layers: Sequence[Any]) -> list[int]:
        """The indices of the layers whose spectral ratios a logged step holds."""
        if self._spectral is None:
            return []
        return [i for i, layer in enumerate(layers) if len(layer.shape) >= 2]

    def _share(self, logged: LoggedStep) -> None:
        """Rank 0: its logged step's skipped-step marker, ratios and spectral ratios to the
        other ranks, in the collective they wait in (`_received`)."""
        n = len(logged.layers)
        matrices = self._matrices(logged.layers)
        values = np.empty(1 + n + len(matrices))
        values[0] = float(logged.was_skipped)
        values[1:1 + n] = np.asarray(logged.ratios, np.float64)
        values[1 + n:] = [logged.spectral[i] for i in matrices]
        ranks.share_from_rank_0(logged.step, values, values.size, self._device)

    def _received(self, step: int, entries: list[_Entry]) -> LoggedStep:
        """A rank other than 0 of an unsharded model: rank 0's logged step `step` of
        `entries` (the same parameters as rank 0's), to judge."""
        n = len(entries)
        matrices = self._matrices(entries)
        values = ranks.share_from_rank_0(step, None, 1 + n + len(matrices), self._device)
        return LoggedStep(
            step, entries, values[1:1 + n],
            spectral={i: float(v) for i, v in zip(matrices, values[1 + n:])} or None,
            skipped=bool(values[0]),
        )


# --- parameters ----------------------------------------------------------------------------


def _entries_of(model: torch.nn.Module, sharded: bool, watched: _Watched | None) -> list[Any]:
    """What a logged step of `watched` logs: the sharded model's pieces, or the parameters
    (`watched` None: all of them, untagged by optimizer).

    Raises:
      ValueError: a parameter's tag is in the plugin's reserved namespace.
    """
    if sharded:  # one optimizer only (watch refuses several)
        return shards.pieces(model)
    if watched is None:
        return _parameters(model)
    return _parameters(model, watched.updates, watched.prefix)


def _parameters(model: torch.nn.Module, updates: set[int] | None = None,
                tag_prefix: str = "") -> list[_Entry]:
    """The parameters of an unsharded model that require grad (and, `updates` given, whose
    ids are in it), with their tags (DDP's and torch.compile's wrapper segments dropped,
    `tag_prefix` prepended)."""
    entries = []
    prefix = shards.wrapper_prefix(model)
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad or (updates is not None and id(parameter) not in updates):
            continue
        tag, dtype = shards.tag_and_dtype(name.removeprefix(prefix), parameter.dtype)
        entries.append(_Entry(tag_prefix + tag, parameter, tuple(parameter.shape), dtype))
    return entries


def _live(entries: list[Any]) -> list[int]:
    """The indices of the sharded parts that this rank counts and that hold elements."""
    return [i for i, e in enumerate(entries) if e.counted and e.tensor.numel()]


def _by_device(entries: list[Any]) -> list[list[int]]:
    groups: dict[torch.device, list[int]] = {}
    for i, e in enumerate(entries):
        groups.setdefault(e.tensor.device, []).append(i)
    return list(groups.values())


def _zero_counts(size: int) -> np.ndarray:
    """The histogram counts of a parameter of `size` elements that did not move."""
    counts = np.zeros(metadata.NUM_BUCKETS, np.int64)
    counts[metadata.ZERO_BUCKET] = size
    return counts


# --- the optimizer, the rank -------------------------------------------------------------------


def _optimizers_of(optimizer: Any) -> list[torch.optim.Optimizer]:
    """`watch`'s first argument as a list of one or more distinct optimizers."""
    many = isinstance(optimizer, (list, tuple))
    optimizers = list(optimizer) if many else [optimizer]
    for o in optimizers:
        if not isinstance(o, torch.optim.Optimizer):
            raise TypeError(
                "optimizer must be a torch.optim.Optimizer or a list or tuple of them, got "
                f"{type(o).__name__}{' in the sequence' if many else ''}"
            )
    if not optimizers:
        raise ValueError("optimizer: the sequence of optimizers is empty")
    if len({id(o) for o in optimizers}) < len(optimizers):
        raise ValueError("optimizer: the same optimizer appears twice in the sequence")
    return optimizers


def _learning_rate(optimizer: torch.optim.Optimizer) -> float | None:
    try:
        rate = optimizer.param_groups[0]["lr"]
        return float(rate.item() if isinstance(rate, torch.Tensor) else rate)
    except (IndexError, KeyError, TypeError, ValueError, RuntimeError):
        return None


def _restored_step(optimizer: torch.optim.Optimizer, stacklevel: int) -> int:
    """The number of updates the optimizer's state counts: the largest `state[p]["step"]`
    (a tensor or a number) of its parameters; 0 when none holds one (with a warning when
    the optimizer holds state all the same)."""
    counts = []
    holds_state = False
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            state = optimizer.state.get(parameter)
            if not state:
                continue
            holds_state = True
            count = state.get("step") if isinstance(state, dict) else None
            if isinstance(count, torch.Tensor):
                count = count.item() if count.numel() == 1 else None
            if isinstance(count, (int, float, np.integer, np.floating)) and not isinstance(
                count, bool
            ) and np.isfinite(count) and count >= 0:
                counts.append(int(count))
    if counts:
        return max(counts)
    if holds_state:
        warnings.warn(
            f"tb_wur_plugin.torch.watch: the optimizer ({type(optimizer).__name__}) holds "
            "state but no count of its updates (state[p]['step']), so steps are counted from "
            "0; to continue the steps of a resumed run, pass first_step (e.g. the step saved "
            "with the checkpoint)",
            UserWarning,
            stacklevel=stacklevel,
        )
    return 0


def _distributed() -> bool:
    distributed = torch.distributed
    return distributed.is_available() and distributed.is_initialized()


def _rank() -> int:
    return torch.distributed.get_rank() if _distributed() else 0


def _device_of(model: torch.nn.Module) -> torch.device:
    """Where a sharded model's collectives run: the device of its first parameter."""
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")
