"""Fast math (``fa.compile(fast_math=True)``): batches on vectors of points, libmvec's math.

Two kinds of check. With no vector math functions (every math function
libm's, lane by lane), the vector kernels must give the interpreter's bits in
every mode: that tests the lowering itself (lanes, masks, stores, guards,
the recheck, the last partial group) on the random programs of every op.
With libmvec, each math function is within a few units in the last place of
libm's, and whole programs within the rounding that implies.
"""

import ctypes
import ctypes.util
import json
import pickle

import numpy as np
import pytest
from test_codegen import (
    EXAMPLE_2,
    assert_same_bits,
    branchy,
    points_with_special_values,
    random_program,
    wait_for_codegen,
)

import fastad as fa
from fastad import demo
from fastad.compiled import native_code, tiers
from fastad.kernels import scalar_ir, scalar_source, vector_ir

try:
    HOST = native_code.fast_math()
except RuntimeError:  # the tests below that need libmvec say so by failing
    HOST = None
# Every vector width this CPU runs (AVX-512 runs AVX2's and SSE's code too); without
# libmvec, SSE's, whose tests then fail saying so.
WIDTHS = [lanes for lanes in (2, 4, 8) if lanes <= (HOST.lanes if HOST else 2)]


def lanes_without_vector_math(monkeypatch, lanes):
    """Fast math on ``lanes`` points per vector, every math function libm's."""
    monkeypatch.setattr(native_code, "fast_math", lambda: native_code.Vectors(lanes, ()))


def without_libmvec(monkeypatch):
    """This process as a machine without libmvec: fast math refused, naming it."""

    def missing():
        raise RuntimeError("fast math needs glibc's libmvec (libmvec.so.1), which was not found")

    monkeypatch.setattr(native_code, "fast_math", missing)


def with_metadata(path, **changes):
    """Rewrite the saved function at ``path`` with ``changes`` to its JSON metadata."""
    with np.load(path) as saved:
        arrays = {key: saved[key] for key in saved.files}
    meta = json.loads(str(arrays["meta"]))
    meta.update(changes)
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)


def compiled_pair(function, example, **options):
    plain = fa.compile(function, example=example, backend="codegen", **options)
    fast = fa.compile(function, example=example, backend="codegen", fast_math=True, **options)
    return plain, fast


def assert_fast_math_tier(function, call):
    tier = function.tier(call)
    assert tier.name == "codegen", tier.reason
    assert "points per vector" in tier.reason, tier.reason


@pytest.mark.parametrize("lanes", [2, 4, 8])
def test_without_vector_functions_every_mode_gives_the_interpreters_bits(monkeypatch, lanes):
    lanes_without_vector_math(monkeypatch, lanes)
    rng = np.random.default_rng(lanes)
    function = random_program(lanes)
    plain, fast = compiled_pair(function, rng.uniform(0.5, 1.5, 4), num_inputs=4)
    # 301 points: whole groups of every width and a partial last one.
    points = points_with_special_values(rng, 301, 4)
    cotangents = rng.normal(size=(301, 3))
    cotangents[::5, 1] = 0.0
    tangents = rng.normal(size=(301, 4))
    tangents[::3, 2] = 0.0
    assert_same_bits(fast(points), plain(points))
    for mine, theirs in zip(
        fast.vjp(points, cotangents), plain.vjp(points, cotangents), strict=True
    ):
        assert_same_bits(mine, theirs)
    for mine, theirs in zip(fast.jvp(points, tangents), plain.jvp(points, tangents), strict=True):
        assert_same_bits(mine, theirs)
    for mode in ("fwd", "rev"):
        assert_same_bits(fast.jacobian(points, mode=mode), plain.jacobian(points, mode=mode))
    for call in ("values", "vjp", "jvp", "jacobian_fwd", "jacobian_rev"):
        assert_fast_math_tier(fast, call)
    for size in range(1, lanes + 2):  # a partial group alone, a whole one, one more
        assert_same_bits(fast.jacobian(points[:size]), plain.jacobian(points[:size]))


