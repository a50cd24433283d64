"""``CompiledFunction``: a traced function of scalars, replayed in compiled code anywhere.

Replays never run Python per point or per node: the compiled kernels
(``fastad.kernels.lane_sweeps.sweep_*``) evaluate the recorded program at new
input values, many points at a time in lanes (one opcode dispatch serves a
row of points) and, for large batches, on several threads.

Data-dependent control flow is guarded: every ``bool()`` taken of a node
while tracing (``if x > 0:``) is recorded with its outcome, and every replay
re-checks it. A point where the branch would go the other way raises
:class:`fastad.BranchError` naming the comparison; it never silently returns
the traced branch's result. ``fa.where`` is the branch-free alternative.

The class is the public face: its methods' types and documentation, and the
latency path of ``value_and_grad``. :class:`fastad.compiled.points.PointCalls`
does the work (tracing at the first point, the calls, their shapes and
failures); :mod:`fastad.compiled.files` reads and writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from fastad.compiled import files, trace
from fastad.compiled.batch_errors import check_errors
from fastad.compiled.definition import ScalarDefinition
from fastad.compiled.points import FLOAT64, PointCalls
from fastad.compiled.replay import GRAD

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike, NDArray

    from fastad.compiled.tiers import Tier
    from fastad.eager.optimize import OptimizationReport
    from fastad.eager.tape import Tape
    from fastad.util.hints import FloatArray, StrPath, Values

    Failed = NDArray[np.bool_]
    """``errors="mask"``'s mask: True at each point whose traced branch went the other way."""

    Traceable = Callable[..., Any]
    """The Python function ``fa.compile`` traces: scalar (or array) arguments, fastad nodes
    while tracing, returning a node or number, or a tuple or list of them."""


