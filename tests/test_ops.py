"""Table-driven tests of every op: values, compiled replay, local derivatives.

One row per op of ``kernels/optable.py``. A new op without a row here fails
``test_every_op_has_a_test_row``.
"""

import math

import numpy as np
import pytest
from op_table import CASES, OP_CASES, expected_partial, sample_operands

import fastad as fa
from fastad.core import scalar_rules
from fastad.kernels import _generate, optable, point_rules


def central_difference(function, point, index):
    step = np.cbrt(np.finfo(float).eps) * max(1.0, abs(point[index]))
    hi, lo = list(point), list(point)
    hi[index] += step
    lo[index] -= step
    return (function(*hi) - function(*lo)) / (hi[index] - lo[index])


# -- the table itself ---------------------------------------------------------------
def test_every_op_has_a_test_row():
    recorded_ops = {op.name for op in optable.OPS if op.arity > 0}
    assert recorded_ops == set(CASES)


@pytest.mark.parametrize("op", optable.OPS, ids=lambda op: op.name)
def test_every_op_has_all_parts(op):
    assert optable.OPS[op.code] is op, "opcodes must equal their row index"
    assert op.name and op.symbol
    assert op.arity in (0, 1, 2)
    assert len(op.partials) == op.arity
    assert bool(op.value) == (op.arity > 0)
    for expression in (op.value, *op.partials):
        if expression:
            compile(expression, op.name, "eval")
    if op.arity:
        assert len(CASES[op.name].domain) == op.arity


@pytest.mark.parametrize("name", sorted(_generate.GENERATED))
def test_generated_rules_are_current(name):
    source = (_generate.KERNELS_FOLDER / name).read_text()
    assert source == _generate.module_text(name), (
        f"kernels/{name} is out of date: run `python -m fastad.kernels._generate`"
    )


def test_every_generated_module_is_listed():
    # A module that says it is generated but is no longer listed would go stale unseen.
    marked = {
        path.name
        for path in _generate.KERNELS_FOLDER.glob("*.py")
        if _generate.MARK in path.read_text() and path.name != "_generate.py"
    }
    assert marked == set(_generate.GENERATED)


def test_public_functions_are_the_rows_with_a_doc():
    # fastad/eager/functions.py makes one function per row with a doc, bound by name.
    for op in optable.OPS:
        function = getattr(fa, op.name, None)
        if op.doc:
            assert callable(function) and function.__name__ == op.name, op.name
            assert function.__doc__ == op.doc and op.name in fa.__all__, op.name
        else:
            assert function is None, f"fa.{op.name} exists but its row has no doc"


@pytest.mark.parametrize("op", [op for op in optable.OPS if op.arity == 2], ids=lambda op: op.name)
def test_commutative_and_comparison_flags_are_true_to_the_rules(op):
    # The optimiser merges a + b with b + a for commutative ops, bit for bit;
    # comparisons give 1.0 or 0.0 with zero partials.
    values = [-2.0, -0.0, 0.0, 0.5, 3.0, math.inf, -math.inf]
    pairs = [(a, b) for a in values for b in values]
    swapped = all(
        np.float64(scalar_rules.value(op.code, a, b)).tobytes()
        == np.float64(scalar_rules.value(op.code, b, a)).tobytes()
        for a, b in pairs
    )
    assert op.commutative == swapped
    if op.comparison:
        assert {scalar_rules.value(op.code, a, b) for a, b in pairs} == {0.0, 1.0}
        assert op.partials == ("0.0", "0.0")


def test_public_function_for_every_named_op():
    for name in ("exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs"):
        assert getattr(fa, name)(0.5) == scalar_rules.value(optable.BY_NAME[name].code, 0.5)


# -- values ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: c.name)
def test_eager_value_matches_numpy(case, rng):
    for point in sample_operands(case, rng):
        with fa.Tape():
            nodes = [fa.var(v) for v in point]
            out = case.apply(*nodes)
        np.testing.assert_allclose(out.value, case.reference(*point), rtol=1e-14, atol=0)


