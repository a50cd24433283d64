"""NumPy's axis, joining and contraction functions on blocks (fastad/eager/array_functions.py):
each gives NumPy's value, and its gradient and Hessian-vector product match central
differences of NumPy's own function; bad axes and options are named.
"""

import warnings

import numpy as np
import pytest

import fastad as fa
from fastad.eager import contractions

# (name, call on the operands, shapes of the operands); the call is NumPy's own function,
# run once on plain arrays (the reference) and once on blocks (recorded by fastad).
CASES = [
    ("expand_dims", lambda a: np.expand_dims(a, (0, -1)), [(2, 3)]),
    ("moveaxis", lambda a: np.moveaxis(a, [0, 1], [-1, 0]), [(2, 3, 4)]),
    ("swapaxes", lambda a: np.swapaxes(a, 0, 2), [(2, 3, 4)]),
    ("flip", lambda a: np.flip(a, axis=1), [(3, 4)]),
    ("flip all", lambda a: np.flip(a), [(3, 4)]),
    ("outer", lambda a, b: np.outer(a, b), [(3,), (2, 2)]),
    ("inner", lambda a, b: np.inner(a, b), [(2, 3), (4, 3)]),
    ("tensordot 2", lambda a, b: np.tensordot(a, b), [(2, 3, 4), (3, 4, 2)]),
    ("tensordot axes", lambda a, b: np.tensordot(a, b, ([0, 2], [2, 0])), [(2, 3, 4), (4, 5, 2)]),
    ("trace", lambda a: np.trace(a), [(4, 4)]),
    ("trace offset", lambda a: np.trace(a, offset=-1), [(4, 3)]),
    ("diagonal", lambda a: np.diagonal(a, 1), [(3, 4)]),
    ("diagonal of a stack", lambda a: np.diagonal(a, 0, 1, 2), [(2, 3, 3)]),
    ("diagonal of a stack, axes apart", lambda a: np.diagonal(a, -1, 2, 0), [(4, 2, 3)]),
    ("diagonal past the corner", lambda a: np.diagonal(a, 2, 0, 1), [(5, 3, 2)]),
    ("diagonal of 4 axes", lambda a: np.diagonal(a, 1, 3, 1), [(2, 3, 2, 4)]),
    ("trace of a stack", lambda a: np.trace(a, 1, 1, 2), [(3, 4, 4)]),
    ("diagonal of nothing", lambda a: np.diagonal(a, -3, 1, 2), [(2, 3, 4)]),
    ("diag of a matrix", lambda a: np.diag(a, -1), [(4, 4)]),
    ("diag of a vector", lambda a: np.diag(a), [(3,)]),
    ("diag above", lambda a: np.diag(a, 2), [(3,)]),
    ("diag below", lambda a: np.diag(a, -1), [(3,)]),
    ("vstack", lambda a, b: np.vstack([a, b]), [(3,), (2, 3)]),
    ("hstack", lambda a, b: np.hstack([a, b]), [(2, 3), (2, 1)]),
    ("hstack vectors", lambda a, b: np.hstack([a, b]), [(2,), (3,)]),
    ("tile", lambda a: np.tile(a, (2, 1, 3)), [(2, 3)]),
    ("take_along_axis broadcast", lambda a: np.take_along_axis(a, np.array([[2, 0]]), 1), [(3, 4)]),
    ("triu of a vector", lambda a: np.triu(a, 1), [(3,)]),
    ("tril of a vector", lambda a: np.tril(a), [(3,)]),
    ("pad", lambda a: np.pad(a, ((1, 0), (2, 1)), constant_values=0.5), [(2, 3)]),
    ("einsum matmul", lambda a, b: np.einsum("ij,jk->ik", a, b), [(2, 3), (3, 4)]),
    ("einsum batch", lambda a, b: np.einsum("bij,bkj->bki", a, b), [(2, 3, 4), (2, 5, 4)]),
    (
        "einsum three",
        lambda a, b, c: np.einsum("ijk,jl,kl->il", a, b, c),
        [(2, 3, 2), (3, 2), (2, 2)],
    ),
    ("einsum implicit", lambda a, b: np.einsum("ij,ij", a, b), [(2, 3), (2, 3)]),
    ("einsum sum", lambda a: np.einsum("abc->b", a), [(2, 3, 2)]),
    ("einsum ellipsis", lambda a, b: np.einsum("...ij,jk->...ki", a, b), [(2, 3, 4), (4, 2)]),
    ("einsum ellipsis implicit", lambda a, b: np.einsum("...j,j", a, b), [(2, 3, 4), (4,)]),
    ("einsum diagonal", lambda a: np.einsum("ii->i", a), [(3, 3)]),
    ("einsum trace", lambda a: np.einsum("ii", a), [(3, 3)]),
    ("einsum batched diagonal", lambda a, b: np.einsum("bii,bj->bij", a, b), [(2, 3, 3), (2, 4)]),
    (
        "einsum four",
        lambda a, b, c, d: np.einsum("ij,jk,kl,lm->im", a, b, c, d),
        [(2, 5), (5, 3), (3, 4), (4, 2)],
    ),
    ("einsum scalar", lambda a, b, c: np.einsum("i,i,j->j", a, b, c), [(3,), (3,), (2,)]),
    # NumPy's greedy path takes all three at once here (no pair fits its size limit), with
    # the letter all three share summed last.
    ("einsum third moment", lambda a, b, c: np.einsum("ni,nj,nk->ijk", a, b, c), [(5, 2)] * 3),
    ("einsum three at once", lambda a, b, c: np.einsum("ab,ac,ad->bcd", a, b, c), [(3, 2)] * 3),
    # The last product as a stack of one operand with the other broadcast against it, the
    # output's order without a transpose (large enough for the form: 16 * 16 * 16).
    (
        "einsum stack by matrix",
        lambda a, b: np.einsum("ijk,jl->ilk", a, b),
        [(3, 16, 16), (16, 16)],
    ),
    (
        "einsum matrix by stack",
        lambda a, b: np.einsum("jl,ijk->ilk", a, b),
        [(16, 16), (2, 16, 16)],
    ),
    (
        "einsum stack, matrix last",
        lambda a, b: np.einsum("kl,ijk->ijl", a, b),
        [(16, 16), (2, 16, 16)],
    ),
    ("cumsum", lambda a: np.cumsum(a, axis=0), [(4, 3)]),
    ("cumsum flat", lambda a: np.cumsum(a), [(2, 3)]),
    ("cumsum float64", lambda a: np.cumsum(a, axis=-1, dtype=np.float64), [(2, 3)]),
    ("sort", lambda a: np.sort(a, axis=0), [(4, 3)]),
    ("sort flat", lambda a: np.sort(a, axis=None), [(2, 3)]),
]


