"""Shared hypothesis strategies: random expression DAGs with fan-out."""

import operator

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