@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: c.name)
def test_compiled_replay_equals_eager_bit_for_bit(case, rng):
    with fa.Tape() as tape:
        outputs = []
        for point in sample_operands(case, rng):
            outputs.append(case.apply(*[fa.var(v) for v in point]))
    eager = [out.value for out in outputs]
    ids = [out.id for out in outputs]
    tape.forward()
    assert tape.val[ids].tolist() == eager


@pytest.mark.parametrize("case", [c for c in OP_CASES if len(c.domain) == 2], ids=lambda c: c.name)
def test_number_operands_on_either_side(case, rng):
    a, b = sample_operands(case, rng, count=1)[0]
    with fa.Tape():
        left = case.apply(a, fa.var(b))
        right = case.apply(fa.var(a), b)
    np.testing.assert_allclose([left.value, right.value], case.reference(a, b), rtol=1e-14)


# -- derivatives ----------------------------------------------------------------------
@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: c.name)
def test_gradient_matches_central_differences(case, rng):
    for point in sample_operands(case, rng):
        with fa.Tape():
            nodes = [fa.var(v) for v in point]
            out = case.apply(*nodes)
            out.backward()
        for i, node in enumerate(nodes):
            numeric = expected_partial(case, case.reference, point, i, central_difference)
            assert node.grad == pytest.approx(numeric, rel=1e-7, abs=1e-9), (case.name, point, i)


@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: c.name)
def test_kernel_local_partials_match_central_differences(case, rng):
    # Straight at the compiled rule, one op code at a time: catches a rule
    # that falls through the dispatch or has a wrong sign or factor.
    code = optable.BY_NAME[case.name].code
    for point in sample_operands(case, rng):
        a, b = (point + [0.0])[:2]
        out = point_rules.forward_value(code, a, b)
        assert out == scalar_rules.value(code, a, b)
        partials = point_rules.local_partials(code, a, b, out)
        for i in range(len(point)):
            value = lambda *p: scalar_rules.value(code, *p)  # noqa: E731
            numeric = expected_partial(case, value, point, i, central_difference)
            assert partials[i] == pytest.approx(numeric, rel=1e-7, abs=1e-9), (case.name, point, i)


def test_pow_with_constant_exponent():
    with fa.Tape():
        x = fa.var(1.7)
        cube, root, reciprocal = x**3, x**0.5, x**-1
        grads = [fa.grad(y, x) for y in (cube, root, reciprocal)]
    assert grads == pytest.approx([3 * 1.7**2, 0.5 / math.sqrt(1.7), -1 / 1.7**2], rel=1e-14)


def test_square_records_one_multiplication():
    with fa.Tape() as tape:
        x = fa.var(3.0)
        y = x**2
    assert len(tape) == 2 and y.op == "mul"
    assert tape.in0[1] == tape.in1[1] == 0


def test_number_to_the_power_of_a_node():
    with fa.Tape():
        x = fa.var(1.5)
        y = 2.0**x
        y.backward()
    assert y.value == 2.0**1.5
    assert x.grad == pytest.approx(2.0**1.5 * math.log(2.0), rel=1e-15)


# -- kinks: fixed, documented subgradients, pinned exactly -----------------------------
@pytest.mark.parametrize(
    "apply, expected",
    [
        (fa.relu, 0.0),  # relu'(0) = 0
        (fa.abs, 0.0),  # abs'(0) = 0, the minimum-norm subgradient
    ],
    ids=["relu", "abs"],
)
def test_subgradient_at_zero(apply, expected):
    for zero in (0.0, -0.0):
        with fa.Tape():
            x = fa.var(zero)
            apply(x).backward()
        assert x.grad == expected


@pytest.mark.parametrize("apply", [fa.maximum, fa.minimum], ids=["maximum", "minimum"])
def test_tie_splits_the_gradient(apply):
    with fa.Tape():
        x, y = fa.var(1.5), fa.var(1.5)
        apply(x, y).backward()
    assert (x.grad, y.grad) == (0.5, 0.5)


