"""The arguments of a function of arrays: checked against the traced shapes, and the
shapes of a call (any number of rows along the batch axis), of its output, of its
directions and ``out`` arrays; gradients returned per argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.compiled import batch_axis
from fastad.compiled.definition import ArrayDefinition
from fastad.util.errors import is_real_dtype, not_real

FLOAT64 = np.dtype(np.float64)  # `dtype is FLOAT64`: a cheaper test than ==


class Arguments:
    """The argument rules of one traced function of arrays.

    Parameters
    ----------
    definition : ArrayDefinition
        Its traced shapes, batch positions and axes, ``wrt`` and output.
    """

    def __init__(self, definition: ArrayDefinition) -> None:
        self.shapes = definition.shapes
        self.batch = definition.batch
        self._batch_axes = definition.batch_axes
        self._count = len(definition.inputs)
        self._wrt = definition.wrt
        self._tape = definition.tape
        self._output = definition.output.id

    def wrt_positions(self) -> tuple[list[int], bool]:
        """The differentiated arguments' positions, and whether ``wrt`` was one int."""
        if self._wrt is None:
            return list(range(self._count)), False
        return list(self._wrt[0]), self._wrt[1]

    def checked(self, arguments: Iterable[ArrayLike]) -> list[Any]:
        """The arguments as arrays, each of the traced shape (any number of rows along the
        batch axis, the same in each batch argument) and a real dtype (else raises)."""
        listed = list(arguments)
        if len(listed) != self._count:
            raise ValueError(f"expected {self._count} arguments, got {len(listed)}")
        shapes = self.shapes
        if self.batch:
            leading = np.shape(listed[self.batch[0]])[:1]
            if leading and leading[0] >= 1:
                shapes = self.shapes_at(leading[0])
        checked = []
        for position, (shape, value) in enumerate(zip(shapes, listed, strict=True)):
            if type(value) is np.ndarray and value.dtype is FLOAT64 and value.shape == shape:
                checked.append(value)  # the common case, checked at once
                continue
            array = np.asarray(value)
            if not is_real_dtype(array.dtype):
                raise not_real(value, f"argument {position}")
            if array.shape != shape:
                raise ValueError(self._shape_error(position, array.shape, shape))
            checked.append(array)
        return checked

    def _shape_error(self, position: int, found: tuple[int, ...], expected: tuple[int, ...]) -> str:
        if position not in self.batch:
            return (
                f"argument {position} has shape {found}, the traced function expects "
                f"{expected} (a function of arrays is traced for one shape of each argument: "
                "compile one per shape, or name the arguments whose first axis is the batch "
                "with batch=)"
            )
        traced = self.shapes[position]
        if len(found) != len(traced) or found[1:] != traced[1:] or found[0] < 1:
            return (
                f"argument {position} has shape {found}, the traced function expects "
                f"(rows,) + {traced[1:]} with at least one row (a batch argument: its first "
                "axis is the batch)"
            )
        return (
            f"argument {position} has {found[0]} rows, argument {self.batch[0]} has "
            f"{expected[0]}: the batch arguments share one number of rows"
        )

    def shapes_at(self, rows: int) -> list[tuple[int, ...]]:
        """Every argument's shape in a call with ``rows`` rows along the batch axis."""
        return [
            (rows, *shape[1:]) if position in self.batch else shape
            for position, shape in enumerate(self.shapes)
        ]

    def call_shapes(self, checked: Sequence[Any]) -> list[tuple[int, ...]]:
        """The shapes of checked arguments (the traced ones, but along the batch axis)."""
        if not self.batch:
            return self.shapes
        return self.shapes_at(np.shape(checked[self.batch[0]])[0])

    def wrt_shapes(self, checked: Sequence[Any]) -> list[tuple[int, ...]]:
        """The shapes of the differentiated arguments in this call."""
        call_shapes = self.call_shapes(checked)
        return [call_shapes[p] for p in self.wrt_positions()[0]]

    def call_rows(self, checked: Sequence[Any]) -> int | None:
        """The call's number of rows along the batch axis (None without one)."""
        return np.shape(checked[self.batch[0]])[0] if self.batch else None

    def output_shape_at(self, rows: int | None) -> tuple[int, ...]:
        """The output's shape in a call with ``rows`` rows (None: no batch): ``()`` for a
        scalar."""
        block = self._tape.block_value(self._output)
        if block is None:
            return ()
        axes = self._batch_axes.get(self._output, ())
        return batch_axis.shape_at(tuple(block.shape), axes, rows) if rows else tuple(block.shape)

    def cotangent(self, cotangent: ArrayLike, rows: int | None) -> NDArray[np.float64]:
        """``vjp``'s cotangent: finite, of the output's shape in this call (else raises)."""
        u = np.asarray(cotangent)
        if not is_real_dtype(u.dtype):
            raise not_real(cotangent, "the cotangent")
        u = u.astype(np.float64, copy=False)
        shape = self.output_shape_at(rows)
        if u.shape != shape:
            raise ValueError(f"the cotangent has shape {u.shape}, the output {shape}")
        if not np.isfinite(u).all():
            bad = np.argwhere(~np.isfinite(u))[0] if u.ndim else ()
            where = f" at index {tuple(int(i) for i in bad)}" if u.ndim else ""
            raise ValueError(
                f"the cotangent must be finite, got {u[tuple(bad)] if u.ndim else float(u)}{where}"
            )
        return u

    def directions(
        self, directions: ArrayLike | Iterable[ArrayLike], shapes: Sequence[tuple[int, ...]]
    ) -> list[ArrayLike]:
        """One direction per differentiated argument, each of its shape in this call
        (``shapes``, from :meth:`call_shapes`), else raises."""
        positions, single = self.wrt_positions()
        if not single and not isinstance(directions, (list, tuple)):
            raise TypeError(
                f"directions must be a list or tuple with one direction per gradient "
                f"({len(positions)}), got {type(directions).__name__}"
            )
        along: list[ArrayLike] = (
            [cast(ArrayLike, directions)] if single else list(cast(Iterable[ArrayLike], directions))
        )
        if len(along) != len(positions):
            raise ValueError(
                f"expected {len(positions)} directions, one per gradient, got {len(along)}"
            )
        for position, direction in zip(positions, along, strict=True):
            try:
                array = np.asarray(direction)
            except ValueError:  # a ragged sequence: several directions given for one
                array = None
            if array is not None and not is_real_dtype(array.dtype):
                raise not_real(direction, f"the direction for argument {position}")
            shape = None if array is None else array.shape
            if shape != shapes[position]:
                found = f"shape {shape}" if shape is not None else "a ragged sequence"
                several = " (one per gradient: a list where several are differentiated)"
                raise ValueError(
                    f"the direction for argument {position} has {found}, the argument has "
                    f"shape {shapes[position]}{several if single else ''}"
                )
        return along

    def out_arrays(self, out: Any, arguments: list[Any]) -> list[NDArray[np.float64] | None] | None:
        """``out`` checked: one writable float64 C-contiguous array (or None) per gradient,
        sharing memory with no argument and no other ``out`` array."""
        if out is None:
            return None
        positions, single = self._wrt or (list(range(self._count)), False)
        listed = [out] if single else out
        form = "one array" if single else f"a list of {len(positions)} (arrays or None)"
        if not isinstance(listed, (list, tuple)):
            raise TypeError(f"out must be {form}, one per gradient, got {type(out).__name__}")
        if len(listed) != len(positions):
            raise ValueError(
                f"out must be {form}, one per gradient, got a {type(out).__name__} of {len(listed)}"
            )
        checked: list[NDArray[np.float64] | None] = []
        shapes = self.call_shapes(arguments)
        for position, array in zip(positions, listed, strict=True):
            shape = shapes[position]
            if array is None:
                checked.append(None)
                continue
            if not shape:
                raise ValueError(
                    f"out for argument {position}: a scalar argument's gradient is a float; "
                    "give None there"
                )
            if not isinstance(array, np.ndarray) or array.dtype != np.float64:
                # A wrong type or dtype is a TypeError, as for NumPy's out= and the
                # compiled functions of scalars; a wrong shape or layout a ValueError.
                found = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
                raise TypeError(
                    f"out for argument {position} must be a float64 NumPy array of shape "
                    f"{shape}, got {found}"
                )
            if array.shape != shape or not array.flags.c_contiguous or not array.flags.writeable:
                described = (
                    f"array of shape {array.shape}"
                    + ("" if array.flags.c_contiguous else ", not C-contiguous")
                    + ("" if array.flags.writeable else ", read-only")
                )
                raise ValueError(
                    f"out for argument {position} must be a writable C-contiguous float64 array "
                    f"of shape {shape}, got {described}"
                )
            others = [a for a in arguments if isinstance(a, np.ndarray)] + [
                a for a in checked if a is not None
            ]
            if any(np.may_share_memory(array, other) for other in others):
                raise ValueError(
                    f"out for argument {position} shares memory with an argument or another "
                    "out array: the gradients would overwrite what the call reads"
                )
            checked.append(array)
        return checked


def copied_into(target: NDArray[np.float64], gradient: Any) -> NDArray[np.float64]:
    """``gradient`` written into ``target``; ``target``."""
    np.copyto(target, gradient)
    return target


def by_argument(results: Iterable[Any], single: bool) -> Any:
    """A function of arrays' per-argument results: arrays, floats for scalars; one if ``single``."""
    listed = [r if isinstance(r, np.ndarray) and r.ndim else float(r) for r in results]
    return listed[0] if single else listed
