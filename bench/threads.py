"""The threading trap: the MLP step under every BLAS x Numba thread setting.

Usage (from a clone, after the README's test set-up)::

    python bench/threads.py [--steps 300] [--busy both|no|yes] [--json out.json]

Runs the MLP training step of ``bench/models.py`` (64 -> 128 -> 10, batch
256, float64) in a fresh subprocess for each combination of
OPENBLAS_NUM_THREADS in {1, 2, unset} and NUMBA_NUM_THREADS in {1, 2,
unset} (OMP_NUM_THREADS and MKL_NUM_THREADS removed, so "unset" is each
library's default: one thread per core), and prints microseconds per step,
median and best, for four ways:

- ``numpy alone``: the hand-written NumPy step in a process of its own,
  where NumPy's OpenBLAS is the only BLAS loaded;
- ``numpy``: the same step in the process that also runs the next two;
- ``eager``: fastad eager (its products are NumPy's, through the same
  OpenBLAS; until 2026-12-01 its fused kernels called SciPy's OpenBLAS
  through Numba's ``np.dot``, a second BLAS with a pool of its own, which
  is what made the threaded rows 10-80x slower; the bias, ReLU, softmax
  backward and strong-zero passes are Numba kernels);
- ``mixed``: the eager step followed by a Numba-parallel call, fastad's
  compiled example 2 on 20 000 points with ``threads`` = Numba's thread
  count: a step that alternates BLAS pools and Numba's OpenMP pool, where
  one pool's threads still spin while the other's want the cores.

The last three are interleaved step by step in one process. Each setting
runs twice with ``--busy both`` (the default): on its own, and beside a
second process that keeps one core busy (a spinning Python loop), as an
editor, a browser or a second job does on a laptop. The "other load"
column is what /proc/stat says the machine's cores did besides the
measured process (the spinner included), since a shared machine's own
load drifts. Before the table it checks that OPENBLAS_NUM_THREADS takes
effect: the CPU time over wall time of a large matmul in a subprocess with
1 and with 2 threads, and the pool's size where threadpoolctl is
installed (it is optional; each row prints every loaded pool's size too).
"""

import argparse
import contextlib
import json
import os
import pathlib
import resource
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
SETTINGS = ("1", "2", None)  # None: unset
CLEARED = ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
MIXED_POINTS = 20_000
MIN_STEPS = 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def child_environment(openblas, numba):
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    if openblas is not None:
        env["OPENBLAS_NUM_THREADS"] = openblas
    if numba is not None:
        env["NUMBA_NUM_THREADS"] = numba
    return env


def pools():
    """{library (where it lies): pool size} from threadpoolctl, or None without it."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    import scipy.linalg  # noqa: F401  (SciPy's OpenBLAS: the one Numba's np.dot calls)

    found = {}
    for info in threadpoolctl.threadpool_info():
        path = pathlib.Path(info["filepath"])
        where = path.parent.name if "site-packages" in path.parts else str(path.parent)
        found[f"{info['prefix']} ({where})"] = info["num_threads"]
    return found


def child_steps(names, steps, budget):
    """In the subprocess: time the three ways, interleaved; print one JSON line."""
    sys.path.insert(0, str(HERE))
    import models
    import numba
    import numpy as np
    from example2 import example_2, random_points

    import fastad as fa

    inputs = models.mlp_inputs(*models.MLP_SIZE)
    expected = models.numpy_mlp(*inputs)
    compiled = fa.compile(example_2, example=np.array([0.5, 1.2, -0.3, 0.8, 0.1, 1.0]))
    points = random_points(MIXED_POINTS, seed=0)
    threads = numba.get_num_threads()

    def mixed():
        models.eager_mlp(*inputs)
        compiled.value_and_grad(points, threads=threads)

    ways = {
        "numpy": lambda: models.numpy_mlp(*inputs),
        "eager": lambda: models.eager_mlp(*inputs),
        "mixed": mixed,
    }
    ways = {name: ways[name] for name in names}
    if "eager" in ways:
        loss, _ = models.eager_mlp(*inputs)
        assert abs(loss - expected[0]) <= 1e-10 * abs(expected[0])
    for _ in range(20):  # warm the JIT, the caches and every pool
        for way in ways.values():
            way()
    seconds = {name: [] for name in ways}
    clock = time.perf_counter
    stop = clock() + budget
    for step in range(steps):
        if step >= MIN_STEPS and clock() > stop:  # a bad setting takes 50 ms a step
            break
        for name, way in ways.items():
            start = clock()
            way()
            seconds[name].append(clock() - start)
    result = {
        name: {"median_us": float(np.median(s)) * 1e6, "min_us": float(np.min(s)) * 1e6}
        for name, s in seconds.items()
    }
    result["numba_threads"] = threads
    result["steps"] = len(seconds["numpy"])
    result["pools"] = pools()
    print(json.dumps(result))


MATMUL_CHECK = """
import json, time, numpy as np
a = np.random.default_rng(0).normal(size=(1500, 1500))
a @ a
c, w = time.process_time(), time.perf_counter()
for _ in range(5):
    a @ a
