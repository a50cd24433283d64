"""LLVM IR for one traced program, straight from the text of its generated kernels.

``scalar_source.module_source`` writes a program's kernels in a small
subset of Python: straight-line assignments of the op table's rule
expressions, the guards' ``if`` statements, the loop over points, and the
op table's helpers. Numba compiles that text well but slowly: its typing
and lowering grow faster than the program, to a minute for ten thousand
nodes. This module lowers the same text to LLVM IR itself, one statement
after another, so a program reaches LLVM in time linear in its length and
the kernels keep exactly the statements Numba would have compiled.

Semantics are Numba's, to the bit, because the instructions are the ones
Numba emits for the same expressions with fastad's options
(``error_model="numpy"``, no fast-math flags): ``fadd``/``fsub``/``fmul``/
``fdiv`` for the arithmetic, ordered comparisons (``!=`` unordered), and the
same math functions: LLVM's intrinsics where Numba uses them (``exp``,
``log``, ``sin``, ``cos``, ``pow``, ``fabs``, ``copysign``), the C library's
functions otherwise. A conditional expression becomes a ``select`` (both
sides are pure and total, so evaluating both changes no bit).

The subset, checked as it is lowered (anything else raises
``NotImplementedError`` naming the construct, never a guess): function
definitions with positional parameters; assignments to names, to
subscripts and of tuples; ``+=``; ``if``/``else``; ``return``; one loop
``for p in range(start, stop)``; expressions of float, int and bool
literals, names, subscripts, the four arithmetic operators, unary minus,
``not``, ``and``/``or``, single comparisons, conditional expressions and
calls of the math functions and of functions defined in the same text.

Kernels trust their input as every kernel does: arrays are float64 (int64
for ``status``, bytes for ``recheck``) with the shapes the front end made.
"""

from __future__ import annotations

import ast
import gc
import heapq
import re
import struct
from collections.abc import Callable, Iterable
from functools import partial
from typing import NamedTuple, cast

from . import scalar_source

DOUBLE, INT, BOOL, BYTE = "double", "i64", "i1", "i8"

INTRINSICS = {"exp", "log", "sin", "cos", "pow", "fabs", "copysign"}
"""Math functions Numba lowers to LLVM intrinsics (``llvm.<name>.f64``)."""
ARITY = {"pow": 2, "copysign": 2, "atan2": 2}
"""Math functions of two arguments; the others take one."""


class Parameter(NamedTuple):
    """How a kernel parameter reaches the IR function."""

    name: str
    kind: str  # "rows" (2-D float64), "vector" (1-D of ``element``) or "scalar" (i64)
    element: str = DOUBLE
    noalias: bool = True  # no other parameter reaches this memory


BATCH = (
    Parameter("points", "rows"),
    # The front end passes ``values`` here in the modes without directions (never read).
    Parameter("directions", "rows", noalias=False),
    Parameter("values", "rows", noalias=False),
    Parameter("derivatives", "rows"),
    Parameter("status", "vector", INT),
    Parameter("recheck", "vector", BYTE),
    Parameter("constants", "vector"),
    Parameter("start", "scalar"),
    Parameter("stop", "scalar"),
)
POINT = tuple(Parameter(name, "vector") for name in ("point", "direction", "gradient", "constants"))
"""The one-point function takes all four vectors in every mode (the unused ones are
never read) and a pointer to an i64 that receives the failed guard."""


def double_literal(value: float) -> str:
    """A float64 literal, exactly: LLVM's hexadecimal form of its bits."""
    return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


class Value(NamedTuple):
    text: str
    type: str


_VARYING = re.compile(r"(?<![\w.])[a-z]+\d+(?:_\d+)*(?![\w.(])|(?<![\w.+-])\d+(?![\w.(])")
"""What varies between the statements of one shape: the generated names (``v12``,
``p3_0``, ``g7_2``; a function name such as ``expm1`` is followed by its parenthesis)
and integer literals (array indices, guard numbers) not after a sign; float literals
(a rule's constants, exponents included) are part of the shape."""


class Bound(ast.stmt):
    """A simple statement as a shared template of its shape, and the names and
    integers that fill its placeholders (``__0``, ``__1``, ...)."""

    template: ast.stmt
    names: list[str]
    stores: list[str]  # the names it assigns
    loads: list[str]  # the names it reads


class _Shapes:
    """Statements parsed once per shape: a long kernel is tens of thousands of
    statements of a few hundred shapes, and ``ast.parse`` of the whole text took
    most of the time from text to IR."""

    def __init__(self) -> None:
        # shape -> (template, what it stores, what it loads: placeholder indices or names)
        self.known: dict[str, tuple[ast.stmt, list[int | str], list[int | str]]] = {}

    def bound(self, line: str) -> Bound:
        names: list[str] = []

        def placeholder(match: re.Match[str]) -> str:
            names.append(match.group(0))
            return f"__{len(names) - 1}"

        shape = _VARYING.sub(placeholder, line)
        found = self.known.get(shape)
        if found is None:
            (template,) = ast.parse(shape).body
            stores: list[int | str] = []
            loads: list[int | str] = []
            for node in ast.walk(template):
                if isinstance(node, ast.Name):
                    which: int | str = int(node.id[2:]) if node.id.startswith("__") else node.id
                    (stores if isinstance(node.ctx, ast.Store) else loads).append(which)
            found = self.known[shape] = (template, stores, loads)
        template, stores, loads = found
        bound = Bound()
        bound.template, bound.names = template, names
        bound.stores = [names[i] if isinstance(i, int) else i for i in stores]
        bound.loads = [names[i] if isinstance(i, int) else i for i in loads]
        return bound


