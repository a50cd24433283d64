"""Progress on stderr for steps that may take seconds: never a silent wait.

``with progress("compiling f", lambda: "2,000 of 8,399 nodes"):`` prints
nothing for a step that ends within ``delay`` seconds; past it, a line
saying what runs, how far it is (if ``how_far`` is given) and how long it
has taken, then another every ``interval`` seconds, and a last line with
the total time when it ends. A daemon thread does the printing, so it also
speaks while the step runs in compiled code that releases the GIL (LLVM)
or in Python code of the user's (tracing).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DELAY_SECONDS = 1.0
INTERVAL_SECONDS = 5.0


@contextmanager
def progress(
    what: str,
    how_far: Callable[[], str] | None = None,
    expected: float | None = None,
    delay: float = DELAY_SECONDS,
    interval: float = INTERVAL_SECONDS,
) -> Iterator[None]:
    """Report ``what`` on stderr if it runs longer than ``delay`` seconds.

    Parameters
    ----------
    what : str
        The step, as the user would name it ("compiling generated code for f").
    how_far : callable, optional
        Returns a short text of the progress made so far; called from the
        reporting thread, so it must only read.
    expected : float, optional
        The expected duration in seconds, printed with the first line.
    """
    start = time.perf_counter()
    done = threading.Event()
    spoke = threading.Event()

    def report() -> None:
        wait = delay
        while not done.wait(wait):
            elapsed = time.perf_counter() - start
            parts = [f"fastad: {what}"]
            if how_far is not None:
                parts.append(how_far())
            parts.append(f"{elapsed:.0f} s so far")
            if expected is not None and not spoke.is_set():
                parts.append(f"expected about {expected:.0f} s")
            print(", ".join(parts), file=sys.stderr, flush=True)
            spoke.set()
            wait = interval

    reporter = threading.Thread(target=report, name="fastad-progress", daemon=True)
    reporter.start()
    try:
        yield
    finally:
        done.set()
        reporter.join()
        if spoke.is_set():
            elapsed = time.perf_counter() - start
            print(f"fastad: {what}: done in {elapsed:.1f} s", file=sys.stderr, flush=True)
