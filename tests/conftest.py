import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402


@pytest.fixture
def logdir(tmp_path):
    return str(tmp_path / "logs")


@pytest.fixture
def writer(logdir):
    w = tf.summary.create_file_writer(logdir)
    yield w
    w.close()
