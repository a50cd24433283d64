"""Train a 64 -> 128 -> 10 classifier of 8x8 digit images with softmax cross-entropy.

    python examples/train_mlp.py [--steps 200] [--eager] [--data digits|synthetic]

The data are scikit-learn's handwritten digits (1,797 images of 8x8 pixels
of 0-16, shipped with scikit-learn: nothing is downloaded) when
scikit-learn is installed (``pip install ".[examples]"``), otherwise a
synthetic set of the same shape: one stroke pattern per class, with noise.
Both are full of exact zeros (the digits: 49% of the pixels, and 3 pixels
0 in every image), the data that used to send array products down a slow
path. Pixels are scaled to [0, 1].

The model is ``H = relu(X @ W1 + b1)`` (one fused node), ``logits = H @ W2
+ b2`` (fused linear) and the fused, stable ``fa.cross_entropy`` with
integer class labels. By default the loss is compiled once with
``fa.compile(..., wrt=(0, 1, 2, 3), backend="codegen")``: every step is one
call of a generated kernel (the whole forward and backward pass, NumPy's
BLAS for the products; a few seconds to compile the first time, then
cached on disk), and the data ``X`` and labels ``y`` get no gradient (so
the first layer's ``dX`` product is never computed). They are the batch
(``batch=(4, 5)``): every epoch visits the training images once in a new
order, in batches of 256 and a last, smaller one (1,500 = 5 x 256 + 220),
which runs the same traced program without a new trace. ``--eager``
records a fresh tape per step instead, the PyTorch way; both give the same
numbers. The optimiser (SGD with momentum) is plain NumPy, separate from
the gradients. At the end it prints the held-out accuracy and the time of
one gradient step beside the same step written by hand in NumPy.
"""

import argparse
import time

import numpy as np

import fastad as fa

INPUTS, HIDDEN, CLASSES = 64, 128, 10
HELD_OUT = 297  # of the digits' 1,797 images: 1,500 to train on


def load_data(kind, rng):
    """``(X, labels)`` of ``kind`` "digits" (scikit-learn's) or "synthetic", pixels in [0, 1]."""
    if kind == "digits":
        from sklearn.datasets import load_digits  # optional: the "examples" extra

        digits = load_digits()
        return digits.data / 16.0, digits.target
    if kind == "synthetic":
        return make_data(rng)
    raise ValueError(f"unknown data {kind!r}: digits or synthetic")


