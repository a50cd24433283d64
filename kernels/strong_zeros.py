"""Strong zeros: which adjoints and tangents nothing reached, and what an edge sends.

Every sweep, elementwise map and lane kernel sends along an edge with
``contribution``; the generated modules of compiled functions restate
``reached`` and ``contribution`` from this file's text (``scalar_source.py``).
"""

from __future__ import annotations

from math import copysign

from .jit import kernel

# Which adjoints and tangents are strong zeros. A node that no contribution
# has reached holds -0.0, the identity of +: every sweep starts its adjoint or
# tangent buffer at UNREACHED. A contribution that arrives is never -0.0
# (``contribution`` turns a zero product into +0.0), and in round-to-nearest
# no sum of terms that are not all -0.0 is -0.0, so a reached node never
# looks unreached again, even when its contributions cancel (1 + -1 = +0.0).
# A node that nothing reached sends nothing, whatever its local partial; a
# node that was reached sends partial * adjoint, so a cancelled adjoint
# meeting an infinite partial gives nan, as the unmerged graph and forward
# mode do. The front end adds 0.0 to every result it hands out, so users
# never see -0.0 for an unreached node.
UNREACHED = -0.0


@kernel
def reached(x: float) -> bool:
    """False only for ``UNREACHED`` (-0.0): an adjoint or tangent nothing arrived at."""
    return x != 0.0 or copysign(1.0, x) > 0.0


@kernel
def contribution(partial: float, incoming: float) -> float:
    """What one edge sends: ``partial * incoming``, with strong zeros.

    ``UNREACHED`` (adds nothing, reaches nothing) when the local partial is
    exactly zero or nothing reached the sending node; otherwise the product,
    with a zero product made +0.0 so that it marks its target reached.
    """
    if partial == 0.0 or not reached(incoming):
        return UNREACHED
    return partial * incoming + 0.0
