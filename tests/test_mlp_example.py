"""examples/train_mlp.py: the loss falls on both data sets, and a step (fastad's and the
example's own NumPy timing reference) is a hand-written NumPy step."""

import numpy as np
import pytest
from conftest import load_example


@pytest.fixture(scope="module")
def example():
    return load_example("train_mlp")


def numpy_step(parameters, X, labels):
    """The same loss and its gradients, by hand: the reference."""
    W1, b1, W2, b2 = parameters
    Z = X @ W1 + b1
    H = np.maximum(Z, 0.0)
    logits = H @ W2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(X.shape[0])
    loss = -log_p[rows, labels].mean()
    d_logits = np.exp(log_p)
    d_logits[rows, labels] -= 1.0
    d_logits /= X.shape[0]
    dZ = (d_logits @ W2.T) * (Z > 0)
    return loss, [X.T @ dZ, dZ.sum(axis=0), H.T @ d_logits, d_logits.sum(axis=0)]


@pytest.mark.parametrize("way", ["eager", "compiled", "numpy"])
def test_first_step_equals_a_hand_written_numpy_step(example, way, rng):
    X, labels = example.make_data(rng, samples=256)
    assert np.mean(X == 0.0) > 0.4 and X.min() == 0.0 and X.max() <= 1.0  # zero pixels
    parameters = example.init_parameters(rng)
    parameters[1] = rng.normal(size=parameters[1].shape)  # nonzero biases: a real test
    if way == "eager":
        value, gradients = example.eager_step(parameters, X, labels)
    elif way == "numpy":
        value, gradients = example.numpy_step(parameters, X, labels)
    else:
        value, gradients = example.compiled_step(parameters, X, labels)(parameters, X, labels)
    loss, expected = numpy_step(parameters, X, labels)
    assert value == pytest.approx(loss, rel=1e-10)
    for got, want in zip(gradients, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("data", ["digits", "synthetic"])
def test_loss_falls_and_both_ways_train_alike(example, data):
    compiled = example.train(steps=60, data=data, out=None)
    eager = example.train(steps=60, eager=True, data=data, out=None)
    assert np.mean(compiled[-10:]) < 0.3 * np.mean(compiled[:5])
    np.testing.assert_allclose(eager, compiled, rtol=1e-9)


def test_the_digits_are_scikit_learns_and_the_report_says_so(example, rng):
    X, labels = example.load_data("digits", rng)
    assert X.shape == (1797, 64) and set(labels) == set(range(10))
    assert np.all(X[:, [0, 32, 39]] == 0.0)  # pixels 0 in every image
    printed = []
    example.train(steps=3, data="digits", out=printed.append)
    assert printed[0].startswith("digits: 1500 training images, 297 held out, 49% of the pixels")
    assert printed[-2].startswith("held-out accuracy ")
    assert "NumPy by hand" in printed[-1] and printed[-1].endswith("x)")
    with pytest.raises(ValueError, match="unknown data 'mnist'"):
        example.load_data("mnist", rng)
