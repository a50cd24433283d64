"""The ``einsum`` group: ``np.einsum`` on fastad blocks against NumPy's own, forward pass.

``python -m pytest bench -k einsum``. Four contractions (a batched product,
a chain of three where the order matters, a contraction of a 3-d array
with a matrix, a batched trace), one BLAS thread:

- ``eager``: ``np.einsum`` of blocks recorded on a fresh tape, the leaves
  made by ``fa.var`` (which copies its array) inside the timing: what a
  user's eager forward pass costs;
- ``eager_shared``: the same, the leaves made by ``fa.var(a, copy=False)``,
  which keeps the caller's array instead of copying it (as PyTorch's
  ``from_numpy``);
- ``compiled``: the same call as ``fa.compile``'s function of arrays,
  called for its value (traced once, and run until its generated code
  takes over, outside the timing);
- ``numpy``: ``np.einsum(..., optimize=True)``, NumPy's own best order and
  BLAS calls.

Every row is checked once against ``np.einsum``'s value.
"""

import time

import numpy as np
import pytest

import fastad as fa

CONTRACTIONS = {
    "batched product": ("bij,bjk->bik", [(32, 64, 64), (32, 64, 64)]),
    "chain of three": ("ij,jk,kl->il", [(400, 20), (20, 400), (400, 10)]),
    "3-d by matrix": ("ijk,jl->ilk", [(64, 64, 32), (64, 48)]),
    "batched trace": ("bii->b", [(256, 32, 32)]),
}


def _operands(shapes):
    rng = np.random.default_rng(3)
    return [rng.normal(size=shape) for shape in shapes]


def _eager(spec, copy=True):
    def forward(*arrays):
        with fa.Tape():
            return np.einsum(spec, *[fa.var(a, copy=copy) for a in arrays]).value

    return forward


def _compiled(spec, arrays, seconds=120.0):
    """The compiled call once it runs generated code: the default backend interprets
    the first calls and builds the module in a background thread (or loads it from the
    cache at once), as a user's loop reaches it."""
    product = fa.compile(lambda *xs: np.einsum(spec, *xs), example=tuple(arrays))
    deadline = time.monotonic() + seconds
    while product.tier("values").name != "codegen":
        if time.monotonic() > deadline:
            raise RuntimeError(f"no generated code after {seconds:.0f} s: {product.tier()}")
        product(list(arrays))
    return lambda *xs: product(list(xs))


@pytest.mark.benchmark(group="einsum")
@pytest.mark.parametrize("contraction", list(CONTRACTIONS))
@pytest.mark.parametrize("way", ["eager", "eager_shared", "compiled", "numpy"])
def test_einsum_forward(benchmark, way, contraction):
    spec, shapes = CONTRACTIONS[contraction]
    arrays = _operands(shapes)
    forward = {
        "eager": lambda: _eager(spec),
        "eager_shared": lambda: _eager(spec, copy=False),
        "compiled": lambda: _compiled(spec, arrays),
        "numpy": lambda: lambda *xs: np.einsum(spec, *xs, optimize=True),
    }[way]()
    np.testing.assert_allclose(
        np.asarray(forward(*arrays)), np.einsum(spec, *arrays), rtol=1e-12, atol=1e-12
    )
    benchmark.extra_info.update(way=way, contraction=contraction, spec=spec)
    benchmark(forward, *arrays)
