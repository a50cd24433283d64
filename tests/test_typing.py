"""The type hints: a user's program type-checks under mypy, and mistakes are reported.

mypy runs in a subprocess with the project's configuration (pyproject.toml
[tool.mypy], strict) on two small programs: one that uses the public API the
way the manual does (eager scalars, blocks, compiled functions, gradcheck) and
asserts the types of its results with ``assert_type``, and one whose marked
lines are wrong and must each be reported. The first program also runs, so
the types it asserts are those of code that works. The Python examples of
README.md and docs/*.md, each page's blocks as one program, are checked the
same way.
"""

import re
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pages import PAGES, python_blocks

REPO = Path(__file__).resolve().parents[1]

USER_PROGRAM = '''
"""Eager scalars, blocks, compiled functions and gradcheck, as a user writes them."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from typing_extensions import assert_type

import fastad as fa

Floats = NDArray[np.float64]

# Eager scalars: operators and functions on nodes give nodes, on numbers floats.
with fa.Tape() as tape:
    x, y = fa.var(2.0, name="x"), fa.var(3)
    z = (x * y + x) ** 2
    assert_type(z, fa.Var)
    assert_type(2.0 * fa.sin(x) - fa.log(y) / 3, fa.Var)
    assert_type(fa.maximum(x, 1.0), fa.Var)
    assert_type(fa.where(x > 0, fa.sqrt(x), 0.0), fa.Var)
    z.backward()
    assert_type(z.value, float)
    assert_type(x.grad, float)
    assert_type(fa.grad(z, x), float)
    assert_type(fa.grad(z, [x, y]), Floats)
    assert_type(fa.jvp(z, [x, y], [1.0, 0.0]), float)
    assert_type(fa.hvp(z, [x, y], [1.0, 0.0]), Floats)
    assert_type(tape.table(grad=True), str)
    assert_type(tape.val, Floats)
assert_type(fa.exp(1.0), float)
assert_type(fa.tanh(np.linspace(-1.0, 1.0, 5)), Floats)
assert_type(fa.current_tape(), fa.Tape)
report = fa.optimize(tape, [z]).report
assert_type(report, fa.OptimizationReport)

# Blocks: arrays as nodes, fused layers and losses.
rng = np.random.default_rng(0)
X0, T0 = rng.normal(size=(4, 3)), rng.normal(size=(4, 2))
with fa.Tape():
    X, W, b = fa.var(X0), fa.var(rng.normal(size=(3, 2)), name="W"), fa.var(np.zeros(2))
    assert_type(W, fa.Block)
    assert_type(W.reshape(6), fa.Block)
    assert_type(W.reshape((2, 3)), fa.Block)
    assert_type(fa.var(np.ones((1, 1))).reshape(()), fa.Var)  # one element: a scalar node
    H = fa.relu(fa.linear(X, W, b))
    assert_type(H, fa.Block)
    loss = fa.mse_loss(H, T0) + 0.1 * (W * W).sum()
    assert_type(loss, fa.Var)
    loss.backward()
    assert_type(W.grad, Floats)
    assert_type(fa.grad(loss, W), Floats)
    assert W.grad.shape == W.shape == (3, 2)
    # A product of blocks is typed a block (as NumPy types a product of arrays), so
    # its reductions type-check; NumPy's functions accept blocks.
    assert_type(fa.relu(X @ W).sum(), fa.Var)
    assert isinstance(np.sum(X, axis=0), fa.Block)
    assert isinstance(fa.grad(loss, [W, b])[1], np.ndarray)

# Models with arrays: reductions, the softmax family, chosen gradients.
with fa.Tape():
    logits = fa.var(rng.normal(size=(4, 3)))
    assert_type(fa.softmax(logits), fa.Block)
    assert_type(fa.log_softmax(logits, axis=0), fa.Block)
    assert_type(fa.logsumexp(logits), fa.Var)
    assert_type(logits.max(), fa.Var)
    assert_type(logits.sum(axis=(0, 1), keepdims=True), fa.Block | fa.Var)
    ce = fa.cross_entropy(logits, np.array([0, 2, 1, 1]))
    assert_type(ce, fa.Var)
    assert_type(fa.stop_gradient(logits), fa.Block)
    assert_type(fa.jvp(logits * 2.0, logits, np.ones((4, 3))), Floats)
assert_type(fa.softmax(np.zeros(3)), Floats)
assert_type(fa.cross_entropy(np.zeros((2, 3)), np.array([0, 1])), float)


# Compiled functions of scalars: a float at one point, arrays for a batch.
def neuron(w: fa.Var, x: fa.Var, b: fa.Var) -> fa.Var:
    return fa.sigmoid(w * x + b)


f = fa.compile(neuron)
assert_type(f, fa.CompiledFunction)
point = np.array([0.5, 1.2, 0.1])
assert_type(f(point), Any)  # a float here; an array for a batch
values_at_point, _ = f.value_and_grad(point)
assert round(values_at_point, 4) == round(float(f(point)), 4)
assert_type(f.grad(point), Floats)
values, gradients = f.value_and_grad(np.ones((8, 3)))
assert_type(gradients, Floats)
assert gradients.shape == (8, 3)
assert fa.gradcheck(f, point)
result = fa.gradcheck(f, point, mode="fast", raise_exception=False)
assert_type(result, fa.GradcheckResult)
assert result.passed


@fa.compile(num_inputs=2)
def two_outputs(*xs: fa.Var) -> tuple[fa.Var, fa.Var]:
    return xs[0] * xs[1], fa.exp(xs[0])


assert_type(two_outputs, fa.CompiledFunction)
assert two_outputs.jacobian(np.array([1.0, 2.0])).shape == (2, 2)

# A compiled function of arrays, and gradcheck of a plain callable.
g = fa.compile(lambda A, v: (A @ v).sum(), example=(np.ones((2, 2)), np.ones(2)))
assert_type(g, fa.BlockFunction)
value, arrays = g.value_and_grad((np.eye(2), np.array([1.0, 2.0])))
assert_type(value, float)
assert value == 3.0
assert fa.gradcheck(lambda p: np.sin(p).sum(), np.array([0.1, 0.2]), grad=np.cos)
'''

