"""Fast-math batch kernels: several points at once, with glibc's vector math functions.

A generated module whose header sets ``LANES = n`` (``scalar_source.module_source``
with ``lanes=n``) has its ``batch`` kernel lowered here instead of by
:mod:`fastad.kernels.scalar_ir`: the body of the loop over points runs on
``n`` points at once, every float an LLVM ``<n x double>``. The points of a
batch are taken in groups of ``n``; the last, partial group reads its last
point again in the missing lanes and writes only the lanes of real points, so
a point's result never depends on where it stands in the batch or on how
threads share the batch out.

Arithmetic and comparisons are the same IEEE instructions as the scalar
kernels, on vectors: only the math functions differ. Those the header lists
in ``VECTOR_MATH`` call glibc's libmvec (``_ZGVeN8v_exp`` for eight lanes
of AVX-512, ``_ZGVdN4v_exp`` for four of AVX2, ``_ZGVbN2v_exp`` for two of
SSE), which is accurate to a few units in the last place rather than libm's
correctly rounded or nearly so; ``fabs``, ``copysign`` and ``sqrt`` are exact
vector instructions; any other math function runs libm's scalar function on
each lane (the same bits as the scalar kernels).

Control flow is made data flow: an ``if`` runs both of its sides, each
assignment under a lane mask (LLVM ``select``), a store only in the lanes
whose mask is set. That needs every expression to be pure and total, which
the generated code's are (the scalar lowering relies on the same for its
conditional expressions). The helpers the body calls are lowered the same
way, a ``return`` completing the lanes it is reached in.

The subset is the scalar lowering's, inside the loop body: anything else (a
nested loop, a subscript not by the point or by a literal) raises
``NotImplementedError`` naming it. A body longer than ``MAX_STATEMENTS`` is
refused the same way (``body_statements`` tells a caller beforehand): the
group is one function, whose compile grows faster than its length, where the
scalar kernels split long bodies into parts (``scalar_ir.PART_STATEMENTS``).
"""

from __future__ import annotations

import ast
import re

from . import scalar_ir, scalar_source
from .scalar_ir import BOOL, BYTE, DOUBLE, INT, FunctionLowering, ModuleLowering, Value

ISA = {2: "b", 4: "d", 8: "e"}
"""The vector function ABI's letter for each lane count: SSE, AVX2, AVX-512."""

EXACT = {"fabs", "copysign", "sqrt"}
"""Math functions that are single exact instructions on vectors (LLVM intrinsics)."""

MAX_STATEMENTS = 12_000
"""The longest loop body lowered here, in statements. The gradient of a random DAG of
sin, tanh and arithmetic takes about 2.6 statements a node; measured on the 2-core
machine (program compiled and first called): 1,600 nodes (4,225 statements) 0.8 s,
4,000 nodes (10,598) 2.1 s, 10,000 nodes (26,388) 10.2 s."""

_LOOP_BODY = re.compile(
    r"^    for p in range\(start, stop\):\n(.*?)^    return flagged$", re.MULTILINE | re.DOTALL
)


def body_statements(source: str) -> int:
    """How many lines the batch kernel's loop body of generated module ``source`` has
    (statements and ``if`` headers: what :data:`MAX_STATEMENTS` bounds)."""
    found = _LOOP_BODY.search(source)
    return 0 if found is None else found.group(1).count("\n")


def vector_symbol(name: str, lanes: int) -> str:
    """libmvec's name for math function ``name`` on ``lanes`` doubles (the vector
    function ABI's mangling: ISA letter, unmasked, lanes, one ``v`` per argument)."""
    return f"_ZGV{ISA[lanes]}N{lanes}{'v' * scalar_ir.ARITY.get(name, 1)}_{name}"


_LANES = re.compile(r"^LANES = (\d+)$", re.MULTILINE)
_VECTOR_MATH = re.compile(r"^VECTOR_MATH = \(([^)]*)\)$", re.MULTILINE)


