"""Which tier runs a call of a function of arrays: its generated kernel or the interpreter.

:class:`Generated` builds the function's generated code
(:func:`fastad.compiled.array_kernel.build`; None where an op has no
generated rule, with the reason), keeps the :class:`~fastad.compiled.tiers.Tiers`
that decide when it runs (counting the interpreter's work under ``"auto"``),
and runs the generated calls: a call refused or flagged (a nan in a
gradient) comes back with a status other than ``OK``, and the caller
runs the interpreter instead.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fastad.compiled import array_kernel, native_code
from fastad.compiled.array_interpreter import unit
from fastad.compiled.definition import ArrayDefinition
from fastad.compiled.tiers import HOT_CALLS, HOT_NODE_POINTS, Tier, Tiers
from fastad.eager.handle import storage_of

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from fastad.util.hints import FloatArray

OK = array_kernel.OK


class Generated:
    """A function of arrays' generated tier and the choice of tier per call.

    Parameters
    ----------
    definition : ArrayDefinition
        The traced function (its tape, ids, ``wrt``, batch axes, backend).
    lock : threading.Lock
        The function's lock: generated calls share its buffers.

    Attributes
    ----------
    code : BlockCode or None
        The generated code; None under ``backend="interpret"`` or where it cannot run.
    """

    def __init__(self, definition: ArrayDefinition, lock: threading.Lock) -> None:
        tape = definition.tape
        self._lock = lock
        elements = sum(
            math.prod(array_kernel.shape_of(storage_of(tape), i)) for i in range(len(tape))
        )  # element operations per call (a scalar counts 1): the tiers' measure of work
        self._work = max(elements, HOT_NODE_POINTS // HOT_CALLS)
        self.code: array_kernel.BlockCode | None = None
        self._tiers: Tiers | None = None
        self._no_code = ""
        backend = definition.backend
        if backend == "interpret":
            self._no_code = 'backend="interpret"'
            return
        wrt = None if definition.wrt is None else list(definition.wrt[0])
        try:
            code = array_kernel.build(
                storage_of(tape),
                [node.id for node in definition.inputs],
                definition.output.id,
                list(range(len(definition.inputs))) if wrt is None else wrt,
                definition.guards,
                definition.integers,
                f"the function of arrays {definition.name!r}",
                definition.batch_axes,
                native_code.fast_math_for(definition.name, stacklevel=4)  # load's caller
                if definition.fast_math
                else None,
            )
        except array_kernel.Unsupported as error:
            if backend == "codegen":
                raise NotImplementedError(
                    f'backend="codegen": {error}; use backend="auto" or "interpret", which '
                    "replay the tape"
                ) from None
            self._no_code = f'backend="auto": {error}; interpreted'
            return
        self.code = code
        self._tiers = Tiers(backend, code)

    def tier(self, call: str) -> Tier:
        """:meth:`fastad.BlockFunction.tier`: which tier runs ``call`` now, and why."""
        if call not in array_kernel.MODES:
            raise ValueError(f'call must be "grad", "values", "vjp", "jvp" or "hvp", got {call!r}')
        if self.code is None or self._tiers is None:
            return Tier("interpret", self._no_code)
        if call not in self.code.modes:
            reason = self.code.unsupported.get(call)
            if reason is not None:
                return Tier("interpret", f"no generated code: {reason}")
            if call in ("grad", "hvp"):
                return Tier("interpret", "the output is an array: it has no gradient")
            if call == "jvp":
                return Tier("interpret", "the output is an argument: its JVP is the direction")
            return Tier("interpret", "the output is an argument: its VJP is the cotangent")
        found = self._tiers.tier(call)
        fast_math = self.code.fast_math_reason()
        if fast_math is None or found.name != "codegen":
            return found
        return found._replace(reason=f"{found.reason}; {fast_math}")

    def of(self, call: str) -> array_kernel.BlockCode:
        """The generated code for ``call``, else raises naming the tier's reason."""
        if self.code is None or call not in self.code.modes:
            raise ValueError(f"no generated code for {call!r}: {self.tier(call).reason}")
        return self.code

    def ready(self, mode: str) -> bool:
        """Whether generated code runs this call (counting the work while it does not)."""
        code, tiers = self.code, self._tiers
        if code is None or tiers is None or mode not in code.modes:
            return False
        return tiers.ready(mode, self._work)

    def run(
        self,
        mode: str,
        checked: list[Any],
        targets: list[Any] | None,
        rows: int | None,
        seed: Any = None,
        directions: list[Any] | None = None,
    ) -> tuple[int, Any, Any]:
        """One generated call: :meth:`fastad.compiled.array_kernel.BlockCode.run`'s result."""
        code = cast(array_kernel.BlockCode, self.code)  # ready(mode) said it is there
        return code.run(mode, checked, targets, rows, seed, directions)

    def along(
        self, mode: str, checked: list[Any], directions: Sequence[ArrayLike], rows: int | None
    ) -> tuple[int, Any, Any]:
        """One generated call of ``mode`` (``jvp`` or ``hvp``) along ``directions``, one per
        ``wrt`` position (checked by the caller)."""
        moved = [array_kernel.kernel_argument(d) for d in directions]
        return self.run(mode, checked, None, rows, directions=moved)

    def jacobian(
        self,
        checked: list[Any],
        matrix: FloatArray,
        output: tuple[int, ...],
        shapes: list[tuple[int, ...]],
        rows: int | None,
    ) -> bool:
        """Fill ``matrix`` by generated VJPs (a row each) or JVPs (a column each); False
        where that code does not run, or a call was refused or flagged (nothing kept)."""
        m, n = matrix.shape
        mode = "vjp" if m <= n else "jvp"
        with self._lock:
            if not self.ready(mode):
                return False
            for line in range(m if mode == "vjp" else n):
                if mode == "vjp":
                    u = unit(line, [output])[0]
                    seed = float(u) if not output else u
                    status, _, found = self.run("vjp", checked, None, rows, seed)
                    if status != OK:
                        return False
                    matrix[line] = np.concatenate([np.reshape(g, -1) for g in found])
                else:
                    status, _, found = self.along("jvp", checked, unit(line, shapes), rows)
                    if status != OK:
                        return False
                    matrix[:, line] = np.reshape(found, -1)
        return True

    def hessian(
        self,
        checked: list[Any],
        matrix: FloatArray,
        shapes: list[tuple[int, ...]],
        rows: int | None,
    ) -> bool:
        """Fill ``matrix`` by generated Hessian-vector products, one per row; False where
        that code does not run, or a call was refused or flagged (nothing kept)."""
        with self._lock:
            if not self.ready("hvp"):
                return False
            for row in range(matrix.shape[0]):
                status, _, found = self.along("hvp", checked, unit(row, shapes), rows)
                if status != OK:
                    return False
                matrix[row] = np.concatenate([np.reshape(p, -1) for p in found])
        return True
