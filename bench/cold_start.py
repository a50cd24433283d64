"""What a fresh machine waits for: the demo, a first compiled call and the tests, cold and warm.

``python bench/cold_start.py [--suite]`` runs each case in a fresh process
twice: first with an empty cache folder (``FASTAD_CACHE_DIR``: Numba's
compiled kernels and the generated code both live there, so an empty
folder is a fresh machine for fastad), then again with the folder the first
run filled. It prints the wall time of each, in seconds:

- ``fastad demo`` (the articles' examples and their checks);
- a first ``f.value_and_grad`` of a compiled function of scalars (example 2
  at 1,000 points, the default backend), from ``import fastad`` on;
- with ``--suite``, the test suite (``python -m pytest -q``), whose cold run
  should take at most twice its warm run.

Run it from the repository root; the machine should be otherwise idle.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import time

FIRST_CALL = textwrap.dedent(
    """
    import numpy as np
    import fastad as fa
    from fastad import demo

    f = fa.compile(demo.example_2)
    points = np.random.default_rng(0).normal(size=(1000, 6))
    values, gradients = f.value_and_grad(points)
    assert np.isfinite(gradients).all()
    print(f.tier("grad").name)
    """
)

CASES = {
    "fastad demo": [sys.executable, "-m", "fastad", "demo"],
    "first f.value_and_grad": [sys.executable, "-c", FIRST_CALL],
}
SUITE = {"test suite": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]}


def timed(command: list[str], cache: str) -> float:
    """Seconds ``command`` takes with ``cache`` as fastad's cache folder; it must succeed."""
    environment = {**__import__("os").environ, "FASTAD_CACHE_DIR": cache}
    started = time.perf_counter()
    result = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return seconds


def main() -> None:
    cases = {**CASES, **(SUITE if "--suite" in sys.argv[1:] else {})}
    print(f"{'case':<26} {'cold (s)':>9} {'warm (s)':>9} {'cold/warm':>9}")
    for name, command in cases.items():
        with tempfile.TemporaryDirectory(prefix="fastad-cold-") as cache:
            cold = timed(command, cache)
            warm = timed(command, cache)
        print(f"{name:<26} {cold:9.1f} {warm:9.1f} {cold / warm:9.2f}", flush=True)


if __name__ == "__main__":
    main()
