"""How far fast math's vector functions lie from libm's, in units in the last place.

Usage: ``python bench/fast_math_ulps.py``. For every vector width this CPU runs
(2, 4 and 8 lanes with AVX-512), each math function compiled alone
(``fa.compile(op, backend="codegen", fast_math=True)``) is evaluated at 10^5
random arguments over its domain (``tests/test_fast_math.py``'s table) and
compared with the default mode (libm): the most ulps apart and the share of
arguments where the two differ at all.
"""

import ctypes
import ctypes.util
import sys

import numpy as np

import fastad as fa
from fastad.compiled import native_code
from fastad.kernels import vector_ir

sys.path.insert(0, "tests")
from test_fast_math import FUNCTIONS, ulps  # noqa: E402


def arguments(name, low, high):
    rng = np.random.default_rng(len(name))
    if low > 0:  # spread over the exponents
        return np.exp(rng.uniform(np.log(low), np.log(high), 100_000))
    return rng.uniform(low, high, 100_000)


def compare(op, points, example):
    plain = fa.compile(op, example=example, backend="codegen")
    fast = fa.compile(op, example=example, backend="codegen", fast_math=True)
    apart = ulps(fast(points), plain(points))
    return f"{int(apart.max())} ({(apart > 0).mean() * 100:.0f}%)"


def main():
    host = native_code.fast_math()
    library = ctypes.CDLL(ctypes.util.find_library("mvec") or "libmvec.so.1")
    for lanes in (2, 4, 8):
        if lanes > host.lanes:
            continue
        functions = tuple(
            name
            for name in host.functions
            if hasattr(library, vector_ir.vector_symbol(name, lanes))
        )
        native_code.fast_math = lambda lanes=lanes, functions=functions: native_code.Vectors(
            lanes, functions
        )
        found = [
            f"{name} {compare(op, arguments(name, *domain)[:, None], np.array([0.5]))}"
            for name, op, domain in FUNCTIONS
        ]
        rng = np.random.default_rng(5)
        pairs = np.column_stack([rng.uniform(0.01, 10.0, 50_000), rng.uniform(-20, 20, 50_000)])
        for name, op in (("pow", lambda a, b: a**b), ("atan2", fa.arctan2)):
            found.append(f"{name} {compare(op, pairs, np.array([1.5, 2.0]))}")
        print(f"{lanes} lanes: most ulps from libm (share of arguments that differ)")
        print("  " + "; ".join(found))


if __name__ == "__main__":
    main()
