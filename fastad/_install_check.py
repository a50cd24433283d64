"""Clear errors for a ``fastad`` that is not the installed package.

Two ways an ordinary ``import fastad`` can pick up the wrong thing, both of
which otherwise surface far away as ``AttributeError: module 'fastad' has no
attribute 'sin'`` or ``No module named 'fastad.kernels'``:

- A **namespace shadow**: a folder named ``fastad`` without ``__init__.py``
  earlier on ``sys.path`` than an editable install (whose meta-path finder
  Python consults only after its path finder). Python imports the folder as
  an empty namespace package; no fastad code runs at ``import fastad``, but
  submodules still load through the editable finder, so the check sits in
  the entry points that load first (``fastad.__main__``, ``tests/conftest.py``).
  A common cause is ``site-packages/fastad/`` left behind by an earlier
  non-editable install, for example holding cache files pip does not own.
- A **source-checkout shadow**: ``fastad/__init__.py`` of a checkout runs
  (the checkout is the current directory, which Python puts first on
  ``sys.path``) while fastad is installed non-editable, so
  ``fastad.kernels``, which lives in ``kernels/`` of the checkout and is
  mapped into ``fastad`` only by an editable install, cannot be found.

This module imports nothing of fastad, so it loads in either situation.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import ModuleType

PACKAGE = "fastad"


def require_regular_package(module: ModuleType) -> None:
    """Raise ImportError if ``module`` (``fastad``) is an empty namespace package.

    Parameters
    ----------
    module : module
        The imported ``fastad`` module object.

    Raises
    ------
    ImportError
        Naming the folders Python took for ``fastad`` and what to do.
    """
    if getattr(module, "__file__", None) is not None:
        return
    folders = [str(folder) for folder in getattr(module, "__path__", [])]
    listed = ", ".join(folders) if folders else "(no folder)"
    raise ImportError(
        f"'import {PACKAGE}' found the folder(s) {listed}, which have no __init__.py, and "
        "Python imported them as an empty namespace package that hides the installed "
        f"{PACKAGE} (this is why {PACKAGE}.sin and the rest are missing). Rename or remove "
        "that folder (a leftover site-packages/fastad/ from an earlier non-editable "
        "install is a common cause: delete it, or uninstall and reinstall fastad), or "
        "take it off sys.path: run from another directory, check PYTHONPATH."
    )


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
    checkout = any(
        os.path.isdir(os.path.join(os.path.dirname(folder), "kernels")) for folder in folders
    )
    if checkout:
        why = (
            "That is the source folder of a fastad checkout, which Python found first "
            "because it is in the current directory (or the script's folder); the compiled "
            "kernels live beside it in kernels/, and only an editable install maps them "
            "into fastad."
        )
    else:
        why = "The installation looks incomplete."
    return ImportError(
        f"{PACKAGE} was imported from {listed}, but its kernels (fastad.kernels) are not "
        f"there ({error}). {why} Fix: install editable with 'pip install -e .' from the "
        "checkout, or run from another directory so the installed fastad is imported "
        "(reinstall fastad if the installation is incomplete)."
    )
