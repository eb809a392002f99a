"""The line search's tests' problem: logistic regression on scikit-learn's breast-cancer data
(standardised), its mean loss and gradient in float64 numpy, which the numpy references of
the search (tests/armijo/) step with."""

import numpy as np
from sklearn.datasets import load_breast_cancer


def logistic_data(dtype=np.float64):
    """(x, y): the standardised features and the labels, as `dtype`."""
    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    return x.astype(dtype), y.astype(dtype)


X, Y = logistic_data()
D = X.shape[1]


def np_loss(w, b, x, y):
    """Mean logistic loss, float64."""
    z = x @ w + b
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def np_grad(w, b, x, y):
    """The gradient of `np_loss`: (dw, db)."""
    z = x @ w + b
    r = (1.0 / (1.0 + np.exp(-z)) - y) / len(y)
    return x.T @ r, float(np.sum(r))
