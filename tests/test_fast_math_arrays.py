"""Fast math for functions of arrays: the loops LLVM vectorises call libmvec.

``fa.compile(fn, example=(X, ...), fast_math=True)`` writes the generated
kernel with :func:`fastad.kernels.vector_math.libmvec`'s math functions:
libm's, with the vector variants LLVM's loop vectoriser may call instead.
Each element is then within libmvec's few units in the last place of the
default code's, whole programs within the rounding that implies, and the
machine code calls the vector functions (checked in code compiled in the
test, not loaded from the cache).
"""

import math
import pickle
import re

import numba
import numpy as np
import pytest
from test_fast_math import (
    FUNCTIONS,
    HOST,
    WIDTHS,
    lanes_with_vector_math,
    loaded_without_libmvec,
    ulps,
    with_metadata,
    without_libmvec,
)

import fastad as fa
from fastad.kernels import array_source, vector_ir, vector_math

SIZE = 20_011  # whole vectors of every width, and a remainder


def every_function(X):
    """Each vector function on its own row of ``X`` (its domain), then pow and atan2."""
    rows = [op(X[i]) for i, (_, op, _) in enumerate(FUNCTIONS)]
    k = len(FUNCTIONS)
    rows += [X[k] ** X[k + 1], fa.arctan2(X[k + 2], X[k + 1])]
    return fa.stack(rows)


def every_function_points(rng, n=SIZE):
    X = np.empty((len(FUNCTIONS) + 3, n))
    for i, (_, _, (low, high)) in enumerate(FUNCTIONS):
        if low > 0:  # spread over the exponents
            X[i] = np.exp(rng.uniform(np.log(low), np.log(high), n))
        else:
            X[i] = rng.uniform(low, high, n)
    k = len(FUNCTIONS)
    X[k] = rng.uniform(0.01, 10.0, n)
    X[k + 1] = rng.uniform(-20.0, 20.0, n)
    X[k + 2] = rng.uniform(-20.0, 20.0, n)
    return X


NAMES = [name for name, _, _ in FUNCTIONS] + ["pow", "atan2"]


def machine_code(f, mode):
    """The assembly of ``f``'s generated ``mode`` kernel (compiled in this process)."""
    kernel = getattr(f._generated.code.module(mode), mode)
    return kernel.inspect_asm(kernel.signatures[0])


def assert_fast_math_tier(f, call):
    tier = f.tier(call)
    assert tier.name == "codegen", tier.reason
    assert "fast math: the loops LLVM vectorises call glibc's libmvec" in tier.reason


@pytest.mark.parametrize("lanes", WIDTHS)
def test_each_function_is_within_four_ulps_of_libm_and_runs_on_vectors(
    monkeypatch, tmp_path, lanes
):
    monkeypatch.setenv("FASTAD_CACHE_DIR", str(tmp_path))  # compiled here: its code readable
    assert set(NAMES) <= set(lanes_with_vector_math(monkeypatch, lanes))
    X = every_function_points(np.random.default_rng(lanes))
    fast = fa.compile(every_function, example=(X,), backend="codegen", fast_math=True)
    plain = fa.compile(every_function, example=(X,), backend="codegen")
    actual, expected = fast((X,)), plain((X,))
    assert_fast_math_tier(fast, "values")
    assert "fast math" not in plain.tier("values").reason
    assert ulps(actual, expected).max() <= 4
    assert (np.signbit(actual) == np.signbit(expected)).all()
    differs = (actual != expected).any(axis=1)
    # libmvec's log at four and eight lanes is libm's to the bit on these points; its
    # call is checked below.
    same = [name for name, found in zip(NAMES, differs, strict=True) if not found]
    assert set(same) <= {"log"}, f"libmvec gave libm's bits on every element: {same}"
    called = set(re.findall(r"_ZGV([bde])N(\d)(v+)_(\w+)", machine_code(fast, "values")))
    for name in NAMES:
        widths = {int(width) for _, width, _, found in called if found == name}
        assert widths and max(widths) <= lanes, f"{name}: vector calls at {widths}"
    assert "_ZGV" not in machine_code(plain, "values")


def logistic(w, b, X, y):
    z = X @ w + b
    return (fa.softplus(z) - y * z).mean() + 0.1 * (fa.tanh(w) * fa.exp(-w)).sum()


def logistic_arguments(rng, N=1003, k=7):
    X = rng.normal(size=(N, k))
    X[::3, 2] = 0.0  # exact zeros, and a whole column of them
    X[:, 4] = 0.0
    w = rng.normal(size=k)
    y = (rng.random(N) < 0.5).astype(np.float64)
    return w, 0.3, X, y


