"""Small models, one training step each, several ways: the shared set-up of
``test_bench_models.py`` and ``threads.py``.

``mlp``: one forward+backward step of a 64 -> 128 -> 10 classifier
(``relu(X @ W1 + b1) @ W2 + b2``, softmax cross-entropy averaged over the
batch, integer labels), batch 256, float64. Every way returns
``(loss, [dW1, db1, dW2, db2])``:

- ``numpy``: the fastest honest NumPy layout we found (forward, stable
  log-softmax, hand-written backward), the reference;
- ``eager``: what a user calls: a fresh ``fa.Tape()``, ``fa.var`` leaves,
  ``fa.linear_relu``, ``fa.linear``, ``fa.cross_entropy``, ``backward()``
  and the ``.grad`` reads;
- ``compiled``: ``fa.compile(..., example=..., wrt=(0, 1, 2, 3))`` of the
  same function of arrays (the data X, y get no gradient; the labels stay
  integers), ``value_and_grad`` per step, timed once the default
  ``backend="auto"`` runs its generated kernel (:func:`generated`);
- ``torch``: PyTorch float64 eager (``torch.addmm``, ``F.cross_entropy``),
  when torch is installed.

``logreg``: value and gradient of logistic regression,
``mean(softplus(z) - y z)`` with ``z = X @ w + b``, X (2000, 20): the
fastad compiled function of arrays (``wrt=(0, 1)``) against hand-written
NumPy; each returns ``(loss, [dw, db])``.

``cross_entropy``: the fused ``fa.cross_entropy(logits, y)`` against the
same loss composed from blocks, forward+backward on a tape, the fused loss
compiled (``compiled``: ``wrt=0``, its generated kernel) and the fastest
NumPy we wrote (``numpy``); each returns ``(loss, dlogits)``.

``textbook_mlp`` and ``textbook_logreg`` are the plain textbook forms, not
timed: the NumPy ways are checked against them, and they against central
differences (``test_bench_models.py``).
"""

import importlib
import time

import numpy as np
from data import digits_like, with_exact_zeros

import fastad as fa

MLP_SIZE = (256, 64, 128, 10)  # batch, inputs, hidden, classes
LOGREG_SIZE = (2000, 20)  # samples, features
CROSS_ENTROPY_SIZES = ((256, 10), (256, 1000))


# -- the MLP step -----------------------------------------------------------------------------
def mlp_inputs(B=256, n=64, h=128, c=10, seed=0, data="dense"):
    """``(W1, b1, W2, b2, X, y)``: He-scaled weights, integer labels, and the data:
    normal (``dense``), with exact zeros (``zeros``) or digit-like images
    (``digits``: n = 64, c = 10; ``bench/data.py``)."""
    rng = np.random.default_rng(seed)
    W1 = rng.normal(size=(n, h)) * np.sqrt(2.0 / n)
    b1 = rng.normal(size=h) * 0.1
    W2 = rng.normal(size=(h, c)) * np.sqrt(1.0 / h)
    b2 = rng.normal(size=c) * 0.1
    X = rng.normal(size=(B, n))
    y = rng.integers(0, c, size=B)
    if data == "digits":
        if (n, c) != (64, 10):
            raise ValueError(f"digits data has 64 features and 10 classes, not {n} and {c}")
        X, y = digits_like(B)
    else:
        X = _features(X, data)
    return W1, b1, W2, b2, X, y


def textbook_mlp(W1, b1, W2, b2, X, y):
    """The step as a textbook writes it (relu'(0) = 0); the check, not timed."""
    B = X.shape[0]
    Z = X @ W1 + b1
    H = np.maximum(Z, 0.0)
    logits = H @ W2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    onehot = np.eye(W2.shape[1])[y]
    loss = -(onehot * log_p).sum() / B
    dlogits = (np.exp(log_p) - onehot) / B
    dH = dlogits @ W2.T
    dZ = dH * (Z > 0.0)
    return loss, [X.T @ dZ, dZ.sum(axis=0), H.T @ dlogits, dlogits.sum(axis=0)]


