"""tb-wur-plugin: per-layer weight-update ratios ‖Δw‖ / ‖w‖ in TensorBoard.

`tb_wur_plugin.Flag` is `judgement.online.Flag`: a finding of the judgement fired while
training (imported on first use; it loads no TensorFlow module).
"""

__version__ = "0.1.0"


def read_ratios(logdir, run=None, **kwargs):
    """The weight-update ratios of a logdir as a pandas DataFrame (columns run, tag, step,
    wall_time, ratio; a dict of numpy arrays without pandas), whatever layout wrote them.
    See `tb_wur_plugin.read.ratio_table.read_ratios` for the arguments."""
    from tb_wur_plugin.read.ratio_table import read_ratios as read

    return read(logdir, run, **kwargs)


def __getattr__(name: str):
    """`Flag`, imported on first use (so that `import tb_wur_plugin` stays light)."""
    if name == "Flag":
        from tb_wur_plugin.judgement.online import Flag

        return Flag
    raise AttributeError(f"module 'tb_wur_plugin' has no attribute {name!r}")