def assert_close(actual, expected):
    """Within 1e-13 of the largest element: the rounding of a few ulps per math call."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(actual, expected, rtol=1e-13, atol=1e-13 * scale)


def flat(result):
    """A call's numbers and arrays, in order (values, gradients, tangents)."""
    if isinstance(result, (tuple, list)):
        return [item for part in result for item in flat(part)]
    return [result]


def test_every_mode_agrees_with_the_interpreter_to_rounding():
    rng = np.random.default_rng(3)
    arguments = logistic_arguments(rng)
    fast = fa.compile(logistic, example=arguments, wrt=(0, 1), backend="codegen", fast_math=True)
    exact = fa.compile(logistic, example=arguments, wrt=(0, 1), backend="interpret")
    directions = [rng.normal(size=7), 0.5]
    calls = {
        "grad": lambda f: f.value_and_grad(arguments),
        "values": lambda f: f(arguments),
        "jvp": lambda f: f.jvp(arguments, directions),
        "hvp": lambda f: f.hvp(arguments, directions),
        "vjp": lambda f: f.vjp(arguments, 2.0),
    }
    for call, run in calls.items():
        for mine, theirs in zip(flat(run(fast)), flat(run(exact)), strict=True):
            assert_close(mine, theirs)
        assert_fast_math_tier(fast, call)
    assert fast.fast_math and not exact.fast_math


def test_nonfinite_gradients_are_rechecked_with_the_exact_rules():
    # log's partial at 0 is inf: times a zero weight, nan in plain code; the exact rules
    # (strong zeros) give 0. The recheck runs the interpreter: libm's bits.
    def function(x, c):
        return (fa.log(x) * c).sum() + fa.exp(x).sum()

    x, c = np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 1.0, 1.0, 1.0])
    fast = fa.compile(function, example=(x + 1.0, c), wrt=0, backend="codegen", fast_math=True)
    exact = fa.compile(function, example=(x + 1.0, c), wrt=0, backend="interpret")
    _, gradient = fast.value_and_grad((x, c))
    _, expected = exact.value_and_grad((x, c))
    assert np.isfinite(gradient).all()
    assert (gradient.view(np.int64) == expected.view(np.int64)).all()


def test_the_module_text_names_the_vector_functions_and_their_stamp():
    arguments = logistic_arguments(np.random.default_rng(4))
    fast = fa.compile(logistic, example=arguments, wrt=(0, 1), backend="codegen", fast_math=True)
    plain = fa.compile(logistic, example=arguments, wrt=(0, 1), backend="codegen")
    text = fast.generated_source("grad")
    assert HOST is not None
    for name in HOST.functions:
        assert f"\n{name} = libmvec({name!r}, {HOST.lanes})\n" in text
    assert f"import libmvec  # vector math {vector_math.stamp()}\n" in text
    assert "libmvec" not in plain.generated_source("grad")
    program = fast._generated.code.program
    narrow, _ = array_source.module_source(program, "grad", 2, ("exp",))
    assert "\nexp = libmvec('exp', 2)\n" in narrow and "libmvec('log1p'" not in narrow


def classifier(W, X, y):
    """A softmax classifier's loss (the softmax family's exponentials) and tanh (libm's)."""
    return fa.cross_entropy(X @ W, y) + fa.tanh(W).sum()


def classifier_arguments(rng, classes=13):
    X = rng.normal(size=(37, 5))
    X[:, 1] = 0.0  # a column of exact zeros
    return rng.normal(size=(5, classes)), X, rng.integers(0, classes, size=37)


def test_the_softmax_familys_exp_runs_on_vectors_in_every_mode(monkeypatch, tmp_path):
    # Only the softmax family's exp (``row_exp``), the one math call those ops make per
    # element, takes libmvec's vectors without fast math; tanh stays libm's.
    monkeypatch.setenv("FASTAD_CACHE_DIR", str(tmp_path))  # compiled here: its code readable
    assert HOST is not None and "exp" in HOST.functions, "this machine has no libmvec exp"
    rng = np.random.default_rng(5)
    arguments = classifier_arguments(rng)
    plain = fa.compile(classifier, example=arguments, wrt=0, backend="codegen")
    exact = fa.compile(classifier, example=arguments, wrt=0, backend="interpret")
    text = plain.generated_source("grad")
    assert f"\nrow_exp = libmvec('exp', {HOST.lanes})  # the softmax family's exp\n" in text
    assert "\ntanh = " not in text and "fast math" not in plain.tier("grad").reason
    direction = rng.normal(size=arguments[0].shape)
    for run in (
        lambda f: f.value_and_grad(arguments),
        lambda f: f.hvp(arguments, direction),
        lambda f: f.jvp(arguments, direction),
    ):
        for mine, theirs in zip(flat(run(plain)), flat(run(exact)), strict=True):
            assert_close(mine, theirs)
    called = set(re.findall(r"_ZGV[bde]N\d(v+)_(\w+)", machine_code(plain, "grad")))
    assert {name for _, name in called} == {"exp"}


