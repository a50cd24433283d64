"""Drawing tapes: Graphviz DOT text, and rendered files when Graphviz is installed.

A drawing is most useful when it shows what the node table cannot at a
glance: shared nodes, several paths to one node, and on every edge the local
derivative, so a reader can tell a node's total gradient (in the node) from
one edge's contribution (edge label times the consumer's gradient).
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING

import numpy as np

from fastad.kernels import optable, sweeps

if TYPE_CHECKING:
    from fastad._typing import StrPath
    from fastad.node import NodeRef
    from fastad.tape import Tape

DEFAULT_MAX_NODES = 200


def to_dot(
    tape: Tape, root: NodeRef | None = None, max_nodes: int = DEFAULT_MAX_NODES, grad: bool = True
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
        root_id = tape.node_id(root, "root")
        mark = np.zeros(n, np.bool_)
        sweeps.mark_ancestors(tape.in0, tape.in1, root_id, mark)
        ids = np.flatnonzero(mark)
    if ids.size > max_nodes:
        raise ValueError(
            f"refusing to draw {ids.size} nodes (max_nodes={max_nodes}): draw the part one "
            "output depends on with root=, or raise max_nodes"
        )
    opcode, in0, in1, val, adjoint = tape.opcode, tape.in0, tape.in1, tape.val, tape.grad
    labels = tape.labels
    partials = tape.local_partials(ids)
    block_ops = set(tape._block_ops)  # their edges carry arrays, not one number
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
        block = tape._blocks.get(i)
        value = f"shape {block.shape}" if block is not None else f"value {float(val[i]):.4g}"
        text = [f"#{i} {title}" + (f" ({kind})" if name else ""), value]
        if grad and block is None:
            text.append(f"grad {float(adjoint[i]):.4g}")
        shape = ", shape=ellipse" if op.arity == 0 else ""
        lines.append(f'  n{i} [label="{_escape(chr(10).join(text))}"{shape}];')
    for row, i in enumerate(ids.tolist()):
        for slot, operand in enumerate((in0[i], in1[i])):
            if operand >= 0 and i in block_ops:
                lines.append(f"  n{operand} -> n{i};")
            elif operand >= 0:
                lines.append(f'  n{operand} -> n{i} [label="{partials[row, slot]:.4g}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(
    tape: Tape,
    path: StrPath,
    root: NodeRef | None = None,
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