# Every line marked "# wrong" must be reported, and nothing else.
MISTAKES = """
import numpy as np

import fastad as fa

with fa.Tape():
    fa.var("x")  # wrong: a leaf holds numbers
    x = fa.var(1.0)
    fa.exp("1.0")  # wrong: fa.exp takes nodes, numbers or arrays
    x.grad.shape  # wrong: a scalar node's gradient is a float
    X = fa.var(np.ones(3))
    fa.grad(X, x)  # wrong: the output must be a scalar node
    x.backward(accumulate="yes")  # wrong: a flag, not a string
    fa.mse_loss(X, np.ones(3)).mT  # wrong: the loss is a scalar node, no matrix axes
f = fa.compile(lambda a, b: a * b)
f.grad()  # wrong: the point is missing
fa.compile(lambda a: a, num_inputs="1")  # wrong: an int
fa.gradcheck(f, np.ones(2), mode="quick")  # wrong: "full" or "fast"
"""


def _mypy(tmp_path, **programs):
    """mypy's (exit code, output) on the given programs, with the project's configuration."""
    for name, source in programs.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source).lstrip())
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / "mypy-cache"),
        "--show-error-codes",
        "--no-pretty",
        *(str(tmp_path / f"{name}.py") for name in programs),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("typing")
    return tmp_path, _mypy(tmp_path, user_program=USER_PROGRAM, mistakes=MISTAKES)


def _reported_lines(output, name):
    return sorted({int(n) for n in re.findall(rf"{name}\.py:(\d+): error", output)})


def test_a_users_program_type_checks(mypy_output):
    _, (returncode, output) = mypy_output
    assert returncode in (0, 1), output  # 2: mypy itself failed (configuration, crash)
    errors = [line for line in output.splitlines() if "user_program.py" in line]
    assert not errors, "\n".join(errors)


def test_mistakes_are_reported(mypy_output):
    _, (returncode, output) = mypy_output
    assert returncode == 1, output
    source = textwrap.dedent(MISTAKES).lstrip().splitlines()
    wrong = [number for number, line in enumerate(source, start=1) if "# wrong" in line]
    assert len(wrong) == 9
    assert _reported_lines(output, "mistakes") == wrong, output


def test_the_users_program_runs(mypy_output):
    # The asserted types belong to working code: run it (assert_type is a no-op at run time).
    tmp_path, _ = mypy_output
    runpy.run_path(str(tmp_path / "user_program.py"), run_name="user_program")


def test_mypy_finds_fastad_from_outside_the_checkout(tmp_path):
    # The editable install is a plain path in a .pth file (fastad/kernels links to
    # kernels/, so the layout is setuptools' simple one); an import hook, which mypy
    # does not run, would give "Cannot find implementation or library stub".
    program = tmp_path / "outside.py"
    program.write_text("import fastad as fa\n\nx: float = fa.exp(1.0)\nprint(x)\n")
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(program)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout


def test_the_package_declares_its_hints():
    assert (REPO / "fastad" / "py.typed").is_file()
    assert 'fastad = ["py.typed"]' in (REPO / "pyproject.toml").read_text()


def _example_name(page):
    return "example_" + page.stem.lower().replace("-", "_")


@pytest.fixture(scope="module")
def examples_mypy_output(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("examples")
    programs = {
        _example_name(page): "\n\n".join(python_blocks(page))
        for page in PAGES
        if python_blocks(page)
    }
    return programs, _mypy(tmp_path, **programs)


def test_the_examples_of_the_pages_type_check(examples_mypy_output):
    # The project's configuration is strict (mypy's --strict flag would also turn
    # back on warn_return_any, which the configuration turns off for NumPy's Any
    # results); every example of README.md and docs/ must pass it.
    programs, (returncode, output) = examples_mypy_output
    assert returncode in (0, 1), output  # 2: mypy itself failed (configuration, crash)
    assert len(programs) >= 8, sorted(programs)
    assert returncode == 0, output
    assert "Success: no issues found" in output, output
