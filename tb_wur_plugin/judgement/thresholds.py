"""The judgement's settings and thresholds (docs/report.md says why each is where it is, and
what the corpus of real runs in tests/support/judgement_corpus.py showed)."""

# Judged steps in a row that make a streak flag, unless the user gives another patience.
DEFAULT_PATIENCE = 5
# The band the counts (`above`, `below`) are taken against when no band is given, and the
# edge a band given with one edge only takes for the other.
DEFAULT_BAND = (1e-4, 1e-2)

# A ratio below this is no real movement (an update below float32's resolution of the weights
# leaves them as they were: the ratio is then exactly 0).
NOT_MOVING_BELOW = 1e-9
# The run moves at a step when another layer's ratio is at least this; the peers' median
# must be at least this for the outlier rules.
RUN_MOVING_FROM = 1e-6
# Updates at least half the weights' norm, sustained, are too fast whatever the optimizer.
TOO_FAST_FROM = 0.5
# An outlier is this many times below (slow) or above (fast) the median of its peers.
SLOW_OUTLIER_FACTOR = 150.0
FAST_OUTLIER_FACTOR = 40.0
# A fast outlier's own ratio is at least this (a layer still moving when the rest of a run has
# converged is no defect).
FAST_OUTLIER_FROM = 1e-3
# An outlier is also at least this many times away from the median of its group, itself
# included (so that in a group of three, the healthy two are not outliers of the third).
OUTLIER_CONFIRM_FACTOR = 10.0
# Peers needed to call a layer an outlier (with one, which of the two is odd is unknown).
MIN_PEERS = 2
