"""Type aliases used in fastad's hints.

Only for annotations: the modules import this under ``TYPE_CHECKING``, so it
adds nothing at run time. The tape's own array types come from
``fastad.kernels.arrays``, which documents their dtypes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from fastad.kernels.arrays import BoolArray, FloatArray, IdArray, IndexArray, OpcodeArray

__all__ = [
    "BoolArray",
    "FloatArray",
    "IdArray",
    "IndexArray",
    "NumericArray",
    "PlainArrayLike",
    "Values",
    "ObjectArray",
    "OpcodeArray",
    "RealNumber",
    "RuleValue",
    "StrPath",
]

RealNumber: TypeAlias = float | np.floating[Any] | np.integer[Any]
"""A real number that may stand beside a node (``int`` and ``bool`` included, as for
``float`` hints). A 0-d array counts as a number at run time too."""

NumericArray: TypeAlias = NDArray[np.bool_ | np.integer[Any] | np.floating[Any]]
"""A real NumPy array: what becomes a block constant beside a node."""

ObjectArray: TypeAlias = NDArray[np.object_]

Values: TypeAlias = Any
"""The values a compiled function returns: a float at one point, an array for a batch
or for several outputs. NumPy's hints do not carry an array's rank, so a point and a
batch have one type; ``Any`` lets each be used as what it is (``round(value)``,
``values.mean()``), where a union would refuse both."""

PlainArrayLike: TypeAlias = NDArray[Any] | Sequence[Any] | RealNumber
"""Array data that is not a node: the NumPy overloads of the fused ops take it. (A
``Block`` is array-like to type checkers, so NumPy's functions accept blocks; an
overload typed ``ArrayLike`` would then overlap the block overloads.)"""
"""An object array of nodes (:func:`fastad.scalar_nodes`)."""

StrPath: TypeAlias = str | os.PathLike[str]

RuleValue: TypeAlias = Any
"""An operand value, output, adjoint or tangent of a block rule (``fastad.core.block_rules``): an
array, a float, or None (nothing reached it). Which one depends on the op (and the
operand's shape), known at run time only, so these are not checked statically."""
