"""Train a 64 -> 128 -> 10 classifier with softmax cross-entropy on synthetic data.

    python examples/train_mlp.py [--steps 200] [--eager]

The model is ``H = relu(X @ W1 + b1)`` (one fused node), ``logits = H @ W2
+ b2`` (fused linear) and the fused, stable ``fa.cross_entropy`` with
integer class labels. By default the loss is compiled once with
``fa.compile(..., wrt=(0, 1, 2, 3))``: every step replays the traced tape
at the new parameters, and the data ``X`` and labels ``y`` get no gradient
(so the first layer's ``dX`` product is never computed). ``--eager``
records a fresh tape per step instead, the PyTorch way; both give the same
numbers. The optimiser (SGD with momentum) is plain NumPy, separate from
the gradients.
"""

import argparse
import time

import numpy as np

import fastad as fa

INPUTS, HIDDEN, CLASSES = 64, 128, 10


def make_data(rng, samples=2048, inputs=INPUTS, classes=CLASSES, spread=5.0):
    """Gaussian clusters, one per class, in ``inputs`` dimensions: (X, integer labels)."""
    centres = rng.normal(size=(classes, inputs))
    labels = rng.integers(0, classes, size=samples)
    X = centres[labels] + spread * rng.normal(size=(samples, inputs))
    return X, labels


def init_parameters(rng, inputs=INPUTS, hidden=HIDDEN, classes=CLASSES):
    """He initialisation for the ReLU layer, Glorot-like for the logits; zero biases."""
    return [
        rng.normal(size=(inputs, hidden)) * np.sqrt(2.0 / inputs),
        np.zeros(hidden),
        rng.normal(size=(hidden, classes)) * np.sqrt(1.0 / hidden),
        np.zeros(classes),
    ]


def loss(W1, b1, W2, b2, X, y):
    """Mean softmax cross-entropy of the two-layer network: nodes in, a scalar node out."""
    H = fa.linear_relu(X, W1, b1)
    return fa.cross_entropy(fa.linear(H, W2, b2), y)


def eager_step(parameters, X, y):
    """(loss, gradients) recorded on a fresh tape, as in PyTorch."""
    with fa.Tape():
        nodes = [fa.var(p) for p in parameters]
        L = loss(*nodes, X, y)
        L.backward()
        return L.value, [node.grad for node in nodes]


def compiled_step(parameters, X, y):
    """A (loss, gradients) function for batches shaped like ``X``, traced once."""
    f = fa.compile(loss, example=(*parameters, X, y.astype(np.float64)), wrt=(0, 1, 2, 3))
    return lambda parameters, X, y: f.value_and_grad((*parameters, X, y))


def accuracy(parameters, X, labels):
    W1, b1, W2, b2 = parameters
    logits = np.maximum(X @ W1 + b1, 0.0) @ W2 + b2
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def train(steps=200, batch=256, learning_rate=0.05, momentum=0.9, seed=0, eager=False, out=print):
    """Train with minibatch SGD + momentum; return the per-step losses."""
    rng = np.random.default_rng(seed)
    X, labels = make_data(rng)
    parameters = init_parameters(rng)
    velocity = [np.zeros_like(p) for p in parameters]
    step_function = eager_step if eager else compiled_step(parameters, X[:batch], labels[:batch])
    losses = []
    started = time.perf_counter()
    for step in range(steps):
        rows = rng.choice(X.shape[0], size=batch, replace=False)
        value, gradients = step_function(parameters, X[rows], labels[rows])
        for p, v, g in zip(parameters, velocity, gradients, strict=True):
            v *= momentum
            v -= learning_rate * g
            p += v
        losses.append(value)
        if out and (step % 50 == 0 or step == steps - 1):
            out(f"step {step:4d}  loss {value:.4f}  accuracy {accuracy(parameters, X, labels):.3f}")
    if out:
        per_step = (time.perf_counter() - started) / steps * 1e6
        way = "eager (a tape per step)" if eager else "compiled (one traced tape)"
        out(f"{way}: {per_step:.0f} us per step of batch {batch}, optimiser included")
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eager", action="store_true", help="a fresh tape per step")
    args = parser.parse_args(argv)
    train(steps=args.steps, eager=args.eager)


if __name__ == "__main__":
    main()
