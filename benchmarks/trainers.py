"""The trainer callbacks' cost (issue 26): a tiny GPT-2 `Trainer.train()` of STEPS updates
with no callback, with `tb_wur_plugin.transformers.WeightUpdateRatioCallback`, and with
`tb_wur_plugin.torch.watch` attached to the same torch optimizer by a plain callback;
every=1 (every step logged) and every=10**9 (no step logged after step 0). Runs are
interleaved in one process; the median time of each, as a ratio to the bare run.

    .venv/bin/python benchmarks/trainers.py [--repeats 5] [--steps 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import torch  # noqa: E402
import transformers  # noqa: E402

from tb_wur_plugin.torch import watch  # noqa: E402
from tb_wur_plugin.transformers import WeightUpdateRatioCallback  # noqa: E402


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n=4096, length=64, vocab=512):
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class _Watch(transformers.TrainerCallback):
    """torch.watch by hand on the same optimizer: the baseline the callback must match."""

    def __init__(self, log_dir, every):
        self.log_dir, self.every, self.handle = log_dir, every, None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
        self.handle = watch(optimizer.optimizer, model, self.log_dir, every=self.every)

    def on_train_end(self, *a, **kw):
        self.handle.remove()


def _run(kind: str, every: int, steps: int) -> float:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=512,
                                     n_positions=64, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        callbacks = {"bare": [], "callback": [WeightUpdateRatioCallback(every=every)],
                     "watch": [_Watch(os.path.join(out, "w"), every)]}[kind]
        args = transformers.TrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=8, logging_steps=10**6,
            report_to=[], use_cpu=True, disable_tqdm=True, save_strategy="no", seed=0)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(),
                                       callbacks=callbacks)
        start = time.perf_counter()
        trainer.train()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    a = parser.parse_args()
    cases = [(k, e) for e in (1, 10**9) for k in ("bare", "callback", "watch")]
    times = {c: [] for c in cases}
    _run("bare", 1, 5)  # warm-up
    for _ in range(a.repeats):
        for case in cases:
            times[case].append(_run(*case, a.steps))
    for every in (1, 10**9):
        bare = statistics.median(times[("bare", every)])
        for kind in ("bare", "callback", "watch"):
            t = statistics.median(times[(kind, every)])
            print(f"every={every:<10} {kind:<8} {1e3 * t / a.steps:8.2f} ms/step  "
                  f"x{t / bare:.3f} of bare")


if __name__ == "__main__":
    main()