found = {"cpu_over_wall": (time.process_time() - c) / (time.perf_counter() - w),
         "ms": (time.perf_counter() - w) / 5 * 1e3, "pool": "threadpoolctl not installed"}
try:
    import threadpoolctl
    found["pool"] = [i["num_threads"] for i in threadpoolctl.threadpool_info()]
except ImportError:
    pass
print(json.dumps(found))
"""


def check_blas_threads():
    """Does OPENBLAS_NUM_THREADS take effect? CPU time / wall time of a big matmul."""
    print("OPENBLAS_NUM_THREADS takes effect? a 1500x1500 matmul in a fresh process:")
    for openblas in ("1", "2"):
        output = subprocess.run(
            [sys.executable, "-c", MATMUL_CHECK],
            env=child_environment(openblas, None),
            capture_output=True,
            text=True,
            check=True,
        )
        found = json.loads(output.stdout)
        print(
            f"  OPENBLAS_NUM_THREADS={openblas}: {found['ms']:.0f} ms, "
            f"CPU time / wall time {found['cpu_over_wall']:.2f}, pool size {found['pool']}"
        )


@contextlib.contextmanager
def busy_core(on):
    """A second process spinning on one core while the block runs (or nothing)."""
    if not on:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # let it start spinning
        yield
    finally:
        spinner.kill()  # the one process started above, by its handle
        spinner.wait()


def busy_cpu_seconds():
    """CPU seconds every core of the machine has spent busy so far (Linux), or None."""
    try:
        fields = pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def run_setting(openblas, numba, steps, budget):
    """The ways timed together in one process, and NumPy's step in a process of its own."""
    found = run_child(openblas, numba, steps, budget, "numpy,eager,mixed")
    alone = run_child(openblas, numba, steps, budget, "numpy")
    found["numpy_alone"] = alone["numpy"]
    found["pools_alone"] = alone["pools"]
    found["other_load"] = max(found["other_load"], alone["other_load"])
    return found


def run_child(openblas, numba, steps, budget, ways):
    """One subprocess's measurements, and the load beside it (cores busy with other work)."""
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", "--ways", ways]
    before, start = busy_cpu_seconds(), time.perf_counter()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = subprocess.run(
        [*command, "--steps", str(steps), "--seconds", str(budget)],
        env=child_environment(openblas, numba),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    if output.returncode != 0:
        raise SystemExit(f"the child failed:\n{output.stderr[-3000:]}")
    found = json.loads(output.stdout.strip().splitlines()[-1])
    if before is not None:
        own = sum(
            getattr(children, f) - getattr(children_before, f) for f in ("ru_utime", "ru_stime")
        )
        found["other_load"] = (busy_cpu_seconds() - before - own) / wall
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="timed steps per way and setting")
    parser.add_argument("--busy", choices=("both", "no", "yes"), default="both")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="time budget per setting (at least 20 steps)"
    )
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ways", default="numpy,eager,mixed", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_steps(args.ways.split(","), args.steps, args.seconds)
        return
    print(f"{os.cpu_count()} CPUs (os.cpu_count), {len(os.sched_getaffinity(0))} usable")
    check_blas_threads()
    loads = {"both": (False, True), "no": (False,), "yes": (True,)}[args.busy]
    results = []
    # Busy and quiet side by side for each setting, so that the machine's
    # own load, which drifts, hits both alike.
    for openblas in SETTINGS:
        for numba in SETTINGS:
            for busy in loads:
                with busy_core(busy):
                    found = run_setting(openblas, numba, args.steps, args.seconds)
                found.update(openblas=openblas, numba=numba, busy=busy)
                results.append(found)
                print(f"  {_row(found)}", flush=True)
    print()
    print_table(results)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


def _label(value):
    return "unset" if value is None else value


def _row(found):
    cells = "  ".join(
        f"{way} {found[way]['median_us']:7.0f} ({found[way]['min_us']:5.0f})"
        for way in ("numpy_alone", "numpy", "eager", "mixed")
    )
    return (
        f"OPENBLAS={_label(found['openblas']):5s} NUMBA={_label(found['numba']):5s} "
        f"busy={'yes' if found['busy'] else 'no ':3s}  {cells}  other load "
        f"{found.get('other_load', float('nan')):.2f} cores, pools {found['pools']}"
    )


def print_table(results):
    print("us/step, median (best) of the interleaved steps; NUMBA: Numba's thread count")
    print("other load: cores busy with anything but the measured process (the spinner included)")
    header = [
        "OPENBLAS",
        "NUMBA",
        "busy core",
        "other load",
        "numpy alone",
        "numpy",
        "fastad eager",
        "eager + Numba-parallel",
    ]
    lines = [header]
    for found in results:
        lines.append(
            [
                _label(found["openblas"]),
                f"{_label(found['numba'])} ({found['numba_threads']})",
                "yes" if found["busy"] else "no",
                f"{found.get('other_load', float('nan')):.2f}",
                *(
                    f"{found[way]['median_us']:.0f} ({found[way]['min_us']:.0f})"
                    for way in ("numpy_alone", "numpy", "eager", "mixed")
                ),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


if __name__ == "__main__":
    main()
