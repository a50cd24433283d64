"""Reading fastad's ``.npz`` files without trusting them.

Tapes and compiled functions are saved as NumPy ``.npz`` archives (a zip of
``.npy`` members, no pickle inside). A file can be truncated, corrupted, not
written by fastad at all, or crafted: ``np.load`` then fails with whatever
the zip or NumPy layer raises (``BadZipFile``, ``EOFError``, an "encrypted"
``RuntimeError``...) or, for a member whose header claims 10^12 elements,
tries to allocate terabytes before it notices the data is missing.
:func:`read_npz` checks every member's header against the bytes the member
really holds before reading it, and turns every failure into one
``ValueError`` naming the file, the member and what to do.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
import zlib
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format

_CHUNK_BYTES = 1 << 24
_FIX = "it may be truncated, corrupted or not written by fastad; save it again"
# What the zip and .npy layers raise for damaged data (zlib.error: a broken
# compressed stream; OSError: a seek past the end; RuntimeError: encryption).
_DAMAGED = (
    ValueError,
    EOFError,
    OSError,
    RuntimeError,
    NotImplementedError,
    MemoryError,
    OverflowError,
    TypeError,
    KeyError,
    zipfile.BadZipFile,
    zlib.error,
)
# Errors that already name the file and say what is wrong with the path.
_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def file_path(path: object, what: str) -> str | os.PathLike[str]:
    """``path`` as a file's path (a ``str``, ``bytes`` or ``os.PathLike``), else a
    TypeError naming it: an int would be read as an open file descriptor, and closed."""
    if isinstance(path, bytes):
        return os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{what} takes a file path (str or os.PathLike), got {type(path).__name__} {path!r}"
        )
    return path


def read_npz(
    path: str | os.PathLike[str] | IO[bytes], kind: str, name: str | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """Every array of the ``.npz`` file ``path`` (or open binary file), by name, validated first.

    ``kind`` names what the file should hold ("tape", "compiled function")
    in error messages, and ``name`` the file itself (``path`` by default).
    A missing file raises ``FileNotFoundError`` (and other operating-system
    errors pass through: they already name the file); every
    problem with the contents raises ``ValueError``.
    """
    if name is None:
        name = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except _PATH_ERRORS:
        raise
    except _DAMAGED as error:
        raise ValueError(
            f"{name}: not a fastad {kind} file (not a readable .npz archive: {error}); {_FIX}"
        ) from None
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    with archive:
        for info in archive.infolist():
            member = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            arrays[member] = _read_member(archive, info, f"{name}: member {info.filename!r}")
    return arrays


def _read_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str
) -> np.ndarray[Any, Any]:
    if info.flag_bits & 0x1:
        raise ValueError(f"{where} is encrypted; fastad never writes encrypted files")
    try:
        with archive.open(info) as member:
            shape, fortran_order, dtype = _header(member)
            if dtype.hasobject:
                raise ValueError("holds Python objects (pickled data), which fastad never writes")
            count = math.prod(shape)
            data = _read_data(member, count, dtype)
        array = np.frombuffer(data, dtype=dtype, count=count)
        return array.reshape(shape, order="F" if fortran_order else "C")
    except _DAMAGED as error:
        raise ValueError(f"{where} cannot be read: {error}; {_FIX}") from None


def _header(member: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """Shape, Fortran order and dtype of an ``.npy`` stream, read without its data."""
    version = npy_format.read_magic(member)
    if version == (1, 0):
        shape, fortran_order, dtype = npy_format.read_array_header_1_0(member)
    elif version in ((2, 0), (3, 0)):
        shape, fortran_order, dtype = npy_format.read_array_header_2_0(member)
    else:
        raise ValueError(f"unknown .npy format version {version}")
    return tuple(shape), bool(fortran_order), np.dtype(dtype)


def _read_data(member: IO[bytes], count: int, dtype: np.dtype[Any]) -> bytearray:
    """The ``count * itemsize`` data bytes after the header, read in bounded chunks.

    Neither the header's shape nor the zip directory's sizes are trusted:
    memory grows only with the bytes that are really there, so a 1 kB file
    claiming terabytes fails after reading 1 kB.
    """
    expected = count * dtype.itemsize
    data = bytearray()
    while len(data) < expected:
        chunk = member.read(min(expected - len(data), _CHUNK_BYTES))
        if not chunk:
            raise ValueError(
                f"its header claims {count} elements of {dtype} ({expected} bytes) but it "
                f"holds only {len(data)} bytes of data"
            )
        data += chunk
    return data


def text_field(arrays: dict[str, np.ndarray[Any, Any]], name: str, where: str) -> str:
    """The string stored as the 0-d array ``arrays[name]``."""
    value = arrays[name]
    if value.ndim != 0 or value.dtype.kind != "U":
        raise ValueError(f"{where}: {name!r} must be a text field, got {value.dtype} {value.shape}")
    return str(value)


def json_object(text: str, where: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object (a dict), or a ``ValueError`` naming ``where``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where} is not valid JSON ({error}); {_FIX}") from None
    except RecursionError:
        raise ValueError(f"{where} nests deeper than Python can read; {_FIX}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(value).__name__}; {_FIX}")
    return value
