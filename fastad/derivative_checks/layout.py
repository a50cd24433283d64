"""The flat view of a checked function and the user's names for its elements.

Every check runs on a flat point ``z`` of ``n`` numbers and flat outputs of
``m`` numbers (``m = 1`` for a scalar). :class:`Layout` maps a flat
``(output, input)`` pair back to what the user wrote: the Jacobian index
``output index + input index`` (the layout of
``torch.autograd.functional.jacobian`` and ``jax.jacobian``), or
``(argument, element)`` for a function of arrays, and names it in messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fastad.util.hints import FloatArray

    Values = Callable[[FloatArray], FloatArray]
    """On the flat view: ``z`` of shape (n,) to the flat outputs, shape (m,)."""


def format_position(index: tuple[int, ...]) -> str:
    """A multi-index as the message prints it: 1-D positions as integers."""
    return str(index[0]) if len(index) == 1 else str(index)


class Layout:
    """Flat indices in the user's terms: Jacobian indices and element names.

    ``input_shapes`` holds the point's shape (one input) or each argument's
    shape (``arguments=True``, a function of arrays); ``output_shape`` is
    ``()`` for a scalar output.
    """

    def __init__(
        self,
        input_shapes: Iterable[tuple[int, ...]],
        output_shape: tuple[int, ...],
        arguments: bool,
        positions: list[int] | None = None,
    ) -> None:
        self.input_shapes = [tuple(shape) for shape in input_shapes]
        # The arguments' positions in the user's call (a function of arrays with wrt=).
        self.positions = positions if positions is not None else list(range(len(self.input_shapes)))
        self.output_shape = tuple(output_shape)
        self.arguments = arguments
        sizes = [math.prod(shape) for shape in self.input_shapes]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.n = int(self.offsets[-1])
        self.m = math.prod(self.output_shape)

    @property
    def scalar_output(self) -> bool:
        return self.output_shape == ()

    def split(self, z: FloatArray) -> FloatArray | list[float | FloatArray]:
        """The user's point at flat ``z``: one array, or the argument list (floats for 0-d)."""
        parts = [
            z[start:stop].reshape(shape).copy()
            for start, stop, shape in zip(
                self.offsets[:-1], self.offsets[1:], self.input_shapes, strict=True
            )
        ]
        if not self.arguments:
            return parts[0]
        return [float(part) if part.ndim == 0 else part for part in parts]

    def _input(self, j: int) -> tuple[int, tuple[int, ...]]:
        argument = int(np.searchsorted(self.offsets, j, side="right") - 1)
        shape = self.input_shapes[argument]
        element = np.unravel_index(int(j - self.offsets[argument]), shape)
        return argument, tuple(int(i) for i in element)

    def index(self, o: int, j: int) -> tuple[Any, ...]:
        """Flat (output ``o``, input ``j``) as an index into the user's ``analytic``."""
        argument, element = self._input(j)
        output = tuple(int(i) for i in np.unravel_index(o, self.output_shape))
        if self.arguments:  # per argument, output index + element (JAX's jacobian layout)
            return (self.positions[argument], output + element)
        return output + element

    def name(self, o: int, j: int) -> str:
        """Flat (output ``o``, input ``j``) in words: "input 0", "argument 1 element (0, 2)"."""
        argument, element = self._input(j)
        if self.arguments:
            name = f"argument {self.positions[argument]}"
            name += f" element {format_position(element)}" if element else ""
        else:
            name = f"input {format_position(element)}" if element else "the input"
        if not self.scalar_output:
            output = tuple(int(i) for i in np.unravel_index(o, self.output_shape))
            name += f" of output {format_position(output)}"
        return name

    def where(self, j: int, z: FloatArray) -> str:
        """The point's value at flat input ``j``, for a kink report."""
        return f"{'its value is' if self.arguments else 'x ='} {float(z[j])!r}"

    def unflatten(self, matrix: FloatArray) -> FloatArray | list[FloatArray]:
        """An ``(m, n)`` array in the user's form: the Jacobian, or gradients per argument."""
        if self.arguments:
            return [
                matrix[:, start:stop].reshape(self.output_shape + shape)
                for start, stop, shape in zip(
                    self.offsets[:-1], self.offsets[1:], self.input_shapes, strict=True
                )
            ]
        return matrix.reshape(self.output_shape + self.input_shapes[0])