def test_pow_derivatives_at_zero_base():
    with fa.Tape():
        x, e = fa.var(0.0), fa.var(2.5)
        (x**e).backward()
        assert (x.grad, e.grad) == (0.0, 0.0)
        x0 = fa.var(0.0)
        (x0**0.0).backward()
        assert x0.grad == 0.0


# -- domains: IEEE/NumPy values, never an exception -------------------------------------
# (name, how a user writes it, input, IEEE/NumPy result, is a fastad function
# that also accepts a plain float)
DOMAIN_EDGES = [
    ("log(0)", fa.log, 0.0, -math.inf, True),
    ("log(-1)", fa.log, -1.0, math.nan, True),
    ("sqrt(-1)", fa.sqrt, -1.0, math.nan, True),
    ("exp(1000)", fa.exp, 1000.0, math.inf, True),
    ("sigmoid(-1000)", fa.sigmoid, -1000.0, 0.0, True),
    ("sin(inf)", fa.sin, math.inf, math.nan, True),
    ("relu(nan)", fa.relu, math.nan, math.nan, True),
    ("maximum(nan, 1)", lambda x: fa.maximum(x, 1.0), math.nan, math.nan, True),
    ("minimum(1, nan)", lambda x: fa.minimum(1.0, x), math.nan, math.nan, True),
    ("1/0", lambda x: 1.0 / x, 0.0, math.inf, False),
    ("-1/0", lambda x: -1.0 / x, 0.0, -math.inf, False),
    ("1/-0", lambda x: 1.0 / x, -0.0, -math.inf, False),
    ("(-8)**(1/3)", lambda x: x ** (1.0 / 3.0), -8.0, math.nan, False),
    ("0**-1", lambda x: x**-1.0, 0.0, math.inf, False),
    ("10**400", lambda x: 10.0**x, 400.0, math.inf, False),
]


@pytest.mark.parametrize(
    "apply, x, expected, scalar_path",
    [edge[1:] for edge in DOMAIN_EDGES],
    ids=[edge[0] for edge in DOMAIN_EDGES],
)
def test_domain_edges_follow_ieee(apply, x, expected, scalar_path):
    with fa.Tape() as tape:
        node = apply(fa.var(x))
        node.backward()  # no exception from the backward sweep either
    results = [node.value]
    tape.forward()
    results.append(float(tape.val[node.id]))
    if scalar_path:
        results.append(apply(x))  # fa.<function>(float): no tape, same rule
    for got in results:
        if math.isnan(expected):
            assert math.isnan(got)
        else:
            assert got == expected
            assert math.copysign(1.0, got) == math.copysign(1.0, expected)


# -- second local partials (for second-order sweeps) ---------------------------
_SECOND_NAMESPACE = {name: getattr(math, name) for name in dir(math) if not name.startswith("_")}
_SECOND_NAMESPACE |= {helper.__name__: helper for helper in optable.HELPERS}


def test_every_op_has_its_second_partials():
    # One op, one place: a row without its second partials fails here.
    for op in optable.OPS:
        if op.arity:
            assert op.second is not None, f"{op.name} has no second partials"
            assert len(op.second) == (1 if op.arity == 1 else 3), op.name
        else:
            assert op.second is None, op.name


