"""How much memory a new allocation can take: checked before a large result is made.

A result that cannot fit must raise ``MemoryError`` naming its size before
anything is allocated, never be killed by the kernel half way. On Linux the
figure is ``MemAvailable`` lowered to what the process's memory cgroup
(v2 or v1) has left, since a container's limit kills a process long before
the machine runs out; elsewhere, the physical memory.
"""

from __future__ import annotations

import contextlib
import os

SMALL_BYTES = 64 * 2**20
"""Sizes below this are not checked: no machine fastad runs on lacks them, and
reading the memory figures (several files) would cost a small call more
than its work."""


def check_fits(size: int, what: str, advice: str) -> None:
    """Raise MemoryError, before allocating, if ``size`` bytes exceed the memory available.

    ``what`` names the result and its shape, ``advice`` (a sentence) what to do instead.
    """
    if size < SMALL_BYTES:
        return
    available = available_memory()
    if available is not None and size > available:
        raise MemoryError(
            f"{what} needs {_format_bytes(size)}; {_format_bytes(available)} is available. {advice}"
        )


def _format_bytes(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def available_memory() -> int | None:
    """Bytes a new allocation can take, or None if unknown.

    Linux: ``MemAvailable``, lowered to what the process's cgroup (v2 or v1)
    has left, since a container's limit kills a process long before the
    machine runs out. Elsewhere: the physical memory.
    """
    found = [value for value in (_meminfo_available(), _cgroup_available()) if value is not None]
    if found:
        return min(found)
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """What the process's memory cgroup has left, or None without a limit.

    The process's own group (``/proc/self/cgroup``) and its parents, the
    tightest limit; usage counts reclaimable page cache, so the inactive
    file pages are taken off it (as the kernel would reclaim them first).
    """
    try:
        with open("/proc/self/cgroup") as groups:
            lines = groups.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            base, files = "/sys/fs/cgroup", ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # cgroup v1
            base = "/sys/fs/cgroup/memory"
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts), -1, -1):
            left = _group_left(os.path.join(base, *parts[:depth]), *files)
            if left is not None:
                found = left if found is None else min(found, left)
    return found


def _group_left(folder: str, limit_name: str, usage_name: str, inactive_name: str) -> int | None:
    try:
        with open(os.path.join(folder, limit_name)) as limit:
            text = limit.read().strip()
        if text == "max" or int(text) >= 2**60:  # no limit (v1 writes a huge number)
            return None
        with open(os.path.join(folder, usage_name)) as usage:
            used = int(usage.read().strip())
        inactive = 0
        with (
            contextlib.suppress(OSError, ValueError),
            open(os.path.join(folder, "memory.stat")) as stat,
        ):
            for entry in stat:
                key, _, value = entry.partition(" ")
                if key == inactive_name:
                    inactive = int(value)
        return max(0, int(text) - (used - inactive))
    except (OSError, ValueError):
        return None
