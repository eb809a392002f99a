"""The corpus of real training runs (support/judgement_corpus.py) the judgement's tests share:
written once per test session, with the spectral ratios too (a minute or two of CPU). The
folder's modules run on one xdist worker (tests/conftest.py, TOGETHER), so it is written once."""

import pytest

import judgement_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("judgement_corpus"))
    judgement_corpus.generate(logdir, spectral=True)
    return logdir
