"""Property tests: random expression DAGs with fan-out (hypothesis, seeded)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import dags, evaluate

import fastad as fa


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