def numpy_mlp(W1, b1, W2, b2, X, y):
    """The timed NumPy step: the textbook's arithmetic, in place where NumPy allows it.

    Measured 10-20% faster than :func:`textbook_mlp` (334 against 414 us,
    542-559 against 588-651 us under load; best of 5 x 200, one BLAS
    thread, the 2-core machine); ``dH *= H > 0`` is the fastest mask we
    timed (``np.copyto(..., where=)`` and boolean assignment were several
    times slower). In place: the biases are added into the products,
    the ReLU overwrites ``Z`` (``H > 0`` exactly where ``Z > 0``, so the
    mask comes from ``H``), the softmax overwrites the shifted logits, and
    ``dlogits`` is the softmax with ``1`` taken off each label's entry (one
    fancy-indexed subtraction, no one-hot matrix). The loss needs only each
    row's log-sum and the label's shifted logit. ``X.T``, ``H.T`` and
    ``W2.T`` are views that BLAS reads transposed, no copies.
    """
    B = X.shape[0]
    rows = np.arange(B)
    H = X @ W1
    H += b1
    np.maximum(H, 0.0, out=H)
    logits = H @ W2
    logits += b2
    logits -= logits.max(axis=1, keepdims=True)
    picked = logits[rows, y]  # the labels' shifted logits (a copy)
    P = np.exp(logits, out=logits)
    sums = P.sum(axis=1, keepdims=True)
    loss = (np.log(sums).sum() - picked.sum()) / B
    P *= 1.0 / B / sums  # one (B, 1) division, then B * c multiplies
    P[rows, y] -= 1.0 / B  # dlogits = (softmax - onehot) / B
    dH = P @ W2.T
    dH *= H > 0.0
    return loss, [X.T @ dH, dH.sum(axis=0), H.T @ P, P.sum(axis=0)]


def eager_mlp(W1, b1, W2, b2, X, y):
    """What a user writes: fresh tape, leaves, fused layers, loss, backward, grads."""
    with fa.Tape():
        params = [fa.var(a) for a in (W1, b1, W2, b2)]
        w1, c1, w2, c2 = params
        H = fa.linear_relu(X, w1, c1)
        logits = fa.linear(H, w2, c2)
        L = fa.cross_entropy(logits, y)
        L.backward()
        return L.value, [p.grad for p in params]


def mlp_loss(W1, b1, W2, b2, X, y):
    """The loss as a function of arrays, for ``fa.compile``."""
    return fa.cross_entropy(fa.linear(fa.linear_relu(X, W1, b1), W2, b2), y)


# The parameters' positions in the compiled functions' arguments: with
# ``wrt=`` the data (X, y) get no gradient, so the first layer's backward
# is one product (dW1), not two (dX too).
MLP_WRT = (0, 1, 2, 3)
LOGREG_WRT = (0, 1)


def generated(f, arguments, seconds=120.0):
    """``f`` once its calls run generated code: ``backend="auto"`` builds it in a
    background thread after some interpreted calls (or loads it from the cache at
    once), and a user's loop runs it from then on; raises if it never comes."""
    deadline = time.monotonic() + seconds
    while f.tier("grad").name != "codegen":
        if time.monotonic() > deadline:
            raise RuntimeError(f"no generated code after {seconds:.0f} s: {f.tier('grad').reason}")
        f.value_and_grad(arguments)
    return f


def compile_mlp(W1, b1, W2, b2, X, y):
    """``(f, arguments)``: the compiled loss, running its generated kernel, and the
    argument tuple its steps take (the labels as integers)."""
    arguments = (W1, b1, W2, b2, X, y)
    return generated(fa.compile(mlp_loss, example=arguments, wrt=MLP_WRT), arguments), arguments


def compiled_mlp(f, arguments):
    """One step of the compiled loss: ``(loss, [dW1, db1, dW2, db2])``."""
    loss, grads = f.value_and_grad(arguments)
    return loss, grads


def load_torch():
    """``(torch, None)``, or ``(None, why)`` where it is not installed (an optional peer).

    Imported on demand, not with this module: importing torch starts an
    OpenMP runtime of its own, which ``threads.py``'s processes must not have.
    """
    try:
        return importlib.import_module("torch"), None
    except ImportError as error:
        return None, f"torch not installed: {error}"