def module_irs(source: str, name: str, modules: int) -> scalar_ir.Modules:
    """:func:`fastad.kernels.scalar_ir.module_irs`, with the ``batch`` kernel of a
    module whose header sets ``LANES`` lowered to vector code."""
    found = _LANES.search(source)
    if found is None:
        return scalar_ir.module_irs(source, name, modules)
    lanes = int(found.group(1))
    if lanes not in ISA:
        raise NotImplementedError(f"LANES = {lanes}: expected one of {sorted(ISA)}")
    listed = _VECTOR_MATH.search(source)
    vector_math = set(re.findall(r'"(\w+)"', listed.group(1))) if listed else set()

    def batch(
        module: ModuleLowering,
        definition: ast.FunctionDef,
        symbol: str,
        helpers: dict[str, ast.FunctionDef],
    ) -> str:
        vectors = _Vectors(module, lanes, vector_math, helpers)
        return _batch_kernel(vectors, definition, symbol)

    return scalar_ir.module_irs(source, name, 1, batch)


class _Vectors:
    """What the vector functions of one module share: the lane count, which math
    functions have vector versions, the helpers (lowered once each, on first call)."""

    def __init__(
        self,
        module: ModuleLowering,
        lanes: int,
        vector_math: set[str],
        helpers: dict[str, ast.FunctionDef],
    ) -> None:
        self.module = module
        self.lanes = lanes
        self.vector_math = vector_math
        self.definitions = helpers
        self.lowered: dict[str, tuple[int, str]] = {}  # helper -> (arity, vector return type)

    def of(self, element: str) -> str:
        """The vector type of ``element``."""
        return f"<{self.lanes} x {element}>"

    def declare(self, symbol: str, text: str) -> None:
        self.module.declarations.setdefault(symbol, text)

    def helper(self, name: str) -> tuple[int, str]:
        """The vector version of helper ``name``: its arity and return type."""
        found = self.lowered.get(name)
        if found is None:
            definition = self.definitions[name]
            function = _VectorLowering(self, definition)
            text, returned = function.lower_helper(f"{name}.v{self.lanes}")
            found = self.lowered[name] = (len(definition.args.args), returned)
            self.module.extra.append(text)
        return found


def _element(type_: str) -> str:
    """The element type of a vector type (a scalar type is its own)."""
    return type_.rsplit(" x ", 1)[1][:-1] if type_.startswith("<") else type_


