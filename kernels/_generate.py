"""Generate the compiled rules from the op table: the modules listed in ``GENERATED``.

Run ``python -m fastad.kernels._generate`` after editing ``optable.py``; the
test suite fails while a generated module differs from what this produces.
Each module is written whole, its imports included, and holds one job's
rules (``point_rules.py`` one node at one point, ``lane_rules.py`` one node
over lanes, ``map_rules.py`` an elementwise block op...); ``rule_helpers.py``
holds Numba copies of the table's helper functions, which the rules call.
Numba's cache stamps every kernel with the contents of all of ``kernels/``
(``jit.py``), so a change to a rule invalidates every cached kernel that
calls it, whichever module that kernel lives in.
"""

from __future__ import annotations

import inspect
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from . import optable, scalar_source

KERNELS_FOLDER = pathlib.Path(__file__).parent
LINE_LENGTH = 100  # [tool.ruff] line-length: the modules must pass ruff format unchanged
MARK = "Made from kernels/optable.py by ``python -m fastad.kernels._generate``: do not edit."


def _helper_sources() -> Iterator[str]:
    for helper in optable.HELPERS:
        yield "@kernel\n" + inspect.getsource(helper).rstrip()


def _dispatch(
    name: str,
    parameters: str,
    returns: str,
    doc: list[str],
    case: Callable[[optable.Op, str, str], list[str]],
    fallback: str,
) -> str:
    """A ``@kernel`` that branches on ``op`` over every op with operands.

    ``parameters`` and ``returns`` give its annotated signature. ``case(op,
    d0, d1)`` gives the body lines for one op (``d0``, ``d1``: its partial
    expressions, ``0.0`` for a missing operand); ``fallback`` is the last
    line, reached only by leaves and constants.
    """
    lines = ["@kernel", _signature(name, parameters, returns)]
    lines += [f"    {line}" if line else "" for line in doc]
    for op in optable.OPS:
        if op.arity == 0:
            continue
        d0, d1 = (list(op.partials) + ["0.0"] * (2 - op.arity))[:2]
        lines.append(f"    if op == {op.code}:  # {op.name}")
        lines += [f"        {line}" for line in case(op, d0, d1)]
    lines.append(f"    {fallback}")
    return "\n".join(lines)


def _signature(name: str, parameters: str, returns: str) -> str:
    """``def name(parameters) -> returns:`` as ruff format wraps it."""
    signature = f"def {name}({parameters}) -> {returns}:"
    if len(signature) > LINE_LENGTH:
        signature = f"def {name}(\n    {parameters}\n) -> {returns}:"
        if len(f"    {parameters}") > LINE_LENGTH:  # one parameter per line
            listed = "".join(f"    {p.strip()},\n" for p in parameters.split(","))
            signature = f"def {name}(\n{listed}) -> {returns}:"
    return signature


def _forward_value_source() -> str:
    return _dispatch(
        "forward_value",
        "op: int, a: float, b: float",
        "float",
        [
            '"""Value of a node with opcode ``op`` and operand values ``a``, ``b``.',
            "",
            "``b`` is ignored by unary ops. Leaves and constants never reach this",
            "function: the sweeps keep their stored values.",
            '"""',
        ],
        lambda op, d0, d1: [f"return {op.value}"],
        "return a",
    )


def _local_partials_source() -> str:
    return _dispatch(
        "local_partials",
        "op: int, a: float, b: float, out: float",
        "tuple[float, float]",
        [
            '"""Local partial derivatives ``(d out/d a, d out/d b)`` of one node.',
            "",
            "``out`` is the node value saved by the forward sweep. Unary ops give",
            "0.0 for the second partial.",
            '"""',
        ],
        lambda op, d0, d1: [f"return {d0}, {d1}"],
        "return 0.0, 0.0",
    )


def _values_and_partials_source() -> str:
    return _dispatch(
        "values_and_partials",
        "op: int, a: float, b: float",
        "tuple[float, float, float]",
        ['"""``(out, d out/d a, d out/d b)`` of one node: one dispatch for both rules."""'],
        lambda op, d0, d1: [f"out = {op.value}", f"return out, {d0}, {d1}"],
        "return a, 0.0, 0.0",
    )


def _second(op: optable.Op) -> tuple[str, str, str]:
    """``(d2/da2, d2/da db, d2/db2)`` of ``op``: zeros for the operand a unary op lacks."""
    if op.second is None:  # tests/test_ops.py fails for such a row first
        raise ValueError(f"op {op.name!r} has no second local partials in kernels/optable.py")
    s0, s1, s2 = (list(op.second) + ["0.0", "0.0"])[:3]
    return s0, s1, s2


