"""The operators every node handle shares: one mixin for ``Var`` and ``Block``.

Each operator records one node through the handle class's recorder
(``_record`` for two operands, ``_record_unary`` for one): a scalar node
for ``Var`` with scalars, a block node as soon as an array is involved.
The type parameters say what comes back: ``Operators[S, A]`` gives ``S``
with a scalar operand (a ``Var`` or a number) and ``A`` with an array
operand (a ``Block`` or a NumPy array); ``Var`` is ``Operators[Var,
Block]``, ``Block`` is ``Operators[Block, Block]``.

Comparisons (``<``, ``<=``, ``==``...) record a node worth 1.0 or 0.0 with a
zero derivative, usable as a ``fa.where`` condition; ``hash`` stays by
identity, as for PyTorch tensors.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, overload

import numpy as np

from fastad.kernels import optable
from fastad.util.errors import is_long_double, is_real_dtype

if TYPE_CHECKING:
    from fastad.eager.node import Block, Var
    from fastad.util.hints import NumericArray, RealNumber

S = TypeVar("S")
A = TypeVar("A")

_op = optable.BY_NAME
ADD, SUB, MUL, DIV = _op["add"].code, _op["sub"].code, _op["mul"].code, _op["div"].code
NEG, POW, ABS, SQRT = _op["neg"].code, _op["pow"].code, _op["abs"].code, _op["sqrt"].code
LT, LE, GT, GE = _op["lt"].code, _op["le"].code, _op["gt"].code, _op["ge"].code
EQ, NE = _op["eq"].code, _op["ne"].code


def is_number(x: object) -> bool:
    """True for real Python/NumPy scalars (0-d arrays and NumPy bools too) that may appear
    beside a node."""
    return (
        type(x) is float
        or type(x) is int
        or (isinstance(x, (numbers.Real, np.bool_)) and not is_long_double(x))
        or (isinstance(x, np.ndarray) and x.ndim == 0 and is_real_dtype(x.dtype))
    )


def _no_steps(operator: str, written: str) -> NoReturn:
    raise TypeError(
        f"fastad nodes have no {operator} ({written}): it is a step function, whose "
        "derivative is 0 except at the jumps, so fastad records no rule for it. Compute it "
        "on values (x.value), or write what you mean from differentiable ops: the "
        "remainder x - y * n, with n = (x.value // y) held as a constant, has derivative 1 "
        "in x"
    )


class Operators(Generic[S, A]):
    """Python's operators on a node handle, each recording one node."""

    __slots__ = ()

    if TYPE_CHECKING:  # each handle class sets its recorders

        @staticmethod
        def _record(code: int, x: Any, y: Any, /) -> Any: ...

        @staticmethod
        def _record_unary(code: int, x: Any, /) -> Any: ...

        _square_root_power: bool
        """Whether ``x ** 0.5`` is ``sqrt(x)``: NumPy's power of an array (its ufunc takes
        the square root for that exponent: ``-0.0`` stays ``-0.0``, ``-inf`` gives nan)
        for ``Block``; Python's float power, ``pow``, for ``Var``."""

    # Comparisons: the type checker's fallback for other operands is object's ==.
    @overload
    def __eq__(self, other: Var | RealNumber) -> S: ...  # type: ignore[overload-overlap]
    @overload
    def __eq__(self, other: Block | NumericArray) -> A: ...  # type: ignore[overload-overlap]
    @overload
    def __eq__(self, other: object) -> bool: ...
    def __eq__(self, other: object) -> Any:
        return self._record(EQ, self, other)

    @overload
    def __ne__(self, other: Var | RealNumber) -> S: ...  # type: ignore[overload-overlap]
    @overload
    def __ne__(self, other: Block | NumericArray) -> A: ...  # type: ignore[overload-overlap]
    @overload
    def __ne__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> Any:
        return self._record(NE, self, other)

    def __hash__(self) -> int:
        return id(self)

    @overload
    def __lt__(self, other: Var | RealNumber) -> S: ...
    @overload
    def __lt__(self, other: Block | NumericArray) -> A: ...
    def __lt__(self, other: Any) -> Any:
        return self._record(LT, self, other)

    @overload
    def __le__(self, other: Var | RealNumber) -> S: ...
    @overload
    def __le__(self, other: Block | NumericArray) -> A: ...
    def __le__(self, other: Any) -> Any:
        return self._record(LE, self, other)

    @overload
    def __gt__(self, other: Var | RealNumber) -> S: ...
    @overload
    def __gt__(self, other: Block | NumericArray) -> A: ...
    def __gt__(self, other: Any) -> Any:
        return self._record(GT, self, other)

    @overload
    def __ge__(self, other: Var | RealNumber) -> S: ...
    @overload
    def __ge__(self, other: Block | NumericArray) -> A: ...
    def __ge__(self, other: Any) -> Any:
        return self._record(GE, self, other)

    # -- arithmetic: one node per operator --------------------------------------

    @overload
    def __add__(self, other: Var | RealNumber) -> S: ...
    @overload
    def __add__(self, other: Block | NumericArray) -> A: ...
    def __add__(self, other: Any) -> Any:
        return self._record(ADD, self, other)

    @overload
    def __radd__(self, other: RealNumber) -> S: ...
    @overload
    def __radd__(self, other: NumericArray) -> A: ...
    def __radd__(self, other: Any) -> Any:
        return self._record(ADD, other, self)

    @overload
    def __sub__(self, other: Var | RealNumber) -> S: ...
    @overload
    def __sub__(self, other: Block | NumericArray) -> A: ...
    def __sub__(self, other: Any) -> Any:
        return self._record(SUB, self, other)

    @overload
    def __rsub__(self, other: RealNumber) -> S: ...
    @overload
    def __rsub__(self, other: NumericArray) -> A: ...
    def __rsub__(self, other: Any) -> Any:
        return self._record(SUB, other, self)

    @overload
    def __mul__(self, other: Var | RealNumber) -> S: ...
    @overload
    def __mul__(self, other: Block | NumericArray) -> A: ...
    def __mul__(self, other: Any) -> Any:
        return self._record(MUL, self, other)

    @overload
    def __rmul__(self, other: RealNumber) -> S: ...
    @overload
    def __rmul__(self, other: NumericArray) -> A: ...
    def __rmul__(self, other: Any) -> Any:
        return self._record(MUL, other, self)

    @overload
    def __truediv__(self, other: Var | RealNumber) -> S: ...
    @overload
    def __truediv__(self, other: Block | NumericArray) -> A: ...
    def __truediv__(self, other: Any) -> Any:
        return self._record(DIV, self, other)

    @overload
    def __rtruediv__(self, other: RealNumber) -> S: ...
    @overload
    def __rtruediv__(self, other: NumericArray) -> A: ...
    def __rtruediv__(self, other: Any) -> Any:
        return self._record(DIV, other, self)

    @overload
    def __pow__(self, exponent: Var | RealNumber, modulo: None = None) -> S: ...
    @overload
    def __pow__(self, exponent: Block | NumericArray, modulo: None = None) -> A: ...
    def __pow__(self, exponent: Any, modulo: object = None) -> Any:
        if modulo is not None:
            return NotImplemented
        # x ** 2 records x * x: one node instead of a constant and a pow, and
        # the article's graph (its node 12 is d * d).
        if is_number(exponent) and exponent == 2:
            return self._record(MUL, self, self)
        if self._square_root_power and is_number(exponent) and exponent == 0.5:
            return self._record_unary(SQRT, self)
        return self._record(POW, self, exponent)

    @overload
    def __rpow__(self, base: RealNumber) -> S: ...
    @overload
    def __rpow__(self, base: NumericArray) -> A: ...
    def __rpow__(self, base: Any) -> Any:
        return self._record(POW, base, self)

    # The remainder and the floor division: steps, with no derivative fastad records.
    def __mod__(self, other: object) -> NoReturn:
        _no_steps("%", "x % y")

    def __rmod__(self, other: object) -> NoReturn:
        _no_steps("%", "y % x")

    def __floordiv__(self, other: object) -> NoReturn:
        _no_steps("//", "x // y")

    def __rfloordiv__(self, other: object) -> NoReturn:
        _no_steps("//", "y // x")

    def __divmod__(self, other: object) -> NoReturn:
        _no_steps("divmod", "divmod(x, y)")

    def __rdivmod__(self, other: object) -> NoReturn:
        _no_steps("divmod", "divmod(y, x)")

    def __neg__(self) -> S:
        return self._record_unary(NEG, self)

    def __pos__(self) -> S:
        return self  # type: ignore[return-value]

    def __abs__(self) -> S:
        return self._record_unary(ABS, self)
