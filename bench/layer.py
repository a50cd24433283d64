"""One linear+ReLU layer, forward and backward, five ways (the ``fused`` group),
and the same layer trained in a long-lived-tape loop (``long_lived``).

``H = relu(X @ W + b)`` with upstream gradient ``G``; every way returns
``(H, dX, dW, db)``:

- ``numpy``: the fastest honest NumPy composition we found (forward plus
  hand-written backward, in-place where NumPy allows it), the
  reference;
- ``kernels``: fastad's fused layer rule called directly (its forward and
  VJP from ``fastad.core.block_rules``: the products and the compiled passes around
  them), what the fused node costs without a tape;
  nobody calls this path, it is the floor under the tape's overhead;
- ``fused``: what a user calls: ``fa.linear_relu`` recorded on a fresh
  ``fa.Tape()``, the scalar loss ``(H * G).sum()`` (whose gradient with
  respect to ``H`` is ``G``), ``backward()``, then reading ``.grad``;
- ``blocks``: the same through the tape, unfused: ``fa.relu(X @ W + b)``
  recorded as three block nodes;
- ``compiled``: ``fa.compile`` of the loss ``(linear_relu(X, W, b) * G).sum()``
  with ``wrt=(0, 1, 2)`` (``G`` is data), ``value_and_grad`` per call, once
  its generated kernel runs: the whole layer in one compiled call. It
  returns the loss in the place of ``H``, which it does not hand out;
- ``numpy_loss``: ``numpy`` with the loss in the place of ``H``, the
  ``compiled`` way's outputs: its reference;
- ``torch``: PyTorch float64 eager (``torch_layer``), on tensors made once
  outside the timing (``torch_layer_setup``), skipped without torch;
- ``scalars``: every multiply and add recorded as a scalar node
  (``fa.scalar_nodes``), the articles' "a matmul as 10^9 scalar nodes",
  only at sizes where that tape stays small (``SCALAR_NODE_LIMIT``).

``reference_layer`` is the textbook composition every way is checked
against; it is not timed.

``long_lived_loop`` is the PyTorch-style training loop: every step records
the layer, the loss and the backward on ONE tape that is never reset (the
current tape, as ``fa.var`` without ``with fa.Tape()`` per step would use),
then takes a plain SGD step on the NumPy parameters. It returns each step's
seconds, so one run compares late steps with early ones.
"""

import os
import time

import numpy as np
from data import with_exact_zeros
from models import generated, load_torch

import fastad as fa
from fastad.core import block_rules
from fastad.core.reach import Need
from fastad.kernels import optable

LINEAR_RELU = block_rules.RULES[optable.BLOCK_BY_NAME["linear_relu"].code]

SIZES = ((8, 16, 16), (8, 64, 64), (32, 128, 128), (64, 256, 512), (64, 512, 1024))
if os.environ.get("FASTAD_BENCH_QUICK") == "1":  # bench/report.py's default subset
    SIZES = ((8, 16, 16), (8, 64, 64), (32, 128, 128), (64, 512, 1024))
# About 2 B n h scalar nodes, each ~1 us to record and ~100 bytes with its
# Python object: past ~10^5 the scalar-node path takes seconds and then
# gigabytes (10^8 nodes at (64, 512, 1024)), so it is skipped there.
SCALAR_NODE_LIMIT = 100_000

# The long-lived tape loop: steps [50, 100) against steps [2000, 2050) of
# one run, on the (8, 64, 64) layer.
LOOP_SIZE = (8, 64, 64)
EARLY_STEPS = (50, 100)
LATE_STEPS = (2000, 2050)
LEARNING_RATE = 1e-3


