"""Strong zeros through block rules: the same reach as the scalar-node expansion.

An adjoint or tangent element that nothing reached stays a strong zero through
every block rule (reductions, broadcasting, matmul, the fused kernels), so an
infinite local derivative behind it never makes ``0 * inf = nan``; a reached
element is an ordinary number whatever its sign. The reference is the same
computation recorded as scalar nodes (``fa.scalar_nodes``), where reach is
exact node by node, and forward mode must agree with reverse mode.
"""

import numpy as np
import pytest

import fastad as fa
from fastad.eager.handle import storage_of


def gradient_and_jvps(build, values, as_scalar_nodes=False):
    """``dL/dA`` by reverse mode and by forward mode (one unit direction per element)."""
    with fa.Tape():
        A = fa.scalar_nodes(values) if as_scalar_nodes else fa.var(values)
        L = build(A)
        if as_scalar_nodes:
            leaves = list(A.ravel())
            reverse = np.reshape(fa.grad(L, leaves), values.shape)
            forward = [fa.jvp(L, [leaf], [1.0]) for leaf in leaves]
        else:
            reverse = fa.grad(L, A)
            forward = []
            for index in np.ndindex(values.shape):
                direction = np.zeros(values.shape)
                direction[index] = 1.0
                forward.append(fa.jvp(L, [A], [direction]))
    return reverse, np.reshape(forward, values.shape)


def dead_relu_layer(A, fused=True):
    # every relu unit is dead: the loss is constant in A, sqrt'(0) = inf is behind
    W, b = np.ones((2, 1)), np.array([-5.0])
    if fused:
        return fa.linear_relu(fa.sqrt(A), W, b).sum()
    return fa.relu(fa.sqrt(A) @ W + b).sum()


def half_dead_layer(A, fused=True):
    W, b = np.array([[1.0, -1.0], [1.0, -1.0]]), np.zeros(2)
    if fused:
        return fa.linear_relu(fa.sqrt(A), W, b).sum()
    return fa.relu(fa.sqrt(A) @ W + b).sum()


def nan_preactivation_layer(A, fused=True):
    W, b = np.ones((2, 1)), np.zeros(1)
    if fused:
        return fa.linear_relu(fa.sqrt(A), W, b).sum()
    return fa.relu(fa.sqrt(A) @ W + b).sum()


def mse_at_minimum(A, fused=True, sign=1.0):
    Y, T = fa.sqrt(A), np.zeros(A.shape)
    return sign * (fa.mse_loss(Y, T) if fused else ((Y - T) * (Y - T)).mean())


def broadcast_zero_factor(A, fused=True):
    return ((fa.sqrt(A[0]) * np.array([1.0, 2.0])) * np.zeros(2)).sum() + A[1]


def cancelled_matmul(A, fused=True):
    v = fa.sqrt(A) @ np.array([1.0, -1.0])
    return v - v


def unmoved_sum(A, fused=True):
    return fa.sqrt(A.sum()) + A[0] * 0.0 + 1.0


def axis_mean(A, fused=True):
    return (fa.sqrt(A).mean(axis=0) * np.array([0.0, 1.0])).sum()


def inf_weight_dead_unit(A, fused=True):
    # unit 0 is dead (relu'(-inf) = 0), unit 1 alive; W holds an inf
    W = np.array([[np.inf, -1.0]])
    if fused:
        return fa.linear_relu(A, W, np.zeros(2)).sum()
    return fa.relu(A @ W).sum()


def sqrt_after_zero_weight(A, fused=True):
    # the weight 0 is a strong zero: sqrt'(0) = inf behind it is never reached
    W = np.array([[0.0], [1.0]])
    if fused:
        return fa.sqrt(fa.linear(A, W, np.zeros(1))).sum()
    return fa.sqrt(A @ W).sum()


def zero_weight_after_sqrt(A, fused=True):
    W = np.array([[0.0], [1.0]])
    if fused:
        return fa.linear(fa.sqrt(A), W, np.zeros(1)).sum()
    return (fa.sqrt(A) @ W).sum()


