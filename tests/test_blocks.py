"""Blocks in the tape: the articles' examples 3-6, every block op against finite
differences, and the fused kernels against the same computation unfused."""

import math
import tracemalloc
import warnings

import numpy as np
import pytest

import fastad as fa
from fastad.eager.handle import storage_of


# -- the articles' examples 3-6 --------------------------------------------------------
def test_example_3_broadcast_gradient():
    with fa.Tape():
        X = fa.var(np.array([[10.0, 20, 30], [40, 50, 60]]))
        b = fa.var(np.array([1.0, 2, 3]))
        Y = X + b
        upstream = np.array([[1.0, 0, 2], [3, 1, 0]])
        (Y * upstream).sum().backward()  # dL/dY = upstream
    assert b.grad.tolist() == [4.0, 1.0, 2.0]
    assert X.grad.tolist() == upstream.tolist()
    assert Y.value.tolist() == [[11.0, 22, 33], [41, 52, 63]]


def test_example_4_one_linear_layer():
    with fa.Tape():
        W = fa.var(np.array([[1.0, 2], [3, 4]]))
        x = fa.var(np.array([1.0, 0.5]))
        y = W @ x
        r = y - np.array([1.0, 1.0])
        L = 0.5 * (r * r).sum()
        L.backward()
    assert y.value.tolist() == [2.0, 5.0]
    assert W.grad.tolist() == [[1.0, 0.5], [4.0, 2.0]]
    assert x.grad.tolist() == [13.0, 18.0]


def test_example_5_gradient_descent_step_on_a_block():
    with fa.Tape():
        w = fa.var(np.array([0.0]))
        ((w - 3.0) ** 2).sum().backward()
    assert (w.value - 0.1 * w.grad).tolist() == pytest.approx([0.6], abs=1e-15)


def two_layer(X, W1, b1, W2, b2, T):
    H = fa.sigmoid(X @ W1 + b1)
    Z2 = H @ W2 + b2
    return 0.5 * ((Z2 - T) ** 2).sum()


def two_layer_numpy_gradients(X, W1, b1, W2, b2, T):
    Z1 = X @ W1 + b1
    H = 1.0 / (1.0 + np.exp(-Z1))
    Z2 = H @ W2 + b2
    G2 = Z2 - T
    GH = G2 @ W2.T
    G1 = GH * H * (1.0 - H)
    return G1 @ W1.T, X.T @ G1, G1.sum(0), H.T @ G2, G2.sum(0)


def test_example_6_two_layer_network_gradients(rng):
    shapes = dict(B=5, n=7, h=6, m=3)
    arrays = [
        rng.normal(size=(shapes["B"], shapes["n"])),
        rng.normal(size=(shapes["n"], shapes["h"])),
        rng.normal(size=shapes["h"]),
        rng.normal(size=(shapes["h"], shapes["m"])),
        rng.normal(size=shapes["m"]),
    ]
    T = rng.normal(size=(shapes["B"], shapes["m"]))
    with fa.Tape():
        nodes = [fa.var(a) for a in arrays]
        two_layer(*nodes, T).backward()
    for node, expected in zip(nodes, two_layer_numpy_gradients(*arrays, T), strict=True):
        np.testing.assert_allclose(node.grad, expected, rtol=1e-12, atol=1e-14)


