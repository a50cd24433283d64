"""A micrograd-style pure-Python autodiff engine: the record+backward baseline.

This follows Karpathy's micrograd (``micrograd/engine.py``): each ``Value``
holds ``data``, ``grad``, the set of its operands ``_prev`` and a
``_backward`` closure that adds its local rule's contribution to the
operands' ``grad`` (``+=``, so fan-out is correct). ``backward`` sorts the
graph topologically and calls the closures in reverse order.

Two deliberate differences, both so that the baseline is correct and not
crippled:

- The topological sort is an iterative depth-first search with an explicit
  stack. micrograd's recursive ``build_topo`` exceeds Python's recursion
  limit (1000 frames by default) on any path longer than about 1000 nodes,
  so it could not run the 10^5-node benchmark DAG at all; raising the limit
  instead risks overflowing the C stack. The order produced is the same kind
  (post-order, children before parents).
- ``sub`` and ``sin`` are primitives with their own closure. micrograd writes
  ``a - b`` as ``a + (-b)`` and ``-b`` as ``b * -1``, three Values per
  subtraction, and has no ``sin``; one Value per op keeps the node counts of
  both engines equal, so per-node times compare like with like, and only
  makes the baseline faster.

Otherwise the engine is kept as micrograd writes it (no ``__slots__``, a
``set`` of children, a closure per node), since that is the engine the
reference figure of the targets (8.8 us/node) describes.
"""

import math


class Value:
    """A scalar node: its value ``data`` and, after ``backward``, its ``grad``."""

    def __init__(self, data, _children=(), _op=""):
        self.data = data
        self.grad = 0.0
        # Internal variables used for autograd graph construction.
        self._backward = lambda: None
        self._prev = set(_children)
        self._op = _op  # the op that produced this node, for debugging

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data + other.data, (self, other), "+")

        def _backward():
            self.grad += out.grad
            other.grad += out.grad

        out._backward = _backward
        return out

    def __sub__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data - other.data, (self, other), "-")

        def _backward():
            self.grad += out.grad
            other.grad -= out.grad

        out._backward = _backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data * other.data, (self, other), "*")

        def _backward():
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad

        out._backward = _backward
        return out

    def sin(self):
        """Sine; derivative cos of the input."""
        out = Value(math.sin(self.data), (self,), "sin")

        def _backward():
            self.grad += math.cos(self.data) * out.grad

        out._backward = _backward
        return out

    def tanh(self):
        """Hyperbolic tangent; derivative ``1 - out**2`` from the saved output."""
        out = Value(math.tanh(self.data), (self,), "tanh")

        def _backward():
            self.grad += (1.0 - out.data * out.data) * out.grad

        out._backward = _backward
        return out

    def backward(self):
        """Add d self / d node to ``grad`` of every node ``self`` depends on.

        As in micrograd, gradients accumulate: a second call on the same graph
        adds again.
        """
        # Iterative post-order DFS (see the module docstring for why not
        # recursive). A node is appended after all of its children: the
        # marker (node, True) sits below the children on the stack.
        topo = []
        visited = set()
        stack = [(self, False)]
        while stack:
            node, children_done = stack.pop()
            if children_done:
                topo.append(node)
                continue
            if node in visited:
                continue
            visited.add(node)
            stack.append((node, True))
            for child in node._prev:
                if child not in visited:
                    stack.append((child, False))

        # Go one variable at a time and apply the chain rule to get its gradient.
        self.grad = 1.0
        for node in reversed(topo):
            node._backward()

    def __neg__(self):
        return self * -1

    def __radd__(self, other):
        return self + other

    def __rsub__(self, other):
        return Value(other) - self

    def __rmul__(self, other):
        return self * other

    def __repr__(self):
        return f"Value(data={self.data}, grad={self.grad})"