def inf_weight_unmoved_input(A, fused=True):
    return (A @ np.array([[np.inf], [1.0]])).sum()


def vector_dot_after_sqrt(A, fused=True):
    return fa.sqrt(A) @ np.array([0.0, 1.0])


CASES = {
    "inf weight, dead unit": (inf_weight_dead_unit, np.array([[-1.0]])),
    "sqrt after a zero weight": (sqrt_after_zero_weight, np.array([[5.0, 0.0]])),
    "zero weight after sqrt": (zero_weight_after_sqrt, np.array([[0.0, 4.0]])),
    "inf weight, unmoved input": (inf_weight_unmoved_input, np.array([[2.0, 3.0]])),
    "vector dot after sqrt": (vector_dot_after_sqrt, np.array([0.0, 4.0])),
    "linear_relu, dead units": (dead_relu_layer, np.zeros((1, 2))),
    "linear_relu, some units dead": (half_dead_layer, np.array([[0.0, 4.0], [0.0, 0.0]])),
    "linear_relu at a nan pre-activation": (nan_preactivation_layer, np.array([[-1.0, 4.0]])),
    "mse_loss at its minimum": (mse_at_minimum, np.zeros((1, 2))),
    "minus mse_loss at its minimum": (
        lambda A, fused=True: mse_at_minimum(A, fused, -1.0),
        np.zeros((1, 2)),
    ),
    "broadcast scalar operand, zero factor": (broadcast_zero_factor, np.array([0.0, 3.0])),
    "matmul with a negative weight, cancelled": (cancelled_matmul, np.zeros(2)),
    "sum of a block no direction moves": (unmoved_sum, np.zeros(3)),
    "mean over an axis": (axis_mean, np.array([[0.0, 1.0], [0.0, 4.0]])),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_block_rules_keep_reach_like_scalar_nodes(name, fused):
    build, values = CASES[name]
    reverse, forward = gradient_and_jvps(lambda A: build(A, fused), values)
    scalar_reverse, scalar_forward = gradient_and_jvps(
        lambda A: build(A, fused=False), values, as_scalar_nodes=True
    )
    np.testing.assert_array_equal(reverse, scalar_reverse)
    np.testing.assert_array_equal(forward, scalar_forward)


def test_dead_units_give_zero_gradients_not_nan():
    # The old value-based rule gave 0 here, and so must this one.
    build, values = CASES["linear_relu, dead units"]
    reverse, forward = gradient_and_jvps(build, values)
    assert reverse.tolist() == [[0.0, 0.0]] and forward.tolist() == [[0.0, 0.0]]


def test_block_results_never_show_negative_zero():
    with fa.Tape():
        A = fa.var(np.zeros((2, 2)))
        L = fa.linear_relu(A, -np.ones((2, 2)), -np.ones(2)).sum() + fa.mse_loss(A, A * 1.0)
        gradient = fa.grad(L, A)
        L.backward()
        for array in (gradient, A.grad):
            assert not np.signbit(array).any(), array


def test_jvp_with_a_single_block_as_wrt():
    with fa.Tape() as tape:
        X = fa.var(np.array([1.0, 2.0]))
        L = (X * X).sum()
        before = len(tape)
        assert fa.jvp(L, X, np.ones(2)) == fa.grad(L, X) @ np.ones(2) == 6.0
        assert len(tape) == before  # nothing recorded by the call


def test_a_block_output_is_refused_where_a_scalar_is_needed():
    with fa.Tape() as tape:
        X = fa.var(np.array([1.0, 2.0]))
        Y = X * 3.0
        for call in (lambda: tape.gradient(Y, [X]), lambda: fa.grad(Y, X)):
            with pytest.raises(TypeError, match="scalar"):
                call()


def test_fused_ops_refuse_object_arrays_of_nodes():
    # They would compute plain numbers from the nodes' values: no gradient.
    with fa.Tape():
        X = fa.scalar_nodes(np.ones((1, 2)))
        x, y = fa.var(1.0), fa.var(-2.0)
        for nodes in (X, [[x, y]]):
            with pytest.raises(TypeError, match="scalar nodes"):
                fa.linear_relu(nodes, np.ones((2, 1)), np.zeros(1))
        for nodes in (X, [x, y]):
            with pytest.raises(TypeError, match="scalar nodes"):
                fa.mse_loss(nodes, np.zeros(np.shape(nodes)))
        assert fa.mse_loss([1.0, 2.0], [0.0, 0.0]) == 2.5  # plain numbers still work


def test_block_rules_raise_no_warnings_at_infinities():
    # IEEE results, silently, as the compiled elementwise rules give them
    # (the test run turns warnings into errors).
    with fa.Tape():
        A = fa.var(np.array([[0.0, 4.0]]))
        L = (fa.sqrt(A) @ np.array([[0.0], [1.0]])).sum()
        assert fa.jvp(L, [A], [np.array([[1.0, 0.0]])]) == 0.0
        b = fa.var(np.array([0.0]))
        M = (fa.sqrt(b + np.zeros(2)) * np.array([1.0, -1.0])).sum()
        assert np.isnan(fa.grad(M, b)).all()
        P = fa.var(np.array([np.inf, -np.inf]))
        assert np.isnan((P @ np.array([1.0, 1.0])).value) and np.isnan(P.sum().value)
    with fa.Tape():
        S = fa.scalar_nodes(np.zeros(2))
        assert fa.log(S)[0].value == -np.inf


def test_no_derivative_escapes_a_trace():
    # Each would be a number computed at the traced point, frozen into replays.
    def nested_grad(x):
        return (x * x) * fa.grad(x * x, x)

    def read_after_backward(x):
        y = x * x
        y.backward()
        return y * x.grad

    for function in (nested_grad, read_after_backward, lambda x: x * x.tape.grad[0]):
        with pytest.raises(fa.TraceError, match="while fa.compile traces"):
            fa.compile(function)(np.array([3.0]))
    with pytest.raises(fa.TraceError, match="while fa.compile traces"):
        fa.compile(lambda A: (A * fa.grad((A * A).sum(), A)).sum(), example=(np.ones(2),))(
            (np.array([3.0, 3.0]),)
        )
    f = fa.compile(lambda x: x * x)  # differentiating the compiled function is the way
    assert f.grad(np.array([5.0]))[0] == 10.0


def test_object_arrays_of_nodes_combine_with_scalar_nodes():
    with fa.Tape():
        X = fa.scalar_nodes(np.array([1.0, -2.0]))
        s = fa.var(3.0)
        products = [X * s, s * X, fa.maximum(X, s), X - s]
        assert [[node.value for node in p] for p in products] == [
            [3.0, -6.0],
            [3.0, -6.0],
            [3.0, 3.0],
            [-2.0, -5.0],
        ]
        (X * s).sum().backward()
        assert s.grad == -1.0


def test_every_block_op_has_its_rules_and_an_unknown_one_raises():
    from fastad.core import block_rules
    from fastad.kernels import optable

    for op in (*optable.BLOCK_OPS, *(op for op in optable.OPS if op.arity > 0)):
        entry = block_rules.RULES[op.code]
        assert entry.code == op.code and entry.name == op.name, op.name
    for code in (99, optable.INPUT, optable.CONST, 70):  # 70 was `pair`, now gone
        with pytest.raises(NotImplementedError, match=f"opcode {code}"):
            block_rules.rule(code)


def test_backward_on_a_long_lived_tape_visits_only_what_the_root_depends_on(monkeypatch):
    from fastad.core import block_rules

    calls = []
    rule = block_rules.rule
    monkeypatch.setattr(block_rules, "rule", lambda code: calls.append(code) or rule(code))
    tape = fa.Tape()
    W = np.ones((3, 2))
    for _ in range(30):  # a PyTorch-style loop: every step on the same tape
        with tape:
            Wv = fa.var(W)
            L = (fa.relu(np.ones((4, 3)) @ Wv) * 2.0).sum()
    calls.clear()
    L.backward()
    assert len(calls) == 4  # this step's sum, mul, relu and matmul; not 30 steps' worth
    assert Wv.grad.tolist() == [[8.0, 8.0]] * 3
    calls.clear()
    fa.jvp(L, [Wv], [np.ones((3, 2))])
    assert len(calls) == 4


def test_a_tape_that_keeps_growing_says_so_once(monkeypatch):
    from fastad.core import node_arrays

    monkeypatch.setattr(node_arrays, "GROWTH_WARNING_BYTES", 100_000)
    tape = fa.Tape()
    with pytest.warns(RuntimeWarning, match="with fa.Tape") as caught, tape:
        for _ in range(30):
            fa.var(np.ones(1000))  # 8 kB each
    assert len(caught) == 1
    assert caught[0].filename == __file__  # the user's line, through either recording path
    with pytest.warns(RuntimeWarning, match="with fa.Tape") as caught, fa.Tape():
        X = fa.var(np.ones(1000))
        for _ in range(30):
            X = X * 2.0
    assert len(caught) == 1 and caught[0].filename == __file__


def test_arrays_are_copied_in_and_read_only_out_so_mutation_never_corrupts_a_gradient():
    X = np.array([1.0, 2.0, 3.0])
    with fa.Tape():
        Xv = fa.var(X)
        L = (Xv * Xv).sum()
        X[0] = 100.0  # the caller's array: the tape holds its own copy
        L.backward()
        assert Xv.value.tolist() == [1.0, 2.0, 3.0] and L.value == 14.0
        assert Xv.grad.tolist() == [2.0, 4.0, 6.0]
        with pytest.raises(ValueError, match="read-only"):
            Xv.value[0] = 5.0  # the tape's copy cannot be written through .value
        with pytest.raises(ValueError, match="read-only"):
            Xv.grad[0] = -1.0  # nor through .grad (the tape's own array, not a copy)
        gradient = Xv.grad.copy()
        gradient[0] = -1.0  # a copy is the caller's to change
        assert Xv.grad.tolist() == [2.0, 4.0, 6.0]
        kept = Xv.grad
        (Xv * 3.0).sum().backward()  # a later sweep makes new arrays
        assert Xv.grad.tolist() == [3.0, 3.0, 3.0] and kept.tolist() == [2.0, 4.0, 6.0]
        (Xv * Xv).sum().backward(accumulate=True)
        assert Xv.grad.tolist() == [5.0, 7.0, 9.0] and kept.tolist() == [2.0, 4.0, 6.0]


def test_a_gradient_read_shows_no_negative_zeros():
    # The elements of b that no sample reaches hold UNREACHED (-0.0) in the
    # sweep: .grad reads them as +0.0, settled once, in place.
    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    W = np.array([[1.0, -1.0, 0.0], [1.0, -1.0, 0.0]])
    with fa.Tape():
        Wv, bv = fa.var(W), fa.var(np.zeros(3))
        fa.linear_relu(X, Wv, bv).sum().backward()
        for gradient in (bv.grad, Wv.grad, bv.grad):
            assert not np.signbit(gradient).any()
        assert bv.grad.tolist() == [2.0, 0.0, 0.0]


def test_adopted_adjoints_are_never_shared(rng):
    # Kernel outputs become adjoints without a copy, then accumulate in place:
    # X gets contributions from the fused layer and from X * X, W from the
    # layer twice; NumPy by hand is the reference.
    X, W, b, G = (rng.normal(size=shape) for shape in ((4, 3), (3, 2), (2,), (4, 2)))
    with fa.Tape():
        Xv, Wv, bv = fa.var(X), fa.var(W), fa.var(b)
        H1, H2 = fa.linear_relu(Xv, Wv, bv), fa.linear(Xv, Wv, bv)
        L = (H1 * G).sum() + (H2 * G).sum() + (Xv * Xv).sum()
        L.backward()
        L.backward(accumulate=True)
        mask = (X @ W + b) > 0
        dZ = G * mask + G
        np.testing.assert_allclose(Xv.grad, 2 * (dZ @ W.T + 2 * X), rtol=1e-12)
        np.testing.assert_allclose(Wv.grad, 2 * (X.T @ dZ), rtol=1e-12)
        np.testing.assert_allclose(bv.grad, 2 * dZ.sum(axis=0), rtol=1e-12)


def test_a_training_loop_that_resets_its_tape_runs_in_bounded_memory(rng):
    # The loop the growth warning recommends: one tape, reset after each step.
    import tracemalloc

    X, T = rng.normal(size=(16, 8)), rng.normal(size=(16, 4))
    W, b = rng.normal(size=(8, 4)), np.zeros(4)
    tape = fa.Tape()

    def step():
        nonlocal W, b
        with tape:
            Wv, bv = fa.var(W), fa.var(b)
            loss = fa.mse_loss(fa.linear_relu(X, Wv, bv), T)
            loss.backward()
            W, b = W - 0.01 * Wv.grad, b - 0.01 * bv.grad
        tape.reset()

    for _ in range(20):
        step()
    nbytes = tape.nbytes
    tracemalloc.start()
    for _ in range(50):
        step()
    early = tracemalloc.get_traced_memory()[0]
    for _ in range(300):
        step()
    late = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert tape.nbytes == nbytes and len(tape) == 0 and storage_of(tape).blocks.nbytes == 0
    assert late - early < 64_000  # a step holds ~3 kB of arrays: 300 kept would be ~1 MB


def test_on_a_long_lived_scalar_tape_backward_sweeps_only_its_own_span(monkeypatch):
    # A PyTorch-style scalar loop on one tape: each backward touches the nodes
    # from the lowest its root depends on up to the root, however long the
    # history; earlier adjoints are still replaced (zero), as the API says.
    from fastad.core import driver
    from fastad.kernels import tape_sweeps

    tape = fa.Tape()
    with tape:
        w = fa.var(0.5)
        first = w * w
        first.backward()
        assert w.grad == 1.0
        for _ in range(3000):
            u = w
            for _ in range(3):
                u = fa.sin(u) * 1.5  # history: 12,000 nodes
        x = fa.var(2.0)
        later = x * x + 3.0 * x
    ranges = []
    original = tape_sweeps.backward_range
    monkeypatch.setattr(
        tape_sweeps, "backward_range", lambda *a: ranges.append((a[-2], a[-3])) or original(*a)
    )
    later.backward()
    assert x.grad == 7.0 and w.grad == 0.0 and first.grad == 0.0
    assert ranges == [(x.id, later.id + 1)]  # (lowest, stop): not from node 0
    assert driver.plan(storage_of(tape), later.id) == ([], x.id)
    later.backward(accumulate=True)
    assert x.grad == 14.0
    assert fa.grad(later, [x, w]).tolist() == [7.0, 0.0]
    assert fa.jvp(later, [x], [1.0]) == 7.0
    tape.zero_grad()
    assert not tape.grad.any()


def test_repeated_constants_are_shared_only_within_reach():
    from fastad.core import driver, storage

    with fa.Tape() as tape:
        x = fa.var(1.0)
        early, again = x * 2.0, x * 2.0
        assert early.tape.in1[early.id] == again.tape.in1[again.id]  # one constant node
        for _ in range(storage.CONSTANT_REACH):
            fa.var(0.0)
        y = fa.var(3.0)
        late = y * 2.0
        assert tape.in1[late.id] != tape.in1[early.id]  # recorded again, near its use
        assert driver.plan(storage_of(tape), late.id)[1] == y.id
        late.backward()
        assert y.grad == 2.0 and late.value == 6.0
