"""Work shared out over Python threads, for calls that release the GIL.

:func:`on_threads` runs one function over several items at once: the first
item on the calling thread, the others on a thread pool made for the call
(nothing outlives it, so a fork finds no pool of fastad's). A worker's
exception is raised in the caller. While Python shuts down (the main thread
has ended and pools take no new work), the items run on the caller, one
after another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def on_threads(
    function: Callable[[_Item], _Result], items: Sequence[_Item], name: str
) -> list[_Result]:
    """``[function(item) for item in items]``, the items at once, on threads named
    ``name``; the results in the items' order."""
    if len(items) < 2:
        return [function(item) for item in items]
    with ThreadPoolExecutor(len(items) - 1, name) as pool:
        others: list[Future[_Result] | _Item] = []
        for item in items[1:]:
            try:
                others.append(pool.submit(function, item))
            except RuntimeError:  # Python is shutting down: no new threads
                others.append(item)
        first = function(items[0])
        results = [first]
        for other in others:  # a worker's exception is raised here
            results.append(other.result() if isinstance(other, Future) else function(other))
        return results
