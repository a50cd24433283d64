"""A clear error for a ``fastad`` found without its kernels.

``fastad/kernels`` of a checkout is a symbolic link to ``kernels/``. Where git
does not make symbolic links (``core.symlinks`` false, as on Windows by
default) it writes a small text file instead, and ``import fastad`` would fail
far away with ``No module named 'fastad.kernels'``; an incomplete installation
fails the same way. :func:`kernels_missing_error` says which and what to do.

This module imports nothing of fastad, so it loads in either situation.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

PACKAGE = "fastad"


def kernels_missing_error(
    package_folders: Iterable[str], error: ModuleNotFoundError
) -> ImportError:
    """The ImportError for a ``fastad`` found without its ``fastad.kernels``.

    Parameters
    ----------
    package_folders : iterable of str
        ``fastad.__path__``: where ``fastad`` was imported from.
    error : ModuleNotFoundError
        The failure to import ``fastad.kernels``.

    Returns
    -------
    ImportError
        To be raised ``from error`` by the caller.
    """
    folders = [os.path.abspath(folder) for folder in package_folders]
    listed = ", ".join(folders)
    unlinked = [
        folder
        for folder in folders
        if os.path.isfile(os.path.join(folder, "kernels"))
        and os.path.isdir(os.path.join(os.path.dirname(folder), "kernels"))
    ]
    if unlinked:
        return ImportError(
            f"{PACKAGE} was imported from {listed}, but its kernels (fastad.kernels) are not "
            f"there ({error}). That is a checkout in which {unlinked[0]}/kernels is a plain "
            "file: git wrote the symbolic link to ../kernels as text because it does not make "
            "links here (core.symlinks is false). Fix: 'git config core.symlinks true' and "
            "check out again (on Windows, with Developer Mode or as administrator), or "
            "install from a wheel."
        )
    return ImportError(
        f"{PACKAGE} was imported from {listed}, but its kernels (fastad.kernels) are not "
        f"there ({error}). The installation looks incomplete. Fix: reinstall fastad "
        "('pip install --force-reinstall fastad', or 'pip install -e .' in a checkout)."
    )
