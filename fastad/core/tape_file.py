"""Tapes from raw arrays and ``.npz`` files: every invariant validated first.

The compiled kernels do no bounds checks, so this is what keeps bad data
(a hand-built array, a damaged file) from crashing them: operand ids must
precede their node, opcodes must exist, arrays must be one-dimensional of
one length, ids integer and values floating point. Errors name the first
offending node (and the file). ``check_row`` checks one raw row pushed by
``Tape.push`` the same way.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from fastad.core.block_table import INDEX_DTYPE
from fastad.core.node_arrays import OPCODE_DTYPE, VALUE_DTYPE
from fastad.core.storage import ARITY
from fastad.kernels import optable
from fastad.util import npz
from fastad.util.errors import is_int

if TYPE_CHECKING:
    from fastad.core.storage import TapeStorage
    from fastad.util.hints import FloatArray, IndexArray, OpcodeArray, StrPath

SAVE_FORMAT = "fastad-tape-1"
BLOCK_SAVE_FORMAT = "fastad-block-tape-1"
"""A tape with blocks: the scalar tape's members and ``fastad.core.block_file``'s."""


def validated_arrays(
    opcode: ArrayLike, in0: ArrayLike, in1: ArrayLike, val: ArrayLike
) -> tuple[OpcodeArray, IndexArray, IndexArray, FloatArray]:
    """The four arrays as the tape's dtypes, or ``ValueError`` naming the first bad node."""
    given = {"opcode": opcode, "in0": in0, "in1": in1, "val": val}
    arrays = {name: np.asarray(a) for name, a in given.items()}
    for name, a in arrays.items():
        if a.ndim != 1:
            raise ValueError(f"tape array {name} must be one-dimensional, got shape {a.shape}")
        # val: float16, float32 or float64 (a long double would lose its digits unsaid).
        if name == "val":
            kind_ok = a.dtype.kind == "f" and a.dtype.itemsize <= 8
        else:
            kind_ok = a.dtype.kind in "iu"
        if not kind_ok:
            wanted = "floating point of at most 64 bits" if name == "val" else "integer"
            raise ValueError(f"tape array {name} must be {wanted}, got dtype {a.dtype}")
    lengths = {name: a.size for name, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"tape arrays must have equal lengths, got {lengths}")
    codes = arrays["opcode"]
    bad = np.flatnonzero((codes < 0) | (codes >= optable.NUM_OPS))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"node {i}: invalid opcode {codes[i]} (valid: 0..{optable.NUM_OPS - 1})")
    arity = ARITY[codes.astype(np.intp)]
    ids = np.arange(codes.size)
    for slot, name in enumerate(("in0", "in1")):
        operand = arrays[name].astype(np.int64)
        used = arity > slot
        wrong = np.flatnonzero(np.where(used, (operand < 0) | (operand >= ids), operand != -1))
        if wrong.size:
            i = int(wrong[0])
            op = optable.ALL[codes[i]]
            rule = f"an id in [0, {i})" if used[i] else "-1 (unused operand)"
            raise ValueError(
                f"node {i} ({op.name}, arity {op.arity}): {name} = {operand[i]}, "
                f"expected {rule}; operands must be earlier nodes"
            )
    return (
        np.ascontiguousarray(codes, OPCODE_DTYPE),
        np.ascontiguousarray(arrays["in0"], INDEX_DTYPE),
        np.ascontiguousarray(arrays["in1"], INDEX_DTYPE),
        np.ascontiguousarray(arrays["val"], VALUE_DTYPE),
    )


