"""Where the suite's files are, for tests that run a script of tests/support/ in a fresh
interpreter: that interpreter finds this checkout's package first when given ROOT on its
PYTHONPATH, and the helpers beside the script (its folder is on its path)."""

import os

SUPPORT = os.path.dirname(os.path.abspath(__file__))  # tests/support: workers and helpers
ROOT = os.path.dirname(os.path.dirname(SUPPORT))  # the checkout: tb_wur_plugin/, examples/ ...