def default_data():
    """ "digits" where scikit-learn is installed, else "synthetic"."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return "synthetic"
    return "digits"


def make_data(rng, samples=1797, classes=CLASSES):
    """Synthetic 8x8 images shaped like the digits: (X in [0, 1], integer labels).

    Each class is a stroke pattern on the 6x6 interior (the edge pixels stay
    0, as the digits' mostly are): one shared pattern with a few strokes of
    its own, so that classes look alike, as 3, 8 and 9 do. An image is its
    class's pattern at a random intensity, each stroke missing at random,
    with noise on the strokes, rounded to the 17 grey levels of the digits
    and clipped at 0, so most pixels are exactly 0.
    """
    shared = rng.random((6, 6)) < 0.4
    own = rng.random((classes, 6, 6)) < 0.15
    patterns = np.zeros((classes, 8, 8))
    patterns[:, 1:7, 1:7] = (shared ^ own) * 12.0
    labels = rng.integers(0, classes, size=samples)
    strokes = patterns[labels] * (rng.random((samples, 8, 8)) < 0.8)
    images = strokes * rng.uniform(0.5, 1.0, size=(samples, 1, 1))
    images += 4.0 * rng.normal(size=images.shape) * (strokes > 0)
    return np.clip(np.rint(images), 0.0, 16.0).reshape(samples, 64) / 16.0, labels


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
    """A (loss, gradients) function for batches of any number of rows (``X``'s columns),
    traced once and run as one generated kernel; the gradients go into the same arrays
    every step."""
    f = fa.compile(
        loss, example=(*parameters, X, y), wrt=(0, 1, 2, 3), batch=(4, 5), backend="codegen"
    )
    gradients = [np.empty_like(p) for p in parameters]
    return lambda parameters, X, y: f.value_and_grad((*parameters, X, y), out=gradients)


def numpy_step(parameters, X, labels):
    """The same loss and its gradients written by hand in NumPy: the timing reference."""
    W1, b1, W2, b2 = parameters
    B = X.shape[0]
    rows = np.arange(B)
    H = np.maximum(X @ W1 + b1, 0.0)
    logits = H @ W2 + b2
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    sums = P.sum(axis=1, keepdims=True)
    value = (np.log(sums).sum() - logits[rows, labels].sum()) / B
    P /= sums * B
    P[rows, labels] -= 1.0 / B  # d loss / d logits
    dH = (P @ W2.T) * (H > 0.0)
    return value, [X.T @ dH, dH.sum(axis=0), H.T @ P, P.sum(axis=0)]


def accuracy(parameters, X, labels):
    W1, b1, W2, b2 = parameters
    logits = np.maximum(X @ W1 + b1, 0.0) @ W2 + b2
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def split(X, labels, rng, held_out=HELD_OUT):
    """A shuffled (train, held-out) split of ``(X, labels)``."""
    order = rng.permutation(X.shape[0])
    test, train = order[:held_out], order[held_out:]
    return (X[train], labels[train]), (X[test], labels[test])


def us_per_call(step, arguments, calls=100):
    """The best of three means over ``calls`` calls of ``step(*arguments)``, in microseconds."""
    step(*arguments)  # warm
    best = np.inf
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(calls):
            step(*arguments)
        best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e6


def train(
    steps=200,
    batch=256,
    learning_rate=0.1,
    momentum=0.9,
    seed=0,
    eager=False,
    data=None,
    out=print,
):
    """Train with minibatch SGD + momentum; return the per-step losses.

    ``data``: "digits" or "synthetic" (None: digits where scikit-learn is
    installed). With ``out`` set it prints progress, the held-out accuracy
    and the time of one gradient step against :func:`numpy_step`.
    """
    rng = np.random.default_rng(seed)
    kind = data or default_data()
    (X, labels), (X_test, labels_test) = split(*load_data(kind, rng), rng)
    parameters = init_parameters(rng)
    velocity = [np.zeros_like(p) for p in parameters]
    step_function = eager_step if eager else compiled_step(parameters, X[:batch], labels[:batch])
    if out:
        out(
            f"{kind}: {X.shape[0]} training images, {X_test.shape[0]} held out, "
            f"{np.mean(X == 0.0):.0%} of the pixels exactly 0"
        )
    losses = []
    order = np.empty(0, np.intp)
    for step in range(steps):
        if order.size == 0:  # a new epoch: every image once, in a new order
            order = rng.permutation(X.shape[0])
        rows, order = order[:batch], order[batch:]  # an epoch's last batch is smaller
        value, gradients = step_function(parameters, X[rows], labels[rows])
        for p, v, g in zip(parameters, velocity, gradients, strict=True):
            v *= momentum
            v -= learning_rate * g
            p += v
        losses.append(value)
        if out and (step % 50 == 0 or step == steps - 1):
            out(f"step {step:4d}  loss {value:.4f}  accuracy {accuracy(parameters, X, labels):.3f}")
    if out:
        out(f"held-out accuracy {accuracy(parameters, X_test, labels_test):.3f}")
        arguments = (parameters, X[:batch], labels[:batch])
        fastad_us, numpy_us = (
            us_per_call(step_function, arguments),
            us_per_call(numpy_step, arguments),
        )
        way = "eager (a tape per step)" if eager else "compiled (one generated kernel)"
        out(
            f"one gradient step of batch {batch}: fastad {way} {fastad_us:.0f} us, "
            f"NumPy by hand {numpy_us:.0f} us ({fastad_us / numpy_us:.2f}x)"
        )
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eager", action="store_true", help="a fresh tape per step")
    parser.add_argument(
        "--data",
        choices=("digits", "synthetic"),
        help="scikit-learn's digits (the default where it is installed) or a synthetic set",
    )
    args = parser.parse_args(argv)
    train(steps=args.steps, eager=args.eager, data=args.data)


if __name__ == "__main__":
    main()
