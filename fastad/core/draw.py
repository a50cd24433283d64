"""Showing tapes: the node table, Graphviz DOT text, and rendered files.

A drawing is most useful when it shows what the node table cannot at a
glance: shared nodes, several paths to one node, and on every edge the local
derivative, so a reader can tell a node's total gradient (in the node) from
one edge's contribution (edge label times the consumer's gradient).
"""

from __future__ import annotations

import math
import os
import pathlib
from typing import TYPE_CHECKING

import numpy as np

from fastad.core import graph
from fastad.kernels import optable
from fastad.util.errors import is_int

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage
    from fastad.util.hints import StrPath

DEFAULT_MAX_NODES = 200


def table(
    tape: TapeStorage,
    grad: bool = False,
    start: int = 0,
    stop: int | None = None,
    max_rows: int = 60,
    around: int | None = None,
    context: int = 5,
) -> str:
    """The node table in the articles' form: id, op, value, inputs (and label).

    See :meth:`fastad.Tape.table`; ``around`` is a node id (``Tape.table`` resolves
    handles).
    """
    for name, value, least in (
        ("start", start, 0),
        ("stop", 0 if stop is None else stop, 0),
        ("max_rows", max_rows, 1),
        ("context", context, 0),
    ):
        if not is_int(value):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value < least:
            raise ValueError(f"{name} must be at least {least} (rows count from 0), got {value}")
    if around is not None:
        around = tape.check_id(around)
        start, stop = max(around - context, 0), around + context + 1
    n = len(tape)
    stop = n if stop is None else min(stop, n)
    ids: list[int | None] = list(range(max(start, 0), stop))
    if len(ids) > max_rows:
        half = max_rows // 2
        ids = ids[:half] + [None] + ids[-half:]
    opcode, _, _, val, adjoint = tape.columns()
    shown = [i for i in ids if i is not None]
    symbols = {i: optable.ALL[opcode[i]].symbol for i in shown}
    values = {}
    for node in shown:
        block = tape.block_value(node)
        values[node] = _fmt(val[node], 4) if block is None else "block" + str(block.shape)
    op_width = max([8, *(len(symbol) for symbol in symbols.values())])
    value_width = max([12, *(len(text) for text in values.values())])
    header = f"{'id':>7}  {'op':<{op_width}} {'value':>{value_width}}"
    header += f" {'grad':>14}" if grad else ""
    inputs = {i: ", ".join(f"#{j}" for j in tape.operands(i)) or "-" for i in shown}
    width = max([14, *(len(text) for text in inputs.values())])
    header += f"  {'inputs':<{width}} label"
    rows = [header + ("  where" if tape.debug else "")]
    for i in ids:
        if i is None:
            rows.append(f"{'...':>7}  ({stop - start - 2 * half} rows not shown)")
            continue
        mark = ">" if i == around else " "
        row = f"{mark}{i:>6}  {symbols[i]:<{op_width}} {values[i]:>{value_width}}"
        if grad:
            is_block = tape.block_value(i) is not None
            row += f" {'(array)' if is_block else _fmt(adjoint[i], 8):>14}"
        row += f"  {inputs[i]:<{width}} {tape.label(i) or '':<5}"
        source = tape.source(i)
        if source is not None:
            row += f"  {os.path.basename(source[0])}:{source[1]}"
        rows.append(row.rstrip())
    return "\n".join(rows)


def _fmt(x: float, digits: int) -> str:
    x = float(x)
    if x == 0.0 or not math.isfinite(x) or 1e-4 <= abs(x) < 1e7:
        return f"{x:.{digits}f}"
    return f"{x:.{digits}e}"


def to_dot(
    tape: TapeStorage,
    root: int | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    grad: bool = True,
) -> str:
    """Graphviz DOT source for ``tape`` (or the part ``root`` depends on).

    Nodes show the label or op, the value and (``grad=True``) the adjoint;
    edges run from operand to result and are labelled with the local
    derivative d result / d operand. A node used twice by one op (``d * d``)
    gets two edges. Tapes larger than ``max_nodes`` are refused with a
    ``ValueError`` rather than drawn unreadably (or slowly): pass a ``root``
    or raise the limit.
    """
    n = len(tape)
    if root is None:
        ids = np.arange(n)
    else:
        ids = np.flatnonzero(graph.ancestors(tape, root)[0])
    if ids.size > max_nodes:
        raise ValueError(
            f"refusing to draw {ids.size} nodes (max_nodes={max_nodes}): draw the part one "
            "output depends on with root=, or raise max_nodes"
        )
    opcode, in0, in1, val, adjoint = tape.opcode, tape.in0, tape.in1, tape.val, tape.grad
    labels = tape.labels
    scalar_ids = [i for i in ids.tolist() if not tape.blocks.is_op(i)]
    partials = dict(
        zip(
            scalar_ids,
            graph.local_partials(tape, np.array(scalar_ids, np.int64)).tolist(),
            strict=True,
        )
    )
    lines = [
        "digraph fastad {",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded", fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    for i in ids.tolist():
        op = optable.ALL[opcode[i]]
        name = labels.get(i)
        title = name if name else (f"{float(val[i]):.4g}" if op.name == "const" else op.symbol)
        kind = {"input": "leaf", "const": "const"}.get(op.name, op.symbol)
        block = tape.block_value(i)
        value = f"shape {block.shape}" if block is not None else f"value {float(val[i]):.4g}"
        text = [f"#{i} {title}" + (f" ({kind})" if name else ""), value]
        if grad and block is None:
            text.append(f"grad {float(adjoint[i]):.4g}")
        shape = ", shape=ellipse" if op.arity == 0 else ""
        lines.append(f'  n{i} [label="{_escape(chr(10).join(text))}"{shape}];')
    for i in ids.tolist():
        if i not in partials:  # a block op: its edges carry arrays, not one number
            lines.extend(f"  n{operand} -> n{i};" for operand in tape.operands(i))
            continue
        for slot, operand in enumerate((in0[i], in1[i])):
            if operand >= 0:
                lines.append(f'  n{operand} -> n{i} [label="{partials[i][slot]:.4g}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(
    tape: TapeStorage,
    path: StrPath,
    root: int | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    grad: bool = True,
) -> pathlib.Path:
    """Render the drawing to ``path``; the format follows the suffix (.svg, .png, .pdf).

    Needs the ``graphviz`` Python package (``pip install 'fastad[viz]'``) and
    Graphviz's ``dot`` program (e.g. ``apt-get install graphviz``).
    """
    path = pathlib.Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"render writes .svg, .png or .pdf files, got {path.name!r}")
    try:
        import graphviz
    except ImportError as error:
        raise RuntimeError(
            "tape.render needs the graphviz Python package: pip install 'fastad[viz]' "
            "(and Graphviz's dot program, e.g. apt-get install graphviz). "
            "tape.to_dot() works without either."
        ) from error
    source = graphviz.Source(to_dot(tape, root, max_nodes, grad))
    try:
        data = source.pipe(format=fmt)
    except graphviz.ExecutableNotFound as error:
        raise RuntimeError(
            "tape.render needs Graphviz's dot program on PATH (e.g. apt-get install "
            "graphviz); tape.to_dot() works without it."
        ) from error
    path.write_bytes(data)
    return path


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
