"""``fastad demo``: each worked example printed with the articles' figures, every check can fail.

The expected numbers below are the articles', never
output of the demo; the planted models are the articles' classic bugs, each
of which must turn at least one independent check (central differences,
NumPy by hand, the other ways of recording a layer) into a failure.
"""

import math
import re

import numpy as np
import pytest

import fastad as fa
from fastad import __main__ as command_line
from fastad import demo
from fastad.demo import checks as demo_checks
from fastad.demo import references


@pytest.fixture(scope="module")
def demo_run():
    """One full run of the demo: (printed text, checks)."""
    printed = []
    checks = demo.main(out=printed.append)
    return "\n".join(printed), checks


def section(text, title):
    """The printed lines of one section, from its header to the next blank line."""
    start = 0 if text.startswith(title) else text.index(f"\n{title}") + 1
    end = text.find("\n\n", start + 1)
    return text[start : end if end != -1 else len(text)]


# -- the whole demo ----------------------------------------------------------------------
def test_every_example_has_a_header_in_order(demo_run):
    text, _ = demo_run
    headers = [line for line in text.splitlines() if re.match(r"Example \d", line)]
    assert [int(line.split()[1].rstrip(":")) for line in headers] == [1, 2, 3, 4, 5, 6]
    positions = [text.index(line) for line in headers]
    assert positions == sorted(positions)
    assert text.index("Compiled batch: example 2 at 1,000,000 points") > positions[-1]
    assert text.index("Fused vs unfused vs scalar nodes") > text.index("Compiled batch")


def test_every_check_passes_and_names_its_section(demo_run):
    _, checks = demo_run
    assert len(checks) >= 20
    assert all(check.passed for check in checks), [c for c in checks if not c.passed]
    sections = {check.section for check in checks}
    assert sections == {f"Example {n}" for n in range(1, 7)} | {"Compiled batch", "Fused layer"}
    passed, line = demo_checks.verdict(checks)
    assert passed and line == f"all {len(checks)} checks agree with their independent references"


def test_every_section_has_an_independent_check(demo_run):
    _, checks = demo_run
    independent = ("central difference", "NumPy", "= fused", "eager recording")
    for name in {check.section for check in checks}:
        whats = [check.what for check in checks if check.section == name]
        assert any(word in what for what in whats for word in independent), (name, whats)


def test_example_1_numbers(demo_run):
    text, _ = demo_run
    part = section(text, "Example 1")
    assert "z = 64; dz/dx = 64 = 48 via #2 (mul) + 16 via #3 (add); dz/dy = 32" in part
    assert "d/dx   =  64.00000000" in part and "d/dy   =  32.00000000" in part
    assert "at x=0, y=-1: z = 0, dz/dx = 0, dz/dy = 0" in part
    # The article's topological order: x, y, x*y, x*y+x, z.
    rows = [line.split() for line in part.splitlines() if re.match(r"\s+\d+\s", line)]
    assert [row[1] for row in rows] == ["leaf", "leaf", "*", "+", "*"]


def test_example_2_numbers_and_table(demo_run):
    text, _ = demo_run
    part = section(text, "Example 2")
    rows = {
        int(fields[0]): fields
        for fields in (line.split() for line in part.splitlines())
        if fields and fields[0].isdigit()
    }
    assert sorted(rows) == list(range(13))
    assert rows[0] == ["0", "leaf", "0.5000", "-", "w1"]
    spec_values = ["0.6000", "-0.2400", "0.3600", "0.4600", "0.6130", "-0.3870", "0.1498"]
    assert [rows[i][2] for i in range(6, 13)] == spec_values
    assert rows[12][1:] == ["*", "0.1498", "#11,", "#11"]  # d * d: the same node twice
    spec_gradients = {
        "w1": "-0.22032911",
        "x1": "-0.09180379",
        "w2": "-0.14688607",
        "x2": "0.05508228",
        "b": "-0.18360759",
        "y": "0.77397165",
    }
    for name, value in spec_gradients.items():
        assert re.search(rf"d/d{name}\s+=\s+{re.escape(value)}\s+central difference", part), name


def test_example_3_numbers(demo_run):
    part = section(demo_run[0], "Example 3")
    assert "Y = X + b = [[11.0, 22.0, 33.0], [41.0, 52.0, 63.0]]" in part
    assert "db = [4.0, 1.0, 2.0]  (shape (3,))" in part
    assert "dX = [[1.0, 0.0, 2.0], [3.0, 1.0, 0.0]]" in part  # = dY