def _parse_kernel(text: str, shapes: _Shapes) -> ast.FunctionDef:
    """One kernel's text, as ``ast.parse`` would give it, its simple statements bound to
    shared templates: runs of them are cut out, the rest (the ``def``, loops, ``if``
    headers, returns, the docstring) parsed whole with a marker per run."""
    runs: list[list[Bound]] = []
    kept: list[str] = []
    current: list[Bound] | None = None
    indent = ""
    for line in text.split("\n"):
        stripped = line.lstrip()
        simple = (
            stripped
            and not stripped.endswith(":")
            and not stripped.startswith(("@", "def ", "return", '"""', "'"))
            and "+=" not in stripped
        )
        here = line[: len(line) - len(stripped)]
        if simple and current is not None and here == indent:
            current.append(shapes.bound(stripped))
            continue
        if simple:
            current, indent = [shapes.bound(stripped)], here
            runs.append(current)
            kept.append(f"{here}__run({len(runs) - 1})")
            continue
        current = None
        kept.append(line)
    tree = ast.parse("\n".join(kept))
    (definition,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)]

    def splice(body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for statement in body:
            value = statement.value if isinstance(statement, ast.Expr) else None
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "__run"
                and isinstance(value.args[0], ast.Constant)
            ):
                out.extend(runs[int(cast(int, value.args[0].value))])
                continue
            for field in ("body", "orelse"):
                if isinstance(getattr(statement, field, None), list):
                    setattr(statement, field, splice(getattr(statement, field)))
            out.append(statement)
        return out

    definition.body = splice(definition.body)
    return definition


_KERNEL_DEFINITION = re.compile(r"^def (?:batch|point)\(", re.MULTILINE)


def _stores_and_loads(statement: ast.stmt) -> tuple[list[str], list[str]]:
    """The names a statement assigns and reads."""
    if isinstance(statement, Bound):
        return statement.stores, statement.loads
    stores: list[str] = []
    loads: list[str] = []
    for node in ast.walk(statement):
        if isinstance(node, ast.Name):
            (stores if isinstance(node.ctx, ast.Store) else loads).append(node.id)
    return stores, loads


def assigned_names(body: Iterable[ast.stmt]) -> dict[str, int]:
    """How often each name is assigned in ``body``, a name assigned under an ``if`` (or
    with ``+=``, or a loop's variable) counted twice: those live in stack slots, the
    others are SSA values."""
    counts: dict[str, int] = {}

    def visit(statements: Iterable[ast.stmt], nested: bool) -> None:
        for statement in statements:
            targets: list[ast.expr] = []
            if isinstance(statement, Bound):
                for stored in statement.stores:
                    counts[stored] = counts.get(stored, 0) + (2 if nested else 1)
                continue
            if isinstance(statement, ast.Assign):
                targets = statement.targets
            elif isinstance(statement, ast.AugAssign):
                targets = [statement.target]
            elif isinstance(statement, ast.If):
                visit(statement.body, True)
                visit(statement.orelse, True)
            elif isinstance(statement, ast.For):
                if isinstance(statement.target, ast.Name):
                    counts[statement.target.id] = 2
                # Names assigned once per pass of the loop stay SSA values: the
                # generated code reads none of them in a later pass.
                visit(statement.body, nested)
            for target in targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                for name in names:
                    if isinstance(name, ast.Name):
                        counts[name.id] = counts.get(name.id, 0) + (2 if nested else 1)
                    if isinstance(statement, ast.AugAssign) and isinstance(name, ast.Name):
                        counts[name.id] = 2

    visit(body, False)
    return counts


PART_STATEMENTS = 256
"""The straight-line statements of a kernel longer than twice this are split into
functions of this many statements each (``noinline``), called in order.

LLVM's instruction selection and scheduling work on one basic block at a time and
grow faster than linearly in its length: one block of a 4,000-node gradient took
12 s to select, against 0.3 s at 1,000 nodes. Functions of a bounded length keep
the compile linear in the program. A value that one part makes and another reads
crosses in the work buffer (a store where it is made, a load where it is read):
the loads and stores the register allocator would have made anyway, since a long
program's values outnumber the registers."""


BLOCK_DOUBLES = 32_768
"""The work buffer of a blocked batch holds about this many doubles (256 KiB, within the
second-level cache): its block of points is this divided by the slots per point,
between 1 and ``MAX_BLOCK_POINTS`` (a program of more slots than this runs one point
per block, its buffer as large as its slots)."""
MAX_BLOCK_POINTS = 64


