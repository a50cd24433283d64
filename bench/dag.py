"""Seeded random scalar DAGs for the core-engine benchmarks.

The DAG is described with plain NumPy arrays, independently of fastad, so the
same graph can be recorded by fastad, by the micrograd-style baseline
(``micrograd_engine.py``) or evaluated on Python floats as a reference.

Node ``i`` has op ``op[i]`` (an index into :data:`OP_NAMES`) and operand ids
``in0[i]`` and ``in1[i]`` (-1 where unused). Nodes ``0 .. n_inputs - 1`` are
the inputs; every operand id is smaller than its node, so recording the nodes
in id order gives fastad tape ids equal to the DAG ids (the DAG uses no
constants). The last node is the root, and every node is an ancestor of it,
so a backward sweep from the root has to visit the whole graph in every
engine.

Shape of the graph ("mostly-local operands with
some fan-out"): an operand is drawn from the previous ``window`` nodes most of
the time and from anywhere earlier with probability ``far``, so nodes are
used several times and gradients meet on many paths.

Values stay bounded at every point in ``[-1, 1]^n_inputs``, not just at the
recording point, because replay happens at new points. Each node carries a
static bound on its magnitude (1 for inputs, sin and tanh; ``Ba + Bb`` for add
and sub; ``Ba * Bb`` for mul). A binary op whose bound would pass ``cap`` is
replaced by tanh of its first operand, which caps the bound at 1 again.
Without it, add chains double and mul chains square their magnitude: at
10^5 nodes (seeds 0-2) values reached 1e12 to 1e70 and input gradients 1e30
to 1e176, where sin of the argument is rounding noise and comparing two
engines' gradients means nothing. The only nodes whose bound passes ``cap``
are the few adds at the very end that sum the last unused nodes into the
root (about ``window`` of them). Measured with the cap: ``max |value| < 15``
and input gradients below 1e4 at 10^5 and 10^6 nodes.
"""

import math
import operator
from dataclasses import dataclass

import numpy as np
from micrograd_engine import Value

import fastad as fa

OP_NAMES = ("input", "add", "sub", "mul", "sin", "tanh")
INPUT, ADD, SUB, MUL, SIN, TANH = range(len(OP_NAMES))
ARITY = (0, 2, 2, 2, 1, 1)
_BINARY_BOUND = {
    ADD: operator.add,
    SUB: operator.add,
    MUL: operator.mul,
}


@dataclass(frozen=True)
class ScalarDag:
    """A random scalar DAG as plain arrays.

    Attributes
    ----------
    op : numpy.ndarray of uint8, shape (n_nodes,)
        Index into :data:`OP_NAMES` for each node; ``INPUT`` for the leaves.
    in0, in1 : numpy.ndarray of int64, shape (n_nodes,)
        Operand ids, -1 where the op has fewer operands.
    n_inputs : int
        Nodes ``0 .. n_inputs - 1`` are the inputs.
    input_values : numpy.ndarray of float64, shape (n_inputs,)
        The recording point, uniform in ``[-1, 1]``.
    """

    op: np.ndarray
    in0: np.ndarray
    in1: np.ndarray
    n_inputs: int
    input_values: np.ndarray

    @property
    def n_nodes(self):
        """Number of nodes, inputs included."""
        return self.op.size

    @property
    def root(self):
        """Id of the root node (the last one)."""
        return self.op.size - 1

    def op_counts(self):
        """``{op name: number of nodes}``, a quick look at the drawn mix."""
        counts = np.bincount(self.op, minlength=len(OP_NAMES))
        return {name: int(c) for name, c in zip(OP_NAMES, counts, strict=True)}


