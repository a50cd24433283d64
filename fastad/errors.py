"""Exceptions raised by fastad."""

from __future__ import annotations

import os
from dataclasses import dataclass


class StaleNodeError(ValueError):
    """A node was used after its tape was reset."""


class TraceError(RuntimeError):
    """A traced value left the tape (``float(x)``, ``x.value``) during ``fa.compile``."""


class BranchError(ValueError):
    """A compiled function was evaluated where a traced branch goes the other way."""


@dataclass(frozen=True)
class NonFiniteOrigin:
    """Where a ``nan`` or ``inf`` first appeared on a tape.

    ``phase`` is ``"forward"`` when a node's value is the first non-finite
    one produced from finite inputs (or a leaf/constant that holds one), and
    ``"backward"`` when a finite adjoint times a node's local derivative for
    operand ``slot`` was the first non-finite gradient contribution.
    """

    phase: str
    node: int
    op: str
    label: str | None
    inputs: tuple[object, ...]
    value: float
    slot: int = -1
    partial: float = float("nan")
    source: tuple[str, int] | None = None  # (file, line) on debug tapes
    block_rule: bool = False  # a block op's rule (no single local derivative)

    def describe(self) -> str:
        name = f"node {self.node} ({self.op}" + (f" '{self.label}')" if self.label else ")")
        if self.source is not None:
            name += f" at {os.path.basename(self.source[0])}:{self.source[1]}"
        inputs = ", ".join(repr(x) for x in self.inputs)
        if self.phase == "forward" and not self.inputs:
            return f"{name} holds {self.value!r}: a non-finite leaf or constant"
        if self.phase == "forward":
            return f"{name} produced {self.value!r} from finite inputs ({inputs})"
        if self.block_rule:
            return (
                f"{name} sent a non-finite gradient to operand {self.slot} from a finite "
                f"upstream gradient (its inputs: {inputs})"
            )
        return (
            f"{name} has local derivative {self.partial!r} with respect to operand "
            f"{self.slot} at inputs ({inputs}); times its finite adjoint it sent a "
            f"non-finite gradient contribution"
        )


class NonFiniteError(FloatingPointError):
    """A checked computation produced ``nan`` or ``inf``; ``.origin`` says where."""

    def __init__(self, origin: NonFiniteOrigin) -> None:
        self.origin = origin
        super().__init__(origin.describe())