def block_points(slots: int) -> int:
    """How many points a batch kernel with ``slots`` work slots per point runs per block."""
    return max(1, min(MAX_BLOCK_POINTS, BLOCK_DOUBLES // max(1, slots)))


def straight_prefix(body: list[ast.stmt], mutable: set[str]) -> int:
    """How many of ``body``'s first statements are plain assignments that touch no
    mutable name: the statements that may move into parts."""
    for position, statement in enumerate(body):
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        assignment = isinstance(statement, ast.Assign) or (
            isinstance(statement, Bound) and isinstance(statement.template, ast.Assign)
        )
        stores, loads = _stores_and_loads(statement)
        if not assignment or any(name in mutable for name in (*stores, *loads)):
            return position
    return len(body)


def spill_plan(body: list[ast.stmt], prefix: int, size: int) -> dict[str, int]:
    """The work-buffer slot of each name that one part of ``body[:prefix]`` (parts of
    ``size`` statements) makes and a later part, or the statements after the prefix,
    reads. A slot is reused once its name was read for the last time, so the buffer
    holds what lives at once, not every value."""
    made: dict[str, int] = {}
    last: dict[str, int] = {}
    for position, statement in enumerate(body):
        stores, loads = _stores_and_loads(statement)
        for name in loads:
            last[name] = position
        if position < prefix:
            for name in stores:
                made.setdefault(name, position)

    def part(position: int) -> int:  # the statements after the prefix are a part of their own
        return position // size if position < prefix else -1

    crossing = sorted(
        (position, name)
        for name, position in made.items()
        if part(last.get(name, position)) != part(position)
    )
    plan: dict[str, int] = {}
    slots = 0
    free: list[int] = []
    ending: list[tuple[int, int]] = []  # (last read, slot), as a heap
    for position, name in crossing:
        while ending and ending[0][0] < position:
            free.append(heapq.heappop(ending)[1])
        if free:
            slot = free.pop()
        else:
            slot, slots = slots, slots + 1
        plan[name] = slot
        heapq.heappush(ending, (last[name], slot))
    return plan


class FunctionLowering:
    """Lowers one function definition of the subset to the text of an LLVM function."""

    def __init__(
        self, module: ModuleLowering, definition: ast.FunctionDef, in_slots: set[str] | None = None
    ) -> None:
        self.module = module
        self.definition = definition
        self.lines: list[str] = []
        self.slots: list[str] = []  # allocas, placed in the entry block
        self.values: dict[str, Value] = {}  # SSA names
        self.mutable: dict[str, Value] = {}  # name -> its stack slot and element type
        self.names: list[str] = []  # what the placeholders of the statement lowered stand for
        self.spilled: dict[str, int] = {}  # name -> its slot in the work buffer
        self.work_size = 0  # slots per point
        self.work_row = "%work"  # where the current point's slots start
        self.block = 1  # points per block: the distance between a point's slots
        self.split: list[ast.stmt] | None = None  # the statements whose prefix runs as parts
        self.prefix = 0
        self.loop_variable: str | None = None
        self.count = 0
        self.terminated = False
        self.returns: list[str] = []  # the return type(s)
        if in_slots is None:
            counts = assigned_names(definition.body)
            in_slots = {name for name, count in counts.items() if count > 1}
        self.in_slots = in_slots

    # -- text ----------------------------------------------------------------------
    def temporary(self) -> str:
        self.count += 1
        return f"%t{self.count}"

    def label(self, what: str) -> str:
        self.count += 1
        return f"{what}{self.count}"

    def emit(self, line: str) -> None:
        if self.terminated:  # code after a return: a block of its own, never reached
            self.lines.append(f"{self.label('dead')}:")
            self.terminated = False
        self.lines.append("  " + line)

    def instruction(self, text: str, type_: str) -> Value:
        name = self.temporary()
        self.emit(f"{name} = {text}")
        return Value(name, type_)

    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.terminated = False

    def branch(self, target: str) -> None:
        if not self.terminated:
            self.emit(f"br label %{target}")
            self.terminated = True

    # -- names -----------------------------------------------------------------------
    def bind(self, name: str, value: Value) -> None:
        spilled = self.spilled.get(name)
        if spilled is not None:  # read by a later part: through the work buffer
            if value.type != DOUBLE:
                raise NotImplementedError(f"{self.definition.name}: {name} crosses parts")
            self.emit(f"store double {value.text}, ptr {self.work_address(spilled)}")
            self.values[name] = value  # this part reads it where it is
            return
        if name in self.in_slots:
            slot = self.mutable.get(name)
            if slot is None:
                slot = self.mutable[name] = Value(f"%{name}.slot", value.type)
                self.slots.append(f"  %{name}.slot = alloca {value.type}")
            if slot.type != value.type:
                raise NotImplementedError(
                    f"{self.definition.name}: {name} is assigned a {value.type} after a {slot.type}"
                )
            self.emit(f"store {value.type} {value.text}, ptr {slot.text}")
        else:
            if name in self.values:
                raise NotImplementedError(f"{self.definition.name}: {name} is assigned twice")
            self.values[name] = value

    def work_address(self, slot: int) -> str:
        """The address of this point's ``slot`` in the work buffer."""
        return self.instruction(
            f"getelementptr inbounds double, ptr {self.work_row}, i64 {slot * self.block}", "ptr"
        ).text

    def point_row(self, point: Value, first: Value) -> None:
        """Where point ``point``'s slots start in the work buffer of a block of points
        that starts at point ``first``: slot-major, so the block's points of one slot
        are neighbours (vector loads and stores when LLVM vectorises a part's loop)."""
        offset = self.arithmetic(ast.Sub(), point, first)
        self.work_row = self.instruction(
            f"getelementptr inbounds double, ptr %work, i64 {offset.text}", "ptr"
        ).text

    def load_spilled(self, slot: int) -> Value:
        """The value an earlier part left in the work buffer's ``slot``."""
        return self.instruction(f"load double, ptr {self.work_address(slot)}", DOUBLE)

    def read(self, name: str) -> Value:
        value = self.values.get(name)
        if value is not None:
            return value
        spilled = self.spilled.get(name)
        if spilled is not None:  # made by an earlier part: loaded once per part
            loaded = self.values[name] = self.load_spilled(spilled)
            return loaded
        slot = self.mutable.get(name)
        if slot is not None:
            return self.instruction(f"load {slot.type}, ptr {slot.text}", slot.type)
        constant = self.module.constants.get(name)
        if constant is not None:
            return Value(double_literal(constant), DOUBLE)
        raise NotImplementedError(f"{self.definition.name}: unknown name {name!r}")

    # -- expressions -----------------------------------------------------------------
    def expression(self, node: ast.expr) -> Value:
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool):
                return Value("true" if value else "false", BOOL)
            if isinstance(value, int):
                return Value(str(value), INT)
            if isinstance(value, float):
                return Value(double_literal(value), DOUBLE)
        elif isinstance(node, ast.Name):
            name = self.resolve(node.id)
            return Value(name, INT) if name.isdigit() else self.read(name)
        elif isinstance(node, ast.BinOp):
            return self.arithmetic(node.op, self.expression(node.left), self.expression(node.right))
        elif isinstance(node, ast.UnaryOp):
            operand = self.expression(node.operand)
            if isinstance(node.op, ast.USub) and operand.type == DOUBLE:
                return self.instruction(f"fneg double {operand.text}", DOUBLE)
            if isinstance(node.op, ast.USub) and operand.type == INT:
                return self.instruction(f"sub i64 0, {operand.text}", INT)
            if isinstance(node.op, ast.Not):
                return self.instruction(f"xor i1 {self.truth(operand).text}, true", BOOL)
        elif isinstance(node, ast.BoolOp):
            verb = "and" if isinstance(node.op, ast.And) else "or"
            result = self.truth(self.expression(node.values[0]))
            for operand_node in node.values[1:]:  # pure operands: both sides evaluated
                right = self.truth(self.expression(operand_node))
                result = self.instruction(f"{verb} i1 {result.text}, {right.text}", BOOL)
            return result
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self.compare(
                node.ops[0], self.expression(node.left), self.expression(node.comparators[0])
            )
        elif isinstance(node, ast.IfExp):
            test = self.truth(self.expression(node.test))
            chosen, other = self.expression(node.body), self.expression(node.orelse)
            return self.select(node, test, chosen, other)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            return self.call(node.func.id, [self.expression(a) for a in node.args])
        elif isinstance(node, ast.Subscript):
            pointer, element = self.element(node)
            return self.instruction(f"load {element}, ptr {pointer}", element)
        raise NotImplementedError(
            f"{self.definition.name}: cannot lower {ast.unparse(node)!r} to LLVM IR"
        )

    def select(self, node: ast.AST, test: Value, chosen: Value, other: Value) -> Value:
        if chosen.type != other.type:
            raise NotImplementedError(
                f"{self.definition.name}: the sides of {ast.unparse(node)} differ in type"
            )
        return self.instruction(
            f"select i1 {test.text}, {chosen.type} {chosen.text}, {other.type} {other.text}",
            chosen.type,
        )

    def truth(self, value: Value) -> Value:
        if value.type != BOOL:
            raise NotImplementedError(f"{self.definition.name}: {value.text} is not a bool")
        return value

    # Per operator: the float instruction and the integer one, and the result type.
    _ARITHMETIC: dict[type[ast.AST], tuple[str, str]] = {
        ast.Add: ("fadd", "add"),
        ast.Sub: ("fsub", "sub"),
        ast.Mult: ("fmul", "mul"),
        ast.Div: ("fdiv", ""),
    }
    _COMPARISONS: dict[type[ast.AST], tuple[str, str]] = {
        ast.Lt: ("fcmp olt", "icmp slt"),
        ast.LtE: ("fcmp ole", "icmp sle"),
        ast.Gt: ("fcmp ogt", "icmp sgt"),
        ast.GtE: ("fcmp oge", "icmp sge"),
        ast.Eq: ("fcmp oeq", "icmp eq"),
        ast.NotEq: ("fcmp une", "icmp ne"),  # Python's != on floats: true at a nan
    }

    def arithmetic(self, op: ast.operator, left: Value, right: Value) -> Value:
        return self.binary(self._ARITHMETIC, op, left, right, None)

    def compare(self, op: ast.cmpop, left: Value, right: Value) -> Value:
        return self.binary(self._COMPARISONS, op, left, right, BOOL)

    def binary(
        self,
        table: dict[type[ast.AST], tuple[str, str]],
        op: ast.AST,
        left: Value,
        right: Value,
        result: str | None,
    ) -> Value:
        """``left op right`` of two floats or two integers, by ``table``'s instructions;
        the operands' type, or ``result``."""
        verbs = table.get(type(op))
        if verbs is not None and left.type == right.type and left.type in (DOUBLE, INT):
            verb = verbs[0] if left.type == DOUBLE else verbs[1]
            if verb:
                return self.instruction(
                    f"{verb} {left.type} {left.text}, {right.text}", result or left.type
                )
        raise NotImplementedError(
            f"{self.definition.name}: {type(op).__name__} of {left.type} and {right.type}"
        )

    def call(self, name: str, arguments: list[Value]) -> Value:
        if any(argument.type != DOUBLE for argument in arguments):
            raise NotImplementedError(f"{self.definition.name}: {name} of a non-float argument")
        listed = ", ".join(f"double {argument.text}" for argument in arguments)
        if name == "isfinite":  # as Numba: neither nan nor infinite
            magnitude = self.call("fabs", arguments)
            return self.instruction(
                f"fcmp one double {magnitude.text}, {double_literal(_INF)}", BOOL
            )
        if name in self.module.helpers:
            arity, returned = self.module.helpers[name]
            if len(arguments) != arity:
                raise NotImplementedError(f"{self.definition.name}: {name} given {len(arguments)}")
            return self.instruction(f"call {returned} @{name}({listed})", returned)
        if name in scalar_source.MATH_NAMES:
            if len(arguments) != ARITY.get(name, 1):
                raise NotImplementedError(f"{self.definition.name}: {name} given {len(arguments)}")
            symbol = f"llvm.{name}.f64" if name in INTRINSICS else name
            self.module.declare(symbol, len(arguments), intrinsic=name in INTRINSICS)
            return self.instruction(f"call double @{symbol}({listed})", DOUBLE)
        raise NotImplementedError(f"{self.definition.name}: unknown function {name!r}")

    def element(self, node: ast.Subscript) -> tuple[str, str]:
        """The address of ``array[index]`` or ``rows[row, column]``, and its element type."""
        if not isinstance(node.value, ast.Name) or node.value.id not in self.arrays:
            raise NotImplementedError(f"{self.definition.name}: {ast.unparse(node)!r}")
        array = self.arrays[node.value.id]
        indices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if array.kind == "rows":
            if len(indices) != 2:
                raise NotImplementedError(f"{self.definition.name}: {ast.unparse(node)!r}")
            row, column = (self.expression(index) for index in indices)
            start = self.instruction(f"mul i64 {row.text}, %{array.name}.stride", INT)
            offset = self.instruction(f"add i64 {start.text}, {column.text}", INT)
        else:
            if len(indices) != 1:
                raise NotImplementedError(f"{self.definition.name}: {ast.unparse(node)!r}")
            offset = self.expression(indices[0])
        if offset.type != INT:
            raise NotImplementedError(f"{self.definition.name}: index {offset.text} not an int")
        address = self.instruction(
            f"getelementptr inbounds {array.element}, ptr %{array.name}, i64 {offset.text}", "ptr"
        )
        return address.text, array.element

    # -- statements --------------------------------------------------------------------
    def statements(self, body: list[ast.stmt]) -> None:
        if body is self.split:  # the straight-line prefix runs as parts
            if self.loop_variable is None:
                self.call_parts([])
            body = body[self.prefix :]
        for statement in body:
            self.statement(statement)

    def call_parts(self, block: list[Value]) -> None:
        """Call every part, with the kernel's own parameters and ``block`` (the first
        point and the end of a block of points, in a loop)."""
        arguments = [parameter.replace("noalias ", "") for parameter in self.parameters]
        arguments += [f"i64 {value.text}" for value in block]
        listed = ", ".join(arguments)
        for part in range(0, self.prefix, PART_STATEMENTS):
            self.emit(f"call void @{self.symbol}.part{part}({listed})")

    def each_point(self, variable: str, first: Value, statements: list[ast.stmt]) -> None:
        """A part's ``statements`` for the point in ``variable`` of a block from ``first``."""
        point = self.read(variable)
        self.point_row(point, first)
        kept = dict(self.values)  # each point makes its values anew
        self.values[variable] = point  # read once per point
        self.statements(statements)
        self.values = kept

    def counted(
        self, name: str, first: Value, stop: Value, step: int, body: Callable[[], None]
    ) -> None:
        """``for name in range(first, stop, step)``: ``name`` in a stack slot (``in_slots``)."""
        self.bind(name, first)
        test, inside, end = self.label("test"), self.label("body"), self.label("done")
        self.branch(test)
        self.start_block(test)
        more = self.compare(ast.Lt(), self.read(name), stop)
        self.emit(f"br i1 {more.text}, label %{inside}, label %{end}")
        self.terminated = True
        self.start_block(inside)
        body()
        self.bind(name, self.arithmetic(ast.Add(), self.read(name), Value(str(step), INT)))
        self.branch(test)
        self.start_block(end)

    def lower_parts(self, body: list[ast.stmt]) -> None:
        """The functions of the parts of ``body[:self.prefix]`` (each its own FunctionLowering).

        In a loop over points a part takes a block of points (its first and its
        end) and runs its statements for each, so its code stays in the
        instruction cache for the whole block instead of being fetched again for
        every point; each point has its own row of the work buffer.
        """
        for start in range(0, self.prefix, PART_STATEMENTS):
            statements = body[start : min(self.prefix, start + PART_STATEMENTS)]
            variable = self.loop_variable
            part = FunctionLowering(self.module, self.definition, {variable} if variable else set())
            part.arrays, part.spilled, part.block = self.arrays, self.spilled, self.block
            for parameter in self.parameters:
                name = parameter.rsplit("%", 1)[1]
                if parameter.startswith("i64") and name in self.values:
                    part.values[name] = self.values[name]
            listed = list(self.parameters)
            if variable is None:
                part.statements(statements)
            else:
                listed += ["i64 %block.first", "i64 %block.end"]
                first, end = Value("%block.first", INT), Value("%block.end", INT)

                each = partial(part.each_point, variable, first, statements)
                part.counted(variable, first, end, 1, each)
            part.emit("ret void")
            symbol = f"@{self.symbol}.part{start}"
            header = f"define internal void {symbol}({', '.join(listed)}) noinline {{"
            self.module.parts.append("\n".join([header, "entry:", *part.slots, *part.lines, "}"]))
            types = ", ".join(parameter.rsplit(" %", 1)[0] for parameter in listed)
            self.module.part_declarations.append(f"declare void {symbol}({types})")

    def resolve(self, name: str) -> str:
        """A template's placeholder (``__3``) as the name or integer it stands for."""
        if name.startswith("__") and name[2:].isdigit():
            return self.names[int(name[2:])]
        return name

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, Bound):
            self.names = node.names
            self.statement(node.template)
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # a docstring
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            self.assign(node.targets[0], node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            target = self.resolve(node.target.id)
            total = self.arithmetic(node.op, self.read(target), self.expression(node.value))
            self.bind(target, total)
        elif isinstance(node, ast.If):
            self.branching(node)
        elif isinstance(node, ast.Return) and node.value is not None:
            self.return_(node.value)
        elif isinstance(node, ast.For):
            self.loop(node)
        else:
            raise NotImplementedError(
                f"{self.definition.name}: cannot lower {ast.unparse(node)!r} to LLVM IR"
            )

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Tuple):
            if not isinstance(value, ast.Tuple) or len(value.elts) != len(target.elts):
                raise NotImplementedError(f"{self.definition.name}: {ast.unparse(target)}")
            results = [self.expression(element) for element in value.elts]  # all, then bind
            for name, result in zip(target.elts, results, strict=True):
                if not isinstance(name, ast.Name):
                    raise NotImplementedError(f"{self.definition.name}: {ast.unparse(name)}")
                self.bind(self.resolve(name.id), result)
        elif isinstance(target, ast.Name):
            self.bind(self.resolve(target.id), self.expression(value))
        elif isinstance(target, ast.Subscript):
            result = self.expression(value)
            pointer, element = self.element(target)
            if element == BYTE and result.type == BOOL:
                result = self.instruction(f"zext i1 {result.text} to i8", BYTE)
            if result.type != element:
                raise NotImplementedError(
                    f"{self.definition.name}: a {result.type} stored into {ast.unparse(target)}"
                )
            self.emit(f"store {element} {result.text}, ptr {pointer}")
        else:
            raise NotImplementedError(f"{self.definition.name}: {ast.unparse(target)}")

    def branching(self, node: ast.If) -> None:
        test = self.truth(self.expression(node.test))
        then, otherwise, end = self.label("then"), self.label("else"), self.label("end")
        self.emit(f"br i1 {test.text}, label %{then}, label %{otherwise}")
        self.terminated = True
        self.start_block(then)
        self.statements(node.body)
        self.branch(end)
        self.start_block(otherwise)
        self.statements(node.orelse)
        self.branch(end)
        self.start_block(end)

    def return_(self, node: ast.expr) -> None:
        parts = node.elts if isinstance(node, ast.Tuple) else [node]
        results = [self.expression(part) for part in parts]
        types = [result.type for result in results]
        if self.returns and self.returns != types:
            raise NotImplementedError(f"{self.definition.name}: returns {types} and {self.returns}")
        self.returns = types
        for position, result in enumerate(results[1:], 1):  # the others through pointers
            self.emit(f"store {result.type} {result.text}, ptr %out{position}")
        self.emit(f"ret {results[0].type} {results[0].text}")
        self.terminated = True

    def loop(self, node: ast.For) -> None:
        """``for p in range(start, stop)``: ``p`` in a stack slot, the body once per value."""
        call = node.iter
        if not (
            isinstance(node.target, ast.Name)
            and isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "range"
            and len(call.args) == 2
            and not node.orelse
        ):
            raise NotImplementedError(
                f"{self.definition.name}: {ast.unparse(node).splitlines()[0]}"
            )
        name = node.target.id
        start, stop = (self.expression(argument) for argument in call.args)
        if node.body is not self.split:
            self.counted(name, start, stop, 1, lambda: self.statements(node.body))
            return
        # In blocks of points: every part runs the block, then the rest of the body
        # runs for each point of the block.
        size = self.block
        self.in_slots.add("block.first")

        def block() -> None:
            first = self.read("block.first")
            after = self.arithmetic(ast.Add(), first, Value(str(size), INT))
            inside = self.compare(ast.Lt(), after, stop)
            end = self.select(node, inside, after, stop)
            self.call_parts([first, end])

            def one_point() -> None:
                self.point_row(self.read(name), first)
                self.statements(node.body)

            self.counted(name, first, end, 1, one_point)

        self.counted("block.first", start, stop, size, block)

    # -- the whole function -----------------------------------------------------------
    def lower(
        self, parameters: tuple[Parameter, ...] | None, linkage: str, outs: int, symbol: str
    ) -> str:
        """The function's text. ``parameters``: the kernel's arrays and scalars (None: a
        helper of float arguments, returning a float); ``outs``: pointers for a returned
        tuple's later items, at the end of the parameters."""
        definition = self.definition
        names = [argument.arg for argument in definition.args.args]
        self.arrays: dict[str, Parameter] = {}
        listed: list[str] = []
        if parameters is None:
            for name in names:
                self.values[name] = Value(f"%{name}", DOUBLE)
                listed.append(f"double %{name}")
        else:
            given = {parameter.name: parameter for parameter in parameters}
            unknown = [name for name in names if name not in given]
            if unknown:
                raise NotImplementedError(f"{definition.name}: unknown parameters {unknown}")
            for parameter in parameters:  # every parameter, in the fixed order
                if parameter.kind == "scalar":
                    self.values[parameter.name] = Value(f"%{parameter.name}", INT)
                    listed.append(f"i64 %{parameter.name}")
                    continue
                self.arrays[parameter.name] = parameter
                listed.append(f"ptr {'noalias ' if parameter.noalias else ''}%{parameter.name}")
                if parameter.kind == "rows":
                    listed.append(f"i64 %{parameter.name}.stride")
        self.symbol = symbol
        if parameters is not None:  # a kernel: a long one runs in parts
            listed.append("ptr noalias %work")
            self.parameters = list(listed)
            loops = [node for node in definition.body if isinstance(node, ast.For)]
            body = loops[0].body if loops else definition.body
            if loops and isinstance(loops[0].target, ast.Name):
                self.loop_variable = loops[0].target.id
            prefix = straight_prefix(body, self.in_slots - {self.loop_variable or ""})
            if prefix > 2 * PART_STATEMENTS:
                self.split, self.prefix = body, prefix
                self.spilled = spill_plan(body, prefix, PART_STATEMENTS)
                self.work_size = max(self.spilled.values(), default=-1) + 1
                if self.loop_variable is not None:
                    self.block = block_points(self.work_size)
                self.lower_parts(body)
            self.buffer_size = self.work_size * self.block
        self.statements(definition.body)
        if not self.terminated:  # a function must return on every path, as Numba requires
            raise NotImplementedError(f"{definition.name}: a path ends without a return")
        returned = self.returned = self.returns[0] if self.returns else "void"
        if len(self.returns) > outs:
            raise NotImplementedError(f"{definition.name}: returns {len(self.returns)} values")
        listed += [f"ptr %out{position}" for position in range(1, outs)]
        header = f"define {linkage} {returned} @{symbol}({', '.join(listed)}) {{"
        return "\n".join([header, "entry:", *self.slots, *self.lines, "}"])