def validated_labels(tape: TapeStorage, labels: object) -> dict[int, str]:
    """``labels`` as ``{node id: label}`` for ``tape``; keys may be ids or their decimal text."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise TypeError(f"labels must be a dict {{node id: label}}, got {type(labels).__name__}")
    checked: dict[int, str] = {}
    for key, label in labels.items():
        # Keys are ids, or their decimal text (JSON object keys are strings).
        node_id = int(key) if isinstance(key, str) and key.isdecimal() else key
        try:
            node_id = tape.check_id(node_id, "label key")
        except (TypeError, IndexError) as error:
            raise ValueError(f"label {label!r}: {error}") from None
        if not isinstance(label, str):
            raise TypeError(f"label of node {node_id} must be a str, got {label!r}")
        checked[node_id] = label
    return checked


def write(
    tape: TapeStorage,
    path: StrPath,
    form: str = SAVE_FORMAT,
    blocks: dict[str, Any] | None = None,
) -> None:
    """Write a tape to a NumPy ``.npz`` file at ``path`` exactly (no pickle inside; no
    ``.npz`` added to the name, so :func:`read` of the same path finds it): its scalar
    rows and labels, and for a tape with blocks (``form`` :data:`BLOCK_SAVE_FORMAT`) the
    block side's members ``blocks``."""
    with open(path, "wb") as file:
        np.savez(
            file,
            format=np.array(form),
            opcode=tape.opcode,
            in0=tape.in0,
            in1=tape.in1,
            val=tape.val,
            labels=np.array(json.dumps({str(k): v for k, v in tape.labels.items()})),
            **(blocks or {}),
        )


def read(path: StrPath) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(format, members, labels)`` of a tape file written by :func:`write` (not yet
    validated): the format :data:`SAVE_FORMAT` or :data:`BLOCK_SAVE_FORMAT`."""
    data = npz.read_npz(path, "tape")
    # write() always writes labels: a file without them is damaged, not unlabelled.
    missing = {"format", "opcode", "in0", "in1", "val", "labels"} - set(data)
    if missing:
        compiled = {"meta", "inputs"} <= set(data)
        hint = " (it is a compiled function: read it with fa.load)" if compiled else ""
        raise ValueError(f"{path}: not a fastad tape, missing {sorted(missing)}{hint}")
    found = npz.text_field(data, "format", str(path))
    if found not in (SAVE_FORMAT, BLOCK_SAVE_FORMAT):
        raise ValueError(f"{path}: format {found!r}, expected {SAVE_FORMAT!r}")
    text = npz.text_field(data, "labels", str(path))
    labels: dict[str, Any] = npz.json_object(text, f"{path}: labels")
    return found, data, labels


def scalar_op(code: object) -> optable.Op:
    """The scalar op ``code`` names, else raises naming it."""
    if not is_int(code):
        raise TypeError(f"opcode must be an integer, got {type(code).__name__} {code!r}")
    if not 0 <= int(code) < optable.NUM_OPS:
        block = int(code) in optable.ALL
        what = "a block op, recorded by its function" if block else "not an opcode"
        raise ValueError(
            f"opcode {code} is {what}; scalar opcodes are 0..{optable.NUM_OPS - 1} "
            "(fastad.kernels.optable.OPS)"
        )
    return optable.OPS[int(code)]


def check_row(storage: TapeStorage, code: object, in0: object, in1: object) -> None:
    """Check one raw row of ``Tape.push`` before anything is written: ``code`` is a scalar
    op, ``in0``/``in1`` ids of earlier scalar nodes for its operands and -1 for the rest."""
    op = scalar_op(code)
    for slot, j in enumerate((in0, in1)):
        field = ("in0", "in1")[slot]
        if slot >= op.arity:
            if not is_int(j) or j != -1:
                raise ValueError(
                    f"{op.name} takes {op.arity} operand(s): {field} must be -1, got {j!r}"
                )
            continue
        node = storage.check_id(j, f"{field} (operand {slot + 1} of {op.name})")
        if storage.block_value(node) is not None:
            raise ValueError(
                f"{field} {node} is a block node: a scalar op reads scalar nodes (record "
                "ops on blocks with fastad's functions, e.g. fa.sin(X))"
            )
