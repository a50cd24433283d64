"""NumPy's calls on fastad nodes against JAX: ``python -m pytest bench/test_bench_numpy_calls.py``.

Not a timing: a cross-check, beside the benchmarks' other JAX rows, that runs
where JAX is installed (an optional peer) and skips, saying so, elsewhere.
Every row of the NumPy-call table (``tests/numpy_calls.py``: the NumPy calls
a JAX or autograd user reaches for) that fastad records runs once on fastad
nodes and once with ``jax.numpy`` in NumPy's place, in float64. They must
agree on:

- the values of every result;
- the JVP of every differentiable result along random directions of all
  the operands (forward mode: ``fa.jvp`` against ``jax.jvp``);
- the gradient of a smooth scalar of the results, ``sum(tanh(r) * w)``
  (reverse mode: ``fa.grad`` against ``jax.grad``);
- that scalar's Hessian-vector product (``fa.hvp`` against ``jax.jvp`` of
  ``jax.grad``).

``tests/test_numpy_calls.py`` checks the same rows against NumPy's values
and central differences, without JAX.
"""

import pathlib
import sys
import types

import numpy as np
import pytest

import fastad as fa

jax = pytest.importorskip("jax", reason="JAX is an optional peer: pip install jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from numpy_calls import CALLS, operands  # noqa: E402 (the tests' table, found above)
from test_numpy_calls import CONSTANTS, REFUSED  # noqa: E402

CHECKED = [row for row in CALLS if row[0] not in REFUSED and row[0] not in CONSTANTS]

# Values: two libraries' libm and LAPACK round differently (a few ulps); the
# derivatives add a few operations' worth to that.
VALUE_RTOL, FIRST_RTOL, SECOND_RTOL = 1e-12, 1e-10, 1e-9


JAX_SPELLINGS = {
    "np.take": lambda a: jnp.take(a, jnp.array([2, 0]), axis=1),
    "X[[2, 0]]": lambda a: a[jnp.array([2, 0])],
}
"""Rows whose NumPy spelling JAX refuses (a list as an index: JAX asks for an array),
spelled as JAX takes them."""


def in_jax(name, call):
    """The row's call with ``jax.numpy`` in NumPy's place: NumPy's function of the same
    name, or the row's own code reading ``np`` as ``jax.numpy``."""
    if name in JAX_SPELLINGS:
        return JAX_SPELLINGS[name]
    for numpy_module, jax_module in ((np, jnp), (np.linalg, jnp.linalg)):
        if getattr(numpy_module, getattr(call, "__name__", ""), None) is call:
            return getattr(jax_module, call.__name__)
    return types.FunctionType(call.__code__, {**call.__globals__, "np": jnp}, closure=None)


def _listed(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _close(got, want, rtol, what):
    want = np.asarray(want, np.float64)
    assert np.shape(got) == want.shape, f"{what}: shape {np.shape(got)}, JAX's {want.shape}"
    scale = max(float(np.max(np.abs(want), initial=0.0)), 1.0)
    np.testing.assert_allclose(
        np.asarray(got, np.float64), want, rtol=rtol, atol=rtol * scale, err_msg=what
    )


@pytest.mark.parametrize("name, call, letters", CHECKED, ids=[row[0] for row in CHECKED])
def test_numpy_call_agrees_with_jax(name, call, letters):
    rng = np.random.default_rng(20261203)
    given = operands(rng)
    arguments = [np.float64(given[c]) if c == "s" else given[c] for c in letters]
    directions = [rng.normal(size=np.shape(a)) for a in arguments]
    theirs = in_jax(name, call)
    wanted = _listed(theirs(*[jnp.asarray(a) for a in arguments]))
    smooth = [np.issubdtype(np.asarray(r).dtype, np.floating) for r in wanted]
    weights = [rng.normal(size=np.shape(r)) for r in wanted]

    def their_loss(*values):
        results = _listed(theirs(*values))
        return sum(
            jnp.sum(jnp.tanh(r) * w) for r, w, s in zip(results, weights, smooth, strict=True) if s
        )

    with fa.Tape():
        nodes = [fa.var(a) for a in arguments]
        got = _listed(call(*nodes))
        assert len(got) == len(wanted), name
        loss = 0.0
        for index, (result, want, is_smooth, w) in enumerate(
            zip(got, wanted, smooth, weights, strict=True)
        ):
            recorded = isinstance(result, (fa.Block, fa.Var))
            value = result.value if recorded else result
            if not is_smooth:  # positions, counts, truth values: equal
                np.testing.assert_array_equal(np.asarray(value), np.asarray(want), err_msg=name)
                continue
            _close(value, want, VALUE_RTOL, f"{name}: value {index}")
            their_jvp = jax.jvp(
                lambda *values, index=index: _listed(theirs(*values))[index],
                tuple(jnp.asarray(a) for a in arguments),
                tuple(jnp.asarray(d) for d in directions),
            )[1]
            _close(fa.jvp(result, nodes, directions), their_jvp, FIRST_RTOL, f"{name}: JVP {index}")
            term = fa.tanh(result) * (w if isinstance(result, fa.Block) else float(w))
            loss = loss + (term.sum() if isinstance(term, fa.Block) else term)
        if not isinstance(loss, fa.Var):
            return  # nothing differentiable: the values were the check
        gradients = fa.grad(loss, nodes)
        products = fa.hvp(loss, nodes, directions)
    positions = tuple(range(len(arguments)))
    their_gradients = jax.grad(their_loss, argnums=positions)(*arguments)
    their_products = jax.jvp(
        lambda *values: jax.grad(their_loss, argnums=positions)(*values),
        tuple(jnp.asarray(a) for a in arguments),
        tuple(jnp.asarray(d) for d in directions),
    )[1]
    for position in positions:
        _close(gradients[position], their_gradients[position], FIRST_RTOL, f"{name}: gradient")
        _close(products[position], their_products[position], SECOND_RTOL, f"{name}: HVP")