def _second_partials_source() -> str:
    return _dispatch(
        "second_partials",
        "op: int, a: float, b: float, out: float",
        "tuple[float, float, float]",
        [
            '"""Second local partials ``(d2 out/da2, d2 out/da db, d2 out/db2)`` of one node.',
            "",
            "``out`` is the node value saved by the forward sweep. Unary ops give",
            "0.0 for the two that involve ``b``.",
            '"""',
        ],
        lambda op, d0, d1: _return_tuple(_second(op), indent=8),
        "return 0.0, 0.0, 0.0",
    )


def _return_tuple(items: tuple[str, ...], indent: int) -> list[str]:
    """``return a, b, c`` as ruff format writes it: wrapped, one item a line, when too long."""
    line = "return " + ", ".join(items)
    if indent + len(line) <= LINE_LENGTH:
        return [line]
    return ["return (", *(f"    {item}," for item in items), ")"]


def _second_lanes_source() -> str:
    # One loop per second partial that is needed and not the literal 0.0:
    # d2/da2 when operand a depends on an input, d2/db2 when b does, the
    # mixed one when both do. The others are never read against a reached
    # tangent (lane_sweeps.second_pass: a product with an UNREACHED tangent is
    # UNREACHED whatever the partial, nan included), so their values do not
    # matter and they are never computed: a pow with a constant exponent
    # skips the two logs of its exponent's partials. Literal zeros are not
    # written either: a row of the work space belongs to one node and starts
    # at 0.0, and only the one-point path writes 0.0 there again.
    def case(op: optable.Op, d0: str, d1: str) -> list[str]:
        body = []
        for name, rule, need in zip(
            ("s0", "s1", "s2"), _second(op), ("need_a", "need_a and need_b", "need_b"), strict=True
        ):
            if rule == "0.0":
                continue
            body += [
                f"if {need}:",
                "    for lane in range(count):",
                "        a = val[j, lane]",
                "        b = val[k, lane]",
                "        out = val[i, lane]",
                f"        {name}[i, lane] = {rule}",
            ]
        return [*body, "return"]

    return _dispatch(
        "second_partials_lanes",
        "op: int, val: FloatArray, s0: FloatArray, s1: FloatArray, s2: FloatArray, "
        "i: int, j: int, k: int, count: int, need_a: bool, need_b: bool",
        "None",
        [
            '"""The second local partials of node ``i`` that are needed, in lanes ``0:count``.',
            "",
            "Rows ``i``, ``j`` and ``k`` of ``val`` hold the node's value and its",
            "operands' (as in ``values_and_partials_lanes``, which runs first);",
            "``need_a`` / ``need_b``: operand ``a`` / ``b`` depends on an input.",
            '"""',
        ],
        case,
        "return",
    )


def _lanes_source(with_partials: bool) -> str:
    # One loop per op, so the dispatch on `op` happens once per node and row
    # of lanes, and the loop body is straight-line code the compiler can
    # vectorise.
    name = "values_and_partials_lanes" if with_partials else "values_lanes"
    names = ("val", "d0", "d1") if with_partials else ("val",)
    arrays = ", ".join(f"{array}: FloatArray" for array in names)
    summary = (
        "Values and local partials of node ``i`` in lanes ``0:count``."
        if with_partials
        else "Values of node ``i`` in lanes ``0:count``."
    )

    def case(op: optable.Op, d0: str, d1: str) -> list[str]:
        body = [
            "for lane in range(count):",
            "    a = val[j, lane]",
            "    b = val[k, lane]",
            f"    out = {op.value}",
            "    val[i, lane] = out",
        ]
        if with_partials:
            body += [f"    d0[i, lane] = {d0}", f"    d1[i, lane] = {d1}"]
        return [*body, "return"]

    return _dispatch(
        name,
        f"op: int, {arrays}, i: int, j: int, k: int, count: int",
        "None",
        [
            f'"""{summary}',
            "",
            "Rows ``j`` and ``k`` of ``val`` hold the operands (``k`` is any row,",
            "e.g. a scratch row, for unary ops); one column per evaluation point.",
            '"""',
        ],
        case,
        "return",
    )


