"""Writers as they wrote before protocol version 2, for tests and benchmarks that compare."""

from tb_wur_plugin.writer import SummaryWriter


class OldLayoutWriter(SummaryWriter):
    """The TF-free writer as it wrote before protocol version 2: one scalar per layer and
    step (`packed=False`), every tag's metadata at every step (its set of described tags stays empty). Histograms follow
    `metadata.HISTOGRAM_WRITE_VERSION`, which the caller sets to 1 for the old layout."""

    def __init__(self, logdir):
        super().__init__(logdir, packed=False)
        self._described = _Forgetful()


class _Forgetful(set):
    """A set that keeps nothing."""

    def update(self, *args):
        pass