def random_dag(n_nodes, n_inputs=100, seed=0, window=8, far=0.1, cap=16.0):
    """Draw a random scalar DAG of exactly ``n_nodes`` nodes.

    Parameters
    ----------
    n_nodes : int
        Total number of nodes, inputs included.
    n_inputs : int
        Number of leaves; at most ``n_nodes // 2``.
    seed : int
        Seed of the NumPy generator; the same arguments give the same DAG.
    window : int
        Local operands come from the previous ``window`` nodes.
    far : float
        Probability that an operand is drawn from all earlier nodes instead.
    cap : float
        Largest allowed static magnitude bound (see the module docstring).

    Returns
    -------
    ScalarDag

    Examples
    --------
    >>> dag = random_dag(1000, n_inputs=10, seed=1)
    >>> dag.n_nodes, dag.root
    (1000, 999)
    """
    # Each op can retire at most one unused node, so fewer ops than inputs
    # could not connect every input to the root.
    if n_inputs < 1 or n_nodes < 2 * n_inputs:
        raise ValueError(
            f"need n_inputs >= 1 and n_nodes >= 2 * n_inputs, "
            f"got n_nodes={n_nodes}, n_inputs={n_inputs}"
        )
    rng = np.random.default_rng(seed)
    op = np.full(n_nodes, INPUT, np.uint8)
    in0 = np.full(n_nodes, -1, np.int64)
    in1 = np.full(n_nodes, -1, np.int64)
    bound = np.ones(n_nodes)
    used = np.zeros(n_nodes, np.bool_)
    # Random numbers are drawn in bulk: per-node generator calls would make
    # building a 10^6-node DAG take longer than benchmarking it.
    drawn_ops = rng.integers(ADD, TANH + 1, n_nodes)
    pick_far = rng.random((n_nodes, 2)) < far
    uniforms = rng.random((n_nodes, 2))

    def draw_operand(i, slot):
        if pick_far[i, slot]:
            return int(uniforms[i, slot] * i)
        start = max(i - window, 0)
        return start + int(uniforms[i, slot] * (i - start))

    unused = n_inputs
    oldest_unused = 0  # every node before this one is used
    for i in range(n_inputs, n_nodes):
        while used[oldest_unused]:
            oldest_unused += 1
        remaining = n_nodes - i
        if unused >= remaining:
            # Drain: add the two oldest unused nodes, one fewer unused per
            # step, so the last node is the only node nobody uses: the root.
            # A step that is not a drain adds at most one unused node, so
            # unused - 1 <= remaining holds throughout and ends at exactly 1.
            # (With a single unused node left, add it to a drawn operand.)
            code = ADD
            a = oldest_unused
            b = next((k for k in range(a + 1, i) if not used[k]), None)
            b = draw_operand(i, 1) if b is None else b
        else:
            code = int(drawn_ops[i])
            # A node that left the window unused could later only be reached
            # by a rare far pick, so the oldest such node is used now. This
            # also works off the inputs, which start outside the window.
            forced = oldest_unused <= i - window
            a = oldest_unused if forced else draw_operand(i, 0)
            b = draw_operand(i, 1) if ARITY[code] == 2 else -1
            if b >= 0 and _BINARY_BOUND[code](bound[a], bound[b]) > cap:
                code, b = TANH, -1
        op[i], in0[i], in1[i] = code, a, b
        if b >= 0:
            bound[i] = _BINARY_BOUND[code](bound[a], bound[b])
        for operand in {a, b} - {-1}:
            if not used[operand]:
                used[operand] = True
                unused -= 1
        unused += 1
    input_values = rng.uniform(-1.0, 1.0, n_inputs)
    return ScalarDag(op, in0, in1, n_inputs, input_values)


def evaluate(dag, leaves, sin, tanh):
    """Evaluate ``dag`` on leaf objects with the given ``sin`` and ``tanh``.

    add, sub and mul use the Python operators, so the same function records
    the DAG in any operator-overloading engine or evaluates it on floats.
    Every engine benchmarked goes through this one loop, so the dispatch
    cost is the same for all of them.

    Parameters
    ----------
    dag : ScalarDag
    leaves : sequence
        One object per input (fastad ``Var``, micrograd ``Value``, float).
    sin, tanh : callable
        The engine's unary functions.

    Returns
    -------
    list
        One result per node, in id order; the root is the last.
    """
    functions = (None, operator.add, operator.sub, operator.mul, sin, tanh)
    nodes = list(leaves)
    # tolist() gives Python ints: indexing a list with NumPy integers is
    # several times slower and would be charged to the engines.
    for code, a, b in zip(
        dag.op[dag.n_inputs :].tolist(),
        dag.in0[dag.n_inputs :].tolist(),
        dag.in1[dag.n_inputs :].tolist(),
        strict=True,
    ):
        if b < 0:
            nodes.append(functions[code](nodes[a]))
        else:
            nodes.append(functions[code](nodes[a], nodes[b]))
    return nodes


def evaluate_floats(dag, point=None):
    """Node values of ``dag`` at ``point`` (default: the recording point).

    A plain-float reference, used to check that values stay bounded.
    """
    point = dag.input_values if point is None else point
    return np.array(evaluate(dag, [float(x) for x in point], math.sin, math.tanh))


def record_fastad(dag, point=None):
    """Record ``dag`` eagerly into a fresh fastad tape.

    Parameters
    ----------
    dag : ScalarDag
    point : array_like, optional
        Input values; the recording point by default.

    Returns
    -------
    tape : fastad.Tape
    root : fastad.Var
    inputs : list of fastad.Var
    """
    point = dag.input_values if point is None else point
    with fa.Tape() as tape:
        inputs = [fa.var(x) for x in np.asarray(point, dtype=np.float64).tolist()]
        nodes = evaluate(dag, inputs, fa.sin, fa.tanh)
    return tape, nodes[-1], inputs


def record_micrograd(dag, point=None):
    """Build ``dag`` with the micrograd-style engine.

    Returns
    -------
    root : micrograd_engine.Value
    inputs : list of micrograd_engine.Value
    """
    point = dag.input_values if point is None else point
    inputs = [Value(x) for x in np.asarray(point, dtype=np.float64).tolist()]
    nodes = evaluate(dag, inputs, Value.sin, Value.tanh)
    return nodes[-1], inputs
