"""What a compiled function is, as one record per kind: the single input of its constructor.

Tracing (:mod:`fastad.compiled.trace`) and reading a file or a pickle
(:mod:`fastad.compiled.files`) both build these records, and
``CompiledFunction`` / ``BlockFunction`` are built from them in one place
each, so a field added here reaches traced, loaded and unpickled functions
alike (``tests/test_compiled_records.py`` checks that a round trip keeps
every field).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from fastad.compiled.batch_axis import Axes
    from fastad.eager.node import Block, Var
    from fastad.eager.optimize import OptimizationReport
    from fastad.eager.tape import Tape
    from fastad.util.hints import IdArray


@dataclass(frozen=True, eq=False)
class ScalarProgram:
    """A traced function of scalars: its frozen tape and the ids that make it a program.

    Attributes
    ----------
    tape : Tape
        The traced (and, by default, optimised) tape.
    inputs, outputs : IdArray
        The input and output node ids, in argument and output order.
    guards : IdArray
        Rows ``(node id, truth)``: the ``bool()`` outcomes every replay re-checks.
    scalar_output : bool
        The function returned one node, not a sequence of them.
    sources : dict
        ``{node id: (file, line)}`` of the nodes whose recording line is known.
    optimization : OptimizationReport or None
        What the optimiser removed (None when not optimised, or loaded).
    """

    tape: Tape
    inputs: IdArray
    outputs: IdArray
    guards: IdArray
    scalar_output: bool
    sources: dict[int, tuple[str, int]]
    optimization: OptimizationReport | None


@dataclass(frozen=True, eq=False)
class ScalarDefinition:
    """A function of scalars: how to trace it and, once traced, its program.

    Attributes
    ----------
    function : callable
        The Python function traced (for a loaded one, a stand-in that refuses to run).
    input_names : list of str
        One name per scalar argument (its parameter name, or ``x<i>``).
    backend : str
        ``"auto"``, ``"interpret"`` or ``"codegen"``.
    optimize, debug : bool
        Whether tracing optimises the tape, and records on a debug tape.
    program : ScalarProgram or None
        The traced program; None until the first point traces it.
    fast_math : bool
        Whether generated batch code runs on vectors of points with libmvec's math.
    """

    function: Callable[..., Any]
    input_names: list[str]
    backend: str
    optimize: bool
    debug: bool
    program: ScalarProgram | None
    fast_math: bool = False

    @property
    def name(self) -> str:
        """The function's ``__name__`` (``"function"`` where it has none)."""
        return getattr(self.function, "__name__", "function")


@dataclass(frozen=True, eq=False)
class ArrayDefinition:
    """A traced function of arrays (blocks).

    Attributes
    ----------
    name : str
        The function's name.
    tape : Tape
        The traced tape (frozen).
    inputs : list of Var or Block
        One input node per argument.
    output : Var or Block
        The output node.
    guards : list of (int, bool)
        The ``bool()`` outcomes every replay re-checks: ``(node id, truth)``.
    shapes : list of tuple of int
        Each argument's traced shape (the traced rows along a batch axis).
    wrt : (list of int, bool) or None
        The differentiated positions and whether ``wrt`` was one int; None: every argument.
    batch : tuple of int
        The positions of the arguments whose first axis is the batch.
    batch_axes : dict
        ``{node id: axes}``: the axes of each node that follow the batch's rows.
    backend : str
        ``"auto"``, ``"interpret"`` or ``"codegen"``.
    integers : list of bool
        Which arguments were integer arrays in the example (labels).
    fast_math : bool
        Whether generated code's math functions may run libmvec's vector forms.
    """

    name: str
    tape: Tape
    inputs: list[Var | Block]
    output: Var | Block
    guards: list[tuple[int, bool]]
    shapes: list[tuple[int, ...]]
    wrt: tuple[list[int], bool] | None
    batch: tuple[int, ...]
    batch_axes: dict[int, Axes]
    backend: str
    integers: list[bool]
    fast_math: bool = False


class Unavailable:
    """Stands in for the Python function of a loaded compiled function."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: object) -> NoReturn:
        raise RuntimeError(
            f"{self.__name__} was loaded from a file: it can be replayed, not traced"
        )