def _weights(shape, seed=5):
    return np.random.default_rng(seed).normal(size=shape)


def _scalar(node, weights):
    """The test's loss on the recorded result: sum(tanh(result) * weights)."""
    if isinstance(node, fa.Var):  # a scalar result (a trace)
        return fa.tanh(node) * float(weights)
    return (fa.tanh(node) * weights).sum()


@pytest.mark.parametrize("name, call, shapes", CASES, ids=[case[0] for case in CASES])
def test_values_gradients_and_hvps_match_numpy(name, call, shapes, rng):
    arrays = [rng.normal(size=shape) for shape in shapes]
    want = call(*arrays)
    weights = _weights(np.shape(want))

    def loss_of(*values):  # NumPy's function, a smooth scalar of its result
        return float(np.sum(np.tanh(call(*values)) * weights))

    with fa.Tape():
        nodes = [fa.var(a) for a in arrays]
        got = call(*nodes)
        assert isinstance(got, (fa.Block, fa.Var)), type(got)
        if name.startswith("einsum"):  # NumPy's einsum sums in its own order: to rounding
            np.testing.assert_allclose(np.asarray(got.value), want, rtol=1e-13, atol=1e-15)
        else:  # the same products and sums NumPy's function makes: bit for bit
            np.testing.assert_array_equal(np.asarray(got.value), want)
        loss = _scalar(got, weights)
        gradients = fa.grad(loss, nodes)
        directions = [rng.normal(size=shape) for shape in shapes]
        products = fa.hvp(loss, nodes, directions)
    h = 1e-6
    for i, array in enumerate(arrays):
        numeric = np.zeros(array.shape)
        for index in np.ndindex(array.shape):
            up, down = [a.copy() for a in arrays], [a.copy() for a in arrays]
            up[i][index] += h
            down[i][index] -= h
            numeric[index] = (loss_of(*up) - loss_of(*down)) / (2 * h)
        np.testing.assert_allclose(gradients[i], numeric, rtol=1e-6, atol=1e-8)

    def gradient_at(step):
        with fa.Tape():
            moved = [fa.var(a + step * d) for a, d in zip(arrays, directions, strict=True)]
            return fa.grad(_scalar(call(*moved), weights), moved)

    for got_product, up, down in zip(products, gradient_at(h), gradient_at(-h), strict=True):
        np.testing.assert_allclose(got_product, (up - down) / (2 * h), rtol=1e-5, atol=1e-7)