def test_example_4_numbers(demo_run):
    part = section(demo_run[0], "Example 4")
    assert "y = W x = [2.0, 5.0]" in part
    assert "dL/dW = [[1.0, 0.5], [4.0, 2.0]],  dL/dx = [13.0, 18.0]" in part


def test_example_5_numbers(demo_run):
    part = section(demo_run[0], "Example 5")
    assert "dL/dw(w0) = -6" in part
    assert "w1 = w0 - eta * dL/dw = 0.6\n" in part
    assert "min_d 9 + (-6) d + 5 d^2: the parabola's vertex is d = 0.6" in part
    assert f"L(w1) = {(0.6 - 3.0) ** 2:.12g} < L(w0) = 9" in part


def test_example_6_shapes_at_the_spec_size(demo_run):
    part = section(demo_run[0], "Example 6")
    assert part.startswith("Example 6: a two-layer network at B=64, n=512, h=1024")
    B, n, h, m = 64, 512, 1024, 10
    shapes = {"X": (B, n), "W1": (n, h), "b1": (h,), "W2": (h, m), "b2": (m,)}
    for name, shape in shapes.items():
        # parameter, its shape, its gradient's shape: the same tuple twice
        assert re.search(
            rf"^\s+{name}\s+{re.escape(str(shape))}\s+{re.escape(str(shape))}\s", part, re.M
        )
    assert "No Jacobian is built" in part
    assert f"{B * h} x {B * n} = {(B * h) * (B * n):.2e} numbers" in part
    peak = float(re.search(r"the step peaked at ([\d.]+) MB", part).group(1))
    assert peak < 100  # MB; the Jacobian alone would be 8.6 GB in float32


def test_compiled_batch_reports_throughput(demo_run):
    part = section(demo_run[0], "Compiled batch")
    assert "P of shape (1000000, 6)" in part
    per_point = float(re.search(r"= ([\d.]+) ns/point for 1,000,000 points", part).group(1))
    assert 0 < per_point < 10_000  # a loose sanity bound: timings drift, the count does not
    assert "[-0.22032911, -0.09180379, -0.14688607, 0.05508228, -0.18360759, 0.77397165]" in part
    assert "vs eager recording" in part and "vs NumPy by hand at all 1,000,000 points" in part


def test_layer_cross_check_prints_the_differences(demo_run):
    part = section(demo_run[0], "Fused vs unfused vs scalar nodes")
    B, n, h = 8, 16, 16
    # B*h outputs, each n products and n - 1 sums, plus the bias add and the relu
    scalar_nodes = B * h * (2 * n - 1) + 2 * B * h
    assert f"scalar nodes ({scalar_nodes:,} nodes)" in part
    assert "unfused blocks (matmul, add, relu)" in part
    for way in ("unfused blocks", "scalar nodes", "NumPy by hand", "compiled to one kernel"):
        row = next(line for line in part.splitlines() if line.strip().startswith(way))
        differences = [float(field) for field in row.split()[-4:]]
        assert max(differences) < 1e-12, row


# -- planted bugs make the demo fail -----------------------------------------------------
def detached_direct_path(x, y):
    """The article's `=` instead of `+=`: x's direct edge contributes nothing (48, not 64)."""
    return (x * y + x.value) ** 2


def two_layer_without_bias_gradient(X, W1, b1, W2, b2, T):
    """Example 6 with b1 cut off from the gradient: right value, db1 = 0."""
    H = fa.sigmoid(X @ W1 + b1.value)
    return 0.5 * ((H @ W2 + b2 - T) ** 2).sum()


def layer_dropping_the_bias_gradient(X, W, b):
    """A fused layer whose backward forgets b: right output, db = 0."""
    return fa.linear_relu(X, W, b.value)


def example_2_with_a_sign_error(w1, x1, w2, x2, b, y):
    """A different function than the article's, so its gradient is not example 2's."""
    return (fa.sigmoid(w1 * x1 - w2 * x2 + b) - y) ** 2