class _VectorLowering(FunctionLowering):
    """Lowers straight-line statements of the subset to vector code under lane masks:
    a group of points of the batch kernel, or a helper."""

    def __init__(self, vectors: _Vectors, definition: ast.FunctionDef) -> None:
        super().__init__(vectors.module, definition, set())
        self.vectors = vectors
        self.lanes = vectors.lanes
        self.mask: Value | None = None  # the lanes the statements run in (None: all)
        self.done: Value | None = None  # a helper's lanes that returned
        self.result: Value | None = None  # a helper's returned values so far
        self.variable = ""  # the loop's variable: the point, in subscripts only
        self.tail = False  # a group of fewer points than lanes (``active``)
        self.active: Value | None = None
        self.rows: list[Value] = []  # the row each lane reads and writes
        self.row_starts: dict[tuple[str, int], Value] = {}
        self.flagged = Value("0", INT)
        self.arrays: dict[str, scalar_ir.Parameter] = {}
        # Arrays read or written a group of rows at once, and their row widths (the
        # kernel calls such a group only where each array's stride is its width).
        self.tiles: dict[str, int] = {}
        self.loaded: dict[str, Value] = {}
        self.pending: dict[str, dict[int, Value]] = {}

    # -- masks -----------------------------------------------------------------------
    def widen(self, value: Value) -> Value:
        """``value`` in every lane (a vector is itself)."""
        if value.type.startswith("<"):
            return value
        vector = self.vectors.of(value.type)
        if not value.text.startswith("%"):  # a literal
            return Value(f"splat ({value.type} {value.text})", vector)
        first = self.instruction(
            f"insertelement {vector} poison, {value.type} {value.text}, i64 0", vector
        )
        return self.instruction(
            f"shufflevector {vector} {first.text}, {vector} poison, "
            f"<{self.lanes} x i32> zeroinitializer",
            vector,
        )

    def both(self, left: Value | None, right: Value | None) -> Value | None:
        """The lanes in both masks (None: every lane)."""
        if left is None or right is None:
            return right if left is None else left
        return self.instruction(f"and {left.type} {left.text}, {right.text}", left.type)

    def negated(self, mask: Value) -> Value:
        return self.instruction(f"xor {mask.type} {mask.text}, splat (i1 true)", mask.type)

    def current(self) -> Value | None:
        """The lanes the statement being lowered runs in."""
        return self.mask if self.done is None else self.both(self.mask, self.negated(self.done))

    def stored(self) -> Value | None:
        """The lanes a store writes: the running lanes of real points."""
        return self.both(self.current(), self.active)

    def choose(self, mask: Value, chosen: Value, other: Value) -> Value:
        chosen, other = self.widen(chosen), self.widen(other)
        if chosen.type != other.type:
            raise NotImplementedError(
                f"{self.definition.name}: a {chosen.type} and a {other.type} in one name"
            )
        return self.instruction(
            f"select {mask.type} {mask.text}, {chosen.type} {chosen.text}, "
            f"{other.type} {other.text}",
            chosen.type,
        )

    # -- names -----------------------------------------------------------------------
    def bind(self, name: str, value: Value) -> None:
        value = self.widen(value)
        mask, old = self.current(), self.values.get(name)
        self.values[name] = value if mask is None or old is None else self.choose(mask, value, old)

    def read(self, name: str) -> Value:
        value = self.values.get(name)
        if value is not None:
            return value
        constant = self.module.constants.get(name)
        if constant is not None:
            return Value(scalar_ir.double_literal(constant), DOUBLE)
        raise NotImplementedError(f"{self.definition.name}: unknown name {name!r}")

    # -- expressions -----------------------------------------------------------------
    def expression(self, node: ast.expr) -> Value:
        if isinstance(node, ast.UnaryOp):
            operand = self.widen(self.expression(node.operand))
            element = _element(operand.type)
            if isinstance(node.op, ast.USub) and element == DOUBLE:
                return self.instruction(f"fneg {operand.type} {operand.text}", operand.type)
            if isinstance(node.op, ast.USub) and element == INT:
                return self.instruction(
                    f"sub {operand.type} zeroinitializer, {operand.text}", operand.type
                )
            if isinstance(node.op, ast.Not) and element == BOOL:
                return self.negated(operand)
        elif isinstance(node, ast.BoolOp):
            verb = "and" if isinstance(node.op, ast.And) else "or"
            result = self.truth(self.expression(node.values[0]))
            for operand_node in node.values[1:]:
                right = self.truth(self.expression(operand_node))
                result = self.instruction(
                    f"{verb} {result.type} {result.text}, {right.text}", result.type
                )
            return result
        elif isinstance(node, ast.IfExp):
            test = self.truth(self.expression(node.test))
            return self.choose(test, self.expression(node.body), self.expression(node.orelse))
        elif isinstance(node, ast.Subscript):
            return self.load(node)
        elif isinstance(node, ast.Name):
            name = self.resolve(node.id)
            if name == self.variable:
                raise NotImplementedError(f"{self.definition.name}: {name} outside a subscript")
        return super().expression(node)

    def truth(self, value: Value) -> Value:
        if _element(value.type) != BOOL:
            raise NotImplementedError(f"{self.definition.name}: {value.text} is not a bool")
        return self.widen(value)

    def binary(
        self,
        table: dict[type[ast.AST], tuple[str, str]],
        op: ast.AST,
        left: Value,
        right: Value,
        result: str | None,
    ) -> Value:
        left, right = self.widen(left), self.widen(right)
        element = _element(left.type)
        verbs = table.get(type(op))
        if verbs is not None and left.type == right.type and element in (DOUBLE, INT):
            verb = verbs[0] if element == DOUBLE else verbs[1]
            if verb:
                returned = self.vectors.of(result) if result else left.type
                return self.instruction(f"{verb} {left.type} {left.text}, {right.text}", returned)
        raise NotImplementedError(
            f"{self.definition.name}: {type(op).__name__} of {left.type} and {right.type}"
        )

    def call(self, name: str, arguments: list[Value]) -> Value:
        vector = self.vectors.of(DOUBLE)
        arguments = [self.widen(argument) for argument in arguments]
        if any(argument.type != vector for argument in arguments):
            raise NotImplementedError(f"{self.definition.name}: {name} of a non-float argument")
        listed = ", ".join(f"{vector} {argument.text}" for argument in arguments)
        if name == "isfinite":
            magnitude = self.call("fabs", arguments)
            return self.instruction(
                f"fcmp one {vector} {magnitude.text}, splat (double 0x7FF0000000000000)",
                self.vectors.of(BOOL),
            )
        if name in self.vectors.definitions:
            arity, returned = self.vectors.helper(name)
            if len(arguments) != arity:
                raise NotImplementedError(f"{self.definition.name}: {name} given {len(arguments)}")
            return self.instruction(f"call {returned} @{name}.v{self.lanes}({listed})", returned)
        if name not in scalar_source.MATH_NAMES:
            raise NotImplementedError(f"{self.definition.name}: unknown function {name!r}")
        arity = scalar_ir.ARITY.get(name, 1)
        if len(arguments) != arity:
            raise NotImplementedError(f"{self.definition.name}: {name} given {len(arguments)}")
        types = ", ".join([vector] * arity)
        if name in self.vectors.vector_math or name in EXACT or name in scalar_ir.INTRINSICS:
            if name in self.vectors.vector_math and name not in EXACT:
                symbol = vector_symbol(name, self.lanes)
                attributes = " nounwind"
            else:  # exact, or scalarised by LLVM into libm's calls
                symbol, attributes = f"llvm.{name}.v{self.lanes}f64", ""
            self.vectors.declare(symbol, f"declare {vector} @{symbol}({types}){attributes}")
            return self.instruction(f"call {vector} @{symbol}({listed})", vector)
        return self.each_lane(name, arguments)

    def each_lane(self, name: str, arguments: list[Value]) -> Value:
        """libm's ``name`` on each lane: a function without a vector version."""
        self.module.declare(name, len(arguments), intrinsic=False)
        vector = self.vectors.of(DOUBLE)
        result = Value("poison", vector)
        for lane in range(self.lanes):
            scalars = [
                self.instruction(f"extractelement {vector} {a.text}, i64 {lane}", DOUBLE)
                for a in arguments
            ]
            listed = ", ".join(f"double {s.text}" for s in scalars)
            value = self.instruction(f"call double @{name}({listed})", DOUBLE)
            result = self.instruction(
                f"insertelement {vector} {result.text}, double {value.text}, i64 {lane}", vector
            )
        return result

    # -- memory ----------------------------------------------------------------------
    def column(self, node: ast.Subscript) -> tuple[scalar_ir.Parameter, int] | None:
        """``(rows, column)`` for ``rows[p, column]``, a column of the group's points."""
        if not isinstance(node.value, ast.Name) or node.value.id not in self.arrays:
            return None
        array = self.arrays[node.value.id]
        indices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if array.kind != "rows" or len(indices) != 2 or not isinstance(indices[0], ast.Name):
            return None
        if self.resolve(indices[0].id) != self.variable:
            return None
        column = super().expression(indices[1])
        if column.type != INT or column.text.startswith("%"):
            return None
        return array, int(column.text)

    def addresses(self, node: ast.Subscript) -> tuple[list[str] | str, str]:
        """Each lane's address of ``rows[p, column]`` or ``vector[p]`` (a list), or the one
        address of ``vector[literal]``; and the element type."""
        if not isinstance(node.value, ast.Name) or node.value.id not in self.arrays:
            raise NotImplementedError(f"{self.definition.name}: {ast.unparse(node)!r}")
        array = self.arrays[node.value.id]
        indices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        by_point = isinstance(indices[0], ast.Name) and self.resolve(indices[0].id) == self.variable
        if array.kind == "rows" and len(indices) == 2 and by_point:
            found = self.column(node)
            if found is None:
                raise NotImplementedError(f"{self.definition.name}: {ast.unparse(node)!r}")
            column = Value(str(found[1]), INT)
            listed = []
            for lane in range(self.lanes):
                start = self.row_start(array.name, lane)
                offset = self.instruction(f"add i64 {start.text}, {column.text}", INT)
                listed.append(self.address(array, offset))
            return listed, array.element
        if array.kind == "vector" and len(indices) == 1 and by_point:
            return [
                self.address(array, self.rows[lane]) for lane in range(self.lanes)
            ], array.element
        if array.kind == "vector" and len(indices) == 1 and not by_point:
            index = super().expression(indices[0])
            if index.type == INT and not index.text.startswith("%"):
                return self.address(array, index), array.element
        raise NotImplementedError(f"{self.definition.name}: {ast.unparse(node)!r}")

    def address(self, array: scalar_ir.Parameter, offset: Value) -> str:
        return self.instruction(
            f"getelementptr inbounds {array.element}, ptr %{array.name}, i64 {offset.text}", "ptr"
        ).text

    def row_start(self, array: str, lane: int) -> Value:
        found = self.row_starts.get((array, lane))
        if found is None:
            found = self.row_starts[array, lane] = self.instruction(
                f"mul i64 {self.rows[lane].text}, %{array}.stride", INT
            )
        return found

    def tile(self, array: str) -> str:
        """The address of the group's first row of ``array``."""
        return self.address(self.arrays[array], self.row_start(array, 0))

    def load(self, node: ast.Subscript) -> Value:
        found = self.column(node)
        if found is not None and found[0].name in self.tiles:
            array, column = found
            width = self.tiles[array.name]
            if array.name in self.pending:
                raise NotImplementedError(f"{self.definition.name}: {array.name} read and written")
            whole = self.loaded.get(array.name)
            if whole is None:  # the group's rows at once
                whole = self.loaded[array.name] = self.instruction(
                    f"load <{width * self.lanes} x double>, ptr {self.tile(array.name)}, align 8",
                    f"<{width * self.lanes} x double>",
                )
            picks = ", ".join(f"i32 {column + lane * width}" for lane in range(self.lanes))
            return self.instruction(
                f"shufflevector {whole.type} {whole.text}, {whole.type} poison, "
                f"<{self.lanes} x i32> <{picks}>",
                self.vectors.of(DOUBLE),
            )
        addresses, element = self.addresses(node)
        if isinstance(addresses, str):  # one element for every lane
            return self.instruction(f"load {element}, ptr {addresses}", element)
        vector = self.vectors.of(element)
        result = Value("poison", vector)
        for lane, address in enumerate(addresses):
            value = self.instruction(f"load {element}, ptr {address}", element)
            result = self.instruction(
                f"insertelement {vector} {result.text}, {element} {value.text}, i64 {lane}",
                vector,
            )
        return result

    def store(self, target: ast.Subscript, value: Value) -> None:
        found = self.column(target)
        if found is not None and found[0].name in self.tiles and self.stored() is None:
            value = self.widen(value)
            if value.type != self.vectors.of(DOUBLE):
                raise NotImplementedError(f"{self.definition.name}: {ast.unparse(target)}")
            self.pending.setdefault(found[0].name, {})[found[1]] = value  # written at the end
            return
        addresses, element = self.addresses(target)
        if isinstance(addresses, str):
            raise NotImplementedError(f"{self.definition.name}: {ast.unparse(target)} written")
        value = self.widen(value)
        if element == BYTE and _element(value.type) == BOOL:
            value = self.instruction(
                f"zext {value.type} {value.text} to {self.vectors.of(BYTE)}", self.vectors.of(BYTE)
            )
        if _element(value.type) != element:
            raise NotImplementedError(
                f"{self.definition.name}: a {value.type} stored into {ast.unparse(target)}"
            )
        mask = self.stored()
        if mask is not None:  # only where a lane's mask is set; skipped when none is
            bits = self.instruction(f"bitcast {mask.type} {mask.text} to i{self.lanes}", "int")
            some = self.instruction(f"icmp ne i{self.lanes} {bits.text}, 0", BOOL)
            lanes, after = self.label("lanes"), self.label("stored")
            self.emit(f"br i1 {some.text}, label %{lanes}, label %{after}")
            self.terminated = True
            self.start_block(lanes)
        for lane, address in enumerate(addresses):
            scalar = self.instruction(
                f"extractelement {value.type} {value.text}, i64 {lane}", element
            )
            if mask is None:
                self.emit(f"store {element} {scalar.text}, ptr {address}")
                continue
            bit = self.instruction(f"extractelement {mask.type} {mask.text}, i64 {lane}", BOOL)
            write, next_lane = self.label("write"), self.label("lane")
            self.emit(f"br i1 {bit.text}, label %{write}, label %{next_lane}")
            self.terminated = True
            self.start_block(write)
            self.emit(f"store {element} {scalar.text}, ptr {address}")
            self.branch(next_lane)
            self.start_block(next_lane)
        if mask is not None:
            self.branch(after)
            self.start_block(after)

    # -- statements --------------------------------------------------------------------
    def assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Subscript):
            self.store(target, self.expression(value))
        else:
            super().assign(target, value)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            target = self.resolve(node.target.id)
            if target == "flagged":  # the count of points to recheck: the lanes it runs in
                self.count_flagged(node)
                return
        elif isinstance(node, ast.For):
            raise NotImplementedError(f"{self.definition.name}: a loop inside the loop body")
        super().statement(node)

    def count_flagged(self, node: ast.AugAssign) -> None:
        if not (
            isinstance(node.op, ast.Add)
            and isinstance(node.value, ast.Constant)
            and node.value.value == 1
        ):
            raise NotImplementedError(f"{self.definition.name}: {ast.unparse(node)!r}")
        mask = self.stored()
        if mask is None:
            added = Value(str(self.lanes), INT)
        else:
            bits = self.instruction(f"bitcast {mask.type} {mask.text} to i{self.lanes}", "int")
            count = self.instruction(
                f"call i{self.lanes} @llvm.ctpop.i{self.lanes}(i{self.lanes} {bits.text})", "int"
            )
            self.vectors.declare(
                f"llvm.ctpop.i{self.lanes}",
                f"declare i{self.lanes} @llvm.ctpop.i{self.lanes}(i{self.lanes})",
            )
            added = self.instruction(f"zext i{self.lanes} {count.text} to i64", INT)
        self.flagged = self.instruction(f"add i64 {self.flagged.text}, {added.text}", INT)

    def branching(self, node: ast.If) -> None:
        test = self.truth(self.expression(node.test))
        outer = self.mask
        self.mask = self.both(outer, test)
        self.statements(node.body)
        self.mask = self.both(outer, self.negated(test))
        self.statements(node.orelse)
        self.mask = outer

    def write_tile(self, array: str, columns: dict[int, Value]) -> None:
        """Store the group's rows of ``array`` at once, interleaving its columns; where a
        column was left unwritten, each value on its own."""
        width = self.tiles.pop(array)  # from here on, stores of single values
        if sorted(columns) != list(range(width)):
            for column, value in sorted(columns.items()):
                subscript = ast.parse(f"{array}[{self.variable}, {column}]").body[0]
                assert isinstance(subscript, ast.Expr) and isinstance(
                    subscript.value, ast.Subscript
                )
                self.store(subscript.value, value)
            return
        parts = [columns[column] for column in range(width)]
        size = self.lanes
        while len(parts) > 1:  # pairwise concatenation, an odd one out padded
            if len(parts) % 2:
                parts.append(Value("poison", f"<{size} x double>"))
            indices = ", ".join(f"i32 {i}" for i in range(2 * size))
            parts = [
                self.instruction(
                    f"shufflevector <{size} x double> {a.text}, <{size} x double> {b.text}, "
                    f"<{2 * size} x i32> <{indices}>",
                    f"<{2 * size} x double>",
                )
                for a, b in zip(parts[::2], parts[1::2], strict=True)
            ]
            size *= 2
        (joined,) = parts
        interleaved = ", ".join(
            f"i32 {column * self.lanes + lane}"
            for lane in range(self.lanes)
            for column in range(width)
        )
        tile = self.instruction(
            f"shufflevector {joined.type} {joined.text}, {joined.type} poison, "
            f"<{width * self.lanes} x i32> <{interleaved}>",
            f"<{width * self.lanes} x double>",
        )
        self.emit(f"store {tile.type} {tile.text}, ptr {self.tile(array)}, align 8")

    def return_(self, node: ast.expr) -> None:
        if isinstance(node, ast.Tuple):
            raise NotImplementedError(f"{self.definition.name}: returns a tuple")
        value = self.widen(self.expression(node))
        mask = self.current()
        if self.result is None or mask is None:
            self.result = value
        else:
            self.result = self.choose(mask, value, self.result)
        self.done = (
            Value("splat (i1 true)", self.vectors.of(BOOL))
            if mask is None
            else (
                mask
                if self.done is None
                else self.instruction(f"or {mask.type} {self.done.text}, {mask.text}", mask.type)
            )
        )

    # -- whole functions ---------------------------------------------------------------
    def lower_helper(self, symbol: str) -> tuple[str, str]:
        """A helper as an internal function of vectors: its text and return type."""
        names = [argument.arg for argument in self.definition.args.args]
        vector = self.vectors.of(DOUBLE)
        for name in names:
            self.values[name] = Value(f"%{name}", vector)
        self.statements(self.definition.body)
        if self.result is None:
            raise NotImplementedError(f"{self.definition.name}: returns nothing")
        self.emit(f"ret {self.result.type} {self.result.text}")
        listed = ", ".join(f"{vector} %{name}" for name in names)
        header = f"define internal {self.result.type} @{symbol}({listed}) {{"
        return "\n".join([header, "entry:", *self.lines, "}"]), self.result.type

    def lower_group(
        self,
        body: list[ast.stmt],
        variable: str,
        parameters: list[str],
        symbol: str,
        tail: bool,
        tiles: dict[str, int],
    ) -> str:
        """The loop body for one group of points from ``%group.first``: every lane a point
        (``tail``: the points before ``%group.end``, the last one again in the other
        lanes). Returns how many points it flagged. ``tiles``: the arrays whose group of
        rows is read or written at once (the caller checks their strides)."""
        self.tiles = dict(tiles)
        self.arrays = {p.name: p for p in scalar_ir.BATCH if p.kind != "scalar"}
        for parameter in scalar_ir.BATCH:
            if parameter.kind == "scalar":
                self.values[parameter.name] = Value(f"%{parameter.name}", INT)
        self.variable = variable
        if tail:
            self.emit("%group.last = sub i64 %group.end, 1")
        for lane in range(self.lanes):
            row = self.instruction(f"add i64 %group.first, {lane}", INT)
            if tail:
                inside = self.instruction(f"icmp slt i64 {row.text}, %group.end", BOOL)
                row = self.instruction(
                    f"select i1 {inside.text}, i64 {row.text}, i64 %group.last", INT
                )
            self.rows.append(row)
        listed = [*parameters, "i64 %group.first"]
        if tail:
            listed.append("i64 %group.end")
            steps = ", ".join(f"i64 {lane}" for lane in range(self.lanes))
            first = self.widen(Value("%group.first", INT))
            lanes = self.instruction(f"add {first.type} {first.text}, <{steps}>", first.type)
            end = self.widen(Value("%group.end", INT))
            self.active = self.instruction(
                f"icmp slt {lanes.type} {lanes.text}, {end.text}", self.vectors.of(BOOL)
            )
        self.statements(body)
        for array, columns in self.pending.items():
            self.write_tile(array, columns)
        if self.result is not None:
            raise NotImplementedError(f"{self.definition.name}: a return inside the loop body")
        self.emit(f"ret i64 {self.flagged.text}")
        header = f"define internal i64 @{symbol}({', '.join(listed)}) {{"
        return "\n".join([header, "entry:", *self.lines, "}"])


