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

    Each class is a fixed stroke pattern of 6x6 pixels; an image is its
    class's pattern at a random intensity with noise on the strokes, placed
    at a random offset of up to one pixel each way on the 8x8 grid (as the
    digits are never quite centred), rounded to the 17 grey levels and
    clipped at 0. So more than half the pixels are exactly 0, the four corners
    in every image, and the pixels near the edges are lit in only a few images:
    those are the zeros that neither a pixel's column nor a unit's column
    of a product explains at once (in the real set, 49% of the pixels are 0,
    and 3 of the 64 are 0 in every image). Scaled to [0, 1] as a user would
    (``/ 16``), which keeps every zero.
    """
    rng = np.random.default_rng(seed)
    patterns = (rng.random((classes, 6, 6)) < 0.8) * rng.uniform(8.0, 16.0, size=(classes, 6, 6))
    patterns[:, [0, 0, -1, -1], [0, -1, 0, -1]] = 0.0  # so the image's corners stay 0
    y = rng.integers(0, classes, size=samples)
    strokes = patterns[y] * rng.uniform(0.6, 1.0, size=(samples, 1, 1))
    strokes += rng.normal(scale=2.0, size=strokes.shape) * (strokes > 0)
    images = np.zeros((samples, 8, 8))
    rows, columns = rng.integers(0, 3, size=(2, samples))
    for image, stroke, r, c in zip(images, strokes, rows, columns, strict=True):
        image[r : r + 6, c : c + 6] = stroke
    X = np.clip(np.rint(images), 0.0, 16.0).reshape(samples, 64) / 16.0
    return X, y