@pytest.mark.parametrize("lanes", [4, 8])
def test_without_vector_functions_second_order_gives_the_interpreters_bits(monkeypatch, lanes):
    lanes_without_vector_math(monkeypatch, lanes)
    rng = np.random.default_rng(20 + lanes)
    function = random_program(30 + lanes, n_outputs=1)
    plain, fast = compiled_pair(
        lambda *xs: function(*xs)[0], rng.uniform(0.5, 1.5, 4), num_inputs=4
    )
    points = points_with_special_values(rng, 203, 4)
    directions = rng.normal(size=(203, 4))
    directions[::3, 1] = 0.0
    for mine, theirs in zip(fast.value_and_grad(points), plain.value_and_grad(points), strict=True):
        assert_same_bits(mine, theirs)
    assert_same_bits(fast.hvp(points, directions), plain.hvp(points, directions))
    assert_same_bits(fast.hessian(points), plain.hessian(points))
    for call in ("grad", "hvp", "hessian"):
        assert_fast_math_tier(fast, call)


def sine_chain(*xs):
    total = xs[0] * 0.0
    for a, b in zip(xs[:-1], xs[1:], strict=True):
        total = total + fa.sin(a * b)
    return total


@pytest.mark.parametrize("lanes", [4, 8])
def test_wide_outputs_give_the_interpreters_bits(monkeypatch, lanes):
    # A Hessian of 21 x 21: 441 columns a row, written a chunk of `lanes` columns at a
    # time, the last chunk short; with 13 points, one whole group and a partial one.
    lanes_without_vector_math(monkeypatch, lanes)
    plain, fast = compiled_pair(sine_chain, np.full(21, 0.5), num_inputs=21)
    points = np.random.default_rng(lanes).normal(size=(13, 21))
    assert_same_bits(fast.hessian(points), plain.hessian(points))
    assert_same_bits(fast.jacobian(points), plain.jacobian(points))
    assert_fast_math_tier(fast, "hessian")


@pytest.mark.parametrize("lanes", [4, 8])
def test_long_bodies_run_in_parts_with_the_interpreters_bits(monkeypatch, tmp_path, lanes):
    # Parts of 7 statements: every group function of these programs is split, and
    # vectors cross from part to part through the work buffer.
    monkeypatch.setattr(scalar_ir, "PART_STATEMENTS", 7)
    monkeypatch.setattr(native_code, "cache_directory", lambda: tmp_path)
    monkeypatch.setattr(native_code, "version_key", lambda: "vector parts of 7 statements")
    lanes_without_vector_math(monkeypatch, lanes)
    program = fa.compile(demo.example_2, example=EXAMPLE_2)._calls.replay._generated.program
    text = scalar_source.module_source(program, "grad", ("batch",), lanes, ())
    (ir,) = vector_ir.module_irs(text, "fastad_test", 1).texts
    assert ir.count("define internal void @fastad_test_batch.group.part") > 2
    rng = np.random.default_rng(lanes)
    function = random_program(40 + lanes)
    plain, fast = compiled_pair(function, rng.uniform(0.5, 1.5, 4), num_inputs=4)
    points = points_with_special_values(rng, 61, 4)
    tangents = rng.normal(size=(61, 4))
    assert_same_bits(fast(points), plain(points))
    for mine, theirs in zip(fast.jvp(points, tangents), plain.jvp(points, tangents), strict=True):
        assert_same_bits(mine, theirs)
    assert_same_bits(fast.jacobian(points, mode="rev"), plain.jacobian(points, mode="rev"))
    plain, fast = compiled_pair(sine_chain, np.full(9, 0.5), num_inputs=9)
    chain_points = rng.normal(size=(21, 9))
    assert_same_bits(fast.hessian(chain_points), plain.hessian(chain_points))
    for mine, theirs in zip(
        fast.value_and_grad(chain_points), plain.value_and_grad(chain_points), strict=True
    ):
        assert_same_bits(mine, theirs)
    assert_fast_math_tier(fast, "hessian")


