"""``BlockFunction``: a traced function of arrays, replayed by the interpreter or by
one generated kernel.

The class is the public face: its methods check what they are given
(:class:`fastad.compiled.array_arguments.Arguments`), ask
:class:`fastad.compiled.array_dispatch.Generated` whether generated code runs
the call, and otherwise run :class:`fastad.compiled.array_interpreter.Interpreter`;
:mod:`fastad.compiled.files` reads and writes it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fastad.compiled import array_kernel, files, trace
from fastad.compiled.array_arguments import Arguments, by_argument, copied_into
from fastad.compiled.array_dispatch import OK, Generated
from fastad.compiled.array_interpreter import Interpreter
from fastad.compiled.definition import ArrayDefinition
from fastad.eager.handle import storage_of
from fastad.eager.node import Block
from fastad.util.memory import check_fits

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastad.compiled.tiers import Tier
    from fastad.eager.optimize import OptimizationReport
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray, StrPath

    Traceable = Callable[..., Any]


class BlockFunction:
    """A traced function of arrays (blocks): ``fa.compile(fn, example=(X, W, b))``.

    Calls take one value per argument, shaped like the example's:
    ``f((X, W, b))`` gives the output (a float, or an array for an array
    output); ``f.value_and_grad((X, W, b))`` gives the scalar output and a
    list of gradients shaped like the arguments. An argument of another
    shape, rank or a non-real dtype raises an error naming the argument and
    both shapes (the function is not traced again: trace one per shape),
    except along the batch axis of the arguments named by ``batch=``:
    those take any number of rows, the same in each (``f.rows`` is the
    traced number). Calls on one function are serialised by a lock.

    Two tiers run a call, as for functions of scalars (``backend``):

    - the interpreter replays the traced tape: its forward and backward
      sweeps, the registry's block rules with the exact rules for strong
      zeros; the tape then holds that call's values and gradients;
    - generated code (``fastad.kernels.array_source`` and its writers) runs the whole program
      as one compiled kernel: loops for the elementwise ops, NumPy's own
      BLAS for the products, row loops for the softmax family, buffers
      allocated once. Its gradients are computed plainly; a call whose
      gradients hold a nan is computed again by the interpreter, so both
      tiers give the exact rules' results. Values and gradients equal the
      interpreter's bit for bit except in the softmax family and the
      cross-entropy (NumPy's vectorised ``exp`` against libmvec's) and where
      a product's row holds an inf: within 1e-13 of the gradient's largest
      element. A call with ``check=True`` always runs the interpreter.
      ``f.tier("grad")`` says which tier runs and why; a program with an
      op generated code has no rule for stays interpreted, and the reason
      says which op.

    ``backend="auto"`` interprets first and builds the generated kernel in
    a background thread once the calls have done
    ``fastad.compiled.tiers.HOT_NODE_POINTS`` element operations, or after
    ``fastad.compiled.tiers.HOT_CALLS`` calls of a small function (at once when an
    earlier process cached it). It pickles and saves (:meth:`save`,
    :func:`fastad.load`) like a function of scalars; it is not optimised.
    """

    def __init__(
        self,
        function: Traceable,
        example: Sequence[ArrayLike],
        wrt: int | Sequence[int] | None = None,
        debug: bool = False,
        backend: str = "auto",
        batch: int | Sequence[int] | None = None,
        fast_math: bool = False,
    ) -> None:
        self._setup(
            trace.array_definition(function, example, wrt, debug, backend, batch, fast_math)
        )

    def _setup(self, definition: ArrayDefinition) -> None:
        """The one constructor: tracing, :func:`fastad.load` and unpickling all end here."""
        storage_of(definition.tape).freeze(f"the compiled function of arrays {definition.name!r}")
        self._definition = definition
        self._tape = definition.tape
        self._output = definition.output
        self._lock = threading.Lock()  # the tape and the generated buffers hold one call
        self._arguments = Arguments(definition)
        self._interpreter = Interpreter(definition, self._lock)
        self._generated = Generated(definition, self._lock)
        self.optimization: OptimizationReport | None = None  # BlockFunction does not optimise

    @property
    def tape(self) -> Tape:
        """The traced tape; after an interpreted call it holds that call's values and gradients."""
        return self._tape

    @property
    def wrt(self) -> tuple[int, ...] | None:
        """The argument positions gradients are computed for (None: every argument)."""
        wrt = self._definition.wrt
        return None if wrt is None else tuple(wrt[0])

    @property
    def backend(self) -> str:
        """``"auto"``, ``"interpret"`` or ``"codegen"``, as compiled."""
        return self._definition.backend

    @property
    def single_wrt(self) -> bool:
        """True when ``wrt`` was one int: gradients (and directions) come one, not as a list."""
        return self._arguments.wrt_positions()[1]

    @property
    def num_inputs(self) -> int:
        """The number of arguments a call takes."""
        return len(self._definition.inputs)

    @property
    def fast_math(self) -> bool:
        """Whether fast math was asked for (``fa.compile(fast_math=True)``); ``f.tier(call)``
        says whether generated code runs it."""
        return self._definition.fast_math

    @property
    def batch(self) -> tuple[int, ...]:
        """The positions of the arguments whose first axis is the batch (``batch=``)."""
        return self._definition.batch

    @property
    def rows(self) -> int | None:
        """The number of rows traced along the batch axis (None without ``batch=``)."""
        batch = self._definition.batch
        return self._definition.shapes[batch[0]][0] if batch else None

    def tier(self, call: str = "grad") -> Tier:
        """Which tier runs ``call`` now, and why: ``"grad"`` (:meth:`value_and_grad`,
        :meth:`grad`), ``"values"`` (:meth:`__call__`), ``"vjp"`` (:meth:`vjp`),
        ``"jvp"`` (:meth:`jvp`) or ``"hvp"`` (:meth:`hvp`, :meth:`hessian`). A question:
        it starts nothing."""
        return self._generated.tier(call)

    def generated_source(self, call: str = "grad") -> str:
        """The text of the generated module for ``call`` (``"grad"`` or ``"values"``)."""
        return self._generated.of(call).source(call)

    def blas_calls(self, call: str = "grad") -> list[str]:
        """The BLAS calls of the generated kernel for ``call``, one line each, in order:
        ``gemm(trans_a, trans_b, A, B, C)`` is ``C = op(A) @ op(B)`` by ``cblas_dgemm``
        (``cblas_dgemv`` or ``cblas_ddot`` where ``C`` is one row, column or element, as
        ``np.matmul`` picks), ``gemv(trans, A, x, y)`` ``cblas_dgemv``, ``dot(x, y)``
        ``cblas_ddot``; operands are node values (``v<id>``), adjoints (``d<id>``) and
        scratch buffers (``s_...``)."""
        return self._generated.of(call).products(call)

    def __repr__(self) -> str:
        return (
            f"<fastad.BlockFunction {self._definition.name}: inputs {self._definition.shapes}, "
            f"{len(self._tape)} nodes>"
        )

    def __call__(
        self, arguments: Iterable[ArrayLike], *, check: bool = False
    ) -> float | FloatArray:
        """The output at new argument values.

        ``check=True`` raises :class:`fastad.NonFiniteError` naming the node
        (op, label, and its line with ``debug=True``) that turned finite
        arguments into ``nan``/``inf``.
        """
        checked = self._arguments.checked(arguments)
        with self._lock:
            if not check and self._generated.ready("values"):
                rows = self._arguments.call_rows(checked)
                status, value, _ = self._generated.run("values", checked, None, rows)
                if status == OK:
                    return cast("float | FloatArray", value)
            return self._interpreter.value(checked, check)  # raises what generated code refused

    def value_and_grad(
        self,
        arguments: Iterable[ArrayLike],
        *,
        check: bool = False,
        out: Sequence[NDArray[np.float64] | None] | NDArray[np.float64] | None = None,
    ) -> tuple[float, Any]:
        """``(value, gradients)``; needs a scalar output.

        The gradients are a list with one per argument, or per position of
        ``wrt`` (a single one for an int ``wrt``), shaped like the arguments.
        ``out`` gives arrays to write them into, in that form (a list with
        None where a fresh array will do; a single array for an int
        ``wrt``): float64, C-contiguous, writable, of the argument's shape;
        the results are those arrays. After an interpreted call without
        ``wrt`` the tape's ``.grad`` holds this call's adjoints too.
        ``check=True``: as for :meth:`__call__`, and for the gradients the
        node whose local derivative (or block rule) made a finite adjoint
        non-finite.
        """
        if isinstance(self._output, Block):
            self._refuse_array_output("value_and_grad")
        checked = self._arguments.checked(arguments)
        targets = None if out is None else self._arguments.out_arrays(out, checked)
        single = self._arguments.wrt_positions()[1]
        with self._lock:
            if not check and self._generated.ready("grad"):
                rows = self._arguments.call_rows(checked)
                status, value, found = self._generated.run("grad", checked, targets, rows)
                if status == OK:  # arrays, and floats for scalars
                    gradients = cast("list[Any]", found)
                    return value, gradients[0] if single else gradients
            value, gradients = self._interpreter.gradients(checked, check)
            if targets is not None:
                gradients = [
                    g if target is None else copied_into(target, g)
                    for g, target in zip(gradients, targets, strict=True)
                ]
            return value, by_argument(gradients, single)

    def grad(self, arguments: Iterable[ArrayLike], *, check: bool = False) -> Any:
        """The gradients of :meth:`value_and_grad`; needs a scalar output."""
        return self.value_and_grad(arguments, check=check)[1]

    def hvp(
        self, arguments: Iterable[ArrayLike], directions: ArrayLike | Iterable[ArrayLike]
    ) -> Any:
        """``H v`` at the arguments: one product per argument (or ``wrt`` position).

        ``directions`` holds one array per argument of :meth:`value_and_grad`'s
        gradients (a single one for an int ``wrt``), shaped like it; the
        result has the gradients' form. Forward-over-reverse: generated
        code where ``f.tier("hvp")`` says so (a result holding a nan is
        computed again by the interpreter), else through the block rules
        (:func:`fastad.hvp`) on the interpreter, where a block op without a
        second-order rule raises ``NotImplementedError`` naming it. Needs a
        scalar output.
        """
        if isinstance(self._output, Block):
            self._refuse_array_output("hvp")
        checked = self._arguments.checked(arguments)
        along = self._arguments.directions(directions, self._arguments.call_shapes(checked))
        single = self._arguments.wrt_positions()[1]
        with self._lock:
            if self._generated.ready("hvp"):
                rows = self._arguments.call_rows(checked)
                status, _, found = self._generated.along("hvp", checked, along, rows)
                if status == OK:
                    return by_argument(cast("list[Any]", found), single)
        _, products = self._interpreter.hvp(checked, along)
        return by_argument(products, single)

    def hessp(self, arguments: Iterable[ArrayLike], p: ArrayLike | Iterable[ArrayLike]) -> Any:
        """``H p`` at the arguments: :meth:`hvp` under the name SciPy's optimisers give it.

        For a function compiled with an int ``wrt`` (one argument varies):
        ``minimize(lambda w: f((w, X, y)), w0, jac=lambda w: f.grad((w, X, y)),
        hessp=lambda w, p: f.hessp((w, X, y), p), method="Newton-CG")``.
        """
        return self.hvp(arguments, p)

    def jvp(
        self, arguments: Iterable[ArrayLike], directions: ArrayLike | Iterable[ArrayLike]
    ) -> tuple[float | FloatArray, float | FloatArray]:
        """``(value, J v)``: the output and its derivative along ``directions``.

        ``directions`` as for :meth:`hvp`: one array per gradient's argument
        (a single one for an int ``wrt``), shaped like it; the other
        arguments hold still. ``J v`` has the output's shape (a float for a
        scalar output). One forward-mode pass: generated code where
        ``f.tier("jvp")`` says so, else the interpreter's sweep; zero
        directions are strong zeros (a generated call whose tangent holds a
        nan is computed again by the interpreter).
        """
        checked = self._arguments.checked(arguments)
        along = self._arguments.directions(directions, self._arguments.call_shapes(checked))
        with self._lock:
            if self._generated.ready("jvp"):
                rows = self._arguments.call_rows(checked)
                status, value, found = self._generated.along("jvp", checked, along, rows)
                if status == OK:
                    return value, found
        return cast(
            "tuple[float | FloatArray, float | FloatArray]", self._interpreter.jvp(checked, along)
        )

    def vjp(self, arguments: Iterable[ArrayLike], cotangent: ArrayLike) -> tuple[Any, Any]:
        """``(value, u^T J)``: the output and ``cotangent`` pulled back to the arguments.

        ``cotangent`` has the output's shape (a float for a scalar output);
        the result has :meth:`value_and_grad`'s form. One backward pass
        seeded with ``cotangent`` (so an array output needs no reduction):
        generated code where ``f.tier("vjp")`` says so, else the
        interpreter's sweep; its zeros are strong zeros (a generated call
        whose result holds a nan is computed again by the interpreter).
        """
        checked = self._arguments.checked(arguments)
        rows = self._arguments.call_rows(checked)
        u = self._arguments.cotangent(cotangent, rows)
        single = self._arguments.wrt_positions()[1]
        with self._lock:
            if self._generated.ready("vjp"):
                seed = float(u) if not u.shape else array_kernel.kernel_argument(u)
                status, value, found = self._generated.run("vjp", checked, None, rows, seed)
                if status == OK:
                    return value, by_argument(cast("list[Any]", found), single)
        value, pulled = self._interpreter.vjp(checked, u)
        return value, by_argument(pulled, single)

    def jacobian(self, arguments: Iterable[ArrayLike]) -> Any:
        """The Jacobian at the arguments: per gradient's argument, d output / d argument
        shaped ``output.shape + argument.shape`` (JAX's ``jacobian`` layout; one array
        for an int ``wrt``, a list otherwise).

        By :meth:`vjp` per output element or :meth:`jvp` per argument element,
        whichever are fewer: generated code where ``f.tier`` says so for that
        call, else the interpreter's sweeps after one replay. The size is
        checked against the memory available first.
        """
        checked = self._arguments.checked(arguments)
        shapes = self._arguments.wrt_shapes(checked)
        sizes = [math.prod(shape) for shape in shapes]
        rows = self._arguments.call_rows(checked)
        output = self._arguments.output_shape_at(rows)
        m, n = math.prod(output), sum(sizes)
        check_fits(
            8 * m * n,
            f"the Jacobian of {m} outputs by {n} inputs",
            "Compute J v or u^T J with f.jvp / f.vjp instead.",
        )
        matrix = np.zeros((m, n))
        if not self._generated.jacobian(checked, matrix, output, shapes, rows):
            self._interpreter.jacobian(checked, matrix, output, shapes)
        matrix += 0.0  # no -0.0
        blocks = np.split(matrix, np.cumsum(sizes)[:-1], axis=1)
        result = [
            block.reshape(output + shape) for block, shape in zip(blocks, shapes, strict=True)
        ]
        return result[0] if self._arguments.wrt_positions()[1] else result

    def hessian(self, arguments: Iterable[ArrayLike]) -> Any:
        """The Hessian at the arguments (a scalar output): for an int ``wrt`` one array of
        shape ``argument.shape * 2``; otherwise a list of rows, ``H[i][j]`` of shape
        ``shape_i + shape_j`` (JAX's ``hessian`` layout). One :meth:`hvp` per argument
        element; symmetric to rounding.
        """
        if isinstance(self._output, Block):
            self._refuse_array_output("hessian")
        checked = self._arguments.checked(arguments)
        shapes = self._arguments.wrt_shapes(checked)
        sizes = [math.prod(shape) for shape in shapes]
        n = sum(sizes)
        check_fits(8 * n * n, f"the Hessian of {n} inputs", "Compute H v with f.hvp instead.")
        rows = np.zeros((n, n))
        call_rows = self._arguments.call_rows(checked)
        if not self._generated.hessian(checked, rows, shapes, call_rows):
            self._interpreter.hessian(checked, rows, shapes)
        cuts = np.cumsum(sizes)[:-1]
        blocks = [np.split(band, cuts, axis=1) for band in np.split(rows, cuts, axis=0)]
        result = [
            [block.reshape(shapes[i] + shapes[j]) for j, block in enumerate(band)]
            for i, band in enumerate(blocks)
        ]
        return result[0][0] if self._arguments.wrt_positions()[1] else result

    def _refuse_array_output(self, what: str) -> None:
        shape = self._arguments.output_shape_at(None)
        raise ValueError(
            f"{what} needs a scalar output; this function returns an array of shape {shape} "
            "(reduce it to a number, e.g. .sum(), or use jacobian / vjp)"
        )

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:  # not in the middle of another thread's call
            return files.array_pickle(self._definition)

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self._setup(files.array_unpickled(state))

    def save(self, path: StrPath) -> None:
        """Write the traced function to a compressed NumPy ``.npz`` file (no pickle inside).

        :func:`fastad.load` reads it back, validating every node, shape and id.
        """
        with self._lock:
            data = files.array_bytes(self._definition)
        files.write(data, path)
