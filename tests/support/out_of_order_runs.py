"""Two runs whose steps are not written in order, for the routes' tests (in-process and
through the real `tensorboard`)."""

import time

import tensorflow as tf

from tb_wur_plugin import wur_summary


def write_out_of_order_runs(logdir: str) -> None:
    """shuffled: steps 5, 2, 9. restarted: steps 0-7, then (a restart from a checkpoint, a
    second event file) steps 4-11 with other values: steps 4-7 are written twice."""
    writer = tf.summary.create_file_writer(f"{logdir}/shuffled")
    with writer.as_default():
        for step in (5, 2, 9):
            wur_summary.scalar("net/w", 1e-3 * (1 + step), step=step)
    writer.close()
    for restart, (steps, value) in enumerate(((range(0, 8), 1e-3), (range(4, 12), 2e-3))):
        if restart:
            # the restart's file in a later second: TensorBoard reads a run's files in the
            # order of their names, whose time is in whole seconds, then a per-process
            # counter compared as text (a 10th writer's file sorts before a 9th's)
            started = int(time.time())
            while int(time.time()) == started:
                time.sleep(0.05)
        writer = tf.summary.create_file_writer(f"{logdir}/restarted")
        with writer.as_default():
            for step in steps:
                wur_summary.scalar("net/w", value, step=step)
        writer.close()