def test_a_block_beside_a_plain_array():
    a, b = np.arange(3.0), np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with fa.Tape():
        B = fa.var(b)
        np.testing.assert_array_equal(np.tensordot(a, B, 1).value, np.tensordot(a, b, 1))
        np.testing.assert_array_equal(np.outer(B, a).value, np.outer(b, a))


def test_bad_axes_and_options_are_named():
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        with pytest.raises(ValueError, match="axis 2 is out of range"):
            np.swapaxes(X, 0, 2)
        with pytest.raises(ValueError, match=r"tensordot: axes \[1\] of shape \(2, 3\)"):
            np.tensordot(X, X, ([1], [1 - 1]))
        with pytest.raises(TypeError, match="mode='constant'"):
            np.pad(X, 1, mode="edge")
        with pytest.raises(TypeError, match="scalar node"):
            np.outer(X.sum(), X)
        with pytest.raises(TypeError, match="out="):
            np.outer(X, X, out=np.empty((6, 6)))
        with pytest.raises(ValueError, match="names a position twice"):
            np.expand_dims(X, (0, 0))
        with pytest.raises(TypeError, match="np.sort with order="):
            np.sort(X, order="x")
        with pytest.raises(ValueError, match="letter 'j' stands for 3 and 2 elements"):
            np.einsum("ij,jk", X, X)
        with pytest.raises(ValueError, match="letter 'j' stands for 2 and 3 elements"):
            np.einsum("jj", X)
        with pytest.raises(ValueError, match="names more axes than its operand"):
            np.einsum("...ijk", X)
        with pytest.raises(ValueError, match="'...' twice in one group"):
            np.einsum("...i...", X[0])
        with pytest.raises(ValueError, match=r"'ij' for an operand of shape \(3,\)"):
            np.einsum("ij", X[0])
        with pytest.raises(TypeError, match="dtype=<class 'numpy.float32'>"):
            np.cumsum(X, dtype=np.float32)
        with pytest.raises(ValueError, match="axis 2 is out of range"):
            np.cumsum(X, axis=2)
        with pytest.raises(ValueError, match=r"at least two axes, got shape \(3,\)"):
            np.diagonal(X[0])
        with pytest.raises(ValueError, match="axis1=-1 and axis2=1 are both axis 1"):
            np.trace(X, 0, -1, 1)
        with pytest.raises(ValueError, match="axis 3 is out of range"):
            np.diagonal(X, 0, 0, 3)


def test_einsum_is_planned_once_per_subscripts_and_shapes(monkeypatch):
    # An eager loop records the same contraction at every step: it is planned (subscripts
    # parsed, NumPy's path found) once per subscripts and shapes, and every later call
    # records the plan's ops on its own values.
    planned = []
    plan = contractions._contraction
    monkeypatch.setattr(contractions, "_contraction", lambda *a: planned.append(a[0]) or plan(*a))
    contractions._plan.cache_clear()
    rng = np.random.default_rng(5)
    spec = "ab,bc,cd->ad"  # a chain: one path, two products
    for _ in range(3):
        arrays = [rng.normal(size=s) for s in [(4, 3), (3, 5), (5, 2)]]
        with fa.Tape() as tape:
            nodes = [fa.var(a) for a in arrays]
            out = np.einsum(spec, *nodes)
            out.sum().backward()
            np.testing.assert_allclose(out.value, np.einsum(spec, *arrays), rtol=1e-13)
            np.testing.assert_allclose(nodes[0].grad, np.ones((4, 2)) @ (arrays[1] @ arrays[2]).T)
            assert len(tape) == 3 + 2 + 1  # the leaves, two products, the sum
    assert len(planned) == 1
    with fa.Tape():
        np.einsum(spec, *[fa.var(np.ones(s)) for s in [(4, 3), (3, 6), (6, 2)]])
    assert len(planned) == 2  # other shapes: planned again
    for _ in range(2):  # a failed plan is not remembered: the error every time
        with fa.Tape(), pytest.raises(ValueError, match="letter 'b' stands for 3 and 4"):
            np.einsum(spec, *[fa.var(np.ones(s)) for s in [(4, 3), (4, 5), (5, 2)]])


