"""Property tests: random expression DAGs with fan-out (hypothesis, seeded)."""

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastad as fa

BINARY = [operator.add, operator.sub, operator.mul]
UNARY = [fa.sin, fa.cos, fa.tanh, fa.sigmoid]


@st.composite
def dags(draw, max_inputs=3, max_ops=12):
    """(input values, steps): each step applies an op to earlier nodes, often reusing them."""
    n_inputs = draw(st.integers(1, max_inputs))
    inputs = draw(st.lists(st.floats(-2, 2), min_size=n_inputs, max_size=n_inputs))
    steps = []
    for k in range(draw(st.integers(1, max_ops))):
        available = n_inputs + k
        if draw(st.booleans()):
            op = draw(st.sampled_from(BINARY))
            steps.append(
                (op, draw(st.integers(0, available - 1)), draw(st.integers(0, available - 1)))
            )
        else:
            steps.append((draw(st.sampled_from(UNARY)), draw(st.integers(0, available - 1)), None))
    return inputs, steps


def evaluate(steps, values):
    """Run the DAG on leaves/numbers ``values``; the output is the sum of all op nodes."""
    nodes = list(values)
    for op, i, j in steps:
        nodes.append(op(nodes[i]) if j is None else op(nodes[i], nodes[j]))
    out = nodes[len(values)]
    for node in nodes[len(values) + 1 :]:
        out = out + node
    return out


def central_difference(steps, point, index):
    step = np.cbrt(np.finfo(float).eps) * max(1.0, abs(point[index]))
    hi, lo = list(point), list(point)
    hi[index] += step
    lo[index] -= step
    with np.errstate(all="raise"):
        return (evaluate(steps, hi) - evaluate(steps, lo)) / (hi[index] - lo[index])


@settings(max_examples=150)
@given(dags())
def test_random_dag_gradient_matches_central_differences(dag):
    point, steps = dag
    with fa.Tape():
        leaves = [fa.var(v) for v in point]
        out = evaluate(steps, leaves)
        out.backward()
    assert out.value == pytest.approx(evaluate(steps, point), rel=1e-14, abs=1e-14)
    for i, leaf in enumerate(leaves):
        numeric = central_difference(steps, point, i)
        assert leaf.grad == pytest.approx(numeric, rel=1e-6, abs=1e-7)


@settings(max_examples=100)
@given(dags(), st.lists(st.floats(-2, 2), min_size=3, max_size=3))
def test_replay_at_a_new_point_equals_a_fresh_recording(dag, new_point):
    point, steps = dag
    new_point = new_point[: len(point)]
    with fa.Tape() as tape:
        out = evaluate(steps, [fa.var(v) for v in point])
    # Put the new point into the leaves and replay with the compiled sweep.
    values = tape.val.copy()
    values[tape.inputs] = new_point
    replayed = fa.Tape.from_arrays(tape.opcode, tape.in0, tape.in1, values)
    replayed.backward(out.id)
    with fa.Tape():
        fresh_leaves = [fa.var(v) for v in new_point]
        fresh = evaluate(steps, fresh_leaves)
        fresh.backward()
    assert replayed.val[out.id] == fresh.value
    assert replayed.grad[replayed.inputs].tolist() == [leaf.grad for leaf in fresh_leaves]