class CompiledFunction:
    """A traced function: value, gradient, JVP, VJP at one point or many.

    Points are arrays of shape ``(k,)`` (one point) or ``(N, k)`` (a batch). For a scalar-output
    function ``f(p)`` is a float and ``f.grad(p)`` has shape ``(k,)``; for a batch they have shapes
    ``(N,)`` and ``(N, k)``. A function returning ``m`` outputs gives ``(m,)`` / ``(N, m)`` values
    and has ``jacobian``, ``jvp`` and ``vjp`` (``grad`` needs a scalar output).

    Instances are immutable once traced, safe to call from several threads at once, picklable and
    savable (:meth:`save`, :func:`fastad.load`).
    """

    def __init__(
        self,
        function: Traceable,
        num_inputs: int | None = None,
        example: ArrayLike | None = None,
        optimize: bool = True,
        backend: str = "auto",
        debug: bool = False,
        fast_math: bool = False,
    ) -> None:
        self._setup(
            trace.scalar_definition(function, num_inputs, optimize, backend, debug, fast_math)
        )
        if example is not None:
            self._calls.trace_at_example(example)

    def _setup(self, definition: ScalarDefinition) -> None:
        """The one constructor: tracing, :func:`fastad.load` and unpickling all end here."""
        self._calls = PointCalls(definition)

    @property
    def num_inputs(self) -> int:
        """``k``: the number of scalar inputs."""
        return self._calls.k

    @property
    def num_outputs(self) -> int | None:
        """``m``: the number of outputs (None before tracing)."""
        return self._calls.m if self._calls.traced else None

    @property
    def tape(self) -> Tape | None:
        """The traced tape (read it, print ``tape.table()``; None before tracing)."""
        return self._calls.tape if self._calls.traced else None

    @property
    def backend(self) -> str:
        """The replay backend asked for: ``"auto"``, ``"interpret"`` or ``"codegen"``."""
        return self._calls.definition.backend

    @property
    def fast_math(self) -> bool:
        """Whether fast math was asked for (``fa.compile(fast_math=True)``); ``f.tier(call)``
        says whether a kind of call's batches run it (not where libmvec is missing)."""
        return self._calls.definition.fast_math

    @property
    def optimization(self) -> OptimizationReport | None:
        """What the tape optimiser removed (None untraced, unoptimised or loaded)."""
        return self._calls.program.optimization if self._calls.traced else None

    def tier(self, call: str = "grad") -> Tier:
        """Which tier replays a kind of call, and why: ``Tier(name, reason)``.

        ``call`` names a kind of call: ``"values"`` (``f(P)``), ``"grad"`` (``value_and_grad`` and
        ``grad``, and a scalar output's reverse ``jacobian``), ``"vjp"``, ``"jvp"``,
        ``"jacobian_fwd"``, ``"jacobian_rev"``. ``name`` is ``"codegen"`` or ``"interpret"``. Needs
        a traced function.
        """
        return self._calls.tier(call)

    def __repr__(self) -> str:
        return f"<fastad.CompiledFunction {self._calls.summary()}>"

    @overload
    def __call__(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
        out: FloatArray | None = None,
    ) -> Values: ...
    @overload
    def __call__(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
        out: FloatArray | None = None,
    ) -> tuple[Values, Failed]: ...
    def __call__(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
        out: FloatArray | None = None,
    ) -> Any:
        """Output value(s) at one point or a batch.

        Every evaluating method takes ``errors`` and ``check``:

        - ``errors="raise"`` (default): a point where a traced branch goes
          the other way raises :class:`fastad.BranchError`, which lists every
          such point (``error.indices``). ``errors="mask"``: those points get
          ``nan`` in every result and the call returns ``(result, failed)``,
          ``failed`` a boolean array over the points (0-d for one point),
          so one bad point need not fail a batch of 10^6.
        - ``check=True``: after the call, the first point whose finite inputs
          (and direction) gave a non-finite value or derivative is replayed
          eagerly, and :class:`fastad.NonFiniteError` names that point
          (``error.point``) and the node that made the ``nan``/``inf``
          (``error.origin``: op, label, and the source line that recorded it
          when traced in this process). The batch runs at full speed; the
          check reads its results.

        ``out``: for a batch, an array to write the values into and return
        (float64, C-contiguous, ``(N,)`` for a scalar output, ``(N, m)``
        otherwise), so a loop over batches allocates nothing; an array above
        glibc's 32 MiB threshold costs page faults each time it is new.
        ``value_and_grad`` and ``grad`` take one too.
        """
        return self._calls.values(points, threads, errors, check, out)

    @overload
    def value_and_grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
        out: tuple[FloatArray | None, FloatArray | None] | None = None,
    ) -> tuple[Values, FloatArray]: ...
    @overload
    def value_and_grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
        out: tuple[FloatArray | None, FloatArray | None] | None = None,
    ) -> tuple[tuple[Values, FloatArray], Failed]: ...
    def value_and_grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
        out: tuple[FloatArray | None, FloatArray | None] | None = None,
    ) -> Any:
        """``(value, gradient)``; needs a scalar output. ``errors``, ``check``: see ``__call__``.

        ``out``: for a batch, ``(values, gradients)`` arrays to write into and
        return (float64, C-contiguous, ``(N,)`` and ``(N, k)``; either may be
        None for a new one).
        """
        calls = self._calls
        if (
            type(points) is np.ndarray
            and points.dtype is FLOAT64
            and points.shape == calls.scalar_point_shape  # (k,) once traced, for a scalar output
            and points.flags.carray  # C-contiguous, aligned, writeable: the kernels' type
            and errors == "raise"
            and not check
            and threads is None
            and out is None
        ):
            # The latency path: one float64 point, no conversion or copy, and
            # for a program without guards, once generated code runs it, one
            # kernel call and nothing else.
            gradient = np.empty(calls.k)
            fast = calls.fast_points.get(GRAD)
            if fast is not None:
                kernel, address, work = fast
                return kernel(address, work, points, gradient, calls.constants), gradient
            return calls.point(points, GRAD, gradient), gradient
        return calls.value_and_grad(points, threads, errors, check, out)

    @overload
    def grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
        out: FloatArray | None = None,
    ) -> FloatArray: ...
    @overload
    def grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
        out: FloatArray | None = None,
    ) -> tuple[FloatArray, Failed]: ...
    def grad(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
        out: FloatArray | None = None,
    ) -> Any:
        """Gradient with respect to the inputs; needs a scalar output. ``out``: for a
        batch, an ``(N, k)`` array to write the gradients into and return."""
        both = None if out is None else (None, out)
        if errors == "mask":
            (_, gradients), failed = self.value_and_grad(
                points, threads, errors="mask", check=check, out=both
            )
            return gradients, failed
        check_errors(errors)
        return self.value_and_grad(points, threads, check=check, out=both)[1]

    @overload
    def vjp(
        self,
        points: ArrayLike,
        cotangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> tuple[Values, FloatArray]: ...
    @overload
    def vjp(
        self,
        points: ArrayLike,
        cotangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[tuple[Values, FloatArray], Failed]: ...
    def vjp(
        self,
        points: ArrayLike,
        cotangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``(value, u^T J)``: the outputs and the cotangent ``u`` pulled back to the inputs.

        ``u`` has the shape of the output: a float (or ``(N,)``) for a scalar output, ``(m,)`` (or
        ``(N, m)``) otherwise.
        """
        return self._calls.vjp(points, cotangents, threads, errors, check)

    @overload
    def jvp(
        self,
        points: ArrayLike,
        tangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> tuple[Values, Values]: ...
    @overload
    def jvp(
        self,
        points: ArrayLike,
        tangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[tuple[Values, Values], Failed]: ...
    def jvp(
        self,
        points: ArrayLike,
        tangents: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``(value, J v)``: the outputs and their directional derivative along ``v``.

        ``v`` has the shape of the points.
        """
        return self._calls.jvp(points, tangents, threads, errors, check)

    @overload
    def jacobian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        mode: str | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> FloatArray: ...
    @overload
    def jacobian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        mode: str | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[FloatArray, Failed]: ...
    def jacobian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        mode: str | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``J``: shape ``(m, k)`` at one point, ``(N, m, k)`` for a batch.

        For a scalar output the gradient's shapes, ``(k,)`` and ``(N, k)``.

        Each point's Jacobian comes from one forward pass and then ``k`` tangent passes
        (``mode="fwd"``, one per input) or ``m`` adjoint passes (``mode="rev"``, one per output); by
        default the cheaper: forward when ``k <= m``. The two agree to rounding. Nothing larger than
        the result is allocated besides the ``(N, m)`` values; a result that cannot fit in the
        memory available raises ``MemoryError``, naming its size, before anything is allocated.
        """
        return self._calls.jacobian(points, threads, mode, errors, check)

    @overload
    def hvp(
        self,
        points: ArrayLike,
        directions: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> FloatArray: ...
    @overload
    def hvp(
        self,
        points: ArrayLike,
        directions: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[FloatArray, Failed]: ...
    def hvp(
        self,
        points: ArrayLike,
        directions: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """``H v``: the Hessian of a scalar output times a direction, per point.

        ``directions`` has the shape of the points: ``(k,)`` for one point, ``(N, k)`` for a batch,
        and so has the result. Forward-over-reverse (the tangent of the gradient's sweep along
        ``v``), exact to rounding like every derivative here; no Hessian is formed. A zero direction
        is a strong zero, as in :meth:`jvp`.
        """
        return self._calls.hvp(points, directions, threads, errors, check)

    def hessp(self, x: ArrayLike, p: ArrayLike) -> FloatArray:
        """``H(x) p`` at one point, in :func:`scipy.optimize.minimize`'s argument order.

        ``minimize(f, x0, jac=f.grad, hessp=f.hessp, method="Newton-CG")`` works as written (also
        ``trust-ncg``, ``trust-krylov``, ``trust-constr``).
        """
        return self.hvp(self._calls.hessp_point(x), p)

    @overload
    def hessian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["raise"] = "raise",
        check: bool = False,
    ) -> FloatArray: ...
    @overload
    def hessian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: Literal["mask"],
        check: bool = False,
    ) -> tuple[FloatArray, Failed]: ...
    def hessian(
        self,
        points: ArrayLike,
        threads: int | None = None,
        *,
        errors: str = "raise",
        check: bool = False,
    ) -> Any:
        """The Hessian of a scalar output: ``(k, k)`` at one point, ``(N, k, k)`` for a batch.

        Built in the sweeps from ``k`` Hessian-vector products, one per input, after one forward and
        one adjoint pass per point (never from finite differences). Symmetric up to rounding: row
        ``t`` is ``H e_t``. ``hess=f.hessian`` with ``method="trust-constr"`` works as written. A
        result that cannot fit in the memory available raises ``MemoryError`` before anything is
        allocated.
        """
        return self._calls.hessian(points, threads, errors, check)

    def __getstate__(self) -> dict[str, Any]:
        return files.scalar_pickle(self._calls.definition)

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self._setup(files.scalar_unpickled(state))

    def save(self, path: StrPath) -> None:
        """Write the traced function to a compressed NumPy ``.npz`` file (no pickle inside)."""
        files.save_scalars(self._calls.definition, path)