def test_einsum_of_a_stack_by_a_matrix_copies_only_the_matrix():
    # 'ijk,jl->ilk' as (1, l, j) @ (i, j, k): the output's order, the 3-d operand as it is.
    rng = np.random.default_rng(2)
    A, B = rng.normal(size=(4, 32, 16)), rng.normal(size=(32, 24))
    with fa.Tape() as tape:
        x, y = fa.var(A), fa.var(B)
        out = np.einsum("ijk,jl->ilk", x, y)
        ops = [tape.op_name(n) for n in range(len(tape))]
        np.testing.assert_allclose(out.value, np.einsum("ijk,jl->ilk", A, B), atol=1e-13)
    assert ops.count("transpose") == 1
    assert tape.operands(ops.index("transpose")) == (tape.node_id(y),)
    # Products 2 wide would be many small BLAS calls: the plain product, one matrix.
    A = rng.normal(size=(50, 32, 2))
    with fa.Tape() as tape:
        out = np.einsum("ijk,jl->ilk", fa.var(A), fa.var(B))
        shapes = [tape.block_value(n).shape for n in range(len(tape))]
        np.testing.assert_allclose(out.value, np.einsum("ijk,jl->ilk", A, B), atol=1e-13)
    assert (100, 24) in shapes and (1, 24, 32) not in shapes


def test_edges_where_numpy_broadcasts_keeps_infinities_or_raises():
    with fa.Tape():
        v = fa.var(np.array([np.inf, 1.0, -np.inf]))
        for k in (0, 2, -1):  # inf only on the diagonal, exact zeros elsewhere
            np.testing.assert_array_equal(np.diag(v, k).value, np.diag(v.value, k))
        X = fa.var(np.arange(12.0).reshape(3, 4))
        for indices in ([], np.array([], dtype=np.intp)):
            assert np.take(X, indices).value.shape == (0,)
            assert np.take(X, indices, axis=1).value.shape == (3, 0)
        with pytest.raises(IndexError, match=r"indices of shape \(2, 1\) do not broadcast"):
            np.take_along_axis(X, np.array([[0], [2]]), axis=1)
        with pytest.raises(ValueError, match="names an axis twice"):
            np.flip(X, (1, -1))
        with pytest.raises(ValueError, match="2 or more axes"):
            np.vsplit(X[0], 2)


def test_sort_under_fa_compile_is_refused_by_name():
    with pytest.raises(fa.TraceError, match="np.sort of"):
        fa.compile(lambda x: np.sort(x).sum(), example=(np.arange(3.0),))


# -- the keywords of NumPy's reductions --------------------------------------------------------
REDUCTIONS = [
    ("sum where", lambda a: np.sum(a, axis=0, where=a > 0.0)),
    ("sum initial", lambda a: np.sum(a, axis=1, initial=2.5)),
    ("sum dtype", lambda a: np.sum(a, dtype=np.float64)),
    ("mean where", lambda a: np.mean(a, axis=1, where=[True, False, True, True])),
    ("prod where initial", lambda a: np.prod(a, axis=0, where=a < 0.5, initial=2.0)),
    ("max where initial", lambda a: np.max(a, axis=1, where=a < 0.5, initial=-3.0)),
    ("min initial", lambda a: np.min(a, axis=0, initial=0.1)),
]


@pytest.mark.parametrize("name, call", REDUCTIONS, ids=[case[0] for case in REDUCTIONS])
def test_reductions_take_numpys_keywords(name, call, rng):
    array = rng.normal(size=(3, 4))
    array[np.abs(array - 0.5) < 0.05] = 0.7  # away from the masks' edges
    array[np.abs(array) < 0.05] = 0.3
    want = call(array)
    weights = _weights(np.shape(want))
    with fa.Tape():
        node = fa.var(array)
        got = call(node)
        np.testing.assert_allclose(np.asarray(got.value), want, rtol=1e-15)
        gradient = fa.grad(_scalar(got, weights), node)

    def loss_of(values):
        return float(np.sum(np.tanh(call(values)) * weights))

    numeric = np.zeros(array.shape)
    for index in np.ndindex(array.shape):
        up, down = array.copy(), array.copy()
        up[index] += 1e-6
        down[index] -= 1e-6
        numeric[index] = (loss_of(up) - loss_of(down)) / 2e-6
    np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-8)