def _map_source(kind: str) -> str:
    """The kernels of one kind of elementwise block rule, one per op, and their table.

    ``kind`` is ``forward``, ``vjp``, ``jvp`` or ``second``. Each op's kernel is
    one loop over 1-D arrays of straight-line code, the table's own
    expressions, so a block and its scalar-node expansion agree bit for bit.
    One kernel per op, not one that branches on the op: Numba compiles a
    kernel at its first call, so a program compiles only the rules of the
    ops it runs (a fresh machine's first ``fastad demo`` compiled all 36 of
    each kind), and no element pays for a branch on the op. The table
    (``FORWARD``, ``VJP``, ``JVP``, ``SECOND``) maps an opcode to its kernel.
    """
    arrays = {
        "forward": "x, y, z",
        "vjp": "x, y, z, g, dx, dy",
        "jvp": "x, y, z, tx, ty, tz",
        "second": "x, y, z, s0, s1, s2",
    }[kind]
    docs = {
        "forward": "``z[t] = op(x[t], y[t])`` over 1-D arrays of one size: the scalar rule.",
        "vjp": (
            "``dx = d0 * g``, ``dy = d1 * g`` per element, with strong zeros: ``dx`` where\n"
            "``want_x``, ``dy`` where ``want_y`` and the op has a second operand (an array\n"
            "not written may be empty)."
        ),
        "jvp": "``tz = d0 * tx + d1 * ty`` per element, with strong zeros.",
        "second": "The second local partials (d2/dx2, d2/dx dy, d2/dy2) per element.",
    }

    def body(op: optable.Op, d0: str, d1: str) -> list[str]:
        lines = _reads(kind, op, d0, d1)
        if kind == "forward":
            lines.append(f"    z[t] = {op.value}")
        elif kind == "second":
            names = ("s0", "s1", "s2")
            lines += [
                f"    {name}[t] = {rule}" for name, rule in zip(names, _second(op), strict=True)
            ]
        elif kind == "vjp" and op.arity == 1:  # nothing to send to a second operand
            lines += [
                "    if want_x:",
                f"        dx[t] = contribution({d0}, g[t])",
            ]
        elif kind == "vjp":  # only what the caller wants: an operand may be data
            lines += [
                "    if want_x:",
                f"        dx[t] = contribution({d0}, g[t])",
                "    if want_y:",
                f"        dy[t] = contribution({d1}, g[t])",
            ]
        else:
            lines += [
                f"    first = contribution({d0}, tx[t])",
                f"    tz[t] = first + contribution({d1}, ty[t])",
            ]
        return lines

    parameters = ", ".join(f"{name}: FloatArray" for name in arrays.split(", "))
    if kind == "vjp":
        parameters += ", want_x: bool, want_y: bool"
    kernels, table = [], []
    for op in optable.OPS:
        if op.arity == 0:
            continue
        d0, d1 = (list(op.partials) + ["0.0"] * (2 - op.arity))[:2]
        name = f"{kind}_{op.name}"
        lines = ["@kernel", _signature(name, parameters, "None")]
        lines.append(f'    """``{op.name}``: see ``{kind.upper()}``."""')
        lines += [f"    {line}" for line in body(op, d0, d1)]
        kernels.append("\n".join(lines))
        table.append(f"    {op.code}: {name},")
    summary = docs[kind].split("\n")
    names = arrays + (", want_x, want_y" if kind == "vjp" else "")
    table_doc = [f'"""Opcode -> its kernel ``({names})``:']
    table_doc += [*summary[:-1], summary[-1] + '"""']
    text = "\n\n\n".join(kernels)
    return text + "\n\n\n" + "\n".join([f"{kind.upper()} = {{", *table, "}", *table_doc])


def _reads(kind: str, op: optable.Op, d0: str, d1: str) -> list[str]:
    """The loop's head and the reads of ``a = x[t]``, ``b = y[t]`` and ``out = z[t]``
    that ``op``'s expressions of this ``kind`` use (an unused read is left out)."""
    used = {
        "forward": [op.value],
        "vjp": [d0] if op.arity == 1 else [d0, d1],
        "jvp": [d0, d1],
        "second": list(_second(op)),
    }[kind]
    reads = [
        f"    {name} = {array}[t]"
        for name, array in (("a", "x"), ("b", "y"), ("out", "z"))
        if any(re.search(rf"\b{name}\b", expression) for expression in used)
    ]
    return ["for t in range(z.size):", *reads]