def test_a_point_gets_the_same_bits_wherever_it_stands_in_a_batch():
    rng = np.random.default_rng(3)
    points = rng.normal(size=(37, 6))
    fast = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen", fast_math=True)
    value, gradient = fast.value_and_grad(points)
    for start in range(0, 9):  # every offset within a group, and batches of 1 to 29 points
        part_value, part_gradient = fast.value_and_grad(points[start:])
        assert_same_bits(part_value, value[start:])
        assert_same_bits(part_gradient, gradient[start:])
    for size in range(1, 10):
        assert_same_bits(fast.value_and_grad(points[:size])[1], gradient[:size])
    split = fast.value_and_grad(np.repeat(points, 200, axis=0), threads=2)[1]
    assert_same_bits(split[::200], gradient)


def ulps(actual, expected):
    """How many doubles lie between ``actual`` and ``expected`` (0: the same)."""

    def order(x):  # the doubles as integers in their order, -0.0 beside +0.0
        bits = np.asarray(x, np.float64).view(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFFFFFFFFFF), bits)

    return np.abs(order(actual) - order(expected))


# Each vector function against libm's, on its domain: glibc documents libmvec's double
# functions as accurate to 4 ulps.
FUNCTIONS = [
    ("exp", fa.exp, (-700.0, 700.0)),
    ("log", fa.log, (1e-300, 1e300)),
    ("sin", fa.sin, (-100.0, 100.0)),
    ("cos", fa.cos, (-100.0, 100.0)),
    ("tanh", fa.tanh, (-20.0, 20.0)),
    ("log1p", fa.log1p, (-0.999, 1e6)),
    ("expm1", fa.expm1, (-50.0, 50.0)),
    ("atan", fa.arctan, (-1e4, 1e4)),
    ("sinh", fa.sinh, (-700.0, 700.0)),
    ("cosh", fa.cosh, (-700.0, 700.0)),
    ("tan", fa.tan, (-1.5, 1.5)),
    ("erf", fa.erf, (-6.0, 6.0)),
]


def lanes_with_vector_math(monkeypatch, lanes):
    """Fast math on ``lanes`` points per vector with libmvec's functions of that width."""
    assert HOST is not None, "this machine has no libmvec"
    library = ctypes.CDLL(ctypes.util.find_library("mvec"))
    functions = tuple(
        name for name in HOST.functions if hasattr(library, vector_ir.vector_symbol(name, lanes))
    )
    monkeypatch.setattr(native_code, "fast_math", lambda: native_code.Vectors(lanes, functions))
    return functions


