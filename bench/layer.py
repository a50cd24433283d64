"""One linear+ReLU layer, forward and backward, five ways (the ``fused`` group).

``H = relu(X @ W + b)`` with upstream gradient ``G``; every way returns
``(H, dX, dW, db)``:

- ``numpy``: the hand-written NumPy composition (the SPEC's reference);
- ``kernels``: fastad's fused kernels called directly
  (``fastad.kernels.fused``), what the fused node costs without a tape;
- ``fused``: ``fa.linear_relu`` recorded on a tape, then ``backward``;
- ``blocks``: ``fa.relu(X @ W + b)`` recorded as three block nodes;
- ``scalars``: every multiply and add recorded as a scalar node
  (``fa.scalar_nodes``), the articles' "a matmul as 10^9 scalar nodes",
  only at sizes where that tape stays small (``SCALAR_NODE_LIMIT``).
"""

import os

import numpy as np

import fastad as fa
from fastad.kernels import fused

SIZES = ((8, 16, 16), (8, 64, 64), (32, 128, 128), (64, 256, 512), (64, 512, 1024))
if os.environ.get("FASTAD_BENCH_QUICK") == "1":  # bench/report.py's default subset
    SIZES = ((8, 16, 16), (8, 64, 64), (32, 128, 128), (64, 512, 1024))
# About 2 B n h scalar nodes, each ~1 us to record and ~100 bytes with its
# Python object: past ~10^5 the scalar-node path takes seconds and then
# gigabytes (10^8 nodes at (64, 512, 1024)), so it is skipped there.
SCALAR_NODE_LIMIT = 100_000


def layer_inputs(B, n, h, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(B, n)),
        rng.normal(size=(n, h)) / np.sqrt(n),
        rng.normal(size=h) * 0.1,
        rng.normal(size=(B, h)),
    )


def flops(B, n, h):
    """Floating-point operations of forward + backward: three (B, n, h) products."""
    return 3 * 2 * B * n * h


def numpy_layer(X, W, b, G):
    Z = X @ W + b
    H = np.maximum(Z, 0.0)
    dZ = G * (Z > 0.0)
    return H, dZ @ W.T, X.T @ dZ, dZ.sum(axis=0)


def kernels_layer(X, W, b, G):
    H = fused.linear_relu_forward(X, W, b)
    dX, dW, db, _ = fused.linear_relu_backward(X, W, H, G)
    return H, dX, dW, db


def _on_tape(X, W, b, G, build):
    with fa.Tape():
        nodes = [fa.var(a) for a in (X, W, b)]
        H = build(*nodes)
        (H * G).sum().backward()
        return (H.value, *(node.grad for node in nodes))


def fused_layer(X, W, b, G):
    return _on_tape(X, W, b, G, fa.linear_relu)


def blocks_layer(X, W, b, G):
    return _on_tape(X, W, b, G, lambda X, W, b: fa.relu(X @ W + b))


def scalars_layer(X, W, b, G):
    with fa.Tape():
        nodes = [fa.scalar_nodes(a) for a in (X, W, b)]
        H = fa.relu(nodes[0] @ nodes[1] + nodes[2])
        (H * G).sum().backward()
        values = np.vectorize(lambda node: node.value)(H)
        return (values, *(np.vectorize(lambda node: node.grad)(n) for n in nodes))


WAYS = {
    "numpy": numpy_layer,
    "kernels": kernels_layer,
    "fused": fused_layer,
    "blocks": blocks_layer,
    "scalars": scalars_layer,
}


def scalar_nodes_fit(B, n, h):
    return 2 * B * n * h <= SCALAR_NODE_LIMIT