def layer_inputs(B, n, h, seed=0, data="dense"):
    """``(X, W, b, G)``: normal inputs, or with ``data="zeros"`` inputs ``X`` with
    exact zeros (``bench/data.py``), scaled weights, bias, upstream gradient."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(B, n))
    if data == "zeros":
        X = with_exact_zeros(X)
    elif data != "dense":
        raise ValueError(f"unknown data {data!r}: dense or zeros")
    return (
        X,
        rng.normal(size=(n, h)) / np.sqrt(n),
        rng.normal(size=h) * 0.1,
        rng.normal(size=(B, h)),
    )


def flops(B, n, h):
    """Floating-point operations of forward + backward: three (B, n, h) products."""
    return 3 * 2 * B * n * h


def reference_layer(X, W, b, G):
    """The textbook composition, the check for every way (relu'(0) = 0)."""
    Z = X @ W + b
    H = np.maximum(Z, 0.0)
    dZ = G * (Z > 0.0)
    return H, dZ @ W.T, X.T @ dZ, dZ.sum(axis=0)


def numpy_layer(X, W, b, G):
    """The timed NumPy reference: the composition with two temporaries fewer.

    Adding ``b`` in place and writing the ReLU over ``Z`` save two
    allocations: 13.4 us against the textbook's 13.7-14.0 at (8, 64, 64)
    on the 2-core machine (best of 15 interleaved repeats, three times);
    3 of the remaining calls are BLAS. ``X.T`` and ``W.T`` are views that
    BLAS reads transposed, no copies. ``np.where(Z > 0, G, 0)`` for ``dZ``
    was slower, and ``np.ones(B) @ dZ`` for ``db`` no faster than
    ``dZ.sum(axis=0)`` within the noise (both sizes), so they stay out.
    """
    Z = X @ W
    Z += b
    dZ = G * (Z > 0.0)
    H = np.maximum(Z, 0.0, out=Z)
    return H, dZ @ W.T, X.T @ dZ, dZ.sum(axis=0)


# What a sweep asks the rule to send X, W and b when all three are leaves (fa.var):
# their values; a leaf's adjoint goes no further, so its zeros' reach is never read.
LEAVES = (Need.VALUES,) * 3


def kernels_layer(X, W, b, G):
    """The fused layer's rule without a tape: its forward and its VJP, as a sweep calls them."""
    H = LINEAR_RELU.forward((X, W, b), None)
    dX, dW, db = LINEAR_RELU.vjp((X, W, b), H, G, None, LEAVES)
    return H, dX, dW, db


def _on_tape(X, W, b, G, build, copy=True):
    with fa.Tape():
        nodes = [fa.var(a, copy=copy) for a in (X, W, b)]
        H = build(*nodes)
        (H * G).sum().backward()
        return (H.value, *(node.grad for node in nodes))


def fused_layer(X, W, b, G):
    return _on_tape(X, W, b, G, fa.linear_relu)


def fused_shared_layer(X, W, b, G):
    """:func:`fused_layer` with leaves that keep the caller's arrays (``copy=False``), as
    PyTorch's ``from_numpy`` tensors do: no copy of ``W`` per step."""
    return _on_tape(X, W, b, G, fa.linear_relu, copy=False)


def blocks_layer(X, W, b, G):
    return _on_tape(X, W, b, G, lambda X, W, b: fa.relu(X @ W + b))


def scalars_layer(X, W, b, G):
    with fa.Tape():
        nodes = [fa.scalar_nodes(a) for a in (X, W, b)]
        H = fa.relu(nodes[0] @ nodes[1] + nodes[2])
        (H * G).sum().backward()
        values = np.vectorize(lambda node: node.value)(H)
        return (values, *(np.vectorize(lambda node: node.grad)(n) for n in nodes))


def numpy_layer_loss(X, W, b, G):
    """The compiled way's reference, with its outputs: :func:`numpy_layer`'s, the loss
    ``sum(H * G)`` in ``H``'s place (``np.vdot``: one BLAS call, the fastest we timed)."""
    H, dX, dW, db = numpy_layer(X, W, b, G)
    return np.vdot(H, G), dX, dW, db


def layer_loss(X, W, b, G):
    """The layer as a function of arrays with a scalar loss: ``G`` is d loss / d H."""
    return (fa.linear_relu(X, W, b) * G).sum()


_COMPILED = {}  # one compiled layer per shape, made by the first (untimed) call


def compiled_layer(X, W, b, G):
    """The layer compiled: ``(loss, dX, dW, db)`` from one generated call."""
    key = (X.shape, W.shape)
    f = _COMPILED.get(key)
    if f is None:
        arguments = (X, W, b, G)
        f = generated(fa.compile(layer_loss, example=arguments, wrt=(0, 1, 2)), arguments)
        _COMPILED[key] = f
    loss, (dX, dW, db) = f.value_and_grad((X, W, b, G))
    return loss, dX, dW, db


def torch_layer_setup(X, W, b, G):
    """``(torch_layer, arguments)``: PyTorch float64 eager on tensors made once (the fastest
    honest way: ``from_numpy`` shares memory, the parameters require gradients), one thread;
    ``(None, why)`` where torch is not installed."""
    torch, missing = load_torch()
    if torch is None:
        return None, missing
    torch.set_num_threads(1)
    tensors = [torch.from_numpy(a) for a in (X, W, b, G)]
    for t in tensors[:3]:
        t.requires_grad_()
    return torch_layer, tuple(tensors)


def torch_layer(X, W, b, G):
    """``relu(b + X @ W)`` (``addmm``, as ``nn.Linear``), the loss ``sum(H * G)``, backward,
    the gradients (cleared by setting them to None, as ``zero_grad``)."""
    for t in (X, W, b):
        t.grad = None
    H = b.addmm(X, W).relu()
    (H * G).sum().backward()
    return H.detach().numpy(), X.grad.numpy(), W.grad.numpy(), b.grad.numpy()


WAYS = {
    "numpy": numpy_layer,
    "kernels": kernels_layer,
    "fused": fused_layer,
    "fused_shared": fused_shared_layer,
    "blocks": blocks_layer,
    "compiled": compiled_layer,
    "numpy_loss": numpy_layer_loss,
    "scalars": scalars_layer,
}


def scalar_nodes_fit(B, n, h):
    return 2 * B * n * h <= SCALAR_NODE_LIMIT


def long_lived_loop(X, W, b, G, steps):
    """``steps`` SGD steps of the layer, all recorded on one never-reset tape.

    Returns ``(W, b, seconds)``: the final parameters and each step's wall
    time (recording, backward, reading the gradients and the update). The
    tape is entered once around the whole loop, so each step's code is
    exactly what a user writes against the thread's default tape; it is a
    fresh tape only so that the benchmark's history does not outlive it.
    """
    seconds = np.empty(steps)
    clock = time.perf_counter
    with fa.Tape():
        for step in range(steps):
            start = clock()
            W_node, b_node = fa.var(W), fa.var(b)
            H = fa.linear_relu(X, W_node, b_node)
            (H * G).sum().backward()
            W = W - LEARNING_RATE * W_node.grad
            b = b - LEARNING_RATE * b_node.grad
            seconds[step] = clock() - start
    return W, b, seconds


def numpy_loop(X, W, b, G, steps):
    """The same SGD steps in NumPy: the check for ``long_lived_loop``."""
    for _ in range(steps):
        _, _, dW, db = reference_layer(X, W, b, G)
        W = W - LEARNING_RATE * dW
        b = b - LEARNING_RATE * db
    return W, b
