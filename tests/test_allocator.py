"""The C allocator keeps large freed temporaries for the next call (fastad/util/allocator.py)."""

import os
import subprocess
import sys
import textwrap

import pytest

# Twenty arrays of 2 MiB made and freed, ten times over: the page faults of
# the last nine rounds, once the first has sized the heap.
CHURN = textwrap.dedent(
    """
    import resource
    import numpy as np
    import fastad.util.allocator as allocator

    def churn():
        arrays = [np.ones(2**18) for _ in range(20)]
        del arrays

    churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(9):
        churn()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(allocator.STATE)
    """
)


def faults(**variables):
    """Page faults of the churn in a new process with ``variables`` set; and the state line."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name
        not in (
            "FASTAD_MALLOC",
            "MALLOC_MMAP_THRESHOLD_",
            "MALLOC_TRIM_THRESHOLD_",
            "GLIBC_TUNABLES",
        )
    }
    result = subprocess.run(
        [sys.executable, "-c", CHURN],
        env={**environment, **variables},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    count, state = result.stdout.splitlines()
    return int(count), state


def glibc():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


@pytest.mark.skipif(not glibc(), reason="the thresholds are glibc's (Linux)")
def test_freed_temporaries_are_reused_without_page_faults():
    count, state = faults()
    assert state.startswith("glibc: arrays below 32 MiB come from the heap")
    # 9 rounds of 40 MiB would be over 90,000 faults of fresh 4 KiB pages.
    assert count < 1000, f"{count} page faults: the freed arrays were given back each round"


@pytest.mark.skipif(not glibc(), reason="the thresholds are glibc's (Linux)")
def test_the_system_settings_can_be_kept():
    # The same churn with glibc's own settings faults its pages in every round:
    # what the thresholds are for (and the measure above can tell the two apart).
    count, state = faults(FASTAD_MALLOC="system")
    assert state == "FASTAD_MALLOC=system: glibc's settings are kept"
    assert count > 9 * 5000
    count, state = faults(MALLOC_TRIM_THRESHOLD_="131072")
    assert state == "glibc's MALLOC_*_THRESHOLD_ variables are set: they are kept"
    assert count > 9 * 5000
    count, state = faults(GLIBC_TUNABLES="glibc.malloc.trim_threshold=131072")
    assert state == "GLIBC_TUNABLES sets a glibc.malloc threshold: it is kept"
    assert count > 9 * 5000