_INF = float("inf")


class ModuleLowering:
    """The functions of one module's text, lowered, and the declarations they need."""

    def __init__(self, constants: dict[str, float]) -> None:
        self.constants = constants
        self.helpers: dict[str, tuple[int, str]] = {}  # lowered so far: arity, return type
        self.declarations: dict[str, str] = {}
        self.parts: list[str] = []  # the parts of long kernels
        self.extra: list[str] = []  # functions a kernel lowering of its own adds
        self.part_declarations: list[str] = []  # each part's, for another module's calls

    def declare(self, symbol: str, arity: int, intrinsic: bool) -> None:
        if symbol not in self.declarations:
            listed = ", ".join(["double"] * arity)
            # As Numba declares them: the C library's functions read no memory
            # a kernel writes (``memory(read)``, Numba's ``readonly``), unwind never.
            attributes = "" if intrinsic else " nounwind memory(read)"
            self.declarations[symbol] = f"declare double @{symbol}({listed}){attributes}"


KERNELS = {"batch": (BATCH, 1), "point": (POINT, 2)}
"""The generated kernels lowered to IR: their parameters and how many values they
return (``point`` always has the pointer for the failed guard). Threads run ``batch``
on ranges of points (``native_calls.run_parallel``)."""


def module_ir(source: str, name: str) -> str:
    """:func:`module_irs` as one module."""
    return module_irs(source, name, 1).texts[0]