PLANTED = {
    "example 1, direct path detached": (demo.show_example_1, detached_direct_path),
    "example 2, x2 detached": (
        demo.show_example_2,
        lambda w1, x1, w2, x2, b, y: (fa.sigmoid(w1 * x1 + w2 * x2.value + b) - y) ** 2,
    ),
    "example 3, no gradient to b": (demo.show_example_3, lambda X, b: X + b.value),
    "example 4, no gradient to x": (demo.show_example_4, lambda W, x: W @ x.value),
    "example 5, half the derivative": (demo.show_example_5, lambda w: (w - 3.0) * (w.value - 3.0)),
    "example 6, no gradient to b1": (demo.show_example_6, two_layer_without_bias_gradient),
    "fused layer, no gradient to b": (
        demo.show_layer_cross_check,
        layer_dropping_the_bias_gradient,
    ),
    "fused layer without its relu": (demo.show_layer_cross_check, fa.linear),
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_a_planted_wrong_gradient_fails_an_independent_check(name):
    show, model = PLANTED[name]
    printed = []
    checks = show(printed.append, model=model)
    failed = [check.what for check in checks if not check.passed]
    independent = ("central difference", "NumPy", "= fused")
    assert any(word in what for what in failed for word in independent), failed
    assert any(line.lstrip().startswith("FAILED") for line in printed)


def test_a_planted_wrong_function_fails_the_batch_check():
    printed = []
    checks = demo.show_compiled_batch(printed.append, model=example_2_with_a_sign_error, points=500)
    by_what = {check.what: check.passed for check in checks}
    # Replay still equals eager recording of the same (wrong) function ...
    assert by_what["values, gradients vs eager recording at 5 rows"]
    # ... but the hand-written NumPy gradient of example 2 catches it.
    assert not by_what["values, gradients vs NumPy by hand at all 500 points"]


def test_the_classic_bug_prints_48_against_64():
    printed = []
    demo.show_example_1(printed.append, model=detached_direct_path)
    text = "\n".join(printed)
    assert "dz/dx = 48 = 48 via #2 (mul); dz/dy = 32" in text
    assert re.search(r"d/dx\s+=\s+48\.00000000\s+central difference\s+64\.0000000", text)


# -- the command line ----------------------------------------------------------------------
def test_command_line_exits_zero_and_draws(tmp_path, capsys):
    assert command_line.main(["demo", "--draw", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    last = printed.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"all \d+ checks agree with their independent references", last)
    assert "FAILED" not in printed
    for stem in ("example1", "example2"):
        assert (tmp_path / f"{stem}.dot").read_text().startswith("digraph fastad")


def test_command_line_exits_non_zero_on_a_planted_wrong_gradient(monkeypatch, capsys):
    monkeypatch.setattr(demo, "example_1", detached_direct_path)
    assert command_line.main(["demo"]) == 1
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert last.startswith("FAILED: 2 of ")
    assert "Example 1: gradients vs central differences (fresh tapes)" in last
    assert "Example 1: z, dz/dx, dz/dy = the article's 64, 64, 32" in last


# -- the helpers the checks rest on --------------------------------------------------------
def test_relative_error():
    assert demo_checks.relative_error([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert demo_checks.relative_error(64.0, 48.0) == pytest.approx(16.0 / 64.0)
    assert demo_checks.relative_error([0.0, 0.0], [0.0, 1e-3]) == 1.0  # a missing gradient is 100%
    assert math.isnan(demo_checks.relative_error([1.0, math.nan], [1.0, 2.0]))


def test_nan_and_wrong_shapes_fail_checks():
    out = [].append
    assert not demo_checks.check_close(out, "nan", [math.nan], [1.0], 1.0).passed
    assert not demo_checks.check_close(out, "shape", np.ones((2, 3)), np.ones(3), 1.0).passed
    assert not demo_checks.check_error(out, "nan error", math.nan, 1.0).passed
    assert demo_checks.check_error(out, "small", 1e-12, 1e-6).passed


def test_check_digits_is_half_a_unit_of_the_last_digit():
    out = [].append
    assert demo_checks.check_digits(out, "rounds", [0.149758], [0.1498], 4).passed
    assert not demo_checks.check_digits(out, "does not", [0.14974], [0.1498], 4).passed


def test_central_differences_of_arrays_against_a_known_gradient():
    A = np.array([[1.0, -2.0], [30.0, 0.5]])
    b = np.array([3.0, -1.0])
    # L = sum(A**2) + sum(A @ b): dL/dA = 2A + outer(1, b), dL/db = A.T @ 1. With |L| ~ 900
    # rounding alone costs eps * |L| / h ~ 1e-7: the demo's tolerance, 1e-6, covers it.
    gradients = references.central_differences(lambda A, b: (A * A).sum() + (A @ b).sum(), [A, b])
    tolerance = demo_checks.CENTRAL_DIFFERENCE_TOLERANCE
    np.testing.assert_allclose(gradients[0], 2 * A + np.outer(np.ones(2), b), rtol=tolerance)
    np.testing.assert_allclose(gradients[1], A.sum(axis=0), rtol=tolerance)


def test_verdict_names_the_failed_checks():
    checks = [
        demo_checks.Check("a", True, "", "Example 1"),
        demo_checks.Check("b", False, "", "Example 3"),
    ]
    assert demo_checks.verdict(checks) == (False, "FAILED: 1 of 2 checks disagree: Example 3: b")
