"""Realistic inputs for the array benchmarks: exact zeros, as real data has them.

Gaussian noise has no exact zero, and real data is full of them: zero
pixels, one-hot and missing features, dead ReLU units, sparse inputs. Each
array benchmark runs on three kinds of data, named by ``DATA``:

- ``dense``: the benchmark's own Gaussian inputs;
- ``zeros``: the same inputs with half their entries set to exactly 0 and
  one column in eight all 0 (:func:`with_exact_zeros`);
- ``digits``: for the MLP, images shaped like scikit-learn's digits (8x8
  pixels of 0-16, 10 classes; :func:`digits_like`), made here from NumPy so
  that nothing is downloaded.

Finite data must never reach the exactness rules' slow path, so every
``zeros`` and ``digits`` row should take its ``dense`` row's time, within
noise (the tests count the slow path: ``tests/test_exact_zeros.py``).
"""

import numpy as np

DATA = ("dense", "zeros", "digits")
ZERO_FRACTION = 0.5
ZERO_COLUMN_EVERY = 8


def with_exact_zeros(X, seed=1):
    """``X`` with half its entries exactly 0 and one column in eight all 0 (a copy)."""
    rng = np.random.default_rng(seed)
    X = np.array(X, dtype=np.float64)
    X[rng.random(X.shape) < ZERO_FRACTION] = 0.0
    columns = X.shape[-1]
    X[..., rng.choice(columns, max(1, columns // ZERO_COLUMN_EVERY), replace=False)] = 0.0
    return X


def digits_like(samples, classes=10, seed=2):
    """``(X, y)``: 8x8 images of 0-16 like scikit-learn's digits, flattened to 64 features.

    Each class is a fixed stroke pattern on the 8x8 grid, each image its
    class's pattern at a random intensity with noise, rounded to the 17 grey
    levels and clipped at 0: most pixels are exactly 0, and the left and
    right edge columns are 0 in every image, as in the real set (where 10
    of the 64 pixels are 0 in more than 99% of the images). Scaled to
    [0, 1] as a user would (``/ 16``), which keeps every zero.
    """
    rng = np.random.default_rng(seed)
    patterns = np.zeros((classes, 8, 8))
    for c in range(classes):
        strokes = rng.random((6, 6)) < 0.8  # the interior only: edge columns stay 0
        patterns[c, 1:7, 1:7] = strokes * rng.uniform(8.0, 16.0, size=(6, 6))
    y = rng.integers(0, classes, size=samples)
    noise = rng.normal(scale=2.0, size=(samples, 8, 8))
    images = patterns[y] * rng.uniform(0.6, 1.0, size=(samples, 1, 1)) + noise * (patterns[y] > 0)
    X = np.clip(np.rint(images), 0.0, 16.0).reshape(samples, 64) / 16.0
    return X, y
