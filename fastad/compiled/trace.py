"""Tracing a Python function into a compiled function's record, for both kinds.

A function of scalars (:func:`trace_scalars`) is traced on scalar leaves of a
tape made with ``trace=True``, its guards kept, its tape optimised and
renumbered; a function of arrays (:func:`array_definition`) on block
leaves, twice with ``batch=`` (the second time with one row more, to find
the axes that follow the batch). Argument names come from the signature.
The results are the records of :mod:`fastad.compiled.definition`.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from fastad.compiled import batch_axis, native_code
from fastad.compiled.definition import ArrayDefinition, ScalarDefinition, ScalarProgram
from fastad.compiled.scalar_expansion import expand_blocks
from fastad.compiled.tiers import BACKENDS
from fastad.core.storage import MAX_NODES
from fastad.eager.handle import storage_of
from fastad.eager.node import Block, Var
from fastad.eager.operators import is_number
from fastad.eager.optimize import optimize as optimize_tape
from fastad.eager.tape import Tape
from fastad.util.errors import flag, is_int, is_real_dtype, not_real
from fastad.util.memory import check_fits
from fastad.util.progress import progress

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastad.util.hints import FloatArray, IdArray

    Traceable = Callable[..., Any]


INPUT_BYTES = 500
"""A lower bound of the memory tracing takes per scalar input (its tape row, ``Var``
and name; with optimisation about 800 bytes at the peak), for refusing at once a
count that cannot fit instead of failing after minutes."""


def check_backend(backend: object) -> None:
    """Refuse a ``backend=`` that is not one of :data:`fastad.compiled.tiers.BACKENDS`."""
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
        )


def check_fast_math(fast_math: bool, backend: str) -> None:
    """Refuse ``fast_math=True`` where it cannot apply: ``backend="interpret"``, or a
    machine without libmvec (named)."""
    if flag(fast_math, "fast_math"):
        if backend == "interpret":
            raise ValueError(
                'fast_math=True applies to generated code, which backend="interpret" never '
                'runs: use backend="auto" or "codegen"'
            )
        native_code.fast_math()  # raises, naming what this machine lacks


# -- functions of scalars -------------------------------------------------------------------
def scalar_definition(
    function: Traceable,
    num_inputs: int | None,
    optimize: bool,
    backend: str,
    debug: bool,
    fast_math: bool = False,
) -> ScalarDefinition:
    """A function of scalars before tracing: checked, with its argument names.

    Parameters
    ----------
    function : callable
        The function of ``k`` scalars.
    num_inputs : int or None
        ``k``; None reads it from the signature.
    optimize, debug : bool
        Optimise the traced tape; trace on a debug tape.
    backend : str
        The replay backend.
    fast_math : bool
        Generated batch code on vectors of points, with libmvec's math.

    Returns
    -------
    ScalarDefinition
        With ``program`` None: :func:`trace_scalars` makes it at a point.
    """
    if not callable(function):
        raise TypeError(f"fa.compile needs a callable, got {type(function).__name__}")
    check_backend(backend)
    check_fast_math(fast_math, backend)
    names, _ = signature(function, num_inputs)
    return ScalarDefinition(function, names, backend, optimize, debug, None, fast_math)


def trace_scalars(definition: ScalarDefinition, point: FloatArray) -> ScalarProgram:
    """Trace ``definition``'s function at ``point`` (one value per argument): its program.

    Parameters
    ----------
    definition : ScalarDefinition
        The function, its argument names and whether to optimise and debug.
    point : FloatArray
        Shape ``(k,)``.

    Returns
    -------
    ScalarProgram
        The tape (optimised if asked, not yet frozen), input, output and guard ids
        (renumbered by the optimiser), the output kind and the source lines.
    """
    tape = Tape(trace=True, debug=definition.debug)
    name = definition.name
    with tape, progress(f"tracing {name}", lambda: f"{len(tape):,} nodes recorded"):
        inputs = [
            tape.input(float(v), label)
            for v, label in zip(point, definition.input_names, strict=True)
        ]
        result = definition.function(*inputs)
    scalar_output = not isinstance(result, (tuple, list))
    outputs = [output_node(tape, r, i) for i, r in enumerate([result] if scalar_output else result)]
    if not outputs:
        raise ValueError("the traced function returned no outputs")
    # Tracing is over: the tape is an ordinary tape now.
    traced_guards = storage_of(tape).end_trace()
    input_ids = np.array([node.id for node in inputs], np.int64)
    output_ids = np.array([node.id for node in outputs], np.int64)
    sources = tape.sources
    if storage_of(tape).blocks.ops:  # arrays built from the scalars: a node per element
        with progress(f"expanding the array ops of {name} into scalar ops"):
            tape, new_ids, sources = expand_blocks(tape, output_ids, traced_guards, sources, name)
        input_ids, output_ids = new_ids[input_ids], new_ids[output_ids]
        traced_guards = [(int(new_ids[node]), truth) for node, truth in traced_guards]
    guards = np.array(traced_guards, dtype=np.int64).reshape(-1, 2)
    optimization = None
    if definition.optimize:
        with progress(f"optimising the tape of {name} ({len(tape):,} nodes)"):
            optimized = optimize_tape(tape, output_ids, keep=guards[:, 0])
        tape, optimization = optimized.tape, optimized.report
        input_ids, output_ids = optimized.new_ids[input_ids], optimized.new_ids[output_ids]
        guards = np.column_stack([optimized.new_ids[guards[:, 0]], guards[:, 1]])
        sources = renumbered(sources, optimized.new_ids)
    return ScalarProgram(tape, input_ids, output_ids, guards, scalar_output, sources, optimization)


def signature(function: Traceable, num_inputs: int | None) -> tuple[list[str], int]:
    """``(argument names, k)``: from ``num_inputs`` (names ``x<i>``) or the signature."""
    if num_inputs is not None:
        if not is_int(num_inputs):
            raise TypeError(
                f"num_inputs must be a positive int, got {type(num_inputs).__name__} {num_inputs!r}"
            )
        if num_inputs < 1:
            raise ValueError(f"num_inputs must be a positive int, got {num_inputs!r}")
        if num_inputs >= MAX_NODES:
            raise ValueError(
                f"num_inputs must be less than {MAX_NODES:,} (a tape's node ids are int32), "
                f"got {num_inputs:,}"
            )
        check_fits(
            int(num_inputs) * INPUT_BYTES,
            f"tracing a function of {int(num_inputs):,} scalar inputs",
            "Compile a function of arrays instead: fa.compile(fn, example=(x,)).",
        )
        return [f"x{i}" for i in range(int(num_inputs))], int(num_inputs)
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError) as error:
        raise TypeError("cannot read the function's signature: pass num_inputs=") from error
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in positional or p.default is not p.empty for p in parameters):
        raise TypeError(
            "fa.compile reads the number of inputs from plain positional parameters "
            "(no *args, keyword-only or default arguments): pass num_inputs="
        )
    if not parameters:
        raise TypeError("the function takes no inputs")
    return [p.name for p in parameters], len(parameters)


def output_node(tape: Tape, result: Any, position: int) -> Var:
    """Output ``position`` of a traced function as a node of ``tape`` (a number: a constant)."""
    if isinstance(result, Var):
        if result.tape is not tape:
            raise ValueError(f"output {position} is a node of another tape: {result!r}")
        return result
    if is_number(result):
        return tape.constant(result)
    raise TypeError(
        f"output {position} of the traced function is a {type(result).__name__}; "
        "expected a fastad node or a real number"
    )


def renumbered(sources: dict[int, tuple[str, int]], new_ids: IdArray) -> dict[int, tuple[str, int]]:
    """``sources`` for the optimised tape: merged nodes keep the first location."""
    found: dict[int, tuple[str, int]] = {}
    for node, location in sources.items():
        new = int(new_ids[node])
        if new >= 0:
            found.setdefault(new, location)
    return found


# -- functions of arrays --------------------------------------------------------------------
def array_definition(
    function: Traceable,
    example: Sequence[ArrayLike],
    wrt: int | Sequence[int] | None,
    debug: bool,
    backend: str,
    batch: int | Sequence[int] | None,
    fast_math: bool = False,
) -> ArrayDefinition:
    """Trace a function of arrays at ``example`` (one value per argument): its record.

    With ``batch=`` the function is traced a second time with one row more in
    the batch arguments, and :func:`fastad.compiled.batch_axis.batch_axes`
    finds the axes that follow the rows (refusing a node that does not).
    Parameters as :func:`fastad.compile`'s.
    """
    if not callable(function):
        raise TypeError(f"fa.compile needs a callable, got {type(function).__name__}")
    check_fast_math(fast_math, backend)
    names = argument_names(function, len(example))
    positions = wrt_positions(wrt, len(example))
    batch_positions = () if batch is None else batch_axis.positions(batch, example)
    values = [block_argument(v, i) for i, v in enumerate(example)]
    tape, inputs, output, guards = trace_arrays(function, values, names, debug)
    axes: dict[int, batch_axis.Axes] = {}
    if batch_positions:
        rows = np.shape(values[batch_positions[0]])[0]
        probe = [
            batch_axis.with_one_more_row(v) if i in batch_positions else v
            for i, v in enumerate(values)
        ]
        try:
            second, _, _, second_guards = trace_arrays(function, probe, names, debug)
        except Exception as error:
            raise ValueError(
                f"batch=: tracing the function again with {rows + 1} rows (the batch "
                f"arguments' last row repeated) failed: {type(error).__name__}: {error}. "
                "A program for any number of rows makes nothing of the batch's length "
                "(an array of the example's rows, a length in the code)"
            ) from error
        axes = batch_axis.batch_axes(
            storage_of(tape),
            storage_of(second),
            rows,
            (guards, second_guards),
            [node.id for node in inputs],
        )
    integers = [np.asarray(v).dtype.kind in "iu" and np.ndim(v) > 0 for v in example]
    return ArrayDefinition(
        name=getattr(function, "__name__", "function"),
        tape=tape,
        inputs=inputs,
        output=output,
        guards=guards,
        shapes=[np.shape(v) for v in values],
        wrt=positions,
        batch=batch_positions,
        batch_axes=axes,
        backend=backend,
        integers=integers,
        fast_math=fast_math,
    )


def trace_arrays(
    function: Traceable, values: Sequence[Any], names: Sequence[str], debug: bool
) -> tuple[Tape, list[Var | Block], Var | Block, list[tuple[int, bool]]]:
    """Trace a function of arrays at ``values``: its tape, input nodes, output node, guards."""
    tape = Tape(trace=True, debug=debug)
    with tape:
        inputs: list[Var | Block] = [
            tape.input(v, name) for v, name in zip(values, names, strict=True)
        ]
        result = function(*inputs)
    guards = storage_of(tape).end_trace()
    if isinstance(result, (tuple, list)):
        raise ValueError("a function of arrays returns one output (a scalar or an array)")
    if isinstance(result, Block) and result.tape is tape:
        output: Var | Block = result
    elif isinstance(result, np.ndarray) and result.ndim > 0:
        output = tape.block_constant(result)  # no input reaches it: its derivatives are 0
    else:
        output = output_node(tape, result, 0)
    return tape, inputs, output, guards


def argument_names(function: Traceable, count: int) -> list[str]:
    """The parameter names of a function of ``count`` arrays (``x<i>`` if unreadable)."""
    try:
        names, found = signature(function, None)
    except TypeError:
        return [f"x{i}" for i in range(count)]
    if found != count:
        raise ValueError(f"the function takes {found} arguments, the example has {count}")
    return names


def wrt_positions(wrt: object, count: int) -> tuple[list[int], bool] | None:
    """``wrt`` checked against ``count`` arguments: (positions, given as one int), or None."""
    if wrt is None:
        return None
    single = not isinstance(wrt, (list, tuple))
    return batch_axis.argument_positions(wrt, count, "wrt"), single


def block_argument(value: ArrayLike, position: int) -> FloatArray | float:
    """An example's argument as traced: a float64 array, or a float for a 0-d value."""
    array = np.asarray(value)
    if not is_real_dtype(array.dtype):
        raise not_real(value, f"argument {position}")
    return array.astype(np.float64) if array.ndim else float(array)