class Modules(NamedTuple):
    """A program's IR as modules (:func:`module_irs`)."""

    texts: list[str]
    lines: int  # of the program as one module: its size, however it was shared out


KernelLowering = Callable[[ModuleLowering, ast.FunctionDef, str, dict[str, ast.FunctionDef]], str]
"""Lowers one kernel another way (``module_irs``'s ``batch``): given the module, the
kernel's definition, its symbol and the module's helpers by name, the function's text
(its ``<symbol>_work`` global included)."""


def module_irs(
    source: str, name: str, modules: int, batch: KernelLowering | None = None
) -> Modules:
    """The LLVM IR of the generated module ``source`` (``scalar_source.module_source``),
    as modules that LLVM can compile at once, ``modules`` threads sharing the work.

    Its helpers become internal functions; ``batch`` and ``point`` become
    external functions ``<name>_batch`` and ``<name>_point`` of the
    parameters ``BATCH`` and ``POINT`` and then a work buffer of
    ``<name>_batch_work`` (``<name>_point_work``) doubles (2-D
    arrays as a pointer and a row stride in elements, 1-D arrays as a
    pointer), with a tuple's later items returned through pointers
    (``point``'s failed guard).

    The first module holds the kernels; the parts of a long kernel (see
    ``PART_STATEMENTS``) are shared out in order among ``modules`` others, as
    external functions the first declares (each module has its own copy of
    the helpers). A module without parts is always one module.

    ``batch``, when given, lowers the ``batch`` kernel instead (the whole
    module is then one module).
    """
    collecting = gc.isenabled()
    gc.disable()  # hundreds of thousands of small objects, no cycles: the collector's
    try:  # passes over them took a third of the time for 10^5 nodes
        return _module_irs(source, name, modules, batch)
    finally:
        if collecting:
            gc.enable()


