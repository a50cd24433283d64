"""The block-op registry, table-driven: one row per entry of ``fastad.core.block_rules.RULES``.

Every entry must have a row (``test_every_entry_has_a_row``). Each row says how
to record the op from leaf arrays, the leaves' shapes and the range their
elements come from. For every row: recording and replay compute the same
values bit for bit, the VJP (backward) and the JVP (forward mode) agree with
central differences of the recorded function, and with each other.

Elementwise rows come from the scalar op table's rows (``tests/op_table.py``),
which every scalar op must have already; the block ops have rows of their own.
"""

import ast
import pathlib
from typing import NamedTuple

import numpy as np
import pytest
from op_table import OP_CASES

import fastad as fa
import fastad.kernels
from fastad.core import block_rules
from fastad.core.storage import as_stored
from fastad.eager.handle import storage_of
from fastad.eager.node import elementwise
from fastad.kernels import optable


class BlockCase(NamedTuple):
    name: str
    record: object  # leaves -> the node the op records
    shapes: tuple  # one shape per leaf
    domain: tuple = (-2.0, 2.0)  # elements are drawn from here
    kinks: tuple = ()  # values (of the first leaf) to keep finite differences away from
    stops_gradient: bool = False  # the derivative is 0 by definition (stop_gradient)


def _elementwise_case(case):
    code = optable.BY_NAME[case.name].code
    if len(case.domain) == 1:
        return BlockCase(
            case.name,
            lambda a: elementwise(code, a),
            ((3, 4),),
            case.domain[0],
            case.kinks,
            stops_gradient=case.derivative is not None,
        )
    # The second operand broadcasts along the first axis.
    return BlockCase(
        case.name,
        lambda a, b: elementwise(code, a, b),
        ((3, 4), (4,)),
        (min(lo for lo, _ in case.domain), max(hi for _, hi in case.domain)),
        case.kinks,
    )


BLOCK_CASES = [
    *(_elementwise_case(case) for case in OP_CASES),
    BlockCase("matmul", lambda a, b: a @ b, ((3, 4), (4, 2))),
    BlockCase("sum", lambda a: a.sum(axis=0), ((3, 4),)),
    BlockCase("mean", lambda a: a.mean(), ((3, 4),)),
    BlockCase("max", lambda a: a.max(axis=0), ((3, 4),)),
    BlockCase("min", lambda a: a.min(), ((3, 4),)),
    BlockCase("reshape", lambda a: a.reshape(2, -1), ((3, 4),)),
    BlockCase("transpose", lambda a: a.T, ((3, 4),)),
    BlockCase("index", lambda a: a[1:, [0, 2, 2]], ((3, 4),)),
    BlockCase("linear", fa.linear, ((3, 4), (4, 2), (2,))),
    BlockCase("linear_relu", fa.linear_relu, ((3, 4), (4, 2), (2,)), kinks=("relu",)),
    BlockCase("mse_loss", fa.mse_loss, ((3, 4), (3, 4))),
    BlockCase("prod", lambda a: a.prod(axis=1), ((3, 4),), (0.5, 2.0)),
    BlockCase("concatenate", lambda a, b: fa.concatenate([a, b], axis=1), ((3, 4), (3, 2))),
    BlockCase("logsumexp", lambda a: fa.logsumexp(a, axis=1), ((3, 4),)),
    BlockCase("softmax", fa.softmax, ((3, 4),)),
    BlockCase("log_softmax", lambda a: fa.log_softmax(a, axis=0), ((3, 4),)),
    BlockCase("cross_entropy", fa.cross_entropy, ((3, 4), (3, 4))),  # probability targets
    # Linear algebra, on matrices kept well away from singular (the leaves are in [-2, 2]):
    BlockCase("cholesky", lambda a: fa.linalg.cholesky(a @ a.T + 3.0 * np.eye(3)), ((3, 3),)),
    BlockCase("solve", lambda a, b: fa.linalg.solve(a + 9.0 * np.eye(3), b), ((3, 3), (3,))),
    BlockCase(
        "solve_triangular",
        lambda a, b: fa.linalg.solve_triangular(a + 9.0 * np.eye(3), b, lower=True),
        ((3, 3), (3, 2)),
    ),
    BlockCase("inv", lambda a: fa.linalg.inv(a + 9.0 * np.eye(3)), ((3, 3),)),
    BlockCase("det", lambda a: fa.linalg.det(a + 9.0 * np.eye(3)), ((3, 3),)),
    BlockCase("logabsdet", lambda a: fa.linalg.slogdet(a - 9.0 * np.eye(3))[1], ((3, 3),)),
    BlockCase("cumsum", lambda a: np.cumsum(a, axis=1), ((3, 4),)),
    # The eigenvectors' signs are NumPy's choice: their squares are smooth.
    BlockCase(
        "eigh", lambda a: _eigen_parts(*fa.linalg.eigh(a + 3.0 * np.diag([0, 1, 2]))), ((3, 3),)
    ),
    BlockCase("sign_det", lambda a: fa.linalg.slogdet(a - 9.0 * np.eye(3))[0] * 2.0, ((3, 3),)),
]


