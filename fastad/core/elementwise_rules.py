"""Block rules of the elementwise ops: the scalar op table's rows per element.

Each scalar op with operands (``kernels/optable.py``) applies per element
by compiled kernels, with NumPy broadcasting; VJP and JVP use
``contribution`` per element, so reach is kept element by element.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from fastad.core.block_rule import BlockRule, Needs, Shape, Values
from fastad.core.reach import (
    UNREACHED,
    contributions,
    unbroadcast,
)
from fastad.kernels import map_rules, map_second_rules, map_tangent_rules, optable

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray, RuleValue


# -- elementwise: the scalar op table, per element ---------------------------------------------
def broadcast_shape(shape_a: Shape, shape_b: Shape) -> Shape:
    """NumPy's broadcast of two shapes, with an error that names both.

    In Python: ``np.broadcast_shapes`` costs a few microseconds a call, which
    every elementwise op on a tape would pay twice.
    """
    if shape_a == shape_b or not shape_b:
        return shape_a
    if not shape_a:
        return shape_b
    return _broadcast(shape_a, shape_b)


@functools.lru_cache(maxsize=1024)
def _broadcast(shape_a: Shape, shape_b: Shape) -> Shape:
    """:func:`broadcast_shape` of two shapes of at least one axis each, remembered: an
    op with a bias asks twice per recording (its shape, its forward), 0.6 us each."""
    extra = len(shape_a) - len(shape_b)
    if extra > 0:
        shape_b = (1,) * extra + shape_b
    elif extra < 0:
        shape_a = (1,) * -extra + shape_a
    shape = []
    for n, m in zip(shape_a, shape_b, strict=True):
        # Python ints: a shape of NumPy ints would be remembered for the equal plain one.
        if n == m or m == 1:
            shape.append(int(n))
        elif n == 1:
            shape.append(int(m))
        else:
            raise ValueError(
                f"shapes {shape_a[max(-extra, 0) :]} and {shape_b[max(extra, 0) :]} cannot be "
                "broadcast together (NumPy rules: trailing axes must match or be 1)"
            )
    return tuple(shape)


def flat(x: RuleValue, shape: Shape) -> FloatArray:
    """``x`` broadcast to ``shape`` as a 1-D C-contiguous float64 array.

    A view, not a copy, when ``x`` already is a C-contiguous float64 array
    of ``shape`` (the common case: operands of one shape); ``reshape``
    copies any other layout. A copy is read-only.
    """
    if type(x) is np.ndarray and x.shape == shape and x.dtype == _FLOAT64:
        return x.reshape(-1)
    full = np.empty(shape)
    full[...] = x  # NumPy broadcasts (and converts) as it copies
    # Read-only, as the tape's values are: the kernels then see one array type for
    # their inputs, and compile once for it, not once per mix of the two.
    full.flags.writeable = False
    return full.reshape(-1)


def _shape(value: RuleValue) -> Shape:
    return value.shape if type(value) is np.ndarray else np.shape(value)


_ADD = optable.BY_NAME["add"].code
_FLOAT64 = np.dtype(np.float64)
_NOTHING = np.empty(0)
"""The buffer a VJP passes for an operand whose contribution is not wanted (never written)."""

_IEEE_UFUNCS = {
    optable.BY_NAME[name].code: ufunc
    for name, ufunc in (
        ("add", np.add),
        ("sub", np.subtract),
        ("mul", np.multiply),
        ("div", np.divide),
    )
}
"""The ops whose scalar rule is one correctly rounded IEEE operation: NumPy's ufunc
gives the kernel's values (a nan's payload aside: NumPy may swap the operands of
add and mul), and broadcasts without copying an operand."""
_UFUNC_FROM = 4096
"""Elements from which the ufunc runs instead of the kernel: below, NumPy's error
state (entered per call, a microsecond or two) costs more than the copies it saves."""


def _ieee_operand(x: RuleValue) -> bool:
    return type(x) is float or (type(x) is np.ndarray and x.dtype == _FLOAT64)


class Elementwise(BlockRule):
    """A scalar op (``kernels/optable.py``) applied per element, with broadcasting."""

    def shape(self, shapes: tuple[Shape, ...], params: object) -> Shape:
        return shapes[0] if self.arity == 1 else broadcast_shape(shapes[0], shapes[1])

    def forward(self, values: Values, params: object) -> FloatArray:
        a = values[0]
        if self.arity == 1:
            if type(a) is np.ndarray and a.dtype == _FLOAT64:  # the common case: a view
                out = np.empty(a.shape)  # owns its memory: stored as it is
                flat_a = a.reshape(-1)
                map_rules.FORWARD[self.code](flat_a, flat_a, out.reshape(-1))
                return out
            shape = _shape(a)
            a_full = b_full = flat(a, shape)
        else:
            b = values[1]
            shape_a, shape_b = _shape(a), _shape(b)
            shape = shape_a if shape_a == shape_b else broadcast_shape(shape_a, shape_b)
            if math.prod(shape) >= _UFUNC_FROM:
                ufunc = _IEEE_UFUNCS.get(self.code)
                if ufunc is not None and _ieee_operand(a) and _ieee_operand(b):
                    out = np.empty(shape)
                    with np.errstate(all="ignore"):  # inf - inf is nan here, as in the kernel
                        ufunc(a, b, out=out)
                    return out
            a_full, b_full = flat(a, shape), flat(b, shape)
        out = np.empty(shape)  # owns its memory: stored as it is
        map_rules.FORWARD[self.code](a_full, b_full, out.reshape(-1))
        return out

    def vjp(
        self, values: Values, out: RuleValue, g: RuleValue, params: object, needs: Needs = None
    ) -> Values:
        shape = out.shape  # an elementwise block op's value is an array
        if self.code == _ADD and type(g) is np.ndarray and g.shape == shape:
            # d(a + b) = g for each, bit for bit VJP's kernel's contribution(1.0, g): g
            # itself where reached (+ 0.0 changes nothing but -0.0), -0.0 where not.
            # A copy of g to own, or its sum to a broadcast operand's shape (new).
            return tuple(
                (g.copy() if (own := _shape(value)) == shape else unbroadcast(g, own))
                if want
                else None
                for value, want in zip(
                    values, (True, True) if needs is None else needs, strict=True
                )
            )
        a = values[0]
        want_a = needs is None or bool(needs[0])
        want_b = self.arity == 2 and (needs is None or bool(needs[1]))
        if not (want_a or want_b):
            return (None,) * self.arity
        a_full = flat(a, shape)
        b_full = a_full if self.arity == 1 else flat(values[1], shape)
        # Of the output's shape, owning their memory: a sweep adopts them, not a copy.
        # An operand that is data (a constant) gets nothing: not computed, not summed.
        da = np.empty(shape) if want_a else _NOTHING
        db = np.empty(shape) if want_b else _NOTHING
        map_rules.VJP[self.code](
            a_full,
            b_full,
            out.reshape(-1),
            flat(g, shape),
            da.reshape(-1),
            db.reshape(-1),
            want_a,
            want_b,
        )
        sent_a = unbroadcast(da, _shape(a)) if want_a else None
        if self.arity == 1:
            return (sent_a,)
        return sent_a, (unbroadcast(db, _shape(values[1])) if want_b else None)

    def jvp(self, values: Values, out: RuleValue, tangents: Values, params: object) -> RuleValue:
        shape = np.shape(out)
        a_full = flat(values[0], shape)
        b_full = a_full if self.arity == 1 else flat(values[1], shape)
        ta = tangents[0]
        ta_full = flat(UNREACHED if ta is None else ta, shape)
        if self.arity == 1:
            tb_full = ta_full
        else:
            tb = tangents[1]
            tb_full = flat(UNREACHED if tb is None else tb, shape)
        tangent = np.empty(a_full.size)
        map_tangent_rules.JVP[self.code](
            a_full, b_full, flat(out, shape), ta_full, tb_full, tangent
        )
        return tangent.reshape(shape)

    def second_vjp(
        self,
        values: Values,
        out: RuleValue,
        g: RuleValue,
        h: RuleValue,
        tangents: Values,
        params: object,
        needs: Needs = None,
    ) -> Values:
        # Per element the scalar sweeps' rule (tape_sweeps.second_backward_range):
        # d0 * h + (s0 * ta + s1 * tb) * g for the first operand, each product
        # with strong zeros, in the same order, so blocks and scalar nodes agree.
        shape = np.shape(out)
        a_full = flat(values[0], shape)
        b_full = a_full if self.arity == 1 else flat(values[1], shape)
        out_full = flat(out, shape)
        n = a_full.size
        first = [np.full(n, UNREACHED), np.full(n, UNREACHED)]
        if h is not None:
            map_rules.VJP[self.code](
                a_full,
                b_full,
                out_full,
                flat(h, shape),
                first[0],
                first[1],
                True,
                self.arity == 2,
            )
        if g is not None:
            s0, s1, s2 = np.empty(n), np.empty(n), np.empty(n)
            map_second_rules.SECOND[self.code](a_full, b_full, out_full, s0, s1, s2)
            ta = flat(UNREACHED if tangents[0] is None else tangents[0], shape)
            tb = (
                flat(UNREACHED, shape)
                if self.arity == 1 or tangents[1] is None
                else flat(tangents[1], shape)
            )
            g_full = flat(g, shape)
            first[0] = first[0] + contributions(
                contributions(s0, ta) + contributions(s1, tb), g_full
            )
            first[1] = first[1] + contributions(
                contributions(s1, ta) + contributions(s2, tb), g_full
            )
        sent = tuple(
            unbroadcast(first[slot].reshape(shape), _shape(values[slot]))
            for slot in range(self.arity)
        )
        return sent