def _module_irs(source: str, name: str, modules: int, batch: KernelLowering | None) -> Modules:
    # The module's text is its header, its helpers and its kernels, three blank lines
    # apart: the helpers are parsed whole, the kernels statement shape by statement shape.
    shapes = _Shapes()
    definitions = []
    for chunk in source.split("\n\n\n"):
        if _KERNEL_DEFINITION.search(chunk):
            definitions.append(_parse_kernel(chunk, shapes))
        else:
            definitions += [n for n in ast.parse(chunk).body if isinstance(n, ast.FunctionDef)]
    constants = {"UNREACHED": -0.0, "inf": _INF, "nan": float("nan")}
    module = ModuleLowering(constants)
    functions, helpers = [], []
    helper_definitions = {d.name: d for d in definitions if d.name not in KERNELS}
    for definition in definitions:
        if batch is not None and definition.name == "batch":
            functions.append(batch(module, definition, f"{name}_batch", helper_definitions))
            continue
        parameters, outs = KERNELS.get(definition.name, (None, 1))
        function = FunctionLowering(module, definition)
        linkage = "internal" if parameters is None else ""
        symbol = definition.name if parameters is None else f"{name}_{definition.name}"
        functions.append(function.lower(parameters, linkage, outs, symbol))
        if parameters is not None:  # how many doubles its caller's work buffer holds
            functions.append(f"@{symbol}_work = constant i64 {function.buffer_size}")
        if parameters is None:  # callable by the functions after it (the text defines in order)
            module.helpers[definition.name] = (len(definition.args.args), function.returned)
            helpers.append(functions[-1])
    declarations = list(module.declarations.values())
    whole = "\n\n".join([*declarations, *functions, *module.extra, *module.parts]) + "\n"
    lines = whole.count("\n")
    groups = min(modules, len(module.parts))
    if modules < 2 or groups < 1 or batch is not None:
        return Modules([whole], lines)
    shared = [part.replace("define internal void", "define void", 1) for part in module.parts]
    cuts = [len(shared) * group // groups for group in range(groups + 1)]
    texts = [
        "\n\n".join([*declarations, *functions, *module.part_declarations]) + "\n",
        *(
            "\n\n".join([*declarations, *helpers, *shared[cuts[i] : cuts[i + 1]]]) + "\n"
            for i in range(groups)
        ),
    ]
    return Modules(texts, lines)