def _eigen_parts(w, V):
    return fa.concatenate([w.reshape((1, 3)), V * V], axis=0)


# More ways to call the entries above (each through every test below).
VARIANTS = [
    BlockCase("sum", lambda a: a.sum(axis=(0, 2), keepdims=True), ((2, 3, 4),)),
    BlockCase("mean", lambda a: a.mean(axis=(-1, 0)), ((2, 3, 4),)),
    BlockCase("max", lambda a: a.max(axis=1, keepdims=True), ((3, 4),)),
    BlockCase("min", lambda a: a.min(axis=(0, 1)), ((3, 4, 2),)),
    BlockCase("prod", lambda a: a.prod(), ((2, 3),), (0.5, 2.0)),
    BlockCase("prod", lambda a: a.prod(axis=(0, 2), keepdims=True), ((2, 3, 2),), (0.5, 2.0)),
    BlockCase("var", lambda a: a.var(axis=0, ddof=1), ((3, 4),)),
    BlockCase("std", lambda a: a.std(), ((3, 4),)),
    BlockCase("ravel", lambda a: a.ravel(), ((3, 4),)),
    BlockCase("transpose", lambda a: a.transpose(1, 2, 0), ((2, 3, 4),)),
    BlockCase("stack", lambda a, b: fa.stack([a, b], axis=-1), ((3, 4), (3, 4))),
    BlockCase("matmul", lambda a, b: a @ b, ((2, 3, 4), (4, 5))),
    BlockCase("matmul", lambda a, b: a @ b, ((2, 1, 3, 4), (3, 4, 2))),
    BlockCase("matmul", lambda a, b: a @ b, ((4,), (2, 4, 3))),
    BlockCase("matmul", lambda a, b: a @ b, ((2, 3, 4), (4,))),
    BlockCase("matmul", lambda a, b: a @ b, ((4,), (4,))),
    BlockCase("where", lambda a, b: fa.where(a > 0.3, a, b), ((3, 4), (4,)), kinks=(0.3,)),
    BlockCase("clip", lambda a: fa.clip(a, -0.5, 0.7), ((3, 4),), kinks=(-0.5, 0.7)),
    BlockCase("logsumexp", lambda a: fa.logsumexp(a), ((3, 4),)),
    BlockCase("logsumexp", lambda a: fa.logsumexp(a, (0, 2), keepdims=True), ((2, 3, 4),)),
    BlockCase("softmax", lambda a: fa.softmax(a, axis=(0, 1)), ((2, 3, 2),)),
    BlockCase("log_softmax", fa.log_softmax, ((5,),)),
    BlockCase(
        "cross_entropy labels",
        lambda x: fa.cross_entropy(x, np.array([0, 3, 1]), reduction="sum"),
        ((3, 4),),
    ),
    BlockCase("cross_entropy", lambda x: fa.cross_entropy(x, 2), ((4,),)),  # one sample
    BlockCase("solve", lambda a, b: fa.linalg.solve(a + 9.0 * np.eye(3), b), ((3, 3), (3, 4))),
    BlockCase(
        "solve_triangular",
        lambda a, b: fa.linalg.solve_triangular(a + 9.0 * np.eye(3), b),  # upper
        ((3, 3), (3,)),
    ),
    BlockCase(
        "np.linalg", lambda a: np.linalg.inv(np.linalg.cholesky(a @ a.T + np.eye(3))), ((3, 3),)
    ),
]
# Domains where the elementwise ops are smooth and defined.
_DOMAINS = {
    "div": (0.5, 3.0),
    "pow": (0.2, 2.5),
    "log": (0.1, 5.0),
    "sqrt": (0.1, 5.0),
    "arctan2": (0.5, 3.0),
}
BLOCK_CASES = [case._replace(domain=_DOMAINS.get(case.name, case.domain)) for case in BLOCK_CASES]


def test_every_entry_has_a_row():
    assert sorted(entry.name for entry in block_rules.RULES.values()) == sorted(
        case.name for case in BLOCK_CASES
    )
    assert len({case.name for case in BLOCK_CASES}) == len(BLOCK_CASES)


def test_every_block_op_has_an_entry():
    for op in (*optable.BLOCK_OPS, *(op for op in optable.OPS if op.arity > 0)):
        assert block_rules.rule(op.code).name == op.name