def test_example_6_at_full_size_never_builds_a_jacobian(rng):
    B, n, h, m = 64, 512, 1024, 10
    arrays = [
        rng.normal(size=(B, n)),
        rng.normal(size=(n, h)) * 0.05,
        np.zeros(h),
        rng.normal(size=(h, m)) * 0.05,
        np.zeros(m),
    ]
    T = rng.normal(size=(B, m))
    tracemalloc.start()
    try:
        with fa.Tape():
            X, W1, b1, W2, b2 = (fa.var(a) for a in arrays)
            two_layer(X, W1, b1, W2, b2, T).backward()
            grads = [node.grad for node in (X, W1, b1, W2, b2)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [g.shape for g in grads] == [(B, n), (n, h), (h,), (h, m), (m,)]
    # The (B*h x B*n) Jacobian would be 8.6 GB; the whole step stays under 100 MB.
    assert peak < 100e6, f"peak traced memory {peak / 1e6:.0f} MB"


# -- every block op against central differences -----------------------------------------
def gradcheck_blocks(function, *arrays):
    """gradcheck over all array inputs at once, flattened into one vector."""
    shapes = [np.shape(a) for a in arrays]
    sizes = [int(np.prod(s)) for s in shapes]

    def unflatten(p):
        parts = np.split(np.asarray(p, dtype=np.float64), np.cumsum(sizes)[:-1])
        return [part.reshape(shape) for part, shape in zip(parts, shapes, strict=True)]

    def value(p):
        with fa.Tape():
            return function(*(fa.var(a) for a in unflatten(p))).value

    def gradient(p):
        with fa.Tape():
            nodes = [fa.var(a) for a in unflatten(p)]
            function(*nodes).backward()
        return np.concatenate([np.ravel(node.grad) for node in nodes])

    point = np.concatenate([np.ravel(a) for a in arrays])
    return fa.gradcheck(value, point, grad=gradient)


WEIGHTS = np.linspace(-1.0, 1.5, 12)


def weighted_sum(block):
    """A scalar with a non-trivial upstream gradient for every element."""
    flat = block.reshape(block.size)
    return (flat * WEIGHTS[: block.size]).sum()


BLOCK_CASES = {
    "add broadcast (3,4)+(4,)": (lambda a, b: weighted_sum(a + b), [(3, 4), (4,)]),
    "sub broadcast (3,1)-(1,4)": (lambda a, b: weighted_sum(a - b), [(3, 1), (1, 4)]),
    "mul broadcast (2,3)*(3,)": (lambda a, b: weighted_sum(a * b), [(2, 3), (3,)]),
    "div (2,3)/(2,3)": (lambda a, b: weighted_sum(a / (b * b + 1.0)), [(2, 3), (2, 3)]),
    "scalar node times block": (lambda s, b: weighted_sum(s.sum() * b), [(1,), (2, 3)]),
    "pow constant": (lambda a: weighted_sum((a * a + 1.0) ** 1.5), [(2, 3)]),
    "unary functions": (
        lambda a: weighted_sum(
            fa.exp(a)
            + fa.sin(a)
            + fa.cos(a)
            + fa.tanh(a)
            + fa.sigmoid(a)
            + fa.sqrt(a * a + 1.0)
            + fa.log(a * a + 1.0)
            + fa.relu(a)
            + fa.abs(a)
            - a
        ),
        [(3, 4)],
    ),
    "maximum minimum": (
        lambda a, b: weighted_sum(fa.maximum(a, b) + fa.minimum(a, 2.0 * b)),
        [(2, 3), (2, 3)],
    ),
    "matmul 2d@2d": (lambda a, b: weighted_sum(a @ b), [(3, 4), (4, 2)]),
    "matmul 2d@1d": (lambda a, b: weighted_sum(a @ b), [(3, 4), (4,)]),
    "matmul 1d@2d": (lambda a, b: weighted_sum(a @ b), [(4,), (4, 3)]),
    "matmul 1d@1d": (lambda a, b: a @ b, [(4,), (4,)]),
    "sum and mean": (lambda a: a.sum() + 2.0 * a.mean(), [(3, 4)]),
    "sum axis": (lambda a: weighted_sum(a.sum(axis=0)) + weighted_sum(a.sum(axis=1)), [(3, 4)]),
    "mean axis": (lambda a: weighted_sum(a.mean(axis=0)) + weighted_sum(a.mean(axis=-1)), [(3, 4)]),
    "reshape transpose": (lambda a: weighted_sum(a.reshape(4, 3).T), [(3, 4)]),
    "index element and slice": (lambda a: a[1, 2] * a[0, 0] + weighted_sum(a[1:, ::2]), [(3, 4)]),
    "linear": (lambda x, w, b: weighted_sum(fa.linear(x, w, b)), [(3, 4), (4, 2), (2,)]),
    "linear_relu": (lambda x, w, b: weighted_sum(fa.linear_relu(x, w, b)), [(3, 4), (4, 2), (2,)]),
    "mse_loss": (lambda y, t: fa.mse_loss(y, t), [(3, 2), (3, 2)]),
}


@pytest.mark.parametrize("name", list(BLOCK_CASES))
def test_block_forward_mode_matches_reverse_mode(name, rng):
    # <grad, v> == J v: the JVP rules against the VJP rules, every block op.
    function, shapes = BLOCK_CASES[name]
    arrays = [rng.uniform(0.3, 1.5, size=s) * rng.choice([-1, 1], size=s) for s in shapes]
    directions = [rng.normal(size=s) for s in shapes]
    with fa.Tape():
        nodes = [fa.var(a) for a in arrays]
        out = function(*nodes)
        gradients = fa.grad(out, nodes)
        forward = fa.jvp(out, nodes, directions)
    reverse = sum(float(np.sum(g * v)) for g, v in zip(gradients, directions, strict=True))
    assert forward == pytest.approx(reverse, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("name", list(BLOCK_CASES))
def test_block_op_gradients_match_central_differences(name, rng):
    function, shapes = BLOCK_CASES[name]
    arrays = [rng.uniform(0.3, 1.5, size=s) * rng.choice([-1, 1], size=s) for s in shapes]
    assert gradcheck_blocks(function, *arrays)


# -- fused == unfused blocks == scalar nodes ------------------------------------------------
SHAPES = [(1, 1, 1), (1, 5, 3), (4, 1, 6), (3, 7, 1), (8, 16, 16), (5, 9, 4)]


def three_ways(kind, X, W, b, upstream):
    """Values and (dX, dW, db) of sum(upstream * layer) recorded fused, as blocks, as scalars."""
    results = []
    for way in ("fused", "blocks", "scalars"):
        with fa.Tape():
            if way == "scalars":
                nodes = [fa.scalar_nodes(a) for a in (X, W, b)]
                Z = nodes[0] @ nodes[1] + nodes[2]
                H = fa.relu(Z) if kind == "linear_relu" else Z
                out = (H * upstream).sum()
                out.backward()
                grads = [np.vectorize(lambda v: v.grad)(n) for n in nodes]
                value = np.vectorize(lambda v: v.value)(H)
            else:
                nodes = [fa.var(a) for a in (X, W, b)]
                if way == "fused":
                    H = getattr(fa, kind)(*nodes)
                else:
                    Z = nodes[0] @ nodes[1] + nodes[2]
                    H = fa.relu(Z) if kind == "linear_relu" else Z
                (H * upstream).sum().backward()
                grads = [n.grad for n in nodes]
                value = H.value
        results.append((value, grads))
    return results


@pytest.mark.parametrize("kind", ["linear", "linear_relu"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_fused_unfused_and_scalar_nodes_agree(kind, shape, rng):
    B, n, h = shape
    X, W, b = rng.normal(size=(B, n)), rng.normal(size=(n, h)), rng.normal(size=h)
    upstream = rng.normal(size=(B, h))
    (fused_value, fused_grads), *others = three_ways(kind, X, W, b, upstream)
    for value, grads in others:
        np.testing.assert_allclose(value, fused_value, rtol=1e-12, atol=1e-13)
        for got, want in zip(grads, fused_grads, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_fused_mse_loss_matches_unfused(rng):
    Y0, T0 = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    with fa.Tape():
        Y, T = fa.var(Y0), fa.var(T0)
        fused_loss = fa.mse_loss(Y, T)
        fused_loss.backward()
        fused = (fused_loss.value, Y.grad, T.grad)
    with fa.Tape():
        Y, T = fa.var(Y0), fa.var(T0)
        loss = ((Y - T) ** 2).mean()
        loss.backward()
        unfused = (loss.value, Y.grad, T.grad)
    assert fused[0] == pytest.approx(unfused[0], rel=1e-14)
    for got, want in zip(fused[1:], unfused[1:], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_relu_kink_in_the_fused_kernel_is_zero():
    with fa.Tape():
        X = fa.var(np.array([[1.0, -1.0]]))
        W = fa.var(np.array([[1.0], [1.0]]))  # Z = 0 exactly
        b = fa.var(np.array([0.0]))
        fa.linear_relu(X, W, b).sum().backward()
    assert b.grad.tolist() == [0.0] and W.grad.tolist() == [[0.0], [0.0]]


# -- errors and semantics ---------------------------------------------------------------------
def test_incompatible_broadcast_names_both_shapes():
    with fa.Tape():
        A = fa.var(np.zeros((3, 4)))
        with pytest.raises(ValueError, match=r"shapes \(3, 4\) and \(3,\) cannot be broadcast"):
            A + np.zeros(3)


def test_bad_shapes_for_matmul_and_fused_ops():
    with fa.Tape():
        A = fa.var(np.zeros((3, 4)))
        with pytest.raises(ValueError, match=r"\(3, 4\) and \(3, 4\)"):
            A @ np.zeros((3, 4))
        with pytest.raises(ValueError, match="do not chain"):
            fa.linear_relu(A, np.zeros((5, 2)), np.zeros(2))
        with pytest.raises(ValueError, match="one shape"):
            fa.mse_loss(A, np.zeros((4, 3)))
        with pytest.raises(TypeError, match="backward needs a scalar output"):
            A.backward()
        # What the message offers for a cotangent instead works: A's own gradient is it.
        with pytest.raises(TypeError, match=r"Y\.tape\.vjp\(Y, \[leaves\.\.\.\], G\)"):
            A.backward(np.ones((3, 4)))
        np.testing.assert_array_equal(A.tape.vjp(A, [A], np.full((3, 4), 2.0))[0], 2.0)
        with pytest.raises(ValueError, match="axis 2 is out of range"):
            A.sum(axis=2)


def test_scalars_and_blocks_mix_and_gradients_reach_both():
    with fa.Tape():
        s = fa.var(2.0)
        A = fa.var(np.array([1.0, 2.0, 3.0]))
        L = (s * A + s).sum() * s
        L.backward()
    # L = s * (s * sum(A) + 3 s) = s^2 (sum(A) + 3)
    assert s.grad == pytest.approx(2 * 2.0 * (6.0 + 3.0))
    assert A.grad.tolist() == [4.0, 4.0, 4.0]
    assert fa.grad(L, [s, A])[1].tolist() == [4.0, 4.0, 4.0]


def test_accumulation_with_blocks():
    with fa.Tape() as tape:
        A = fa.var(np.array([1.0, 2.0]))
        L = (A * A).sum()
        L.backward()
        L.backward(accumulate=True)
        assert A.grad.tolist() == [4.0, 8.0]
        L.backward()
        assert A.grad.tolist() == [2.0, 4.0]
        tape.forward()  # replay reproduces the recorded values
        assert tape.val[L.id] == 5.0


def test_masked_nan_does_not_leak_through_relu_blocks():
    with fa.Tape():
        A = fa.var(np.array([-1.0, 4.0]))
        L = fa.relu(fa.sqrt(A) * 0.0 + A).sum()  # sqrt(-1) = nan, multiplied by an exact 0
        L.backward()
    assert A.grad[1] == 1.0


def test_plain_arrays_without_nodes_compute_directly():
    X, W, b = np.ones((2, 3)), np.ones((3, 4)), np.zeros(4)
    np.testing.assert_array_equal(fa.linear_relu(X, W, b), np.full((2, 4), 3.0))
    np.testing.assert_array_equal(fa.exp(np.zeros(3)), np.ones(3))


def test_unsupported_paths_say_so_instead_of_answering_wrongly(tmp_path):
    with fa.Tape() as tape:
        A = fa.var(np.array([1.0, 2.0]))
        (A * A).sum()
    # A function of scalars that builds an array runs its elements as scalar ops.
    f = fa.compile(lambda x: (x * np.arange(1.0, 4.0)).sum(), example=[1.0])
    assert f.value_and_grad(np.array([2.0])) == (12.0, pytest.approx([6.0]))
    with pytest.raises(NotImplementedError, match="'max'"):
        fa.compile(lambda x: (x * np.arange(1.0, 4.0)).max(), example=[1.0])
    dot = tape.to_dot()
    assert "shape (2,)" in dot and "n0 -> n1;" in dot


def test_a_tape_with_blocks_saves_and_loads_bit_for_bit(tmp_path, rng):
    X0, W0, b0 = rng.normal(size=(5, 3)), rng.normal(size=(3, 4)), rng.normal(size=4)
    with fa.Tape() as tape:
        X, W, b = fa.var(X0, name="X"), fa.var(W0, name="W"), fa.var(b0)
        H = fa.linear_relu(X, W, b)
        picked = H[np.array([4, 0, 2]), ::-1].reshape(-1)
        L = fa.cross_entropy(H, np.array([0, 3, 1, 2, 3])) + (np.tanh(picked) ** 2).sum()
        L.name = "L"
    tape.save(tmp_path / "blocks")  # the path exactly, as for a scalar tape
    loaded = fa.Tape.load(tmp_path / "blocks")
    assert len(loaded) == len(tape) and loaded.labels == tape.labels
    for node in range(len(tape)):
        np.testing.assert_array_equal(loaded.value(node), tape.value(node))
    L.backward()
    again = loaded.node(L.id)
    again.backward()
    for leaf in (X, W, b):
        np.testing.assert_array_equal(loaded.node(leaf.id).grad, leaf.grad)
    # A damaged block side is refused by its shape rules, naming the file.
    data = dict(np.load(tmp_path / "blocks"))
    data["block_dims"][:2] = [3, 5]  # X (5, 3) read as (3, 5): the same data size
    np.savez(tmp_path / "damaged.npz", **data)
    with pytest.raises(ValueError, match=r"damaged.npz: node .*linear_relu"):
        fa.Tape.load(tmp_path / "damaged.npz")
    del data["params"]
    np.savez(tmp_path / "partial.npz", **data)
    with pytest.raises(ValueError, match=r"partial.npz: a tape with blocks, missing \['params'\]"):
        fa.Tape.load(tmp_path / "partial.npz")


def test_block_values_are_read_only_copies():
    source = np.array([1.0, 2.0])
    with fa.Tape():
        A = fa.var(source)
        source[0] = 99.0
        assert A.value.tolist() == [1.0, 2.0]
        with pytest.raises(ValueError):
            A.value[0] = 5.0


def test_a_leaf_without_a_copy_holds_the_callers_array(rng):
    X, W = rng.normal(size=(5, 3)), rng.normal(size=(3, 2))
    with fa.Tape():
        x = fa.var(X, copy=False)
        w = fa.var(W, copy=None)
        (x @ w).sum().backward()
        for leaf, array in ((x, X), (w, W)):
            assert np.shares_memory(leaf.value, array)
            assert not leaf.value.flags.writeable and array.flags.writeable
        np.testing.assert_array_equal(w.grad, np.repeat(X.sum(axis=0)[:, None], 2, axis=1))
        np.testing.assert_array_equal(x.grad, np.repeat(W.sum(axis=1)[None, :], 5, axis=0))
        X[0, 0] = 7.0  # no copy: the tape reads the caller's array
        assert x.value[0, 0] == 7.0


@pytest.mark.parametrize(
    "value, why",
    [
        (np.ones((3, 4)).T, "an array of dtype float64 and shape (4, 3), not C-contiguous"),
        (np.ones((2, 2), np.float32), "an array of dtype float32 and shape (2, 2)"),
        ([1.0, 2.0], "got a list"),
    ],
)
def test_a_leaf_that_needs_a_copy_is_copied_with_none_and_refused_with_false(value, why):
    with fa.Tape():
        kept = fa.var(value, copy=None)
        assert kept.value.dtype == np.float64 and kept.value.flags.c_contiguous
        np.testing.assert_array_equal(kept.value, np.asarray(value, np.float64))
        assert not np.shares_memory(kept.value, np.asarray(value))
        with pytest.raises(ValueError, match="copy=None") as refused:
            fa.var(value, copy=False)
        assert why in str(refused.value)
        with pytest.raises(TypeError, match="copy must be True, False or None, got str"):
            fa.var(np.ones(2), copy="no")


def test_copy_takes_numpys_bools_checks_numbers_and_shares_subclasses(tmp_path):
    mapped = np.lib.format.open_memmap(tmp_path / "w.npy", "w+", np.float64, (3, 2))
    mapped[:] = 2.0
    with fa.Tape():
        kept = fa.var(mapped, copy=np.False_)
        assert type(kept.value) is np.ndarray and np.shares_memory(kept.value, mapped)
        assert fa.var(np.array(2.0), copy=False).value == 2.0  # a scalar leaf: a float
        with pytest.raises(TypeError, match="copy must be True, False or None, got int"):
            fa.var(2.0, copy=1)
        with pytest.raises(TypeError, match="a block needs a real array"):
            fa.var(np.ones(2, complex), copy=False)


# -- compiled functions of arrays ----------------------------------------------------------
def layer_loss(X, W, b, T):
    return fa.mse_loss(fa.linear_relu(X, W, b), T)


def test_compiled_function_of_arrays_replays_like_eager(rng):
    example = (
        rng.normal(size=(4, 3)),
        rng.normal(size=(3, 2)),
        rng.normal(size=2),
        rng.normal(size=(4, 2)),
    )
    f = fa.compile(layer_loss, example=example)
    assert isinstance(f, fa.BlockFunction)
    for _ in range(3):
        arguments = [a + rng.normal(size=np.shape(a)) * 0.3 for a in example]
        value, gradients = f.value_and_grad(arguments)
        with fa.Tape():
            nodes = [fa.var(a) for a in arguments]
            loss = layer_loss(*nodes)
            loss.backward()
        assert value == loss.value == f(arguments)
        for got, node in zip(gradients, nodes, strict=True):
            np.testing.assert_array_equal(got, node.grad)


def test_compiled_function_of_arrays_checks_shapes_and_branches():
    f = fa.compile(
        lambda X, s: (X * s).sum() if s > 0 else (X - s).sum(), example=(np.ones(3), 2.0)
    )
    assert f((np.ones(3), 3.0)) == 9.0
    with pytest.raises(fa.BranchError, match="`s > 0.0`, which was True"):
        f((np.ones(3), -1.0))
    with pytest.raises(ValueError, match=r"argument 0 has shape \(4,\).*expects \(3,\)"):
        f((np.ones(4), 1.0))
    with pytest.raises(ValueError, match="expected 2 arguments"):
        f((np.ones(3),))
    g = fa.compile(lambda X: X * 2.0, example=(np.ones(2),))
    np.testing.assert_array_equal(g((np.array([1.0, 5.0]),)), [2.0, 10.0])
    with pytest.raises(ValueError, match="scalar output"):
        g.value_and_grad((np.ones(2),))


# -- checked mode over blocks ------------------------------------------------------------------
def test_checked_mode_names_a_block_origin_in_the_forward_pass():
    with fa.Tape():
        A = fa.var(np.array([1.0, 0.0]), name="A")
        logs = fa.log(A)  # the origin: -inf from the finite 0.0
        L = (logs * 2.0 + 1.0).sum()
        with pytest.raises(fa.NonFiniteError) as info:
            L.backward(check=True)
    origin = info.value.origin
    assert (origin.phase, origin.node, origin.op) == ("forward", logs.id, "log")
    assert origin.value == -np.inf
    assert "array of shape (2,)" in str(info.value)


def test_checked_mode_names_a_block_rule_in_the_backward_pass():
    with fa.Tape():
        A = fa.var(np.array([4.0, 0.0]))
        roots = fa.sqrt(A)  # finite values, infinite derivative at 0
        L = (roots * 3.0).sum()
        L.backward()  # unchecked: IEEE values, no exception
        assert A.grad[1] == np.inf
        with pytest.raises(fa.NonFiniteError, match="sent a non-finite gradient to operand 0"):
            L.backward(check=True)


def test_checked_mode_with_finite_blocks_passes_and_finds_scalar_origins():
    with fa.Tape():
        A = fa.var(np.array([1.0, 2.0]))
        s = fa.var(0.0, name="s")
        L = (A * A).sum() * 2.0
        L.backward(check=True)
        assert A.grad.tolist() == [4.0, 8.0]
        M = L + fa.log(s)
        with pytest.raises(fa.NonFiniteError, match=r"\(log\) produced -inf"):
            M.backward(check=True)


def test_zero_grad_clears_block_gradients():
    with fa.Tape() as tape:
        W, s = fa.var(np.array([1.0, 2.0])), fa.var(3.0)
        L = (W * W).sum() + s * s
        L.backward()
        tape.zero_grad()
        assert W.grad.tolist() == [0.0, 0.0] and s.grad == 0.0
        L.backward(accumulate=True)
        assert W.grad.tolist() == [2.0, 4.0] and s.grad == 6.0


def test_block_comparisons_record_nodes():
    with fa.Tape():
        A = fa.var(np.array([1.0, 3.0]))
        mask = A > 2.0
        assert mask.value.tolist() == [0.0, 1.0]
        B = A * mask
        B.sum().backward()
    assert A.grad.tolist() == [0.0, 1.0]


def test_stale_block_handles_raise_in_every_block_method():
    tape = fa.Tape()
    with tape:
        X = fa.var(np.array([[1.0, 2.0, 3.0]]))
    tape.reset()
    with tape:
        fa.var(np.array([[10.0], [20.0], [30.0]]))  # takes the stale handle's id
        for use in (X.sum, X.mean, X.transpose, lambda: X.T, lambda: X[0], lambda: X + 1.0):
            with pytest.raises(fa.StaleNodeError):
                use()
    tape.reset()
    with pytest.raises(fa.StaleNodeError):
        X.sum()  # nothing at its id now: still StaleNodeError, not KeyError


def test_an_index_key_changed_after_recording_changes_nothing():
    key = np.array([1, 0])
    with fa.Tape() as tape:
        X = fa.var(np.array([1.0, 2.0, 3.0, 4.0]))
        Y = X[key]
        L = (Y * np.array([10.0, 100.0])).sum()
        key[:] = 3  # the caller reuses its array
        L.backward()
        tape.forward()
    assert X.grad.tolist() == [100.0, 10.0, 0.0, 0.0]
    assert Y.value.tolist() == [2.0, 1.0] and L.value == 120.0
    f = fa.compile(lambda A: A[key].sum(), example=(np.zeros(4),))
    key[:] = 0
    assert f((np.array([1.0, 2.0, 3.0, 4.0]),)) == 8.0  # key [3, 3] as traced


def test_scalar_accessors_refuse_block_nodes_by_name():
    with fa.Tape() as tape:
        X = fa.var(np.ones(2))
        S = X * 2.0
        L = S.sum()
        L.backward()
        with pytest.raises(TypeError, match="block_adjoint"):
            tape.adjoint(X)
        with pytest.raises(TypeError, match="scalar node"):
            tape.block_adjoint(L)
        with pytest.raises(TypeError, match="block op"):
            tape.local_partials([S])
        assert isinstance(tape.node(X.id), fa.Block) and isinstance(tape.node(L.id), fa.Var)
        assert len(tape) == 4  # asking about S recorded nothing (no S[0], S[1])
        assert "n0 -> n2;" in tape.to_dot()  # S's edges are unlabelled


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("shape", [(0, 0), (3, 0), (0, 3)])
def test_a_mean_over_nothing_is_nan_with_an_empty_gradient(shape, axis):
    # NumPy's values (0 / 0 = nan where a mean has no elements), without its
    # warning, and no ZeroDivisionError in the backward or forward mode rule.
    with fa.Tape():
        X = fa.var(np.zeros(shape))
        Y = X.mean(axis=axis)
        L = Y if axis is None else Y.sum()
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = np.zeros(shape).mean(axis=axis)
        np.testing.assert_array_equal(Y.value, expected)
        L.backward()
        assert X.grad.shape == shape
        assert fa.jvp(L, X, np.ones(shape)) == 0.0  # no element to move


def test_block_bytes_count_a_view_once():
    with fa.Tape() as tape:
        X = fa.var(np.ones((100, 100)))
        held = storage_of(tape).blocks.nbytes
        X.reshape(10_000).reshape(100, 100)  # views of X's array
        assert storage_of(tape).blocks.nbytes == held == 80_000


def test_block_forward_and_reverse_mode_give_ieee_values_without_warnings():
    # tests run with warnings as errors: inf - inf inside a block rule is nan, silently
    inf = np.inf
    with fa.Tape():
        Y, T = fa.var(np.array([inf, 1.0])), fa.var(np.array([inf, -inf]))
        with np.errstate(invalid="ignore"):
            L = fa.mse_loss(Y, T)
        assert math.isnan(fa.jvp(L, [Y, T], [np.ones(2), np.ones(2)]))
        dY, dT = fa.grad(L, [Y, T])
        assert math.isnan(dY[0]) and dY[1] == inf and dT[1] == -inf


def test_max_and_min_split_ties_evenly_and_follow_nan():
    # torch.amax's rule; a two-way tie agrees with the scalar fa.maximum.
    with fa.Tape():
        X = fa.var(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]))
        (X.max(axis=1) * np.array([1.0, 3.0])).sum().backward()
        np.testing.assert_allclose(X.grad, [[0.0, 0.5, 0.5], [1.0, 1.0, 1.0]])
        assert fa.jvp(X.min(), X, np.arange(6.0).reshape(2, 3)) == pytest.approx(0.0)
        pair = fa.var(np.array([4.0, 4.0]))
        a, b = fa.var(4.0), fa.var(4.0)
        assert fa.grad(pair.max(), pair).tolist() == fa.grad(fa.maximum(a, b), [a, b]).tolist()
        N = fa.var(np.array([1.0, np.nan, 5.0]))
        M = N.max()
        assert math.isnan(M.value)
        assert fa.grad(M, N)[1] != 0.0 and fa.grad(M, N)[[0, 2]].tolist() == [0.0, 0.0]
        with pytest.raises(ValueError, match="empty"):
            fa.var(np.zeros((0, 2))).max(axis=0)


def test_empty_batched_products_and_scalar_logsumexp():
    with fa.Tape():
        A, B = fa.var(np.ones((2, 3, 0))), fa.var(np.ones((2, 0, 3)))
        C = A @ B
        np.testing.assert_array_equal(C.value, np.zeros((2, 3, 3)))
        assert fa.grad(C.sum(), A).shape == (2, 3, 0)
        E = fa.var(np.ones((2, 3, 4)))
        assert fa.jvp(E @ np.ones((4, 0)), E, np.ones((2, 3, 4))).shape == (2, 3, 0)
        x = fa.var(3.0)
        y = fa.logsumexp(x)
        assert isinstance(y, fa.Var) and y.value == 3.0 and fa.grad(y, x) == 1.0
    assert fa.logsumexp(3.0) == 3.0


def test_joins_and_where_read_nested_lists_as_numpy_does():
    with fa.Tape():
        X = fa.var(np.ones((1, 3)))
        joined = np.concatenate([[[1.0, 2.0, 3.0]], X])
        np.testing.assert_array_equal(joined.value, [[1, 2, 3], [1, 1, 1]])
        picked = fa.where([[True, False, True]], X * 2.0, [0.0, 5.0, 0.0])
        np.testing.assert_array_equal(picked.value, [[2.0, 5.0, 2.0]])
        np.testing.assert_array_equal(fa.grad(picked.sum(), X), [[2.0, 0.0, 2.0]])


def test_a_scalar_where_condition_with_an_array_side():
    # backward raised AttributeError.
    with fa.Tape():
        s, X = fa.var(1.0), fa.var(np.array([2.0, 3.0]))
        L = fa.where(s > 0, X, 1.0).sum()
        L.backward()
        assert (s.grad, X.grad.tolist()) == (0.0, [1.0, 1.0])


def test_forward_mode_through_the_logsumexp_of_a_scalar_node():
    with fa.Tape():
        x = fa.var(3.0)
        assert fa.jvp(fa.logsumexp(x), x, 1.0) == 1.0


def test_reductions_refuse_conflicting_or_non_boolean_keywords():
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        with pytest.raises(ValueError, match="ddof and correction"):
            np.var(X, ddof=1, correction=1)
        with pytest.raises(TypeError, match="keepdims"):
            X.sum(keepdims=1.0)


def _first_maximum(row):
    """The in-order scan the softmax family's maximum is defined by: the first nan, else
    the first of the largest elements (-0.0 or 0.0, whichever comes first)."""
    m = -np.inf
    for x in row:
        if x != x:
            return x
        if x > m:
            m = x
    return m


def test_the_softmax_familys_row_maxima_are_the_in_order_scans_bit_for_bit(rng):
    # Eight running maxima on long rows, and the scan again where a nan or a zero
    # maximum makes the order matter: the bits of the one scan on every kind of row.
    from fastad.kernels import fused

    for length in range(0, 41):
        rows = []
        for kind in ("normal", "nan", "zeros", "infinities", "minus infinity", "ties"):
            row = rng.normal(size=length) * rng.choice([1.0, 1e300])
            if length and kind == "nan":
                row[rng.integers(length)] = np.nan
            elif length and kind == "zeros":
                row = rng.choice([0.0, -0.0, -1.0], size=length)
            elif length and kind == "infinities":
                row[rng.integers(length)] = rng.choice([np.inf, -np.inf])
            elif kind == "minus infinity":
                row[:] = -np.inf
            elif length and kind == "ties":
                row[rng.integers(length, size=3)] = row.max()
            rows.append(row)
        shifted, shift = fused.shifted_rows(np.array(rows).reshape(len(rows), length))
        for r, row in enumerate(rows):  # each row of one array: rows past the first too
            want = _first_maximum(row)
            assert np.array_equal(shift[r], want, equal_nan=True), (row, shift[r], want)
            assert np.signbit(shift[r]) == np.signbit(want), (row, shift[r], want)
            with np.errstate(invalid="ignore"):
                np.testing.assert_array_equal(shifted[r], row - want)


def test_a_blocks_square_root_power_is_numpys_and_a_scalar_nodes_is_pythons():
    edges = np.array([-np.inf, -0.0, 0.0, 0.25, 2.0, 1e300, np.inf, np.nan])
    with np.errstate(invalid="ignore"):
        want = edges**0.5  # NumPy's power of an array: its square root
    with fa.Tape():
        X = fa.var(edges)
        roots = [X**0.5, np.power(X, 0.5), X ** np.float64(0.5)]
        for root in roots:
            np.testing.assert_array_equal(np.signbit(root.value), np.signbit(want))
            np.testing.assert_array_equal(root.value, want)
        roots[0].sum().backward()
    # d sqrt(x) / dx = 0.5 / sqrt(x): inf at +0.0, -inf at -0.0, nan below 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(X.grad, 0.5 / want)
    with fa.Tape():
        x = fa.var(-0.0)
        y = fa.var(-np.inf)
        assert math.copysign(1.0, (x**0.5).value) == math.copysign(1.0, (-0.0) ** 0.5) == 1.0
        assert (y**0.5).value == float("-inf") ** 0.5 == math.inf
