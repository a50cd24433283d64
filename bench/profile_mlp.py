"""Where the fastad eager MLP step spends its time: phases, then a cProfile.

Usage: ``python bench/profile_mlp.py [--steps 400]`` (one BLAS thread, as
the benchmarks: it sets the variables before NumPy loads unless they are
set already).

The step is ``models.eager_mlp`` cut into its phases, each timed with
``perf_counter`` over many steps (median and best): the tape and the four
``fa.var`` leaves, each recorded op (which computes its forward at once),
``backward()``, the ``.grad`` reads. Beside them, the NumPy step's own
pieces as the floor (its two large products are most of it). Then a
cProfile of whole steps, by own time and by cumulative time of the block
rules' ``vjp``, naming the kernels where the backward goes.
"""

import argparse
import cProfile
import os
import pathlib
import pstats
import sys
import time

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import models  # noqa: E402
import numpy as np  # noqa: E402

import fastad as fa  # noqa: E402

PHASES = ("tape + 4 leaves", "linear_relu", "linear", "cross_entropy", "backward", ".grad reads")


def eager_phases(W1, b1, W2, b2, X, y):
    """One eager step, returning each phase's seconds."""
    clock = time.perf_counter
    t0 = clock()
    with fa.Tape():
        params = [fa.var(a) for a in (W1, b1, W2, b2)]
        t1 = clock()
        H = fa.linear_relu(X, params[0], params[1])
        t2 = clock()
        logits = fa.linear(H, params[2], params[3])
        t3 = clock()
        L = fa.cross_entropy(logits, y)
        t4 = clock()
        L.backward()
        t5 = clock()
        for p in params:
            p.grad  # noqa: B018  (the read is what is timed)
        t6 = clock()
    return np.diff([t0, t1, t2, t3, t4, t5, t6])


def numpy_pieces(W1, b1, W2, b2, X, y):
    """The NumPy step's BLAS calls, and the step itself, in seconds."""
    clock = time.perf_counter
    H = np.maximum(X @ W1 + b1, 0.0)
    P = np.abs(H @ W2)
    times = []
    for piece in (
        lambda: X @ W1,
        lambda: H @ W2,
        lambda: P @ W2.T,
        lambda: X.T @ H,
        lambda: H.T @ P,
        lambda: models.numpy_mlp(W1, b1, W2, b2, X, y),
    ):
        start = clock()
        piece()
        times.append(clock() - start)
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args(argv)
    inputs = models.mlp_inputs(*models.MLP_SIZE)
    for _ in range(30):  # warm the JIT and the caches
        eager_phases(*inputs)
        numpy_pieces(*inputs)
    phases = np.array([eager_phases(*inputs) for _ in range(args.steps)]) * 1e6
    pieces = np.array([numpy_pieces(*inputs) for _ in range(args.steps)]) * 1e6
    print(f"fastad eager MLP step, {args.steps} steps, us (median, best):")
    for name, column in zip(PHASES, phases.T, strict=True):
        print(f"  {name:16s} {np.median(column):7.1f}  {column.min():7.1f}")
    total = phases.sum(axis=1)
    print(f"  {'step':16s} {np.median(total):7.1f}  {total.min():7.1f}")
    print("NumPy pieces, us (median, best):")
    names = ("X @ W1", "H @ W2", "dlogits @ W2.T", "X.T @ dH", "H.T @ dlogits", "whole step")
    for name, column in zip(names, pieces.T, strict=True):
        print(f"  {name:16s} {np.median(column):7.1f}  {column.min():7.1f}")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.steps):
        models.eager_mlp(*inputs)
    profile.disable()
    stats = pstats.Stats(profile)
    print(f"\ncProfile of {args.steps} steps (profiling inflates Python-heavy parts):")
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(r"vjp|forward\b")


if __name__ == "__main__":
    main()