def leaves_for(case, rng):
    """Leaf arrays for ``case``, elementwise at least 0.1 away from kinks and ties."""
    arrays = [rng.uniform(*case.domain, size=shape) for shape in case.shapes]
    for _ in range(100):
        near = np.zeros(arrays[0].shape, np.bool_)
        for kink in case.kinks:
            if not isinstance(kink, str):
                near |= np.abs(arrays[0] - kink) < 0.1
        if "tie" in case.kinks:
            near |= np.abs(arrays[0] - arrays[1]) < 0.1
        if not near.any():
            break
        arrays[0][near] = rng.uniform(*case.domain, size=int(near.sum()))
    return arrays


def recorded(case, arrays):
    """(tape, leaves, output) of the case recorded on a fresh tape."""
    with fa.Tape() as tape:
        leaves = [fa.var(a) for a in arrays]
        out = case.record(*leaves)
    return tape, leaves, out


def node_values(tape):
    values = []
    for node in range(len(tape)):
        block = tape.block_value(node)
        values.append(block.copy() if block is not None else np.float64(tape.val[node]))
    return values


@pytest.mark.parametrize("case", BLOCK_CASES + VARIANTS, ids=lambda case: case.name)
def test_record_and_replay_agree_bit_for_bit(case, rng):
    first, second = leaves_for(case, rng), leaves_for(case, rng)
    tape, leaves, _ = recorded(case, first)
    reference, _, _ = recorded(case, second)
    recorded_values = node_values(tape)
    tape.forward()  # the same leaves: replay reproduces the recording
    for got, want in zip(node_values(tape), recorded_values, strict=True):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    for leaf, array in zip(leaves, second, strict=True):
        storage_of(tape).set_leaf_value(leaf.id, as_stored(array.copy()))
    tape.forward()  # new leaves: replay equals recording them afresh
    for got, want in zip(node_values(tape), node_values(reference), strict=True):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


def _scalar_of(out, weights):
    return out if isinstance(out, fa.Var) else (out * weights).sum()


@pytest.mark.parametrize("case", BLOCK_CASES + VARIANTS, ids=lambda case: case.name)
def test_vjp_and_jvp_agree_with_central_differences(case, rng):
    arrays = leaves_for(case, rng)
    _, _, probe = recorded(case, arrays)
    weights = rng.normal(size=np.shape(probe.value)) if isinstance(probe, fa.Block) else None
    directions = [rng.normal(size=a.shape) for a in arrays]

    def loss(*values):
        _, _, out = recorded(case, values)
        return _scalar_of(out, weights).value

    with fa.Tape():
        leaves = [fa.var(a) for a in arrays]
        L = _scalar_of(case.record(*leaves), weights)
        L.backward()
        gradients = [leaf.grad for leaf in leaves]
        tangent = fa.jvp(L, leaves, directions)
    step = 1e-6
    hi = loss(*(a + step * d for a, d in zip(arrays, directions, strict=True)))
    lo = loss(*(a - step * d for a, d in zip(arrays, directions, strict=True)))
    difference = 0.0 if case.stops_gradient else (hi - lo) / (2 * step)
    along = sum(float((g * d).sum()) for g, d in zip(gradients, directions, strict=True))
    scale = max(1.0, abs(difference))
    assert along == pytest.approx(difference, rel=1e-6, abs=1e-6 * scale)
    assert tangent == pytest.approx(along, rel=1e-12, abs=1e-12 * scale)


def test_the_math_names_are_one_list():
    # The op table's import from math is the list; the eager rules take it, and the
    # compiled sweeps and generated modules import it and the kernels' own two.
    import ast
    import pathlib

    from fastad.core import scalar_rules
    from fastad.kernels import point_rules, scalar_source

    def imported_from_math(module):
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        return sorted(
            alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module == "math"
            for alias in node.names
        )

    assert list(optable.MATH_NAMES) == imported_from_math(optable)
    assert imported_from_math(point_rules) == scalar_source.MATH_NAMES
    assert set(scalar_source.MATH_NAMES) - set(optable.MATH_NAMES) == {"copysign", "isfinite"}
    assert set(scalar_rules._math_namespace) >= set(optable.MATH_NAMES)


def test_no_kernel_calls_blas():
    # Numba's np.dot (and @ in a kernel) calls SciPy's OpenBLAS; beside
    # NumPy's, two thread pools spinning on the same cores made threaded
    # steps 10-80x slower (bench/threads.py). Products belong to the front
    # end (NumPy); a kernel calling BLAS would bring the second pool back.
    kernels = pathlib.Path(fastad.kernels.__file__).resolve().parent
    paths = sorted(kernels.glob("*.py"))
    assert {"fused.py", "tape_sweeps.py"} <= {path.name for path in paths}, kernels
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                raise AssertionError(f"{path.name}:{node.lineno}: a matrix product in a kernel")
            if isinstance(node, ast.Attribute) and node.attr in ("dot", "matmul", "vdot"):
                raise AssertionError(f"{path.name}:{node.lineno}: np.{node.attr} in a kernel")
