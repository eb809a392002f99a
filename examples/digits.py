"""Shared by the examples: scikit-learn's handwritten digits (shipped in the package) and a model."""

import keras
import numpy as np
from sklearn.datasets import load_digits


def digits() -> tuple[np.ndarray, np.ndarray]:
    """1,797 8x8 images of digits scaled to [0, 1], and their labels."""
    data = load_digits()
    images = (data.images / 16.0).astype("float32")[..., np.newaxis]
    return images, data.target.astype("int32")


def small_convnet() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, activation="relu", name="conv"),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu", name="hidden"),
            keras.layers.Dense(10, name="logits"),
        ],
        name="digits",
    )
