"""Fast-math batch kernels: several points at once, with glibc's vector math functions.

A generated module whose header sets ``LANES = n`` (``scalar_source.module_source``
with ``lanes=n``) has its ``batch`` kernel lowered here instead of by
:mod:`fastad.kernels.scalar_ir`: the body of the loop over points runs on
``n`` points at once, every float an LLVM ``<n x double>``. The points of a
batch are taken in groups of ``n``, each group read and written straight
from the arrays (an array's columns ``n`` at a time: a row's ``n`` neighbours
in one load or store, transposed to and from the lanes by shuffles). The
last, partial group is copied into the work buffer with its last point again
in the missing lanes, runs there, and only its real points are copied back,
so a point's result never depends on where it stands in the batch or on how
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
``NotImplementedError`` naming it. A long body runs in parts, as in the
scalar kernels (``scalar_ir.PART_STATEMENTS``), so the compile stays linear
in the program.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple

from . import scalar_ir, scalar_source
from .scalar_ir import BOOL, BYTE, DOUBLE, INT, FunctionLowering, ModuleLowering, Value

ISA = {2: "b", 4: "d", 8: "e"}
"""The vector function ABI's letter for each lane count: SSE, AVX2, AVX-512."""

EXACT = {"fabs", "copysign", "sqrt"}
"""Math functions that are single exact instructions on vectors (LLVM intrinsics)."""


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
        self.active: Value | None = None
        self.rows: list[Value] = []  # the row each lane reads and writes
        self.row_starts: dict[tuple[str, int], Value] = {}
        self.flagged = Value("0", INT)
        self.arrays: dict[str, scalar_ir.Parameter] = {}
        self.spilled: dict[str, int] = {}  # names that cross parts: their vector slots
        # Arrays read or written a square of columns at a time (``_access``): widths.
        self.tiles: dict[str, int] = {}
        self.loaded: dict[tuple[str, int], Value] = {}  # (array, first column): its rows
        self.pending: dict[str, dict[int, Value]] = {}

    # -- masks -----------------------------------------------------------------------
    def widen(self, value: Value) -> Value:
        """``value`` in every lane (a vector is itself)."""
        if value.type.startswith("<"):
            return value
        vector = self.vectors.of(value.type)
        if not value.text.startswith("%"):  # a literal
            return Value(_vector(value.type, [value.text] * self.lanes), vector)
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
        every = _vector(BOOL, ["true"] * self.lanes)
        return self.instruction(f"xor {mask.type} {mask.text}, {every}", mask.type)

    def current(self) -> Value | None:
        """The lanes the statement being lowered runs in."""
        return self.mask if self.done is None else self.both(self.mask, self.negated(self.done))

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
        slot = self.spilled.get(name)
        if slot is not None:  # read by a later part: through the work buffer
            if value.type != self.vectors.of(DOUBLE) or mask is not None:
                raise NotImplementedError(f"{self.definition.name}: {name} crosses parts")
            self.emit(f"store {value.type} {value.text}, ptr {self.slot(slot)}, align 8")

    def slot(self, slot: int) -> str:
        """The address of the work buffer's vector ``slot``."""
        return self.instruction(
            f"getelementptr inbounds double, ptr %spill, i64 {slot * self.lanes}", "ptr"
        ).text

    def load_spilled(self, slot: int) -> Value:
        vector = self.vectors.of(DOUBLE)
        return self.instruction(f"load {vector}, ptr {self.slot(slot)}, align 8", vector)

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
                f"fcmp one {vector} {magnitude.text}, "
                + _vector(DOUBLE, ["0x7FF0000000000000"] * self.lanes),
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

    def chunk(self, array: str, column: int) -> tuple[int, int]:
        """The first column and the width of the chunk of ``array``'s columns that holds
        ``column``: as many columns as lanes (a square to transpose), fewer at the end."""
        first = column - column % self.lanes
        return first, min(self.lanes, self.tiles[array] - first)

    def row_chunk(self, array: str, lane: int, first: int) -> str:
        """The address of lane ``lane``'s row of ``array`` at column ``first``."""
        start = self.row_start(array, lane)
        offset = self.instruction(f"add i64 {start.text}, {first}", INT)
        return self.address(self.arrays[array], offset)

    def concatenated(self, parts: list[Value], size: int) -> Value:
        """``parts`` (vectors of ``size`` doubles) end to end, as one vector: pairwise
        concatenation, an odd one out padded."""
        while len(parts) > 1:
            if len(parts) % 2:
                parts = [*parts, Value("poison", f"<{size} x double>")]
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
        return parts[0]

    def picked(self, whole: Value, indices: list[int]) -> Value:
        """The elements ``indices`` of vector ``whole``, as a vector."""
        listed = ", ".join(f"i32 {i}" for i in indices)
        return self.instruction(
            f"shufflevector {whole.type} {whole.text}, {whole.type} poison, "
            f"<{len(indices)} x i32> <{listed}>",
            f"<{len(indices)} x double>",
        )

    def load(self, node: ast.Subscript) -> Value:
        found = self.column(node)
        if found is not None and found[0].name in self.tiles:
            array, column = found[0].name, found[1]
            first, width = self.chunk(array, column)
            rows = self.loaded.get((array, first))
            if rows is None:  # the chunk's columns of every lane's row, one load a row
                loaded = [
                    self.instruction(
                        f"load <{width} x double>, ptr {self.row_chunk(array, lane, first)}, "
                        "align 8",
                        f"<{width} x double>",
                    )
                    for lane in range(self.lanes)
                ]
                rows = self.loaded[array, first] = self.concatenated(loaded, width)
            at = column - first
            return self.picked(rows, [at + lane * width for lane in range(self.lanes)])
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
        if found is not None and found[0].name in self.tiles and self.current() is None:
            value = self.widen(value)
            if value.type != self.vectors.of(DOUBLE):
                raise NotImplementedError(f"{self.definition.name}: {ast.unparse(target)}")
            array, column = found[0].name, found[1]
            columns = self.pending.setdefault(array, {})
            columns[column] = value
            first, width = self.chunk(array, column)
            if all(c in columns for c in range(first, first + width)):  # complete: now
                self.write_chunk(
                    array, first, width, [columns.pop(c) for c in range(first, first + width)]
                )
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
        # Only the lanes the statement runs in (a partial group's lanes past its points
        # write the work buffer's copy, never read back).
        mask = self.current()
        if mask is not None:  # only where a lane's mask is set; skipped when none is
            bits = self.instruction(
                f"bitcast {mask.type} {mask.text} to i{self.lanes}", f"i{self.lanes}"
            )
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
        mask = self.both(self.current(), self.active)  # the group's real points only
        if mask is None:
            added = Value(str(self.lanes), INT)
        else:
            integer = f"i{self.lanes}"
            bits = self.instruction(f"bitcast {mask.type} {mask.text} to {integer}", integer)
            count = self.instruction(
                f"call {integer} @llvm.ctpop.{integer}({integer} {bits.text})", integer
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

    def write_chunk(self, array: str, first: int, width: int, values: list[Value]) -> None:
        """Store the group's values of ``array``'s columns ``first:first + width`` a row at
        a time, transposed."""
        by_column = self.concatenated(values, self.lanes)
        for lane in range(self.lanes):
            row = self.picked(by_column, [c * self.lanes + lane for c in range(width)])
            address = self.row_chunk(array, lane, first)
            self.emit(f"store {row.type} {row.text}, ptr {address}, align 8")

    def finish_tiles(self) -> None:
        """Store what is left of the written tiles, a value a lane at a time (their
        incomplete chunks)."""
        for array, columns in self.pending.items():
            del self.tiles[array]  # from here on, stores of single values
            for column, value in sorted(columns.items()):
                subscript = ast.parse(f"{array}[{self.variable}, {column}]").body[0]
                assert isinstance(subscript, ast.Expr)
                assert isinstance(subscript.value, ast.Subscript)
                self.store(subscript.value, value)
        self.pending = {}

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
            Value(_vector(BOOL, ["true"] * self.lanes), self.vectors.of(BOOL))
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

    def enter_group(self, variable: str, tiles: dict[str, int], spilled: dict[str, int]) -> None:
        """Start a function of the group from ``%group.first`` (``%group.count`` real
        points): the kernel's arrays, each lane's row, the lanes of real points."""
        self.tiles = dict(tiles)
        self.spilled = spilled
        self.arrays = {p.name: p for p in scalar_ir.BATCH if p.kind != "scalar"}
        for parameter in scalar_ir.BATCH:
            if parameter.kind == "scalar":
                self.values[parameter.name] = Value(f"%{parameter.name}", INT)
        self.variable = variable
        for lane in range(self.lanes):
            self.rows.append(self.instruction(f"add i64 %group.first, {lane}", INT))
        steps = _vector(INT, [str(lane) for lane in range(self.lanes)])
        count = self.widen(Value("%group.count", INT))
        self.active = self.instruction(
            f"icmp slt {count.type} {steps}, {count.text}", self.vectors.of(BOOL)
        )

    def lower_group(
        self,
        body: list[ast.stmt],
        variable: str,
        parameters: list[str],
        symbol: str,
        tiles: dict[str, int],
    ) -> tuple[str, int]:
        """The text of the function that runs the loop body for the group of points from
        ``%group.first``, one per lane, and returns how many of its first
        ``%group.count`` points it flagged (a partial group's other lanes repeat its last
        point: see ``_padded_group``); and how many doubles of the work buffer it takes.
        ``tiles``: the arrays read or written a row at a time (``_access``).

        A long body's straight-line start runs as functions of
        ``scalar_ir.PART_STATEMENTS`` statements each (``noinline``), called in order,
        as in the scalar kernels: a value one part makes and a later one reads crosses
        in the work buffer, a vector a slot (``scalar_ir.spill_plan``).
        """
        counts = scalar_ir.assigned_names(body)
        mutable = {name for name, count in counts.items() if count > 1} - {variable}
        size = scalar_ir.PART_STATEMENTS
        prefix = scalar_ir.straight_prefix(body, mutable)
        if prefix <= 2 * size:
            prefix = 0  # short enough to be one function
        spilled = scalar_ir.spill_plan(body, prefix, size) if prefix else {}
        listed = ", ".join([*parameters, "ptr %spill", "i64 %group.first", "i64 %group.count"])
        arguments = ", ".join(
            [*(p.replace("noalias ", "") for p in parameters), "ptr %spill"]
            + ["i64 %group.first", "i64 %group.count"]
        )
        for start in range(0, prefix, size):
            part = _VectorLowering(self.vectors, self.definition)
            part.enter_group(variable, tiles, spilled)
            part.statements(body[start : min(prefix, start + size)])
            part.finish_tiles()
            part.emit("ret void")
            self.vectors.module.extra.append(
                "\n".join(
                    [
                        f"define internal void @{symbol}.part{start}({listed}) noinline {{",
                        "entry:",
                        *part.lines,
                        "}",
                    ]
                )
            )
        self.enter_group(variable, tiles, spilled)
        for start in range(0, prefix, size):
            self.emit(f"call void @{symbol}.part{start}({arguments})")
        self.statements(body[prefix:])
        self.finish_tiles()
        if self.result is not None:
            raise NotImplementedError(f"{self.definition.name}: a return inside the loop body")
        self.emit(f"ret i64 {self.flagged.text}")
        header = f"define internal i64 @{symbol}({listed}) {{"
        slots = max(spilled.values(), default=-1) + 1
        return "\n".join([header, "entry:", *self.lines, "}"]), slots * self.lanes


def _vector(element: str, items: list[str]) -> str:
    """A constant vector of ``items`` (LLVM's ``splat`` syntax is newer than LLVM 15)."""
    return "<" + ", ".join(f"{element} {item}" for item in items) + ">"


class _Access(NamedTuple):
    """How a loop body subscripts the kernel's arrays by the point."""

    rows: dict[str, int]  # 2-D arrays read or written at (point, column): their widths
    written: set[str]
    points: set[str]  # 1-D arrays at the point
    tiles: dict[str, int]  # the arrays a group reads or writes a row at a time: widths


def _access(statements: list[ast.stmt], variable: str) -> _Access:
    """The arrays of ``statements`` subscripted at the point ``variable``, and which a whole
    group reads or writes a row at a time: those only read, and those only written and
    never under an ``if`` (a masked store is written at once, a tile's at the end of the
    group)."""
    columns_read: dict[str, set[int]] = {}
    columns_written: dict[str, set[int]] = {}
    points: set[str] = set()
    others: set[str] = set()  # arrays subscripted any other way
    masked: set[str] = set()  # written under an ``if``
    stored: set[str] = set()  # 1-D arrays written at the point

    def visit(node: ast.AST, names: list[str], nested: bool) -> None:
        def resolve(name: str) -> str:
            return names[int(name[2:])] if name.startswith("__") and name[2:].isdigit() else name

        for found in ast.walk(node):
            if not (isinstance(found, ast.Subscript) and isinstance(found.value, ast.Name)):
                continue
            array, index = found.value.id, found.slice
            elements = index.elts if isinstance(index, ast.Tuple) else [index]
            at_point = isinstance(elements[0], ast.Name) and resolve(elements[0].id) == variable
            if isinstance(found.ctx, ast.Store) and nested:
                masked.add(array)
            if at_point and len(elements) == 1:
                points.add(array)
                if isinstance(found.ctx, ast.Store):
                    stored.add(array)
            elif (
                at_point
                and len(elements) == 2
                and isinstance(elements[1], ast.Name)
                and resolve(elements[1].id).isdigit()
            ):
                table = columns_written if isinstance(found.ctx, ast.Store) else columns_read
                table.setdefault(array, set()).add(int(resolve(elements[1].id)))
            else:
                others.add(array)

    def walk(body: list[ast.stmt], nested: bool) -> None:
        for statement in body:
            if isinstance(statement, scalar_ir.Bound):
                visit(statement.template, statement.names, nested)
            elif isinstance(statement, ast.If):
                visit(statement.test, [], nested)
                walk(statement.body, True)
                walk(statement.orelse, True)
            else:
                visit(statement, [], nested)

    walk(statements, False)
    rows = {
        array: max(columns_read.get(array, set()) | columns_written.get(array, set())) + 1
        for array in {*columns_read, *columns_written}
    }
    mixed = sorted((set(rows) | points) & others)
    if mixed:
        raise NotImplementedError(f"batch: {mixed} subscripted by the point and otherwise")
    tiles = {
        array: width
        for array, width in rows.items()
        if (array in columns_read) != (array in columns_written) and array not in masked
    }
    written = set(columns_written) | masked | stored
    return _Access(rows, written, points, tiles)


def _parameters() -> list[str]:
    """The batch kernel's parameters as LLVM IR, without its work buffer."""
    listed: list[str] = []
    for parameter in scalar_ir.BATCH:
        if parameter.kind == "scalar":
            listed.append(f"i64 %{parameter.name}")
            continue
        noalias = "noalias " if parameter.noalias else ""
        listed.append(f"ptr {noalias}%{parameter.name}")
        if parameter.kind == "rows":
            listed.append(f"i64 %{parameter.name}.stride")
    return listed


def _padded_group(lanes: int, access: _Access, symbol: str, spill: int) -> tuple[str, int]:
    """The function that runs points ``%first:%end`` (at most ``lanes``) through the group
    function: their rows of every array the body subscripts at the point are copied to
    the work buffer, each array's rows as wide as the body uses them (a tile), the last
    point's again in the missing lanes; the group runs there; the rows of the real points
    are copied back into the arrays it writes. Serves the last, partial group. The work
    buffer's first ``spill`` doubles are the group's own. Returns its text and the work
    buffer's size in doubles."""
    lines = [
        f"define internal i64 @{symbol}.padded({', '.join(_parameters())}, "
        "ptr noalias %work, i64 %first, i64 %end) {",
        "entry:",
        "  %count = sub i64 %end, %first",
        "  %last = sub i64 %end, 1",
    ]
    for lane in range(lanes):  # each lane's row: its point's, or the last point's
        lines += [
            f"  %row.{lane}.at = add i64 %first, {lane}",
            f"  %row.{lane}.in = icmp slt i64 %row.{lane}.at, %end",
            f"  %row.{lane} = select i1 %row.{lane}.in, i64 %row.{lane}.at, i64 %last",
        ]
    offset = spill  # in doubles (8 bytes: an i64 or i8 element takes a double's place)
    replaced: dict[str, str] = {}
    copy_back: dict[int, list[str]] = {lane: [] for lane in range(lanes)}
    arrays = {parameter.name: parameter for parameter in scalar_ir.BATCH}
    for name in sorted(access.rows):
        width = access.rows[name]
        lines.append(f"  %{name}.pad = getelementptr inbounds double, ptr %work, i64 {offset}")
        replaced[name] = f"%{name}.pad"
        replaced[f"{name}.stride"] = str(width)
        for lane in range(lanes):
            source = f"%{name}.{lane}.src"
            target = f"%{name}.{lane}.dst"
            lines += [
                f"  %{name}.{lane}.start = mul i64 %row.{lane}, %{name}.stride",
                f"  {source} = getelementptr inbounds double, ptr %{name}, "
                f"i64 %{name}.{lane}.start",
                f"  {target} = getelementptr inbounds double, ptr %{name}.pad, i64 {lane * width}",
                f"  call void @llvm.memcpy.p0.p0.i64(ptr {target}, ptr {source}, "
                f"i64 {8 * width}, i1 false)",
            ]
            if name in access.written:
                copy_back[lane].append(
                    f"  call void @llvm.memcpy.p0.p0.i64(ptr {source}, ptr {target}, "
                    f"i64 {8 * width}, i1 false)"
                )
        offset += lanes * width
    for name in sorted(access.points):
        element = arrays[name].element
        lines.append(f"  %{name}.pad = getelementptr inbounds double, ptr %work, i64 {offset}")
        replaced[name] = f"%{name}.pad"
        for lane in range(lanes):
            lines += [
                f"  %{name}.{lane}.src = getelementptr inbounds {element}, ptr %{name}, "
                f"i64 %row.{lane}",
                f"  %{name}.{lane}.dst = getelementptr inbounds {element}, ptr %{name}.pad, "
                f"i64 {lane}",
                f"  %{name}.{lane}.value = load {element}, ptr %{name}.{lane}.src",
                f"  store {element} %{name}.{lane}.value, ptr %{name}.{lane}.dst",
            ]
            if name in access.written:
                copy_back[lane] += [
                    f"  %{name}.{lane}.result = load {element}, ptr %{name}.{lane}.dst",
                    f"  store {element} %{name}.{lane}.result, ptr %{name}.{lane}.src",
                ]
        offset += lanes
    arguments = []
    for parameter in _parameters():
        kind, name = parameter.replace("noalias ", "").rsplit(" %", 1)
        arguments.append(f"{kind} {replaced.get(name, '%' + name)}")
    lines.append(
        f"  %flagged = call i64 @{symbol}.group({', '.join(arguments)}, ptr %work, i64 0, "
        "i64 %count)"
    )
    # Back into the arrays: the real points' rows, lane by lane (a lane past the end
    # holds a copy of the last point's results, written nowhere).
    for lane in range(lanes):
        lines += [
            f"  %back.{lane} = icmp slt i64 {lane}, %count",
            f"  br i1 %back.{lane}, label %copy.{lane}, label %done",
            f"copy.{lane}:",
            *copy_back[lane],
        ]
    lines += ["  br label %done", "done:", "  ret i64 %flagged", "}"]
    return "\n".join(lines), offset


def _batch_kernel(vectors: _Vectors, definition: ast.FunctionDef, symbol: str) -> str:
    """The batch kernel: whole groups of points straight from the arrays, the last,
    partial one through the work buffer (``_padded_group``); the group is one function
    (``_VectorLowering.lower_group``)."""
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
    access = _access(statements, loop.target.id)
    lanes = vectors.lanes
    parameters = _parameters()
    group = _VectorLowering(vectors, definition)
    text, spill = group.lower_group(
        statements, loop.target.id, parameters, f"{symbol}.group", access.tiles
    )
    vectors.module.extra.append(text)
    padded, work = _padded_group(lanes, access, symbol, spill)
    vectors.module.extra.append(padded)
    vectors.declare(
        "llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)"
    )
    arguments = ", ".join(p.replace("noalias ", "") for p in parameters)
    return "\n".join(
        [
            f"define i64 @{symbol}({', '.join(parameters)}, ptr noalias %work) {{",
            "entry:",
            "  br label %test",
            "test:",
            "  %first = phi i64 [%start, %entry], [%after, %group]",
            "  %flagged = phi i64 [0, %entry], [%sum, %group]",
            f"  %after = add i64 %first, {lanes}",
            "  %whole = icmp sle i64 %after, %stop",
            "  br i1 %whole, label %group, label %rest",
            "group:",
            f"  %found = call i64 @{symbol}.group({arguments}, ptr %work, i64 %first, i64 {lanes})",
            "  %sum = add i64 %flagged, %found",
            "  br label %test",
            "rest:",
            "  %left = icmp slt i64 %first, %stop",
            "  br i1 %left, label %last, label %done",
            "last:",
            f"  %some = call i64 @{symbol}.padded({arguments}, ptr %work, i64 %first, i64 %stop)",
            "  %total = add i64 %flagged, %some",
            "  ret i64 %total",
            "done:",
            "  ret i64 %flagged",
            "}",
            "",
            f"@{symbol}_work = constant i64 {work}",
        ]
    )