def test_reduction_keywords_fastad_cannot_take_are_named():
    with fa.Tape():
        X = fa.var(np.ones((2, 3)))
        with pytest.raises(ValueError, match="needs initial="):
            np.max(X, where=np.ones((2, 3), dtype=bool))
        with pytest.raises(TypeError, match="dtype="):
            np.sum(X, dtype=np.float32)


# -- scalar nodes as arrays of one number --------------------------------------------------------
def test_scalar_nodes_stack_into_a_vector_and_reduce_to_themselves():
    with fa.Tape():
        x, y = fa.var(2.0), fa.var(-3.0)
        v = fa.stack([x, 1.5, y])
        np.testing.assert_array_equal(v.value, [2.0, 1.5, -3.0])
        loss = (fa.sin(v) * np.array([1.0, 2.0, 3.0])).sum() * x
        gx, gy = fa.grad(loss, [x, y])
        # by hand: loss = x (sin x + 2 sin 1.5 + 3 sin y)
        assert gx == pytest.approx(
            np.sin(2.0) + 2 * np.sin(1.5) + 3 * np.sin(-3.0) + 2.0 * np.cos(2.0)
        )
        assert gy == pytest.approx(2.0 * 3 * np.cos(-3.0))
        hx, hy = fa.hvp(loss, [x, y], [1.0, 0.0])  # the Hessian's first column, by hand
        assert hx == pytest.approx(2 * np.cos(2.0) - 2.0 * np.sin(2.0))
        assert hy == pytest.approx(3 * np.cos(-3.0))
        np.testing.assert_array_equal(np.stack([x, y], axis=-1).value, [2.0, -3.0])
        infinite = fa.var(np.inf)
        np.testing.assert_array_equal(fa.stack([infinite, x]).value, [np.inf, 2.0])  # no nan
        for reduce in (np.sum, np.mean, np.max, np.min, np.prod):
            assert reduce(x) is x
        assert np.reshape(x, ()) is x
        column = np.reshape(x, (1, 1))
        np.testing.assert_array_equal(column.value, [[2.0]])
        assert fa.grad((column * 3.0).sum(), x) == 3.0
        with pytest.raises(ValueError, match="size 1 into shape"):
            np.reshape(x, (2,))
        with pytest.raises(ValueError, match=r"ndarray of shape \(2,\)"):
            fa.stack([x, np.ones(2)])
        with pytest.raises(ValueError, match="axis 1 is out of range"):
            fa.stack([x, y], axis=1)


def test_full_contractions_and_numpy_forms_of_the_arguments():
    """Cases a review found: each as NumPy gives it."""
    A = np.arange(12.0).reshape(3, 4) - 5.0
    kept = np.array([True, False, True, True])
    with fa.Tape():
        v = fa.var(np.array([1.0, 2.0, 3.0]))
        assert np.inner(v, v).value == 14.0  # a full contraction is a scalar node
        assert np.tensordot(fa.var(np.ones((2, 3))), np.ones((2, 3))).value == 6.0
        X, mask = fa.var(A), fa.var(kept * 1.0 - 0.5) > 0  # a comparison node that broadcasts
        assert np.mean(X, where=mask).value == pytest.approx(np.mean(A, where=kept))
        with warnings.catch_warnings():  # NumPy warns of the empty column; fastad does not
            warnings.simplefilter("ignore", RuntimeWarning)
            want = np.mean(A, axis=0, where=kept)  # nan where the mask keeps nothing
        np.testing.assert_array_equal(np.mean(X, axis=0, where=mask).value, want)
        np.testing.assert_array_equal(np.diagonal(X, 1, -1, -2).value, np.diagonal(A, 1, -1, -2))
        np.testing.assert_array_equal(np.diagonal(X, 0, 0, -1).value, np.diagonal(A, 0, 0, -1))
        np.testing.assert_array_equal(np.hstack([v, np.array(1.0)]).value, [1.0, 2.0, 3.0, 1.0])
        np.testing.assert_array_equal(np.einsum(",i->i", np.array(2.0), v).value, [2.0, 4.0, 6.0])
        with pytest.raises(ValueError, match="names letters that no operand has"):
            np.einsum("i->j", v)
