"""Generated code (backend="codegen") equals the interpreter bit for bit, and its cache."""

import ast
import logging
import os
import pickle
import re
import subprocess
import sys
import textwrap
import threading
import time

import llvmlite.binding as llvm
import numpy as np
import pytest
from op_table import OP_CASES

import fastad as fa
from fastad import demo
from fastad.compiled import module_cache, native_code, replay, tiers
from fastad.kernels import lane_sweeps, native_calls, scalar_ir, vector_ir
from fastad.kernels import scalar_source as generator
from fastad.util import memory
from fastad.util import threads as thread_work
from fastad.util.progress import progress

EXAMPLE_2 = np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0])
SPECIAL = (0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e-310)


def run_script(script, environment, timeout):
    """``script`` in a new Python process; its result, once it exited with status 0."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def assert_same_bits(actual, expected):
    """Equal bit for bit (signed zeros included), every nan counted as one value.

    The nan rule: both tiers give nan at the same places, but which of two
    nan payloads an addition keeps depends on its operand order, which LLVM
    may canonicalise differently in two compilations.
    """
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape
    same = actual.view(np.uint64) == expected.view(np.uint64)
    same |= np.isnan(actual) & np.isnan(expected)
    assert same.all(), f"{(~same).sum()} elements differ, first at {np.argwhere(~same)[0]}"


def random_program(seed, n_inputs=4, n_outputs=3):
    """A function using every op of the table at least once, on a random DAG with fan-out.

    Operands are earlier nodes, chosen near the end so chains grow deep, or
    constants (0.0, -0.0, 2.0, 0.5) as second operands.
    """
    rng = np.random.default_rng(seed)
    cases = [OP_CASES[i] for i in rng.permutation(len(OP_CASES))]
    cases += [OP_CASES[i] for i in rng.integers(0, len(OP_CASES), 25)]
    plan = []
    for step, case in enumerate(cases):
        available = n_inputs + step
        operands = []
        for slot in range(len(case.domain)):
            if slot == 1 and rng.random() < 0.15:
                operands.append(("const", float(rng.choice([0.0, -0.0, 2.0, 0.5]))))
            else:
                low = max(0, available - 8) if rng.random() < 0.8 else 0
                operands.append(("node", int(rng.integers(low, available))))
        plan.append((case.apply, operands))
    outputs = [int(i) for i in rng.choice(n_inputs + len(plan), n_outputs, replace=False)]
    outputs[0] = n_inputs + len(plan) - 1

    def function(*xs):
        nodes = list(xs)
        for apply, operands in plan:
            values = [nodes[i] if kind == "node" else i for kind, i in operands]
            nodes.append(apply(*values))
        return [nodes[i] for i in outputs]

    return function


def points_with_special_values(rng, n_points, k):
    points = rng.uniform(-2.0, 2.0, (n_points, k))
    rows = rng.integers(0, n_points, n_points // 4)
    columns = rng.integers(0, k, rows.size)
    points[rows, columns] = rng.choice(SPECIAL, rows.size)
    return points


def both_tiers(function, example, **options):
    interpreted = fa.compile(function, example=example, backend="interpret", **options)
    generated = fa.compile(function, example=example, backend="codegen", **options)
    assert len(interpreted.tape) == len(generated.tape)
    return interpreted, generated


@pytest.fixture(params=["a point at a time", "vectors of points"])
def batch_code(request, monkeypatch):
    """Both ways a generated batch kernel runs outside fast math: a point at a time, or
    on the host's vectors of points with libm on each lane (every kernel, whatever its
    share of libm calls)."""
    if request.param == "a point at a time":
        monkeypatch.setattr(native_code, "default_vectors", lambda: None)
    elif native_code.default_vectors() is None:
        pytest.skip(f"{llvm.get_process_triple()} has no vectors of doubles for batches")
    else:
        monkeypatch.setattr(module_cache, "VECTOR_CALLS_PER_ROW", float("inf"))
    return request.param


def assert_batch_code(function, call, batch_code):
    reason = function.tier(call).reason
    assert ("on vectors of" in reason) == (batch_code == "vectors of points"), reason


@pytest.mark.parametrize("seed", [0, 1])
def test_random_programs_equal_the_interpreter_in_every_mode(seed, batch_code):
    check_every_mode(seed, batch_code)


def check_every_mode(seed, batch_code=None):
    rng = np.random.default_rng(100 + seed)
    function = random_program(seed)
    example = rng.uniform(0.5, 1.5, 4)
    interpreted, generated = both_tiers(function, example, num_inputs=4)
    assert generated.tier("vjp").name == "codegen"
    points = points_with_special_values(rng, 300, 4)
    cotangents = rng.normal(size=(300, 3))
    cotangents[::5, 1] = 0.0  # zero seeds are strong zeros
    tangents = rng.normal(size=(300, 4))
    tangents[::3, 2] = 0.0
    assert_same_bits(generated(points), interpreted(points))
    for mine, theirs in zip(
        generated.vjp(points, cotangents), interpreted.vjp(points, cotangents), strict=True
    ):
        assert_same_bits(mine, theirs)
    for mine, theirs in zip(
        generated.jvp(points, tangents), interpreted.jvp(points, tangents), strict=True
    ):
        assert_same_bits(mine, theirs)
    for mode in ("fwd", "rev"):
        assert_same_bits(
            generated.jacobian(points, mode=mode), interpreted.jacobian(points, mode=mode)
        )
    assert_same_bits(generated(points[7]), interpreted(points[7]))
    if batch_code is not None:
        for call in ("values", "vjp", "jvp", "jacobian_fwd", "jacobian_rev"):
            assert_batch_code(generated, call, batch_code)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_scalar_programs_equal_the_interpreter(seed, batch_code):
    check_scalar_modes(seed, batch_code)


def check_scalar_modes(seed, batch_code=None):
    rng = np.random.default_rng(200 + seed)
    function = random_program(seed + 10, n_outputs=1)
    interpreted, generated = both_tiers(
        lambda *xs: function(*xs)[0], rng.uniform(0.5, 1.5, 4), num_inputs=4
    )
    points = points_with_special_values(rng, 300, 4)
    for mine, theirs in zip(
        generated.value_and_grad(points), interpreted.value_and_grad(points), strict=True
    ):
        assert_same_bits(mine, theirs)
    directions = rng.normal(size=(300, 4))
    directions[::3, 1] = 0.0  # zero directions are strong zeros
    assert generated.tier("hvp").name == "codegen"
    assert_same_bits(generated.hvp(points, directions), interpreted.hvp(points, directions))
    assert_same_bits(generated.hessian(points), interpreted.hessian(points))
    assert_same_bits(generated.hessian(points[:1]), interpreted.hessian(points[0])[None])
    batch = interpreted.hvp(points, directions)
    for i in range(0, 300, 7):  # the one-point kernels of both tiers
        assert_same_bits(interpreted.hvp(points[i], directions[i]), batch[i])
        assert_same_bits(generated.hvp(points[i], directions[i]), batch[i])
    for point in points[:40]:  # the one-point kernels
        value, gradient = generated.value_and_grad(point)
        expected_value, expected_gradient = interpreted.value_and_grad(point)
        assert_same_bits(value, expected_value)
        assert_same_bits(gradient, expected_gradient)
        assert_same_bits(generated(point), interpreted(point))
    if batch_code is not None:
        for call in ("grad", "hvp", "hessian"):
            assert_batch_code(generated, call, batch_code)


def test_batches_run_on_vectors_where_libm_calls_are_few():
    # Arithmetic and one exp (example 2): vectors of points, libm on each lane. A chain
    # of sines and tanh calls libm in most rows: a point at a time, faster there.
    host = native_code.default_vectors()
    arithmetic = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen")
    math = fa.compile(
        lambda a, b: fa.sin(fa.tanh(fa.sin(a * b)) + fa.tanh(b)),
        example=np.array([0.5, 0.25]),
        backend="codegen",
    )
    points = np.random.default_rng(5).uniform(-1, 1, (50, 6))
    arithmetic.value_and_grad(points)
    math.value_and_grad(points[:, :2])
    program = math._calls.replay._generated.program
    text = generator.module_source(program, "grad", ("batch",))
    assert generator.libm_calls(text) > module_cache.VECTOR_CALLS_PER_ROW * (2 * len(math.tape))
    assert "on vectors" not in math.tier("grad").reason
    if host is not None:
        want = f"batches on vectors of {host.lanes} points (libm on each lane)"
        assert want in arithmetic.tier("grad").reason
    else:
        assert "on vectors" not in arithmetic.tier("grad").reason


def test_vector_code_that_fails_to_build_leaves_the_scalar_kernel(monkeypatch, tmp_path):
    # Outside fast math, a batch kernel whose vector code does not build runs a point at
    # a time (the same bits), saying so, not on the interpreter.
    if native_code.default_vectors() is None:
        pytest.skip(f"{llvm.get_process_triple()} has no vectors of doubles for batches")
    monkeypatch.setattr(native_code, "cache_directory", lambda: tmp_path)
    monkeypatch.setattr(native_code, "version_key", lambda: "vector code that fails")

    def unsupported(*args):
        raise NotImplementedError("a construct the vector lowering lacks")

    monkeypatch.setattr(vector_ir, "_batch_kernel", unsupported)
    interpreted, generated = both_tiers(demo.example_2, EXAMPLE_2)
    points = np.random.default_rng(8).uniform(-1, 1, (37, 6))
    with pytest.warns(RuntimeWarning, match="vector code of .* could not be built"):
        value, gradient = generated.value_and_grad(points)
    want_value, want_gradient = interpreted.value_and_grad(points)
    assert_same_bits(value, want_value)
    assert_same_bits(gradient, want_gradient)
    tier = generated.tier("grad")
    assert tier.name == "codegen", tier.reason
    assert "a point at a time: vector code not built (NotImplementedError" in tier.reason


def test_libm_calls_are_counted_from_code_not_comments():
    # atan2's partials are arithmetic (their helpers' comments name atan2): a gradient of
    # ten atan2 nodes calls libm ten times a point, and runs on vectors.
    def chain(a, b, c):
        x = a
        for _ in range(10):
            x = fa.arctan2(x, b) * c + x * b
        return x

    f = fa.compile(chain, num_inputs=3, example=np.array([0.3, 0.7, 0.2]), backend="codegen")
    f.value_and_grad(np.random.default_rng(6).uniform(0.1, 1.0, (20, 3)))
    program = f._calls.replay._generated.program
    assert generator.libm_calls(generator.module_source(program, "grad", ("batch",))) == 10
    if native_code.default_vectors() is not None:
        assert "on vectors of" in f.tier("grad").reason


@pytest.mark.parametrize("mode", generator.MODES)
def test_statements_parsed_by_shape_lower_as_the_parsed_text(monkeypatch, mode):
    # The kernels' statements are parsed once per shape and bound to their names; the
    # IR must be what parsing the whole text gives (random programs use every op,
    # guards, constants and helpers), parts included.
    function = random_program(3, n_outputs=1 if mode in generator.SECOND_MODES else 3)
    outputs = 1 if mode in generator.SECOND_MODES else 3
    compiled = fa.compile(
        (lambda *xs: function(*xs)[0]) if outputs == 1 else function,
        example=np.linspace(0.6, 1.4, 4),
        num_inputs=4,
        backend="interpret",
    )
    source = generator.module_source(compiled._calls.replay._generated.program, mode)
    monkeypatch.setattr(scalar_ir, "PART_STATEMENTS", 9)
    by_shape = scalar_ir.module_ir(source, "fastad_test")

    def parse_whole(text, shapes):
        (definition,) = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
        return definition

    monkeypatch.setattr(scalar_ir, "_parse_kernel", parse_whole)
    assert by_shape == scalar_ir.module_ir(source, "fastad_test")


def test_code_that_fails_to_build_leaves_the_interpreter_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(native_code, "cache_directory", lambda: tmp_path)
    monkeypatch.setattr(native_code, "version_key", lambda: "a key of its own")
    monkeypatch.setattr(  # the scalar kernels' lowering and the vector kernels' (batch=)
        scalar_ir,
        "module_irs",
        lambda source, name, modules, batch=None: scalar_ir.Modules(["define {"], 1),
    )
    interpreted, generated = both_tiers(demo.example_2, EXAMPLE_2)
    points = np.random.default_rng(4).uniform(-1, 1, (20, 6))
    with pytest.warns(RuntimeWarning, match="could not be built"):
        value, gradient = generated.value_and_grad(points)
    assert_same_bits(value, interpreted.value_and_grad(points)[0])
    assert_same_bits(gradient, interpreted.value_and_grad(points)[1])
    tier = generated.tier("grad")
    assert tier.name == "interpret" and "GenerationError" in tier.reason
    assert "LLVM IR parsing error" in tier.reason
    with pytest.warns(RuntimeWarning, match="could not be built"):  # the one-point path too
        assert_same_bits(generated.hvp(points[0], points[1]), interpreted.hvp(points[0], points[1]))
    assert not list(tmp_path.rglob("*.o"))  # nothing cached


def test_long_kernels_run_in_parts_with_the_same_bits(monkeypatch, tmp_path):
    # Parts of 7 statements: every kernel of these programs is long enough to be split,
    # and values cross from part to part through the work buffer.
    monkeypatch.setattr(scalar_ir, "PART_STATEMENTS", 7)
    monkeypatch.setattr(native_code, "cache_directory", lambda: tmp_path)
    monkeypatch.setattr(native_code, "version_key", lambda: "parts of 7 statements")
    monkeypatch.setattr(native_code, "default_vectors", lambda: None)  # scalar kernels
    program = fa.compile(demo.example_2, example=EXAMPLE_2)._calls.replay._generated.program
    text = scalar_ir.module_ir(generator.module_source(program, "grad"), "fastad_test")
    assert text.count("define internal void @fastad_test_batch.part") > 2
    assert "@fastad_test_batch_work = constant i64 0" not in text
    # Compiled as several modules (the parts shared among them, the first calling
    # across), loaded into one engine: the same bits in every mode.
    modules = scalar_ir.module_irs(generator.module_source(program, "grad"), "fastad_test", 3).texts
    part = re.compile(r"^define void @fastad_test_(batch|point)\.part\d+\(", re.MULTILINE)
    assert len(modules) == 4 and not part.search(modules[0])
    assert all(part.search(module) for module in modules[1:])
    check_every_mode(1)
    check_scalar_modes(0)


@pytest.mark.parametrize(
    "function",
    [lambda x: x**3.0, lambda x: x**0.5, lambda x: x**-1.0, lambda x: 2.0**x],
    ids=["x**3", "x**0.5", "x**-1", "2**x"],
)
def test_constants_reach_the_kernels_at_run_time(function):
    # Regression: constants written into the code as literals let LLVM turn
    # pow(x, 2.0) into x * x and pow(x, 0.5) into sqrt, a last-bit change.
    interpreted, generated = both_tiers(function, np.array([2.0]))
    points = np.geomspace(1e-3, 1e3, 4000).reshape(-1, 1)
    for mine, theirs in zip(
        generated.value_and_grad(points), interpreted.value_and_grad(points), strict=True
    ):
        assert_same_bits(mine, theirs)
    for point in points[::97]:
        for mine, theirs in zip(
            generated.value_and_grad(point), interpreted.value_and_grad(point), strict=True
        ):
            assert_same_bits(mine, theirs)


def test_names_never_reach_the_generated_code(tmp_path):
    # Regression: a function's name (which a loaded file sets) went into the
    # generated module's docstrings unescaped, so a crafted name ran code.
    def function(x):
        return fa.exp(x) * 3.0

    function.__name__ = 'f"""; raise SystemExit("injected"); """'
    f = fa.compile(function, example=[0.5], backend="codegen")
    f.save(tmp_path / "f.npz")
    loaded = fa.load(tmp_path / "f.npz")
    assert loaded.backend == "codegen"
    assert_same_bits(
        loaded.grad(np.array([[0.25], [1.0]])), [[np.exp(0.25) * 3.0], [np.exp(1.0) * 3.0]]
    )


def test_threads_compiling_one_new_program_at_once():
    # Regression: a module was visible in sys.modules before it had run, so a
    # second thread could take a half-built module.
    def fresh(x, y):
        return fa.sin(x * y) + 0.7071067811865476 * y

    point = np.array([0.3, 0.4])
    expected = fa.compile(fresh, example=point, backend="interpret").value_and_grad(point)
    functions = [fa.compile(fresh, example=point, backend="codegen") for _ in range(6)]
    results, errors = [None] * 6, []

    def call(i):
        try:
            results[i] = functions[i].value_and_grad(point)
        except Exception as error:  # noqa: BLE001  (collected for the assertion)
            errors.append(error)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for value, gradient in results:
        assert_same_bits(value, expected[0])
        assert_same_bits(gradient, expected[1])


WORKQUEUE_RUN = textwrap.dedent(
    """
    import time
    import numpy as np, fastad as fa
    from fastad.compiled import replay, tiers
    replay._interpreter_warm = lambda: True  # auto interprets first, as on a warm machine
    tiers.HOT_NODE_POINTS = 1
    f = fa.compile(lambda a, b: fa.tanh(a * b) * 1.25 + b, example=[0.5, 0.5])
    points = np.random.default_rng(0).uniform(-1, 1, (400_000, 2))
    for _ in range(30):
        f.value_and_grad(points, threads=2)
    deadline = time.monotonic() + 120
    while f.tier("grad").name != "codegen" and time.monotonic() < deadline:
        time.sleep(0.05)
    print("survived;", f.tier("grad").reason)
    """
)


def test_background_compile_beside_parallel_calls_under_workqueue(tmp_path):
    # Regression: the background compile called the threaded kernel to make
    # Numba compile it; beside the user's own parallel call, Numba's
    # workqueue layer (no OpenMP or TBB) aborted the process.
    environment = {
        **os.environ,
        "FASTAD_CACHE_DIR": str(tmp_path),
        "NUMBA_THREADING_LAYER": "workqueue",
        "NUMBA_NUM_THREADS": "2",
    }
    result = run_script(WORKQUEUE_RUN, environment, timeout=600)
    assert "survived" in result.stdout
    assert "compiled in the background" in result.stdout  # the build beside the calls ran


def test_threads_give_the_same_bits():
    rng = np.random.default_rng(3)
    interpreted, generated = both_tiers(demo.example_2, EXAMPLE_2)
    points = points_with_special_values(rng, 9000, 6)  # above the parallel threshold
    expected = interpreted.value_and_grad(points, threads=1)
    for threads in (1, 2):
        for mine, theirs in zip(
            generated.value_and_grad(points, threads=threads), expected, strict=True
        ):
            assert_same_bits(mine, theirs)


def test_example_2_matches_the_article():
    f = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen")
    value, gradient = f.value_and_grad(EXAMPLE_2)
    np.testing.assert_allclose(value, 0.14976, atol=5e-5)
    np.testing.assert_allclose(
        gradient,
        [-0.22032911, -0.09180379, -0.14688607, 0.05508228, -0.18360759, 0.77397165],
        rtol=1e-7,
    )


def branchy(x, y):
    if x > y:
        return fa.where(x > 0.0, fa.log(x), x * y)
    return x - y


def test_guards_raise_the_same_branch_error():
    interpreted, generated = both_tiers(branchy, np.array([2.0, 1.0]))
    points = np.array([[3.0, 1.0], [0.5, -1.0], [1.0, 2.0], [4.0, 9.0]])
    messages = []
    for f in (interpreted, generated):
        with pytest.raises(fa.BranchError) as batch:
            f.value_and_grad(points)
        with pytest.raises(fa.BranchError) as one:
            f.value_and_grad(points[2])
        with pytest.raises(fa.BranchError) as values:
            f(points[2])
        messages.append((str(batch.value), str(one.value), str(values.value)))
    assert messages[0] == messages[1]
    assert "point 2" in messages[0][0] and "2 of 4 points differ" in messages[0][0]
    good = points[:2]
    for mine, theirs in zip(
        generated.value_and_grad(good), interpreted.value_and_grad(good), strict=True
    ):
        assert_same_bits(mine, theirs)


def test_where_keeps_the_untaken_side_out():
    f = fa.compile(lambda x: fa.where(x > 0.0, fa.sqrt(x), 0.0), example=[1.0], backend="codegen")
    value, gradient = f.value_and_grad(np.array([[-1.0], [0.0], [4.0]]))
    assert_same_bits(value, [0.0, 0.0, 2.0])
    assert_same_bits(gradient, [[0.0], [0.0], [0.25]])


# -- the Jacobian by the cheaper mode ---------------------------------------------------
def wide(a, b):  # 2 inputs, 3 outputs: forward mode by default
    return [a * b, fa.sin(a) + b, fa.exp(b) / (1.0 + a * a)]


def test_jacobian_modes_agree_with_central_differences():
    f = fa.compile(wide, example=[0.3, -0.2])
    rng = np.random.default_rng(5)
    points = rng.uniform(-1, 1, (20, 2))
    forward, reverse = f.jacobian(points, mode="fwd"), f.jacobian(points, mode="rev")
    np.testing.assert_allclose(forward, reverse, rtol=1e-14, atol=1e-15)
    h = 1e-6
    for j in range(2):
        step = np.zeros(2)
        step[j] = h
        difference = (f(points + step) - f(points - step)) / (2 * h)
        np.testing.assert_allclose(forward[:, :, j], difference, rtol=1e-7, atol=1e-8)
    np.testing.assert_array_equal(f.jacobian(points), forward)
    assert f.jacobian(points[0]).shape == (3, 2)


def test_scalar_jacobian_keeps_the_gradient_shape():
    f = fa.compile(demo.example_2, example=EXAMPLE_2)
    points = np.tile(EXAMPLE_2, (3, 1))
    for mode in (None, "fwd", "rev"):
        np.testing.assert_allclose(f.jacobian(points, mode=mode), f.grad(points), rtol=1e-14)


def test_jacobian_refuses_a_result_that_cannot_fit(monkeypatch):
    f = fa.compile(wide, example=[0.3, -0.2])
    monkeypatch.setattr(memory, "available_memory", lambda: 10_000)
    monkeypatch.setattr(memory, "SMALL_BYTES", 0)  # check even this small a result
    with pytest.raises(
        MemoryError,
        match=r"1,000 points \(3 outputs x 2 inputs each, with the values\) needs 70\.3 KiB; "
        r"9\.8 KiB",
    ):
        f.jacobian(np.zeros((1000, 2)))
    with pytest.raises(ValueError, match="mode must be"):
        f.jacobian(np.zeros(2), mode="forward")


# -- choosing the tier -----------------------------------------------------------------
def wait_for_codegen(f, call, timeout=300.0):
    deadline = time.monotonic() + timeout
    while f.tier(call).name != "codegen":
        assert "failed" not in f.tier(call).reason
        assert time.monotonic() < deadline, f.tier(call).reason
        time.sleep(0.05)


def test_auto_interprets_first_then_compiles_in_the_background(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTAD_CACHE_DIR", str(tmp_path))  # nothing cached yet

    def unique(x, y):  # a program no other test compiles, so nothing is loaded yet
        return fa.tanh(x * y) + 0.123456789 * x

    f = fa.compile(unique, example=[0.5, 2.0])
    assert f.backend == "auto"
    points = np.tile([0.5, 2.0], (2000, 1))
    expected = fa.compile(unique, example=[0.5, 2.0], backend="interpret")
    expected = expected.value_and_grad(points)
    tier = f.tier("grad")
    assert tier.name == "interpret" and "interpreted until" in tier.reason
    monkeypatch.setattr(tiers, "HOT_NODE_POINTS", 20_000)
    f.value_and_grad(points)  # 2,000 points of a 6-node program: still counting
    assert f"{len(f.tape) * 2000:,} so far" in f.tier("grad").reason
    value, gradient = f.value_and_grad(points)  # hot: the background compile starts
    assert_same_bits(value, expected[0])
    wait_for_codegen(f, "grad")
    assert "compiled in the background" in f.tier("grad").reason
    for mine, theirs in zip(f.value_and_grad(points), expected, strict=True):
        assert_same_bits(mine, theirs)
    # A new function of the same program finds it in the cache: generated at once.
    again = fa.compile(unique, example=[0.5, 2.0])
    assert "is in the cache" in again.tier("grad").reason  # a question starts nothing
    again.value_and_grad(points)  # starts the load, in the background
    wait_for_codegen(again, "grad")
    assert "loaded from the cache" in again.tier("grad").reason
    assert again.tier("values").name == "interpret"  # another kind of call


def test_auto_starts_on_generated_code_while_the_interpreter_is_cold(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTAD_CACHE_DIR", str(tmp_path))  # nothing cached yet

    def unique(x, y):  # a program no other test compiles
        return fa.sin(x * y) - 0.987654321 * y

    points = np.random.default_rng(5).normal(size=(5000, 2))
    reference = fa.compile(unique, example=[0.5, 2.0], backend="interpret")
    expected = reference.value_and_grad(points, threads=2)
    expected_one = reference.value_and_grad(points[7])
    monkeypatch.setattr(replay, "_interpreter_warm", lambda: False)

    def interpreter(*args):
        raise AssertionError("the interpreter ran")

    monkeypatch.setattr(lane_sweeps, "sweep_points", interpreter)
    monkeypatch.setattr(lane_sweeps, "sweep_point", interpreter)
    f = fa.compile(unique, example=[0.5, 2.0])
    tier = f.tier("grad")
    assert tier.name == "codegen"
    assert "interpreter kernels were not compiled on this machine then" in tier.reason
    for threads in (1, 2):
        for mine, theirs in zip(f.value_and_grad(points, threads=threads), expected, strict=True):
            assert_same_bits(mine, theirs)
    for mine, theirs in zip(f.value_and_grad(points[7]), expected_one, strict=True):
        assert_same_bits(mine, theirs)
    again = fa.compile(unique, example=[0.5, 2.0])  # in the cache now: loaded at once,
    assert "loaded from the cache" in again.tier("grad").reason  # not interpreted meanwhile
    for mine, theirs in zip(again.value_and_grad(points), expected, strict=True):
        assert_same_bits(mine, theirs)
    monkeypatch.setattr(module_cache, "BUDGET_ROWS", 3)  # the budget still comes first
    large = fa.compile(unique, example=[0.5, 2.0])
    assert large.tier("grad").name == "interpret"
    assert "above the budget of 3 rows" in large.tier("grad").reason


def test_the_threaded_interpreter_gives_the_serial_bits_and_raises_a_workers_error(
    monkeypatch,
):
    # Through the replay itself: the front end caps threads at Numba's thread count,
    # and the split must be right for any count (uneven ranges included).
    f = fa.compile(demo.example_2, example=EXAMPLE_2, backend="interpret")
    points = np.asarray(EXAMPLE_2) + np.random.default_rng(6).normal(size=(9001, 6))
    interpreter = f._calls.replay
    for mode in (replay.GRAD, replay.JACOBIAN_FWD, replay.HESSIAN):
        serial = interpreter.run(points, mode, None, 1)
        for threads in (2, 3, 8):
            for mine, theirs in zip(
                interpreter.run(points, mode, None, threads), serial, strict=True
            ):
                assert_same_bits(mine, theirs)
    sweep = lane_sweeps.sweep_points
    caller = threading.get_ident()

    def failing_in_a_worker(*args):
        if threading.get_ident() != caller:
            raise MemoryError("a worker's work space")
        return sweep(*args)

    monkeypatch.setattr(lane_sweeps, "sweep_points", failing_in_a_worker)
    with pytest.raises(MemoryError, match="a worker's work space"):
        interpreter.run(points, replay.GRAD, None, 2)


def test_auto_interprets_above_the_budget(monkeypatch):
    monkeypatch.setattr(module_cache, "BUDGET_ROWS", 10)
    large = fa.compile(demo.example_2, example=EXAMPLE_2)
    tier = large.tier("grad")
    assert tier.name == "interpret"
    assert "above the budget of 10 rows" in tier.reason and 'backend="codegen"' in tier.reason
    forced = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen")
    assert forced.tier("grad").name == "codegen"
    assert fa.compile(demo.example_2, backend="interpret", example=EXAMPLE_2).tier().name == (
        "interpret"
    )


def test_backend_errors():
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'interpret', 'codegen'"):
        fa.compile(demo.example_2, backend="jit")
    # a function of arrays gets generated code too (tests/test_blockcode.py)
    assert (
        fa.compile(lambda x: (x * x).sum(), example=(np.ones(3),), backend="codegen")
        .tier("grad")
        .name
        == "codegen"
    )
    f = fa.compile(demo.example_2)
    with pytest.raises(ValueError, match="not been traced"):
        f.tier()
    f(EXAMPLE_2)
    with pytest.raises(ValueError, match="call must be one of"):
        f.tier("laplacian")


def test_backend_survives_pickling_and_files(tmp_path):
    f = fa.compile(demo.example_2, example=EXAMPLE_2, backend="interpret")
    assert pickle.loads(pickle.dumps(f)).backend == "interpret"
    f.save(tmp_path / "f.npz")
    loaded = fa.load(tmp_path / "f.npz")
    assert loaded.backend == "interpret"
    assert loaded.value_and_grad(EXAMPLE_2)[0] == f.value_and_grad(EXAMPLE_2)[0]


# -- progress --------------------------------------------------------------------------
def test_progress_speaks_only_for_slow_steps(caplog):
    caplog.set_level(logging.INFO, logger="fastad")
    with progress("a quick step", delay=0.5):
        pass
    assert caplog.messages == []
    with progress("a slow step", lambda: "3 of 7 parts", delay=0.05, interval=10.0):
        time.sleep(0.3)
    assert caplog.messages[0].startswith("a slow step, 3 of 7 parts, 0 s so far")
    assert caplog.messages[-1].startswith("a slow step: done in")
    assert {record.name for record in caplog.records} == {"fastad"}


PROGRESS_RUN = textwrap.dedent(
    """
    import logging, sys, time
    import fastad.util.progress as p
    if sys.argv[1] == "quiet":
        logging.getLogger("fastad").setLevel(logging.WARNING)
    elif sys.argv[1] == "configured":
        logging.basicConfig(level=logging.INFO, format="%(name)s | %(message)s")
    p.DELAY_SECONDS = 0.05  # read at each call
    with p.progress("a slow step"):
        time.sleep(0.3)
    """
)


@pytest.mark.parametrize("logging_set_up", ["not", "quiet", "configured"])
def test_progress_goes_to_stderr_until_logging_is_set_up(logging_set_up):
    # Nothing set up: stderr, as "fastad: ..." lines. The fastad logger's level
    # silences it; a program's own logging set-up receives the records.
    result = subprocess.run(
        [sys.executable, "-c", PROGRESS_RUN, logging_set_up],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    if logging_set_up == "not":
        assert lines[0].startswith("fastad: a slow step, 0 s so far"), lines
        assert lines[-1].startswith("fastad: a slow step: done in"), lines
    elif logging_set_up == "quiet":
        assert lines == []
    else:
        assert lines[0].startswith("fastad | a slow step, 0 s so far"), lines
        assert len(lines) == 2


# -- the cache on disk -----------------------------------------------------------------
CACHED_RUN = textwrap.dedent(
    """
    import numpy as np, fastad as fa
    from fastad import demo
    f = fa.compile(demo.example_2, example=np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0]),
                   backend="codegen")
    points = np.linspace(-1.0, 1.0, 60).reshape(10, 6)
    value, gradient = f.value_and_grad(points)
    print(repr(value.sum()), repr(gradient.sum()))
    """
)


def cached_run(cache, debug=False, compile_allowed=True):
    """CACHED_RUN in a new process; without ``compile_allowed`` compiling generated code
    raises there, so the run passes only by loading it from the cache."""
    environment = {**os.environ, "FASTAD_CACHE_DIR": str(cache)}
    environment["NUMBA_DEBUG_CACHE"] = "1" if debug else "0"
    refuse = (
        ""
        if compile_allowed
        else "from fastad.compiled import native_code\n"
        "def refuse(*args):\n"
        "    raise AssertionError('compiled, not loaded')\n"
        "native_code.compile_object = refuse\n"
    )
    return subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", refuse + CACHED_RUN],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_new_process_loads_generated_code_from_the_cache(tmp_path):
    first = cached_run(tmp_path)
    assert first.returncode == 0, first.stderr
    objects = list((tmp_path / "native").glob("fastad_*.o"))
    assert len(objects) == 1  # grad mode only
    written = objects[0].stat().st_mtime_ns
    again = cached_run(tmp_path, debug=True, compile_allowed=False)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == first.stdout.splitlines()[-1]
    assert objects[0].stat().st_mtime_ns == written
    # fastad's calls of generated code are Numba kernels, cached once per machine.
    loaded = [line for line in again.stdout.splitlines() if "data loaded" in line]
    saved = [line for line in again.stdout.splitlines() if "data saved" in line]
    assert any("run_batch" in line for line in loaded), again.stdout
    assert not saved, again.stdout


def test_a_corrupt_cache_is_regenerated_not_trusted(tmp_path):
    first = cached_run(tmp_path)
    assert first.returncode == 0, first.stderr
    (entry,) = (tmp_path / "native").glob("fastad_*.o")
    original = entry.read_bytes()
    header_size = len(b"\n".join(original.split(b"\n", 3)[:3])) + 1
    damaged = bytearray(original)
    damaged[header_size + 100] ^= 0xFF  # one byte of machine code
    for bad in (original[: len(original) // 2], bytes(damaged), b"x" + original[1:]):
        entry.write_bytes(bad)
        refused = cached_run(tmp_path, compile_allowed=False)
        assert refused.returncode != 0 and "compiled, not loaded" in refused.stderr
        again = cached_run(tmp_path)
        assert again.returncode == 0, again.stderr
        assert again.stdout == first.stdout
        assert entry.read_bytes() == original
    # Numba's own files: an unreadable index is a miss with a warning, never a crash.
    indexes = list((tmp_path / "numba").rglob("native_calls*.nbi"))
    assert indexes
    for index in indexes:
        index.write_bytes(b"not a pickle")
    environment = {**os.environ, "FASTAD_CACHE_DIR": str(tmp_path)}
    third = subprocess.run(
        [sys.executable, "-c", CACHED_RUN],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert third.returncode == 0, third.stderr
    assert third.stdout == first.stdout
    assert "discarded an unreadable compiled-kernel cache entry" in third.stderr


def test_a_cache_entry_names_the_llvm_and_cpu_it_was_made_for(tmp_path, monkeypatch):
    key = native_code.version_key()
    assert "llvmlite" in key and "llvm" in key and llvm.get_host_cpu_name() in key
    monkeypatch.setattr(native_code, "cache_directory", lambda: tmp_path)
    native_code.write_cached("fastad_one", b"code")
    assert native_code.read_cached("fastad_one") == b"code"
    (tmp_path / "native" / "fastad_one.o").rename(tmp_path / "native" / "fastad_two.o")
    assert native_code.read_cached("fastad_two") is None  # made under another key


def test_module_key_names_every_version():
    source = "x = 1\n"
    assert module_cache.module_key(source) != module_cache.module_key(source + "\n")
    assert len(module_cache.module_key(source)) == 32
    assert "numba" in module_cache._version_key() and "python" in module_cache._version_key()


FORK_RUN = textwrap.dedent(
    """
    import os, sys
    import numpy as np, fastad as fa
    from fastad.compiled import replay, tiers
    replay._interpreter_warm = lambda: True  # auto interprets first, as on a warm machine
    f = fa.compile(lambda a, b: fa.sin(a * b) * 1.5 + a, example=[0.5, 0.5])
    f.value_and_grad(np.ones((100, 2)))  # not hot yet: the interpreter's kernels are ready
    tiers.HOT_NODE_POINTS = 10
    f.value_and_grad(np.ones((100, 2)))  # hot: a background build starts
    print(f.tier("grad").reason)
    pid = os.fork()
    if pid == 0:  # the child compiles something new
        g = fa.compile(lambda x: fa.cos(x) * 2.5, example=[0.1], backend="codegen")
        g.value_and_grad(np.array([0.3]))
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_fork_waits_for_background_builds(tmp_path):
    # Regression: a child forked while a background build held Numba's
    # compiler lock hung at its first compile.
    result = subprocess.run(
        [sys.executable, "-c", FORK_RUN],
        env={**os.environ, "FASTAD_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "child 0" in result.stdout
    assert "compiling in a background thread" in result.stdout  # it forked beside a build


FORK_DURING_A_BUILD = textwrap.dedent(
    """
    import os, threading, time
    import numpy as np, fastad as fa

    def loop(x, y, z):
        for _ in range(60):
            x = fa.tanh(x * y + z) / (1.5 + y * y)
        return x

    f = fa.compile(loop, example=[0.3, 0.4, 0.5], backend="codegen")
    points = np.random.default_rng(0).uniform(-1, 1, (20, 3))
    f.value_and_grad(points)
    builder = threading.Thread(target=f.hessian, args=(points,))
    builder.start()  # builds another mode of the same function
    time.sleep(0.2)
    pid = os.fork()
    if pid == 0:  # the child builds a third mode
        f.hvp(points, points)
        os._exit(0)
    builder.join()
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_fork_during_a_build_of_the_same_function_does_not_hang(tmp_path):
    # Regression: the child inherited the function's own build lock held by the
    # building thread, and its first build of another mode waited for good.
    for attempt in range(3):
        environment = {**os.environ, "FASTAD_CACHE_DIR": str(tmp_path / str(attempt))}
        assert "child 0" in run_script(FORK_DURING_A_BUILD, environment, timeout=240).stdout


def test_auto_builds_the_one_point_kernel_in_the_background(monkeypatch, tmp_path):
    monkeypatch.setattr(tiers, "HOT_NODE_POINTS", 1_000)
    monkeypatch.setattr(native_code, "cache_directory", lambda: tmp_path)
    monkeypatch.setattr(native_code, "version_key", lambda: "built in the background")
    built = []
    compile_object = native_code.compile_object

    def spy(source, name):
        built.append(threading.current_thread().name)
        return compile_object(source, name)

    monkeypatch.setattr(native_code, "compile_object", spy)
    f = fa.compile(demo.example_2, example=EXAMPLE_2)
    points = np.random.default_rng(5).uniform(-1, 1, (200, 6))
    f.value_and_grad(points)
    wait_for_codegen(f, "grad")
    value, gradient = f.value_and_grad(points[3])  # the latency path: nothing to build
    assert built == ["fastad-codegen", "fastad-codegen"]  # batch, then one point
    reference = fa.compile(demo.example_2, example=EXAMPLE_2, backend="interpret")
    assert_same_bits(gradient, reference.value_and_grad(points[3])[1])


def test_the_optimisation_level_follows_the_whole_program_not_each_module(monkeypatch):
    # The modules of a long program's parts are each short; compiled at -O2 one by one,
    # they took five times as long as the program at -O1 (1.5 s against 0.3 s at 400 nodes).
    monkeypatch.setattr(scalar_ir, "PART_STATEMENTS", 7)
    program = fa.compile(demo.example_2, example=EXAMPLE_2)._calls.replay._generated.program
    source = generator.module_source(program, "grad")
    levels = []
    compile_module = native_code._compile_module

    def recording(text, large):
        levels.append(large)
        return compile_module(text, large)

    monkeypatch.setattr(native_code, "_compile_module", recording)
    total = scalar_ir.module_irs(source, "fastad_x", 2).lines  # the program's, as one module
    assert total == scalar_ir.module_ir(source, "fastad_x").count("\n")
    for limit, large in ((total + 1, False), (total - 1, True)):
        levels.clear()
        monkeypatch.setattr(native_code, "LARGE_IR_LINES", limit)
        monkeypatch.setattr(native_code, "compiling_threads", lambda: 1)
        native_code._unpack(native_code.compile_object(source, "fastad_x"))
        assert len(levels) > 2 and set(levels) == {large}


def test_modules_compile_on_the_calling_thread_while_python_shuts_down(monkeypatch):
    # After the main thread ends, a thread pool takes no new work: the program's
    # modules compile one after another on the caller, not fail.
    monkeypatch.setattr(scalar_ir, "PART_STATEMENTS", 7)
    program = fa.compile(demo.example_2, example=EXAMPLE_2)._calls.replay._generated.program
    source = generator.module_source(program, "grad")

    class ShutDown(thread_work.ThreadPoolExecutor):
        def submit(self, *args, **kwargs):
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(thread_work, "ThreadPoolExecutor", ShutDown)
    monkeypatch.setattr(native_code, "compiling_threads", lambda: 2)
    texts = scalar_ir.module_irs(source, "fastad_x", 4).texts
    objects = native_code._unpack(native_code.compile_object(source, "fastad_x"))
    assert len(texts) > 2 and len(objects) == len(texts)


def test_object_files_travel_packed_and_a_damaged_pack_is_refused():
    objects = [b"first object", b"", b"third"]
    packed = native_code._pack(objects)
    assert native_code._unpack(packed) == objects
    for damaged in (packed[:-1], packed[:5], b""):
        with pytest.raises(ValueError, match="container of object files"):
            native_code._unpack(damaged)


def test_every_failure_to_build_is_a_generation_error(monkeypatch, tmp_path):
    def broken(source, name, modules):  # noqa: ARG001
        raise ValueError("a kernel line that is not one statement")

    monkeypatch.setattr(scalar_ir, "module_irs", broken)
    with pytest.raises(native_code.GenerationError, match="ValueError: a kernel line"):
        native_code.compile_object("def batch(): pass\n", "fastad_x")

    class Unreadable:
        def is_file(self):
            raise PermissionError("permission denied")

    monkeypatch.setattr(native_code, "_path", lambda name: Unreadable())
    assert native_code.is_cached("fastad_x") is False  # a miss, not an error


def test_read_only_and_strided_points_use_the_compiled_kernels():
    # Regression: such arrays reached the kernels as they were, and Numba
    # compiled every kernel again for their types, in the foreground.
    f = fa.compile(wide, example=[0.3, -0.2], backend="codegen")
    points = np.random.default_rng(9).uniform(-1, 1, (50, 2))
    expected = (f.jacobian(points),)
    signatures = len(native_calls.run_batch.signatures)
    read_only = points.copy()
    read_only.flags.writeable = False
    strided = np.zeros((50, 4))
    strided[:, ::2] = points
    for variant in (read_only, strided[:, ::2]):
        assert_same_bits(f.jacobian(variant), expected[0])
        assert_same_bits(f.jacobian(variant[7]), expected[0][7])
    assert len(native_calls.run_batch.signatures) == signatures
    scalar = fa.compile(demo.example_2, example=EXAMPLE_2, backend="codegen")
    reference = scalar.value_and_grad(EXAMPLE_2.copy())
    point = EXAMPLE_2.copy()
    point.flags.writeable = False
    wider = np.zeros(12)
    wider[::2] = EXAMPLE_2
    for variant in (point, wider[::2]):
        value, gradient = scalar.value_and_grad(variant)
        assert_same_bits(value, reference[0])
        assert_same_bits(gradient, reference[1])
    assert len(native_calls.point_grad.signatures) == 1


def test_the_memory_check_reads_cgroup_limits_without_page_cache(tmp_path):
    (tmp_path / "memory.max").write_text("2147483648\n")
    (tmp_path / "memory.current").write_text("1900000000\n")
    (tmp_path / "memory.stat").write_text("anon 500000000\ninactive_file 1300000000\n")
    left = memory._group_left(str(tmp_path), "memory.max", "memory.current", "inactive_file")
    assert left == 2147483648 - (1900000000 - 1300000000)
    (tmp_path / "memory.max").write_text("max\n")
    assert memory._group_left(str(tmp_path), "memory.max", "memory.current", "x") is None
