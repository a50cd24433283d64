"""Drawings, the tape optimiser and debug recording."""

import inspect
import math
import pathlib
import re
import shutil
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import dags, evaluate

import fastad as fa
from fastad import demo

EDGE = re.compile(r'^\s*n(\d+) -> n(\d+) \[label="([^"]*)"\];$', re.MULTILINE)
NODE = re.compile(r"^\s*n(\d+) \[label=", re.MULTILINE)


def recorded(function, names, point):
    with fa.Tape() as tape:
        leaves = [fa.var(v, name=n) for n, v in zip(names, point, strict=True)]
        out = function(*leaves)
        out.backward()
    return tape, out


# -- drawings ---------------------------------------------------------------------------
def test_example_1_drawing_structure():
    tape, _ = recorded(demo.example_1, ["x", "y"], [2.0, 3.0])
    dot = tape.to_dot()
    assert len(NODE.findall(dot)) == 5
    edges = EDGE.findall(dot)
    assert len(edges) == 6
    assert edges.count(("3", "4", "8")) == 2  # z = u * u: both edges drawn, each d = u = 8
    assert ("0", "2", "3") in edges and ("1", "2", "2") in edges  # d(x*y)/dx = y = 3
    assert ("0", "3", "1") in edges  # the direct path of x
    assert "grad 64" in dot and "grad 32" in dot


def test_example_2_edge_labels_are_the_local_derivatives():
    names = ["w1", "x1", "w2", "x2", "b", "y"]
    tape, _ = recorded(demo.example_2, names, [0.5, 1.2, -0.3, 0.8, 0.1, 1.0])
    dot = tape.to_dot()
    assert len(NODE.findall(dot)) == 13
    edges = EDGE.findall(dot)
    assert len(edges) == 13
    assert edges.count(("11", "12", "-0.387")) == 2
    for source, target, label in edges:
        target = int(target)
        partials = tape.local_partials([target])[0]
        slots = [s for s, j in enumerate((tape.in0[target], tape.in1[target])) if j == int(source)]
        assert any(float(label) == pytest.approx(partials[s], rel=1e-3) for s in slots)