def _tiles(statements: list[ast.stmt], variable: str) -> dict[str, int]:
    """The arrays of ``rows[variable, column]`` subscripts a whole group may read or write
    at once, and their widths: read only, or written only and in every column."""
    read: dict[str, set[int]] = {}
    written: dict[str, set[int]] = {}
    others: set[str] = set()  # arrays subscripted any other way

    def visit(node: ast.AST, names: list[str]) -> None:
        def resolve(name: str) -> str:
            return names[int(name[2:])] if name.startswith("__") and name[2:].isdigit() else name

        for found in ast.walk(node):
            if not (isinstance(found, ast.Subscript) and isinstance(found.value, ast.Name)):
                continue
            array, index = found.value.id, found.slice
            elements = index.elts if isinstance(index, ast.Tuple) else []
            if (
                len(elements) == 2
                and isinstance(elements[0], ast.Name)
                and resolve(elements[0].id) == variable
                and isinstance(elements[1], ast.Name)
                and resolve(elements[1].id).isdigit()
            ):
                target = written if isinstance(found.ctx, ast.Store) else read
                target.setdefault(array, set()).add(int(resolve(elements[1].id)))
            else:
                others.add(array)

    def walk(body: list[ast.stmt]) -> None:
        for statement in body:
            if isinstance(statement, scalar_ir.Bound):
                visit(statement.template, statement.names)
            elif isinstance(statement, ast.If):
                visit(statement.test, [])
                walk(statement.body)
                walk(statement.orelse)
            else:
                visit(statement, [])

    walk(statements)
    tiles = {}
    for array, columns in read.items():
        if array not in written and array not in others:
            tiles[array] = max(columns) + 1
    for array, columns in written.items():
        if array not in read and array not in others and columns == set(range(len(columns))):
            tiles[array] = len(columns)
    return tiles


