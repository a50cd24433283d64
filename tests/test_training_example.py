"""The end-to-end example trains: loss falls, the optimiser step stays separate."""

import numpy as np
import pytest
from conftest import load_example

import fastad as fa


@pytest.fixture(scope="module")
def example():
    return load_example("train_two_layer")


def test_loss_decreases(example):
    losses = example.train(steps=80, log_every=0)
    assert losses[-1] < 0.2 * losses[0]
    assert np.mean(losses[-10:]) < np.mean(losses[10:20])


def test_gradients_are_checked_before_the_step(example, rng):
    # The step is separate from backward: the gradients it uses can be
    # verified first, here against central differences.
    X, Y = example.make_data(rng, samples=6, inputs=3, outputs=2)
    parameters = example.init_parameters(rng, inputs=3, hidden=4, outputs=2)
    names = list(parameters)
    shapes = [parameters[n].shape for n in names]
    sizes = [parameters[n].size for n in names]

    def unflatten(p):
        parts = np.split(p, np.cumsum(sizes)[:-1])
        return {n: part.reshape(s) for n, part, s in zip(names, parts, shapes, strict=True)}

    def value(p):
        return example.loss_and_gradients(unflatten(p), X, Y)[0]

    def gradient(p):
        grads = example.loss_and_gradients(unflatten(p), X, Y)[1]
        return np.concatenate([grads[n].ravel() for n in names])

    point = np.concatenate([parameters[n].ravel() for n in names])
    assert fa.gradcheck(value, point, grad=gradient)


def test_clipping_bounds_the_global_norm(example):
    gradients = {"a": np.array([3.0, 4.0]), "b": np.array([12.0])}
    clipped, norm = example.clip_by_global_norm(gradients, max_norm=6.5)
    assert norm == 13.0
    total = np.sqrt(sum(np.sum(g * g) for g in clipped.values()))
    assert total == pytest.approx(6.5)
    np.testing.assert_allclose(clipped["a"], [1.5, 2.0])