@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize(("name", "op", "domain"), FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_each_vector_function_is_within_four_ulps_of_libm(monkeypatch, lanes, name, op, domain):
    assert name in lanes_with_vector_math(monkeypatch, lanes)
    rng = np.random.default_rng(len(name))
    low, high = domain
    if low > 0:  # spread over the exponents
        x = np.exp(rng.uniform(np.log(low), np.log(high), 100_000))
    else:
        x = rng.uniform(low, high, 100_000)
    plain, fast = compiled_pair(op, np.array([0.5]))
    expected, actual = plain(x[:, None]), fast(x[:, None])
    assert_fast_math_tier(fast, "values")
    assert ulps(actual, expected).max() <= 4
    assert (np.signbit(actual) == np.signbit(expected)).all()
    assert (actual != expected).any(), f"{name}: libmvec gave libm's bits on every point"


@pytest.mark.parametrize("lanes", WIDTHS)
def test_pow_and_atan2_are_within_four_ulps_of_libm(monkeypatch, lanes):
    assert {"pow", "atan2"} <= set(lanes_with_vector_math(monkeypatch, lanes))
    rng = np.random.default_rng(5)
    points = np.column_stack([rng.uniform(0.01, 10.0, 50_000), rng.uniform(-20.0, 20.0, 50_000)])
    for op in (lambda a, b: a**b, fa.arctan2):
        plain, fast = compiled_pair(op, np.array([1.5, 2.0]))
        actual, expected = fast(points), plain(points)
        assert_fast_math_tier(fast, "values")
        assert ulps(actual, expected).max() <= 4
        assert (actual != expected).any(), "libmvec gave libm's bits on every point"


def test_example_2_agrees_with_libm_to_rounding():
    rng = np.random.default_rng(6)
    points = rng.normal(size=(10_007, 6))
    plain, fast = compiled_pair(demo.example_2, EXAMPLE_2)
    assert_fast_math_tier(fast, "grad")
    for mine, theirs in zip(fast.value_and_grad(points), plain.value_and_grad(points), strict=True):
        theirs = theirs.reshape(theirs.shape[0], -1)
        mine = mine.reshape(theirs.shape)
        for column in range(theirs.shape[1]):  # relative to each column's magnitude
            scale = np.abs(theirs[:, column]).max()
            np.testing.assert_allclose(
                mine[:, column], theirs[:, column], rtol=1e-13, atol=1e-15 * scale
            )


def test_nonfinite_derivatives_are_rechecked_with_the_exact_rules():
    # sqrt's partial at 0 is inf: times a zero adjoint, nan in plain code; the exact
    # rules (strong zeros) give 0. The recheck runs the interpreter: libm's bits.
    function = lambda x, y: fa.sqrt(x) * 0.0 + fa.exp(y)  # noqa: E731
    plain, fast = compiled_pair(function, np.array([1.0, 1.0]))
    points = np.array([[0.0, 0.5], [4.0, 0.25], [0.0, -1.0]] * 5)
    value, gradient = fast.value_and_grad(points)
    expected_value, expected_gradient = plain.value_and_grad(points)
    assert_same_bits(gradient[0::3], expected_gradient[0::3])  # rechecked points: exact
    assert np.isfinite(gradient).all()
    np.testing.assert_allclose(value, expected_value, rtol=1e-15)


@pytest.mark.parametrize("size", [1, 7, 8, 9, 17, 4099])
def test_the_kernel_counts_the_points_it_flags(size):
    # The batch kernel returns how many points it flagged for the exact rules: the real
    # points of a partial group only, not its lanes that repeat the last point.
    function = lambda x, y: fa.sqrt(x) * 0.0 + fa.exp(y)  # noqa: E731
    fast = fa.compile(function, example=np.array([1.0, 1.0]), backend="codegen", fast_math=True)
    points = np.ones((size, 2))
    points[::3, 0] = 0.0  # sqrt's partial inf, times 0: nan in plain code
    points[-1, 0] = 0.0  # the last point, whose copies fill a partial group
    code = fast._calls.replay._generated
    values, derivatives = np.empty((size, 1)), np.empty((size, 2))
    status, recheck = np.empty(0, np.int64), np.zeros(size, np.bool_)
    for threads in (1, 2):
        recheck[:] = False
        flagged = code.run(
            "grad", points, values, values, derivatives, status, recheck, threads, threads > 1
        )
        assert flagged == recheck.sum() == len(range(0, size, 3)) + ((size - 1) % 3 != 0)


def test_guards_raise_the_same_branch_error():
    plain, fast = compiled_pair(branchy, np.array([2.0, 1.0]))
    points = np.array([[3.0, 1.0], [0.5, -1.0], [1.0, 2.0], [4.0, 9.0]] * 3)
    messages = []
    for f in (plain, fast):
        with pytest.raises(fa.BranchError) as batch:
            f.value_and_grad(points)
        messages.append(str(batch.value))
        (_, failed) = f.value_and_grad(points, errors="mask")
        messages.append(str(failed.tolist()))
    assert messages[0] == messages[2] and messages[1] == messages[3]


def test_the_module_text_names_its_lanes_and_functions():
    program = fa.compile(demo.example_2, example=EXAMPLE_2)._calls.replay._generated.program
    text = scalar_source.module_source(program, "grad", ("batch",), 4, ("exp", "log"))
    assert 'LANES = 4\nVECTOR_MATH = ("exp", "log", )' in text
    ir = vector_ir.module_irs(text, "fastad_test", 2).texts
    assert len(ir) == 1
    assert "call <4 x double> @_ZGVdN4v_exp" in ir[0]
    assert "define internal <4 x double> @sigmoid.v4(" in ir[0]
    plain = scalar_source.module_source(program, "grad", ("batch",))
    assert (
        "LANES" not in plain and "<4 x double>" not in vector_ir.module_irs(plain, "m", 1).texts[0]
    )


def test_auto_interprets_with_libm_then_runs_fast_math_in_the_background(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTAD_CACHE_DIR", str(tmp_path))  # nothing cached yet
    monkeypatch.setattr(tiers, "HOT_NODE_POINTS", 1_000)

    def unique(x, y):  # a program no other test compiles
        return fa.exp(x * y) + 0.987654321 * x

    f = fa.compile(unique, example=[0.5, 2.0], fast_math=True)
    exact = fa.compile(unique, example=[0.5, 2.0], backend="interpret")
    points = np.random.default_rng(11).uniform(0.1, 3.0, (2000, 2))  # no cancellation
    first = f.value_and_grad(points)  # the interpreter, with libm; now hot
    for mine, theirs in zip(first, exact.value_and_grad(points), strict=True):
        assert_same_bits(mine, theirs)
    wait_for_codegen(f, "grad")
    assert "fast math" in f.tier("grad").reason
    value, _ = f.value_and_grad(points)
    assert (value != first[0]).any()  # libmvec's exp, a few ulps from libm's
    np.testing.assert_allclose(value, first[0], rtol=1e-15)


def test_fast_math_survives_pickling_and_files(tmp_path):
    fast = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen", fast_math=True)
    path = tmp_path / "fast.npz"
    fast.save(path)
    for copy in (pickle.loads(pickle.dumps(fast)), fa.load(path)):
        assert copy.fast_math
        points = np.random.default_rng(8).normal(size=(50, 6))
        assert_same_bits(copy.value_and_grad(points)[1], fast.value_and_grad(points)[1])
    plain = fa.compile(demo.example_2, example=EXAMPLE_2)
    assert not plain.fast_math


def loaded_without_libmvec(fast, tmp_path, monkeypatch):
    """``fast`` saved, then loaded in this process made a machine without libmvec: the
    warning, naming the line that called ``fa.load`` (``load``, here), is checked."""
    path = tmp_path / "fast.npz"
    fast.save(path)
    without_libmvec(monkeypatch)
    with pytest.warns(
        RuntimeWarning, match="compiled with fast_math=True, but fast math needs"
    ) as w:
        loaded = fa.load(path)
    assert w[0].filename == __file__
    return loaded


def test_a_file_loaded_where_fast_math_is_missing_warns_and_runs_libm(tmp_path, monkeypatch):
    fast = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen", fast_math=True)
    loaded = loaded_without_libmvec(fast, tmp_path, monkeypatch)
    points = np.random.default_rng(9).normal(size=(20, 6))
    plain = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen")
    assert_same_bits(loaded.value_and_grad(points)[1], plain.value_and_grad(points)[1])
    assert "fast math" not in loaded.tier("grad").reason
    with pytest.raises(RuntimeError, match="libmvec"):
        fa.compile(demo.example_2, fast_math=True)


def test_a_file_asking_fast_math_of_the_interpreter_is_refused(tmp_path):
    fast = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen", fast_math=True)
    path = tmp_path / "fast.npz"
    fast.save(path)
    with_metadata(path, backend="interpret")
    with pytest.raises(ValueError, match="fast_math with backend 'interpret'"):
        fa.load(path)


def test_bad_fast_math_requests_are_refused():
    with pytest.raises(ValueError, match='backend="interpret" never runs'):
        fa.compile(demo.example_2, backend="interpret", fast_math=True)
    with pytest.raises(TypeError, match="fast_math must be True or False"):
        fa.compile(demo.example_2, fast_math="yes")
