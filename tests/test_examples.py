"""The articles' worked examples 1 and 2, with their exact figures."""

import math

import numpy as np
import pytest

import fastad as fa
from fastad import demo
from fastad.demo import references


def record_example_1(x_value, y_value):
    with fa.Tape() as tape:
        x, y = fa.var(x_value, name="x"), fa.var(y_value, name="y")
        z = (x * y + x) ** 2
        z.backward()
    return tape, x, y, z


def test_example_1_values_and_gradients():
    _, x, y, z = record_example_1(2.0, 3.0)
    # Exact: every intermediate is a small integer. A `=` instead of `+=` on
    # the fan-out edge of x would give 48 or 16 here.
    assert z.value == 64.0
    assert x.grad == 64.0
    assert y.grad == 32.0


def test_example_1_at_origin_gives_zero_gradients():
    _, x, y, z = record_example_1(0.0, -1.0)
    assert z.value == 0.0
    assert x.grad == 0.0
    assert y.grad == 0.0


def test_example_1_topological_order():
    tape, *_ = record_example_1(2.0, 3.0)
    assert len(tape) == 5
    # x, y, x*y, x*y+x, z; every operand precedes its node.
    assert [tape.node(i).op for i in range(5)] == ["input", "input", "mul", "add", "mul"]
    assert tape.in0.tolist() == [-1, -1, 0, 2, 3]
    assert tape.in1.tolist() == [-1, -1, 1, 0, 3]
    assert np.all(tape.in0 < np.arange(5)) and np.all(tape.in1 < np.arange(5))


def test_example_1_intermediate_adjoints():
    # The article's storyboard: the sum node gets 16, x receives 16 directly
    # and 48 through the product, y receives 32.
    tape, *_ = record_example_1(2.0, 3.0)
    assert tape.grad.tolist() == [64.0, 32.0, 16.0, 16.0, 1.0]


EXAMPLE_2_POINT = {"w1": 0.5, "x1": 1.2, "w2": -0.3, "x2": 0.8, "b": 0.1, "y": 1.0}
EXAMPLE_2_GRADIENTS = {
    "w1": -0.22032911,
    "x1": -0.09180379,
    "w2": -0.14688607,
    "x2": 0.05508228,
    "b": -0.18360759,
    "y": 0.77397165,
}
EXAMPLE_2_NODE_VALUES = [0.6000, -0.2400, 0.3600, 0.4600, 0.6130, -0.3870, 0.1498]


@pytest.fixture
def example_2():
    with fa.Tape() as tape:
        leaves = {name: fa.var(v, name=name) for name, v in EXAMPLE_2_POINT.items()}
        loss = demo.example_2(*leaves.values())
        loss.backward()
    return tape, leaves, loss


def test_example_2_graph(example_2):
    tape, _, loss = example_2
    assert len(tape) == 13  # 6 leaves and 7 operations
    assert loss.id == 12
    assert tape.inputs.tolist() == [0, 1, 2, 3, 4, 5]
    np.testing.assert_allclose(tape.val[6:], EXAMPLE_2_NODE_VALUES, atol=5e-5)
    # The last node is d * d: the same node on both edges.
    assert tape.in0[12] == tape.in1[12] == 11


def test_example_2_gradients(example_2):
    _, leaves, _ = example_2
    for name, expected in EXAMPLE_2_GRADIENTS.items():
        assert leaves[name].grad == pytest.approx(expected, abs=5e-9), name


def test_example_2_gradients_against_hand_written_chain_rule(example_2):
    # The article's derivation: dL/dw1 = 2(yhat - y) * s(z)(1 - s(z)) * x1, etc.
    _, leaves, _ = example_2
    p = EXAMPLE_2_POINT
    z = p["w1"] * p["x1"] + p["w2"] * p["x2"] + p["b"]
    s = 1.0 / (1.0 + math.exp(-z))
    dz = 2.0 * (s - p["y"]) * s * (1.0 - s)
    expected = {
        "w1": dz * p["x1"],
        "x1": dz * p["w1"],
        "w2": dz * p["x2"],
        "x2": dz * p["w2"],
        "b": dz,
        "y": -2.0 * (s - p["y"]),
    }
    for name, value in expected.items():
        assert leaves[name].grad == pytest.approx(value, rel=1e-14, abs=1e-16), name


def test_example_2_central_differences(example_2):
    _, leaves, _ = example_2
    point = list(EXAMPLE_2_POINT.values())
    for i, name in enumerate(EXAMPLE_2_POINT):
        numeric = references.central_difference(demo.example_2, point, i)
        assert leaves[name].grad == pytest.approx(numeric, rel=1e-8), name


def test_example_2_table_in_article_form(example_2):
    tape, _, _ = example_2
    lines = tape.table().splitlines()
    assert lines[0].split() == ["id", "op", "value", "inputs", "label"]
    assert lines[1].split() == ["0", "leaf", "0.5000", "-", "w1"]
    assert lines[7].split() == ["6", "*", "0.6000", "#0,", "#1"]
    assert lines[11].split() == ["10", "sigmoid", "0.6130", "#9"]
    assert lines[13].split() == ["12", "*", "0.1498", "#11,", "#11"]
