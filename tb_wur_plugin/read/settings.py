"""The read side's defaults, shared by the plugin's routes and `tb-wur report`."""

# Steps per tag kept by both loaders unless the user passes --samples_per_plugin=wur=N.
DEFAULT_SAMPLES_PER_TAG = 100_000
# Read requests ask for this many points when the user keeps all of them (=0).
ALL_POINTS = 2**31 - 1
