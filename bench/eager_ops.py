"""What one block op costs on a tape, recording and backward, on small arrays.

A chain of ``CHAIN`` ops of one kind is recorded from one (8, 16) leaf,
summed to a scalar and swept backward, through the public API as a user
writes it. Recording the chain (a fresh tape, the leaf, the ops and the
sum) over ``CHAIN`` is the recording cost per op; ``backward()`` over
``CHAIN`` the backward cost per op. The arrays are small, so what is timed
is the tape's own cost: each op's arithmetic takes well under a
microsecond.

The ops, one of each kind a model records:

- ``tanh``: a unary elementwise op;
- ``mul``: an elementwise product with a NumPy array (a new constant node
  for the array at every op, as ``Y * mask`` records it);
- ``add_bias``: an elementwise sum with a bias block of shape (16,),
  broadcast over the rows (its gradient is a column sum);
- ``matmul``: a product with a (16, 16) block;
- ``linear_relu``: the fused layer with a (16, 16) weight block and a
  (16,) bias block.

Every chain is checked once against :func:`numpy_chain`, the same chain
in NumPy with hand-written gradients.
"""

import numpy as np

import fastad as fa

SHAPE = (8, 16)
CHAIN = 32


def chain_inputs(seed=0):
    """``(X, C, W, b)``: the leaf's value, a positive array to multiply by, an
    orthogonal weight (the chain neither blows up nor dies out) and a positive bias."""
    rng = np.random.default_rng(seed)
    rows, columns = SHAPE
    W, _ = np.linalg.qr(rng.normal(size=(columns, columns)))
    return (
        rng.normal(size=SHAPE),
        rng.uniform(0.9, 1.1, size=SHAPE),
        W,
        rng.uniform(0.1, 0.2, size=columns),
    )


def _step(op, Y, C, W, b):
    if op == "tanh":
        return fa.tanh(Y)
    if op == "mul":
        return Y * C
    if op == "add_bias":
        return Y + b
    if op == "matmul":
        return Y @ W
    if op == "linear_relu":
        return fa.linear_relu(Y, W, b)
    raise ValueError(f"unknown op {op!r}")


OPS = ("tanh", "mul", "add_bias", "matmul", "linear_relu")
WEIGHTED = ("add_bias", "matmul", "linear_relu")  # the ops whose W and b are leaves


def record_chain(op, X, C, W, b):
    """Record the chain on a fresh tape: ``(L, leaves)``, the sum and the leaves."""
    with fa.Tape():
        leaves = [fa.var(X)]
        if op in WEIGHTED:
            leaves += [fa.var(W), fa.var(b)]
        Y = leaves[0]
        weights = leaves[1:] if op in WEIGHTED else (W, b)
        for _ in range(CHAIN):
            Y = _step(op, Y, C, *weights)
        return Y.sum(), leaves


def gradients(op, X, C, W, b):
    """Record, sweep backward and read the value and every leaf's gradient."""
    L, leaves = record_chain(op, X, C, W, b)
    L.backward()
    return L.value, [leaf.grad for leaf in leaves]


def numpy_chain(op, X, C, W, b):
    """The same chain in NumPy, forward and hand-written backward: ``(L, grads)``."""
    saved = []
    Y = X
    for _ in range(CHAIN):
        saved.append(Y)
        if op == "tanh":
            Y = np.tanh(Y)
        elif op == "mul":
            Y = Y * C
        elif op == "add_bias":
            Y = Y + b
        elif op == "matmul":
            Y = Y @ W
        else:
            Y = np.maximum(Y @ W + b, 0.0)
        saved[-1] = (saved[-1], Y)
    G = np.ones(SHAPE)
    dW, db = np.zeros(W.shape), np.zeros(b.shape)
    for before, after in reversed(saved):
        if op == "tanh":
            G = G * (1.0 - after * after)
        elif op == "mul":
            G = G * C
        elif op == "add_bias":
            db += G.sum(axis=0)
        elif op == "matmul":
            dW += before.T @ G
            G = G @ W.T
        else:
            dZ = G * (after > 0.0)
            dW += before.T @ dZ
            db += dZ.sum(axis=0)
            G = dZ @ W.T
    grads = [G, dW, db] if op in WEIGHTED else [G]
    return Y.sum(), grads