def _batch_kernel(vectors: _Vectors, definition: ast.FunctionDef, symbol: str) -> str:
    """The batch kernel: full groups of points, then the last, partial one; each group is
    a function of its own (``_VectorLowering.lower_group``)."""
    body = [
        s
        for s in definition.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    loops = [statement for statement in body if isinstance(statement, ast.For)]
    loop = loops[0] if len(loops) == 1 and len(body) == 3 else None
    if loop is not body[1] or not isinstance(body[2], ast.Return):
        raise NotImplementedError("batch: not the loop over points of a generated kernel")
    if not isinstance(loop.target, ast.Name):
        raise NotImplementedError("batch: the loop's variable is not a name")
    statements = loop.body
    if len(statements) > MAX_STATEMENTS:
        raise NotImplementedError(
            f"batch: {len(statements):,} statements per point; vectors of points are "
            f"lowered for at most {MAX_STATEMENTS:,}"
        )
    parameters: list[str] = []
    for parameter in scalar_ir.BATCH:
        if parameter.kind == "scalar":
            parameters.append(f"i64 %{parameter.name}")
            continue
        noalias = "noalias " if parameter.noalias else ""
        parameters.append(f"ptr {noalias}%{parameter.name}")
        if parameter.kind == "rows":
            parameters.append(f"i64 %{parameter.name}.stride")
    variable = loop.target.id
    tiles = _tiles(statements, variable)
    for tail in (False, True):
        group = _VectorLowering(vectors, definition)
        name = f"{symbol}.{'tail' if tail else 'full'}"
        vectors.module.extra.append(
            group.lower_group(statements, variable, parameters, name, tail, {} if tail else tiles)
        )
    arguments = ", ".join(p.replace("noalias ", "") for p in parameters)
    lanes = vectors.lanes
    # Whole groups read and write their rows at once where every array's rows are as
    # wide as the kernel uses them (the front end's C-contiguous arrays); otherwise
    # every group runs the lane-by-lane code of the last one.
    checks = ["  %dense.0 = add i1 0, 1"]
    for position, (array, width) in enumerate(sorted(tiles.items()), 1):
        checks += [
            f"  %width.{position} = icmp eq i64 %{array}.stride, {width}",
            f"  %dense.{position} = and i1 %dense.{position - 1}, %width.{position}",
        ]
    return "\n".join(
        [
            f"define i64 @{symbol}({', '.join(parameters)}, ptr noalias %work) {{",
            "entry:",
            *checks,
            f"  br i1 %dense.{len(tiles)}, label %test, label %strided",
            "strided:",
            "  %at = phi i64 [%start, %entry], [%next, %strided.group]",
            "  %counted = phi i64 [0, %entry], [%added, %strided.group]",
            "  %more = icmp slt i64 %at, %stop",
            "  br i1 %more, label %strided.group, label %strided.done",
            "strided.group:",
            f"  %next.unclipped = add i64 %at, {lanes}",
            "  %inside = icmp slt i64 %next.unclipped, %stop",
            "  %next = select i1 %inside, i64 %next.unclipped, i64 %stop",
            f"  %some = call i64 @{symbol}.tail({arguments}, i64 %at, i64 %next)",
            "  %added = add i64 %counted, %some",
            "  br label %strided",
            "strided.done:",
            "  ret i64 %counted",
            "test:",
            "  %first = phi i64 [%start, %entry], [%after, %group]",
            "  %flagged = phi i64 [0, %entry], [%sum, %group]",
            f"  %after = add i64 %first, {lanes}",
            "  %whole = icmp sle i64 %after, %stop",
            "  br i1 %whole, label %group, label %rest",
            "group:",
            f"  %found = call i64 @{symbol}.full({arguments}, i64 %first)",
            "  %sum = add i64 %flagged, %found",
            "  br label %test",
            "rest:",
            "  %left = icmp slt i64 %first, %stop",
            "  br i1 %left, label %tail, label %done",
            "tail:",
            f"  %last = call i64 @{symbol}.tail({arguments}, i64 %first, i64 %stop)",
            "  %total = add i64 %flagged, %last",
            "  ret i64 %total",
            "done:",
            "  ret i64 %flagged",
            "}",
            "",
            f"@{symbol}_work = constant i64 0",
        ]
    )