def test_without_libmvec_the_softmax_familys_exp_is_libms(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTAD_CACHE_DIR", str(tmp_path))
    without_libmvec(monkeypatch)
    arguments = classifier_arguments(np.random.default_rng(6))
    plain = fa.compile(classifier, example=arguments, wrt=0, backend="codegen")
    exact = fa.compile(classifier, example=arguments, wrt=0, backend="interpret")
    text = plain.generated_source("grad")
    assert "\nrow_exp = exp  # the softmax family's exp\n" in text and "libmvec" not in text
    for mine, theirs in zip(
        flat(plain.value_and_grad(arguments)), flat(exact.value_and_grad(arguments)), strict=True
    ):
        assert_close(mine, theirs)
    assert "_ZGV" not in machine_code(plain, "grad")


def test_the_variants_name_libmvecs_symbols():
    assert vector_math.widths(8) == (2, 4, 8) and vector_math.widths(2) == (2,)
    assert vector_math.variants("exp", 4) == (
        "_ZGV_LLVM_N2v_exp(_ZGVbN2v_exp),_ZGV_LLVM_N4v_exp(_ZGVdN4v_exp)"
    )
    assert vector_math.variants("pow", 2) == "_ZGV_LLVM_N2vv_pow(_ZGVbN2vv_pow)"
    assert vector_ir.vector_symbol("atan2", 8) == "_ZGVeN8vv_atan2"
    assert vector_math.libmvec("exp", 8) is vector_math.libmvec("exp", 8)


def test_fast_math_survives_pickling_and_files(tmp_path):
    arguments = logistic_arguments(np.random.default_rng(5))
    fast = fa.compile(logistic, example=arguments, wrt=(0, 1), backend="codegen", fast_math=True)
    path = tmp_path / "fast.npz"
    fast.save(path)
    expected = fast.value_and_grad(arguments)[1]
    for copy in (pickle.loads(pickle.dumps(fast)), fa.load(path)):
        assert copy.fast_math
        assert_fast_math_tier(copy, "grad")
        for mine, theirs in zip(copy.value_and_grad(arguments)[1], expected, strict=True):
            assert np.asarray(mine).tobytes() == np.asarray(theirs).tobytes()


def test_a_file_loaded_where_fast_math_is_missing_warns_and_runs_libm(tmp_path, monkeypatch):
    arguments = logistic_arguments(np.random.default_rng(6))
    fast = fa.compile(logistic, example=arguments, wrt=(0, 1), backend="codegen", fast_math=True)
    loaded = loaded_without_libmvec(fast, tmp_path, monkeypatch)
    with pytest.warns(RuntimeWarning, match="fast math needs") as w:
        pickle.loads(pickle.dumps(fast))
    assert w[0].filename == __file__
    plain = fa.compile(logistic, example=arguments, wrt=(0, 1), backend="codegen")
    for mine, theirs in zip(
        loaded.value_and_grad(arguments)[1], plain.value_and_grad(arguments)[1], strict=True
    ):
        assert np.asarray(mine).tobytes() == np.asarray(theirs).tobytes()
    assert "fast math" not in loaded.tier("grad").reason
    with pytest.raises(RuntimeError, match="libmvec"):
        fa.compile(logistic, example=arguments, fast_math=True)


def test_a_file_asking_fast_math_of_the_interpreter_is_refused(tmp_path):
    arguments = logistic_arguments(np.random.default_rng(7))
    fast = fa.compile(logistic, example=arguments, wrt=(0, 1), backend="codegen", fast_math=True)
    path = tmp_path / "fast.npz"
    fast.save(path)
    with_metadata(path, backend="interpret")
    with pytest.raises(ValueError, match="fast_math with backend 'interpret'"):
        fa.load(path)


def test_without_the_jit_the_functions_are_maths(monkeypatch):
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    assert vector_math.libmvec.__wrapped__("exp", 8) is math.exp
    assert vector_math.libmvec.__wrapped__("atan2", 4) is math.atan2


def test_bad_fast_math_requests_are_refused():
    example = (np.ones(3),)
    with pytest.raises(ValueError, match='backend="interpret" never runs'):
        fa.compile(lambda x: (x * x).sum(), example=example, backend="interpret", fast_math=True)
    with pytest.raises(TypeError, match="fast_math must be True or False"):
        fa.compile(lambda x: (x * x).sum(), example=example, fast_math=1)