class Module(NamedTuple):
    """One generated module: its docstring's summary and body, and what it holds."""

    summary: str
    about: tuple[str, ...]
    parts: tuple[Callable[[], str], ...]
    arrays: bool = True  # it takes arrays (imports FloatArray)
    helpers: bool = True  # its rules may call the table's helpers
    strong_zeros: bool = False  # it sends with contribution


GENERATED: dict[str, Module] = {
    "rule_helpers.py": Module(
        "Numba copies of the op table's helper functions, which the rules call.",
        ("The functions of ``optable.HELPERS``, each as a ``@kernel``.",),
        (lambda: "\n\n\n".join(_helper_sources()),),
        arrays=False,
        helpers=False,
    ),
    "point_rules.py": Module(
        "The rules of one node at one point, one branch per op of the op table.",
        (
            "``forward_value``, ``local_partials``, ``values_and_partials`` and",
            "``second_partials``: the tape sweeps (``tape_sweeps.py``) and the",
            "one-point paths of the lane sweeps (``lane_sweeps.py``) call them.",
        ),
        (
            _forward_value_source,
            _local_partials_source,
            _values_and_partials_source,
            _second_partials_source,
        ),
        arrays=False,
    ),
    "lane_rules.py": Module(
        "The rules of one node over lanes (one column per point), one loop per op.",
        (
            "``values_lanes`` and ``values_and_partials_lanes``, for the lane sweeps",
            "of compiled functions (``lane_sweeps.py``).",
        ),
        (lambda: _lanes_source(with_partials=False), lambda: _lanes_source(with_partials=True)),
    ),
    "lane_second_rules.py": Module(
        "The second local partials of one node over lanes, one loop per op.",
        (
            "``second_partials_lanes``, for the second-order modes of the lane",
            "sweeps (``lane_sweeps.py``).",
        ),
        (_second_lanes_source,),
    ),
    "map_rules.py": Module(
        "Elementwise block ops by the scalar rules: values and reverse mode.",
        (
            "``FORWARD`` and ``VJP``: per opcode, a kernel of one loop over 1-D arrays,",
            "the VJP's with the strong zeros of ``contribution``.",
        ),
        (lambda: _map_source("forward"), lambda: _map_source("vjp")),
        strong_zeros=True,
    ),
    "map_tangent_rules.py": Module(
        "Elementwise block ops by the scalar rules: forward mode.",
        ("``JVP``: per opcode, a kernel of one loop over 1-D arrays, with strong zeros.",),
        (lambda: _map_source("jvp"),),
        strong_zeros=True,
    ),
    "map_second_rules.py": Module(
        "Elementwise block ops by the scalar rules: the second local partials.",
        ("``SECOND``: per opcode, a kernel of one loop over 1-D arrays.",),
        (lambda: _map_source("second"),),
    ),
}
"""Every generated module of ``kernels/`` by file name."""


def _import(module: str, names: list[str], comment: str = "") -> list[str]:
    """``from module import names`` as ruff's isort and format write it."""
    line = f"from {module} import {', '.join(names)}"
    if not comment and len(line) <= LINE_LENGTH:
        return [line]
    opening = f"from {module} import (" + (f"  # {comment}" if comment else "")
    return [opening, *(f"    {name}," for name in names), ")"]


def module_text(name: str) -> str:
    """The exact text of the generated module ``name`` (a key of ``GENERATED``)."""
    module = GENERATED[name]
    namespace = "noqa: F401  (the generated rules' namespace)"
    lines = [f'"""{module.summary}', "", *module.about, "", MARK, '"""', ""]
    lines += ["from __future__ import annotations", ""]
    lines += [*_import("math", scalar_source.MATH_NAMES, namespace), ""]
    if module.arrays:
        lines += _import(".arrays", ["FloatArray"])
    lines += _import(".jit", ["kernel"])
    if module.helpers:
        helpers = sorted(helper.__name__ for helper in optable.HELPERS)
        lines += _import(".rule_helpers", helpers, namespace)
    if module.strong_zeros:
        lines += _import(".strong_zeros", ["contribution"])
    parts = [part() for part in module.parts]
    return "\n".join(lines) + "\n\n\n" + "\n\n\n".join(parts) + "\n"


def main() -> None:
    for name in GENERATED:
        path = KERNELS_FOLDER / name
        text = module_text(name)
        if path.exists() and path.read_text() == text:
            print(f"{path} is up to date")
        else:
            path.write_text(text)
            print(f"updated {path}")


if __name__ == "__main__":
    main()