def torch_mlp_setup(W1, b1, W2, b2, X, y):
    """``(parameters, X, y, torch.nn.functional)``: the arguments of :func:`torch_mlp`.

    The parameters require gradients. Sets torch's intra-op pool to one
    thread, like every other contender (``bench/conftest.py`` sets the BLAS
    libraries'; torch's pool is its own).
    """
    torch = importlib.import_module("torch")
    torch.set_num_threads(1)
    params = [torch.from_numpy(a.copy()).requires_grad_() for a in (W1, b1, W2, b2)]
    return params, torch.from_numpy(X), torch.from_numpy(y), torch.nn.functional


def torch_mlp(params, X, y, functional):
    """PyTorch float64 eager: what ``nn.Linear`` + ``F.cross_entropy`` run, minus the modules.

    ``addmm`` is ``b + X @ W`` in one BLAS call (as ``nn.Linear``); the
    gradients are cleared by setting them to None (``zero_grad``'s default).
    """
    w1, c1, w2, c2 = params
    for p in params:
        p.grad = None
    H = c1.addmm(X, w1).relu()
    L = functional.cross_entropy(c2.addmm(H, w2), y)
    L.backward()
    return L.item(), [p.grad.numpy() for p in params]


# -- logistic regression ----------------------------------------------------------------------
def logreg_inputs(N=2000, k=20, seed=0, data="dense"):
    """``(w, b, X, y)``: labels drawn from the model at ``w``, ``b`` (so the loss is O(1)),
    on normal features (``dense``) or the same with exact zeros (``zeros``)."""
    rng = np.random.default_rng(seed)
    X = _features(rng.normal(size=(N, k)), data)
    w = rng.normal(size=k) / np.sqrt(k)
    b = 0.3
    y = (rng.random(N) < 1.0 / (1.0 + np.exp(-(X @ w + b)))).astype(np.float64)
    return w, b, X, y


def textbook_logreg(w, b, X, y):
    """``mean(log(1 + exp(z)) - y z)`` and its gradient, as written; the check."""
    z = X @ w + b
    loss = np.mean(np.logaddexp(0.0, z) - y * z)
    d = (1.0 / (1.0 + np.exp(-z)) - y) / len(y)
    return loss, [X.T @ d, d.sum()]


def numpy_logreg(w, b, X, y):
    """The timed NumPy value and gradient; stable at any ``z``.

    One ``exp``, of ``-|z|`` (never overflows): ``softplus(z) = max(z, 0) +
    log1p(e)`` and ``sigmoid(z) = 1 / (1 + e)`` for ``z >= 0``, ``e / (1 +
    e)`` below, with ``e = exp(-|z|)``. ``y z`` is summed as a dot product.
    The sigmoid's ``np.where`` takes 10 us at N = 2000, a boolean-masked
    ``s[z < 0] *= e[z < 0]`` 30 us (``0.5 + 0.5 tanh(z / 2)`` also 10 us).
    """
    N = len(y)
    z = X @ w
    z += b
    e = np.exp(-np.abs(z))
    loss = (np.maximum(z, 0.0).sum() + np.log1p(e).sum() - y @ z) / N
    s = np.where(z < 0.0, e, 1.0)
    s /= 1.0 + e  # sigmoid(z)
    s -= y
    s /= N
    return loss, [X.T @ s, s.sum()]


def logreg_loss(w, b, X, y):
    """The loss as a function of arrays: ``fa.softplus`` is stable at any ``z``."""
    z = X @ w + b
    return (fa.softplus(z) - y * z).mean()


def fast_math_missing():
    """Why this machine has no fast math (``fa.compile(fast_math=True)``), or ""."""
    try:
        fa.compile(lambda x: x * x, num_inputs=1, fast_math=True)
    except RuntimeError as error:
        return str(error)
    return ""


def compile_logreg(w, b, X, y, fast_math=False):
    """``(f, arguments)``: the compiled loss (with libmvec's math under ``fast_math``),
    running its generated kernel, and the argument tuple its calls take."""
    arguments = (w, b, X, y)
    compiled = fa.compile(logreg_loss, example=arguments, wrt=LOGREG_WRT, fast_math=fast_math)
    return generated(compiled, arguments), arguments


