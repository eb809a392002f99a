"""A PyTorch run that stops itself the moment a layer stops learning.

The small convnet of torch_watch.py trains on scikit-learn's digits with Adam, one parameter
group per layer. At --freeze-at a bug of the kind a per-group schedule or a fine-tuning
script makes sets the learning rate of the `hidden` layer's group to 0: the loss keeps
falling (the other layers still learn), so nothing looks wrong. `watch` judges every logged
step as it writes it, as `tb-wur report` judges a finished run: once `hidden`'s ratio has
been 0 for 5 logged steps in a row while the other layers moved, its flag fires (logged at
WARNING to the `tb_wur_plugin` logger), and since "not_moving" is in `stop_on`,
`handle.should_stop` becomes True and the loop below ends the run.

    python examples/torch_stop_on_flag.py --logdir logs/torch_stop_on_flag
    tb-wur report logs/torch_stop_on_flag      # the same flag, from the files
    tensorboard --logdir logs/torch_stop_on_flag   # and in the WUR tab
"""

import argparse
import logging

import torch

from tb_wur_plugin.torch import watch
from torch_watch import digits_batches, small_convnet


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default="logs/torch_stop_on_flag")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps at most")
    parser.add_argument("--every", type=int, default=5, help="log every N-th step")
    parser.add_argument("--freeze-at", type=int, default=60,
                        help="the step from which the hidden layer's learning rate is 0")
    args = parser.parse_args()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")  # shows the flags

    torch.manual_seed(0)
    model = small_convnet()
    layers = ["conv", "hidden", "logits"]
    optimizer = torch.optim.Adam(
        [{"params": getattr(model, name).parameters(), "name": name} for name in layers],
        lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    handle = watch(optimizer, model, args.logdir, every=args.every, stop_on={"not_moving"})
    step = -1
    for step, (x, y) in zip(range(args.steps), digits_batches(batch_size=32, seed=0)):
        if step == args.freeze_at:  # the bug
            next(g for g in optimizer.param_groups if g["name"] == "hidden")["lr"] = 0.0
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if handle.should_stop:
            break
    handle.remove()

    if handle.should_stop:
        print(f"stopped after step {step} (loss {loss.item():.4f}) of at most {args.steps}:")
        for flag in handle.flags:
            print(f"  {flag.tag}: {flag.reason} since step {flag.since}")
    else:
        print(f"{args.steps} steps, no flag (loss {loss.item():.4f})")
    print(f"see the same flags with: tb-wur report {args.logdir}")


if __name__ == "__main__":
    main()
