"""Exceptions raised by fastad, and the checks of an argument's kind that raise them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
from numpy.typing import NDArray


def flag(value: object, name: str) -> bool:
    """A switch given as True or False (NumPy's bools too), else a TypeError naming it."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """An integer, Python's or NumPy's, and not a bool (``True`` is no count or id)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether fastad takes numbers of ``dtype``: bools, integers and floats of at most
    64 bits, which it converts to float64 as NumPy does (floats exactly, integers exactly
    up to 2**53). Long double (``np.longdouble`` where it is wider than float64: x87's
    80 bits, stored as float96 or float128) is refused: float64 would round it, and a
    computation asked in extended precision would come back in float64 without a word
    (JAX and PyTorch refuse it too)."""
    return dtype.kind in "biu" or (dtype.kind == "f" and dtype.itemsize <= 8)


_WIDE_SCALARS = {np.longdouble} if np.dtype(np.longdouble).itemsize > 8 else set()
"""NumPy's scalar types of a float wider than float64 (none where long double is float64)."""


def is_long_double(value: object) -> bool:
    """Whether ``value`` is a NumPy scalar or array of a float wider than float64.

    Asked of every NumPy scalar beside a node, so the scalar's type is looked up, not
    its dtype (about half the time)."""
    if type(value) in _WIDE_SCALARS:
        return True
    return isinstance(value, np.ndarray) and (value.dtype.kind == "f" and value.dtype.itemsize > 8)


def is_real_number(item: object) -> bool:
    """Whether ``item``, an element of an object array, is a real number fastad takes:
    a Python or NumPy bool, int or float, but no float wider than float64."""
    return isinstance(item, (int, float, np.integer, np.floating, np.bool_)) and not (
        is_long_double(item)
    )


def as_float64(value: object, what: str) -> NDArray[np.float64]:
    """``value`` as a float64 array: numbers of a real dtype (``is_real_dtype``), or an
    object array (a list) of real numbers (``is_real_number``). Anything else raises
    ``not_real``: where ``np.asarray(value, np.float64)`` would round a long double, drop
    a complex part (with only a warning) or parse a string."""
    array = np.asarray(value)
    if is_real_dtype(array.dtype):
        return array.astype(np.float64, copy=False)
    if array.dtype == object and all(is_real_number(item) for item in array.flat):
        return array.astype(np.float64)
    raise not_real(array, what)


def not_real(value: object, what: str) -> TypeError:
    """The error for ``value`` that should hold real numbers and does not: it names the
    dtype and, for objects, the first element that is not a real number and where."""
    array = np.asarray(value)
    if array.dtype.kind == "f":  # a float is_real_dtype refuses: wider than float64
        return TypeError(
            f"{what} has dtype {array.dtype}, wider than float64: fastad computes in "
            "float64, which would round it; convert it yourself where float64 is precise "
            "enough (x.astype(np.float64))"
        )
    found = ""
    if array.dtype == object:
        for index, item in np.ndenumerate(array):
            if not is_real_number(item):
                text = repr(item)
                text = text if len(text) <= 40 else text[:37] + "..."
                where = f" at index {index}" if array.ndim else ""
                found = f" ({type(item).__name__} {text}{where})"
                break
    return TypeError(
        f"{what} must hold real numbers, got dtype {array.dtype}{found}: fastad "
        "differentiates real numbers and NumPy arrays of them; pass those (the arrays "
        "themselves, not a dict or list that holds them)"
    )


class NodeIdError(IndexError, ValueError):
    """A node id out of range for its tape: an ``IndexError``, as an index past the end
    is in Python, and a ``ValueError``, as any bad argument to fastad is."""


class StaleNodeError(ValueError):
    """A node was used after its tape was reset."""


class TraceError(RuntimeError):
    """A traced value left the tape (``float(x)``, ``x.value``) during ``fa.compile``."""


class ConcurrentRecordingError(RuntimeError):
    """Several threads recorded onto one tape at the same time; its node ids are invalid.

    Raised before any sweep or read of the tape's rows (also when one
    thread read the tape while another recorded onto it), and again until
    ``tape.reset()``. Sweeps on one tape from several threads are safe.
    """


class BranchError(ValueError):
    """A compiled function was evaluated where a traced branch goes the other way.

    Attributes
    ----------
    guard : str
        The comparison traced, as written (``"x > 0.0"``, or ``bool(...)``).
    traced : bool
        Its outcome when the function was traced.
    indices : numpy.ndarray of int64
        Every failing point's index in the batch, ascending (one index, 0,
        for a call at one point), whichever guard failed there. Pass
        ``errors="mask"`` to get ``nan`` at these points and their mask
        instead of this error.
    others : tuple of str
        The other guards that failed at some of those points (``guard`` is
        the first failing point's), in the order their first points come.
    point : tuple of float, or None
        The first failing point's coordinates (None for a function of arrays).
    total : int
        How many points the call evaluated.
    """

    def __init__(
        self,
        guard: str,
        traced: bool,
        indices: NDArray[np.int64] | None = None,
        point: tuple[float, ...] | None = None,
        total: int = 1,
        others: tuple[str, ...] = (),
    ) -> None:
        self.guard = guard
        self.traced = traced
        self.indices = np.zeros(1, np.int64) if indices is None else np.asarray(indices, np.int64)
        self.point = point
        self.total = total
        self.others = others
        super().__init__(self._message())

    def _message(self) -> str:
        where = (
            "for these arguments"
            if self.point is None
            else f"at point {int(self.indices[0])} {list(self.point)}"
        )
        count = f" ({self.indices.size} of {self.total} points differ)" if self.total > 1 else ""
        if self.others:
            count += " (other points fail " + ", ".join(f"`{g}`" for g in self.others) + ")"
        return (
            f"the traced function branches on `{self.guard}`, which was {self.traced} when "
            f"traced and is {not self.traced} {where}{count}. A replay cannot take the other "
            'branch: use fa.where for a branch-free select, errors="mask" to get nan at the '
            "failing points and their mask, or compile a function for each branch."
        )

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        # Exceptions pickle their args; these are the fields (Dask sends errors back).
        fields = (self.guard, self.traced, self.indices, self.point, self.total, self.others)
        return (type(self), fields)

    def at_offset(self, start: int, total: int) -> BranchError:
        """The same error for a batch that began ``start`` points into one of ``total``.

        A chunk of a larger computation (``fastad.dask``) reports global indices.
        """
        return BranchError(
            self.guard, self.traced, self.indices + start, self.point, total, self.others
        )


@dataclass(frozen=True)
class NonFiniteOrigin:
    """Where a ``nan`` or ``inf`` first appeared on a tape.

    ``phase`` is ``"forward"`` when a node's value is the first non-finite
    one produced from finite inputs (or a leaf/constant that holds one), and
    ``"backward"`` when a finite adjoint times a node's local derivative for
    operand ``slot`` was the first non-finite gradient contribution. A
    compiled call's check has one more, ``"derivative"`` (``node`` -1): the
    values and adjoints are finite, a tangent or second-order rule was not.
    """

    phase: str
    node: int
    op: str
    label: str | None
    inputs: tuple[object, ...]
    value: float
    slot: int = -1
    partial: float = float("nan")
    source: tuple[str, int] | None = None  # (file, line) on debug tapes
    block_rule: bool = False  # a block op's rule (no single local derivative)

    def describe(self) -> str:
        if self.phase == "derivative":
            return (
                "replayed eagerly, every value and first-order adjoint is finite at this "
                "point: the non-finite result comes from a tangent or second-order rule, "
                "which checked mode does not trace node by node"
            )
        name = f"node {self.node} ({self.op}" + (f" '{self.label}')" if self.label else ")")
        if self.source is not None:
            name += f" at {os.path.basename(self.source[0])}:{self.source[1]}"
        inputs = ", ".join(repr(x) for x in self.inputs)
        if self.phase == "forward" and not self.inputs:
            return f"{name} holds {self.value!r}: a non-finite leaf or constant"
        if self.phase == "forward":
            return f"{name} produced {self.value!r} from finite inputs ({inputs})"
        if self.block_rule:
            return (
                f"{name} sent a non-finite gradient to operand {self.slot} from a finite "
                f"upstream gradient (its inputs: {inputs})"
            )
        return (
            f"{name} has local derivative {self.partial!r} with respect to operand "
            f"{self.slot} at inputs ({inputs}); times its finite adjoint it sent a "
            f"non-finite gradient contribution"
        )


class NonFiniteError(FloatingPointError):
    """A checked computation produced ``nan`` or ``inf``; ``.origin`` says where.

    From a compiled call with ``check=True``, ``point`` is the index of the
    first point (in the batch) whose finite inputs gave a non-finite result,
    ``coordinates`` that point, and ``total`` the batch's size; they are
    None, None and 1 on a tape.
    """

    def __init__(
        self,
        origin: NonFiniteOrigin,
        point: int | None = None,
        coordinates: tuple[float, ...] | None = None,
        total: int = 1,
        hint: str = "",
    ) -> None:
        self.origin = origin
        self.point = point
        self.coordinates = coordinates
        self.total = total
        self._hint = hint
        message = origin.describe() + hint
        if point is not None:
            message = (
                f"point {point} {list(coordinates or ())} of {total} (the first whose finite "
                f"inputs gave a non-finite result): {message}"
            )
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        fields = (self.origin, self.point, self.coordinates, self.total, self._hint)
        return (type(self), fields)

    def at_offset(self, start: int, total: int) -> NonFiniteError:
        """The same error for a batch that began ``start`` points into one of ``total``."""
        point = None if self.point is None else self.point + start
        return NonFiniteError(self.origin, point, self.coordinates, total, self._hint)