@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: c.name)
def test_second_partials_match_central_differences_of_the_first(case, rng):
    # d/dj of the compiled first partial d_i, against the row's second
    # partial (i, j); for a binary op both mixed orders, which checks
    # symmetry too.
    op = optable.BY_NAME[case.name]
    second = [
        eval(f"lambda a, b, out: {expression}", dict(_SECOND_NAMESPACE))  # noqa: S307
        for expression in op.second
    ]
    index = {(0, 0): 0, (0, 1): 1, (1, 0): 1, (1, 1): 2}

    def first(point, i):
        a, b = (list(point) + [0.0])[:2]
        return point_rules.local_partials(op.code, a, b, point_rules.forward_value(op.code, a, b))[
            i
        ]

    for point in sample_operands(case, rng, count=10):
        a, b = (point + [0.0])[:2]
        out = scalar_rules.value(op.code, a, b)
        for i in range(op.arity):
            for j in range(op.arity):
                expected = second[index[i, j]](a, b, out)
                h = 1e-5 * max(1.0, abs(point[j]))
                above, below = list(point), list(point)
                above[j] += h
                below[j] -= h
                numeric = (first(above, i) - first(below, i)) / (2 * h)
                assert expected == pytest.approx(numeric, rel=1e-6, abs=1e-7), (
                    case.name,
                    point,
                    i,
                    j,
                )


def test_second_partials_at_kinks_are_the_documented_values():
    for name in ("relu", "abs", "sign", "stop_gradient"):
        assert optable.BY_NAME[name].second == ("0.0",)
    for name in ("maximum", "minimum"):
        assert optable.BY_NAME[name].second == ("0.0", "0.0", "0.0")
    # pow at a zero base: limits, never 0 * inf = nan.
    assert optable.pow_second_base(0.0, 1.0) == 0.0
    assert optable.pow_second_mixed(0.0, 2.5) == 0.0
    assert optable.pow_second_exponent(0.0, 2.0, 0.0) == 0.0


def test_pow_exponent_derivative_at_zero_base_and_zero_exponent_is_zero():
    # d(a**b)/db = a**b * log(a) is 1 * -inf at a = b = 0; PyTorch, JAX and
    # autograd give 0 (0**b is 0 for b > 0 and 1 at b = 0).
    with fa.Tape():
        a, b = fa.var(0.0), fa.var(0.0)
        (a**b).backward()
        assert (a.grad, b.grad) == (0.0, 0.0)
    with fa.Tape():
        b = fa.var(0.0)
        (0.0**b).backward()
        assert b.grad == 0.0
    f = fa.compile(lambda a, b: a**b)
    assert f.grad(np.array([0.0, 0.0])).tolist() == [0.0, 0.0]
    assert f.jvp(np.array([0.0, 0.0]), np.array([1.0, 1.0]))[1] == 0.0
    with fa.Tape():
        base, exponent = fa.var(np.array([0.0, 2.0])), fa.var(np.array([0.0, 0.0]))
        (base**exponent).sum().backward()
        assert exponent.grad.tolist() == [0.0, math.log(2.0)]
    # Away from the corner the rule is unchanged: d/db at a = 2, b = 3 is 8 log 2.
    assert f.grad(np.array([2.0, 3.0]))[1] == pytest.approx(8.0 * math.log(2.0))


def test_arctan2_and_expm1_derivatives_hold_at_extreme_magnitudes():
    # References by hand: d atan2(a, b) = (b, -a) / (a^2 + b^2), scaled so that
    # the squares cannot overflow or underflow; d expm1(x) = exp(x), not
    # expm1(x) + 1, which cancels to 0 below x = -37.
    cases = {
        (1e-200, 1e-200): (5e199, -5e199),
        (1e-200, 0.0): (0.0, -1e200),
        (1e200, 1e200): (5e-201, -5e-201),
        (1.0, 1e200): (1e-200, 0.0),
        (1.0, math.inf): (0.0, 0.0),
    }
    for (a, b), expected in cases.items():
        with fa.Tape():
            x, y = fa.var(a), fa.var(b)
            fa.arctan2(x, y).backward()
            assert (x.grad, y.grad) == pytest.approx(expected, rel=1e-15), (a, b)
    with fa.Tape():
        x = fa.var(0.0)
        fa.arctan2(x, 0.0).backward()
        assert math.isnan(x.grad)  # undefined at the origin
    for value in (-5.0, -20.0, -40.0, 3.0):
        with fa.Tape():
            x = fa.var(value)
            fa.expm1(x).backward()
            assert x.grad == pytest.approx(math.exp(value), rel=1e-15)