def compiled_logreg(f, arguments):
    return f.value_and_grad(arguments)


# -- cross-entropy, fused or composed ---------------------------------------------------------
def cross_entropy_inputs(B, c, seed=0, data="dense"):
    """``(logits, y)``: logits of spread 3 (a loss far from both 0 and log c), labels;
    with ``data="zeros"`` half the logits, and some whole columns, exactly 0."""
    rng = np.random.default_rng(seed)
    return _features(rng.normal(size=(B, c)) * 3.0, data), rng.integers(0, c, size=B)


def _features(X, data):
    if data == "zeros":
        return with_exact_zeros(X)
    if data != "dense":
        raise ValueError(f"unknown data {data!r}: dense or zeros")
    return X


def _on_tape(logits, y, loss):
    with fa.Tape():
        leaf = fa.var(logits)
        L = loss(leaf, y)
        L.backward()
        return L.value, leaf.grad


def fused_cross_entropy(logits, y):
    return _on_tape(logits, y, fa.cross_entropy)


def log_softmax_cross_entropy(logits, y):
    """Composed: the fused ``log_softmax`` block, a one-hot product, two reductions."""

    def loss(x, y):
        onehot = np.zeros(x.shape)
        onehot[np.arange(len(y)), y] = 1.0
        return -(fa.log_softmax(x) * onehot).sum(axis=-1).mean()

    return _on_tape(logits, y, loss)


def primitive_cross_entropy(logits, y):
    """Composed from primitives: max (no gradient), subtract, exp, sum, log, pick, mean.

    The row maximum only keeps ``exp`` in range and cancels in the loss,
    so it is taken as a constant (``fa.stop_gradient``), as the textbook
    derivation does; the labels' logits are picked by indexing.
    """

    def loss(x, y):
        shifted = x - fa.stop_gradient(x.max(axis=-1, keepdims=True))
        lse = fa.log(fa.exp(shifted).sum(axis=-1))
        return (lse - shifted[np.arange(len(y)), y]).mean()

    return _on_tape(logits, y, loss)


def compiled_cross_entropy(logits, y):
    """``fa.cross_entropy`` compiled with ``wrt=0`` (the labels stay integers), one
    ``value_and_grad`` once its generated kernel runs; compiled once per shape."""
    f = _COMPILED_CROSS_ENTROPY.get(logits.shape)
    if f is None:
        arguments = (logits, y)
        f = generated(fa.compile(fa.cross_entropy, example=arguments, wrt=0), arguments)
        _COMPILED_CROSS_ENTROPY[logits.shape] = f
    return f.value_and_grad((logits, y))


_COMPILED_CROSS_ENTROPY = {}


def numpy_cross_entropy_timed(logits, y):
    """The timed NumPy value and gradient: :func:`numpy_mlp`'s loss, in place where
    NumPy allows it (one copy of the logits, shifted, then their exps over it; the
    loss from each row's log-sum and the label's shifted logit)."""
    B = len(y)
    rows = np.arange(B)
    P = logits - logits.max(axis=1, keepdims=True)
    picked = P[rows, y]  # the labels' shifted logits (a copy)
    np.exp(P, out=P)
    sums = P.sum(axis=1, keepdims=True)
    loss = (np.log(sums).sum() - picked.sum()) / B
    P *= 1.0 / B / sums
    P[rows, y] -= 1.0 / B  # (softmax - onehot) / B
    return loss, P


def numpy_cross_entropy(logits, y):
    """The NumPy value and gradient as written: the check for every way."""
    B = len(y)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_p[np.arange(B), y].mean()
    d = np.exp(log_p)
    d[np.arange(B), y] -= 1.0
    return loss, d / B


CROSS_ENTROPY_WAYS = {
    "fused": fused_cross_entropy,
    "log_softmax": log_softmax_cross_entropy,
    "primitives": primitive_cross_entropy,
    "compiled": compiled_cross_entropy,
    "numpy": numpy_cross_entropy_timed,
}
