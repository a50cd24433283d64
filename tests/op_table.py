"""The op test table: one row per op of ``kernels/optable.py``.

Shared by the op tests (values, compiled rules) and the gradcheck regression
suite. Each row: how a user writes the op, an independent NumPy reference,
an input range per operand avoiding singular points, and kinks to keep
finite differences away from.
"""

import operator
from typing import NamedTuple

import numpy as np
import scipy.special

import fastad as fa
from fastad.eager.node import record
from fastad.kernels import optable


class OpCase(NamedTuple):
    name: str
    apply: object  # how a user writes it
    reference: object  # an independent NumPy implementation
    domain: tuple  # (low, high) per operand, avoiding singular points
    kinks: tuple = ()  # points to stay clear of for finite differences
    # The partials by definition, where they are not the reference's slope
    # (stop_gradient: the identity's value, a derivative of 0); None: finite
    # differences of the reference are the expected derivative.
    derivative: object = None


def _sigmoid_reference(a):
    return 0.5 * (1.0 + np.tanh(0.5 * a))  # a different formula on purpose


OP_CASES = [
    OpCase("add", operator.add, np.add, ((-3, 3), (-3, 3))),
    OpCase("sub", operator.sub, np.subtract, ((-3, 3), (-3, 3))),
    OpCase("mul", operator.mul, np.multiply, ((-3, 3), (-3, 3))),
    OpCase("div", operator.truediv, np.divide, ((-3, 3), (0.5, 3))),
    OpCase("neg", operator.neg, np.negative, ((-3, 3),)),
    OpCase("pow", operator.pow, np.power, ((0.2, 3), (-2.5, 2.5))),
    OpCase("exp", fa.exp, np.exp, ((-3, 3),)),
    OpCase("log", fa.log, np.log, ((0.1, 5),)),
    OpCase("sqrt", fa.sqrt, np.sqrt, ((0.1, 5),)),
    OpCase("sin", fa.sin, np.sin, ((-4, 4),)),
    OpCase("cos", fa.cos, np.cos, ((-4, 4),)),
    OpCase("tanh", fa.tanh, np.tanh, ((-3, 3),)),
    OpCase("sigmoid", fa.sigmoid, _sigmoid_reference, ((-6, 6),)),
    OpCase("relu", fa.relu, lambda a: np.maximum(a, 0.0), ((-3, 3),), kinks=(0.0,)),
    OpCase("abs", fa.abs, np.abs, ((-3, 3),), kinks=(0.0,)),
    OpCase("maximum", fa.maximum, np.maximum, ((-3, 3), (-3, 3)), kinks=("tie",)),
    OpCase("minimum", fa.minimum, np.minimum, ((-3, 3), (-3, 3)), kinks=("tie",)),
    *(
        OpCase(
            name, relation, lambda a, b, r=relation: float(r(a, b)), ((-3, 3), (-3, 3)), ("tie",)
        )
        for name, relation in [
            ("lt", operator.lt),
            ("le", operator.le),
            ("gt", operator.gt),
            ("ge", operator.ge),
            ("eq", operator.eq),
            ("ne", operator.ne),
        ]
    ),
    OpCase("log1p", fa.log1p, np.log1p, ((-0.9, 3),)),
    OpCase("expm1", fa.expm1, np.expm1, ((-3, 3),)),
    OpCase("tan", fa.tan, np.tan, ((-1.3, 1.3),)),
    OpCase("arctan", fa.arctan, np.arctan, ((-3, 3),)),
    OpCase("arctan2", fa.arctan2, np.arctan2, ((-3, 3), (0.5, 3))),
    OpCase("sinh", fa.sinh, np.sinh, ((-3, 3),)),
    OpCase("cosh", fa.cosh, np.cosh, ((-3, 3),)),
    OpCase("erf", fa.erf, scipy.special.erf, ((-3, 3),)),
    OpCase("softplus", fa.softplus, lambda a: np.logaddexp(0.0, a), ((-6, 6),)),
    OpCase("sign", fa.sign, np.sign, ((-3, 3),), kinks=(0.0,)),
    OpCase("stop_gradient", fa.stop_gradient, lambda a: a, ((-3, 3),), derivative=lambda a: (0.0,)),
    OpCase(
        "pick",
        lambda c, x: record(optable.BY_NAME["pick"].code, c, x),
        lambda c, x: x if c != 0 else -0.0,
        ((-3, 3), (-3, 3)),
        kinks=(0.0,),
    ),
    OpCase(
        "pick_not",
        lambda c, x: record(optable.BY_NAME["pick_not"].code, c, x),
        lambda c, x: -0.0 if c != 0 else x,
        ((-3, 3), (-3, 3)),
        kinks=(0.0,),
    ),
]
CASES = {case.name: case for case in OP_CASES}
SMOOTH_CASES = [case for case in OP_CASES if case.derivative is None]
"""The rows whose derivative is the slope of their value (what gradcheck checks)."""


def expected_partial(case, function, point, index, difference):
    """The derivative a rule must give: by definition, or ``difference(function, point, index)``."""
    if case.derivative is not None:
        return case.derivative(*point)[index]
    return difference(function, point, index)


def sample_operands(case, rng, count=25):
    """Points in the case's domain, at least 0.05 away from its kinks."""
    points = []
    while len(points) < count:
        point = [rng.uniform(low, high) for low, high in case.domain]
        if 0.0 in case.kinks and abs(point[0]) < 0.05:
            continue
        if "tie" in case.kinks and abs(point[0] - point[1]) < 0.05:
            continue
        points.append(point)
    return points
