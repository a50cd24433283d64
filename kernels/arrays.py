"""The arrays fastad's kernels take.

A tape of ``n`` nodes is five parallel arrays: ``opcode`` (uint8), ``in0``
and ``in1`` (int32 operand ids, -1 where the op has fewer operands), ``val``
and ``grad`` (float64). Every operand id is smaller than the id of the node
that uses it, so increasing id order is a topological order and decreasing
id order is a reverse one.

The kernels trust these dtypes (see ``jit.py``): the arrays are C-contiguous
and the tape invariants hold. The front end (``fastad.eager.tape``)
validates every tape before a kernel sees it.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
from numpy.typing import NDArray

OpcodeArray: TypeAlias = NDArray[np.uint8]
IndexArray: TypeAlias = NDArray[np.int32]
"""Operand ids of a tape (``in0``, ``in1``), and a compiled function's packed program."""
IdArray: TypeAlias = NDArray[np.int64]
"""Node ids chosen by the caller (``nodes``, ``inputs``) and guard statuses."""
FloatArray: TypeAlias = NDArray[np.float64]
BoolArray: TypeAlias = NDArray[np.bool_]
