"""Progress for steps that may take seconds: never a silent wait.

``with progress("compiling f", lambda: "2,000 of 8,399 nodes"):`` says
nothing for a step that ends within ``delay`` seconds; past it, a line
saying what runs, how far it is (if ``how_far`` is given) and how long it
has taken, then another every ``interval`` seconds, and a last line with
the total time when it ends. A daemon thread does the reporting, so it also
speaks while the step runs in compiled code that releases the GIL (LLVM)
or in Python code of the user's (tracing).

The lines are INFO records of the ``fastad`` logger (:data:`LOGGER`, see
:func:`say`). While the program has not set up logging, they go to stderr
as ``fastad: <message>``; once it has, wherever it sends INFO records, as
any library's. To silence them:
``logging.getLogger("fastad").setLevel(logging.WARNING)``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DELAY_SECONDS = 1.0
INTERVAL_SECONDS = 5.0

LOGGER = logging.getLogger("fastad")


def say(message: str) -> None:
    """``message`` as an INFO record of :data:`LOGGER`; while the program has not set up
    logging at all (no level or handler on ``fastad``'s logger, no handler on the root,
    nothing disabled), on stderr as ``fastad: <message>`` instead, as Python's own
    last-resort handler does for warnings."""
    root = logging.getLogger()
    if (
        LOGGER.level == logging.NOTSET
        and not LOGGER.handlers
        and not root.handlers
        and not LOGGER.disabled
        and root.manager.disable < logging.INFO
    ):
        print(f"fastad: {message}", file=sys.stderr, flush=True)
    else:
        LOGGER.info(message)


@contextmanager
def progress(
    what: str,
    how_far: Callable[[], str] | None = None,
    expected: float | None = None,
    delay: float | None = None,
    interval: float | None = None,
) -> Iterator[None]:
    """Report ``what`` (to :data:`LOGGER`) if it runs longer than ``delay`` seconds.

    Parameters
    ----------
    what : str
        The step, as the user would name it ("compiling generated code for f").
    how_far : callable, optional
        Returns a short text of the progress made so far; called from the
        reporting thread, so it must only read.
    expected : float, optional
        The expected duration in seconds, given with the first line.
    delay, interval : float, optional
        Seconds before the first line and between lines (default: the
        module's ``DELAY_SECONDS`` and ``INTERVAL_SECONDS``, read at the call,
        so a program may change them).
    """
    delay = DELAY_SECONDS if delay is None else delay
    interval = INTERVAL_SECONDS if interval is None else interval
    start = time.perf_counter()
    done = threading.Event()
    spoke = threading.Event()

    def report() -> None:
        wait = delay
        while not done.wait(wait):
            elapsed = time.perf_counter() - start
            parts = [what]
            if how_far is not None:
                parts.append(how_far())
            parts.append(f"{elapsed:.0f} s so far")
            if expected is not None and not spoke.is_set():
                parts.append(f"expected about {expected:.0f} s")
            say(", ".join(parts))
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
            say(f"{what}: done in {elapsed:.1f} s")