def test_large_tapes_are_refused_not_hung():
    with fa.Tape() as tape:
        x = fa.var(1.0)
        y = x
        for _ in range(300):
            y = fa.sin(y)
        small = x * 2.0
    with pytest.raises(ValueError, match="refusing to draw 303 nodes"):
        tape.to_dot()
    assert len(NODE.findall(tape.to_dot(root=small))) == 3
    assert len(NODE.findall(tape.to_dot(max_nodes=1000))) == 303


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")
def test_render_writes_svg_and_png(tmp_path):
    pytest.importorskip("graphviz", reason="the graphviz package (extra 'viz') is not installed")
    tape, _ = recorded(demo.example_1, ["x", "y"], [2.0, 3.0])
    svg = tape.render(tmp_path / "graph.svg")
    assert svg.read_text().lstrip().startswith(("<?xml", "<svg"))
    png = tape.render(tmp_path / "graph.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_render_explains_what_to_install(tmp_path, monkeypatch):
    tape, _ = recorded(demo.example_1, ["x", "y"], [2.0, 3.0])
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz fails
    with pytest.raises(RuntimeError, match=r"pip install 'fastad\[viz\]'"):
        tape.render(tmp_path / "graph.svg")
    with pytest.raises(ValueError, match=".svg, .png or .pdf"):
        tape.render(tmp_path / "graph.gif")


def test_demo_draws_both_examples(tmp_path):
    printed = []
    demo.main(out=printed.append, draw_dir=tmp_path)
    for stem in ("example1", "example2"):
        assert (tmp_path / f"{stem}.dot").read_text().startswith("digraph fastad")
    assert any("drew" in line for line in printed)


# -- the optimiser -----------------------------------------------------------------------
def test_common_subexpression_example():
    with fa.Tape() as tape:
        a, b = fa.var(2.0, name="a"), fa.var(5.0, name="b")
        y = (a + b) * (a + b)
        y.backward()
    assert len(tape) == 5
    result = fa.optimize(tape, [y])
    assert len(result.tape) == 4 and result.report.common == 1
    assert [result.tape.node(i).op for i in range(4)].count("add") == 1
    ids = result.new_ids
    result.tape.backward(int(ids[y.id]))
    assert result.tape.grad[[ids[a.id], ids[b.id]]].tolist() == [a.grad, b.grad] == [14.0, 14.0]


def test_commutative_operands_are_normalised():
    with fa.Tape() as tape:
        a, b = fa.var(2.0), fa.var(5.0)
        y = (a * b) + (b * a) + fa.maximum(a, b) + fa.maximum(b, a) + (a - b) + (b - a)
    result = fa.optimize(tape, [y])
    # b*a merges into a*b. Subtraction is not commutative, and neither are
    # maximum/minimum bit for bit: maximum(0.0, -0.0) is -0.0, maximum(-0.0, 0.0) is 0.0.
    assert result.report.common == 1


def test_signed_zeros_survive_optimisation():
    def function(a, b):
        return 1.0 / fa.maximum(a, b) + 1.0 / fa.maximum(b, a)

    point = np.array([0.0, -0.0])
    optimised, plain = fa.compile(function), fa.compile(function, optimize=False)
    with fa.Tape():
        eager = function(fa.var(0.0), fa.var(-0.0)).value
    assert np.isnan(optimised(point)) and np.isnan(plain(point)) and np.isnan(eager)


def test_dead_nodes_and_constant_folding():
    with fa.Tape() as tape:
        x = fa.var(1.5)
        two = tape.constant(2.0)
        folded = fa.exp(two) * fa.sqrt(two)  # only constants: folds to one constant
        fa.log(x)  # dead
        y = x * folded
    result = fa.optimize(tape, [y])
    # exp, sqrt and * fold; 2.0, exp(2.0), sqrt(2.0) and log(x) are gone.
    assert result.report.dead == 4 and result.report.folded == 3
    assert len(result.tape) == 3  # x, the folded constant, the product
    assert result.tape.val[result.new_ids[y.id]] == y.value


@settings(max_examples=100)
@given(dags(), st.lists(st.floats(-2, 2), min_size=3, max_size=3))
def test_optimised_and_plain_compiled_functions_agree(dag, new_point):
    point, steps = dag
    k = len(point)

    def function(*xs):
        # The same subexpressions twice, so CSE has work to do.
        return evaluate(steps, xs) * evaluate(steps, xs)

    plain = fa.compile(function, num_inputs=k, example=point, optimize=False)
    optimised = fa.compile(function, num_inputs=k, example=point)
    assert len(optimised.tape) <= len(plain.tape)
    assert optimised.optimization.common > 0
    p = np.array(new_point[:k])
    value, gradient = plain.value_and_grad(p)
    value_opt, gradient_opt = optimised.value_and_grad(p)
    assert value == value_opt  # values: bit for bit
    # Gradients: to rounding (a merged node's adjoints are summed before the
    # local derivative multiplies them).
    np.testing.assert_allclose(gradient, gradient_opt, rtol=1e-13, atol=1e-15)


def test_guards_survive_optimisation():
    def branchy(x):
        return x * 2.0 if x > 0 else x * 3.0

    f = fa.compile(branchy, example=[1.0])
    assert f(2.0) == 4.0
    with pytest.raises(fa.BranchError):
        f(-2.0)


def test_report_is_readable():
    f = fa.compile(lambda a, b: (a + b) * (a + b), example=[1.0, 2.0])
    assert str(f.optimization) == (
        "5 -> 4 nodes: 0 dead, 0 constant-folded, 1 common subexpressions, 0 duplicate constants"
    )


# -- debug recording ---------------------------------------------------------------------
def test_debug_tape_names_file_and_line_of_the_origin():
    with fa.Tape(debug=True) as tape:
        x = fa.var(0.0, name="x")
        h = x * 3.0
        line = inspect.currentframe().f_lineno + 1
        y = fa.log(h) + 1.0
        with pytest.raises(fa.NonFiniteError) as info:
            y.backward(check=True)
    origin = info.value.origin
    assert origin.source == (__file__, line)
    message = str(info.value)
    assert f"node {origin.node} (log) at {pathlib.Path(__file__).name}:{line} produced -inf" in (
        message
    )
    assert "from finite inputs (0.0)" in message
    table = tape.table(around=origin.node, context=1).splitlines()
    assert len(table) == 4 and table[2].startswith(">")
    assert table[2].rstrip().endswith(f"{pathlib.Path(__file__).name}:{line}")


def test_ordinary_tapes_keep_no_sources():
    with fa.Tape() as tape:
        x = fa.var(1.0)
        x * 2.0
    assert tape.source(1) is None and "where" not in tape.table()


def test_merged_common_subexpressions_give_the_unmerged_gradient():
    # exp(800) = inf, so exp(x) - exp(x) is nan and so is its derivative
    # inf - inf. Merging the two exp nodes (CSE) cancels their adjoints to an
    # exact 0 first; that zero was reached, so it is not a strong zero.
    point = np.array([800.0])
    merged = fa.compile(lambda x: fa.exp(x) - fa.exp(x))
    unmerged = fa.compile(lambda x: fa.exp(x) - fa.exp(x), optimize=False)
    assert math.isnan(merged.grad(point)[0]) and math.isnan(unmerged.grad(point)[0])
    assert merged.optimization.common == 1  # traced at the first call
    assert math.isnan(merged.vjp(point, 1.0)[1][0])
    assert math.isnan(merged.jvp(point, np.array([1.0]))[1])
    with fa.Tape():
        x = fa.var(800.0)
        e = fa.exp(x)
        z = e - e  # merged by hand: forward and reverse mode must still agree
        assert math.isnan(fa.grad(z, x)) and math.isnan(fa.jvp(z, [x], [1.0]))
    # Where everything is finite the merged function is exact: d/dx = 0.
    assert merged.grad(np.array([1.0]))[0] == 0.0


def test_the_table_fits_three_operands_with_long_ids():
    with fa.Tape() as tape:
        for _ in range(1000):
            fa.var(1.0)
        X, W, b = fa.var(np.ones((2, 3))), fa.var(np.ones((3, 2))), fa.var(np.ones(2))
        fa.linear(X, W, b)
    rows = tape.table(start=1000).splitlines()
    assert rows[-1].split()[-3:] == ["#1000,", "#1001,", "#1002"]
    header_label = rows[0].index("label")
    assert rows[-1].index("#1000") < header_label <= rows[-1].index("#1002") + 6


def test_node_table_columns_widen_for_long_op_names_and_shapes():
    with fa.Tape() as tape:
        logits = fa.var(np.ones((200, 2000)))
        fa.cross_entropy(logits, np.zeros(200))
    header, *rows = tape.table().splitlines()
    starts = {header.index(column) for column in ("value", "inputs")}
    assert "cross_entropy " in rows[2]  # the name, then a space, not run into the value
    for row in rows:
        # every value ends where the header's "value" ends; inputs start under "inputs"
        assert row[header.index("value") + len("value") - 1] != " "
        assert row[header.index("inputs")] in "-#"
    assert len(starts) == 2
