"""The performance report: every performance target beside its reference, in one run.

Usage (from a clone, after the README's test set-up)::

    python bench/report.py [--full] [--json bench/results.json] [--plot bench/fused.png]

Runs the pytest-benchmark suite in ``bench/`` (a quick subset by default,
about a minute on 2 cores; ``--full`` for every size), printing one
progress line per case, writes pytest-benchmark's JSON, then prints a table
of each performance target: what fastad measured, the reference measured
in the same run (or the figure measured on the reference machine where it is not
installed, and then marked so), the ratio, the goal and pass/short. With
matplotlib installed it also draws scalar-node vs blocks vs fused
throughput against layer size (log-log).

The linear+ReLU rows time what a user calls: ``fa.linear_relu`` recorded
on a fresh tape, a scalar loss, ``backward()`` and the ``.grad`` reads,
against the NumPy composition (forward and hand-written backward). The
fused kernels without a tape and the unfused ``fa.relu(X @ W + b)`` have
rows of their own, and the long-lived-tape row compares late with early
steps of one training loop that never resets its tape.

The eager-op rows (``test_bench_eager.py``) give what one block op costs on
a tape, recording and backward, per op, on small arrays; the (8, 64, 64)
layer on a tape also runs against PyTorch float64 eager.

The small-model rows (``test_bench_models.py``) time one training step of
a 64 -> 128 -> 10 MLP (fastad eager and compiled against NumPy by hand and
PyTorch float64, "torch absent" where it is not installed), logistic
regression's value and gradient, and the fused cross-entropy against the
faster of two compositions from blocks.

The exact-zero rows run the same cases on data with exact zeros
(``bench/data.py``: half the inputs 0 and some whole columns 0, or
digit-like images), each against its dense row and against its peer on
the same data: finite data must take no slow path.

Every contender runs on one BLAS thread: the pytest subprocess gets
OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and MKL_NUM_THREADS = 1, and
``bench/conftest.py`` records what the run's pools really had (with
threadpoolctl installed) in the JSON, printed above the table.
``bench/threads.py`` shows why: a threaded BLAS on a busy 2-core machine.

Figures are ratios measured side by side; absolute times drift with the
machine and its load.
"""

import argparse
import datetime
import itertools
import json
import os
import pathlib
import platform
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
CASADI_QUOTED_NS_PER_NODE = 14.7  # CasADi's SX VM, measured on the reference machine on 2026-11-30
CASADI_QUOTED_LATENCY_US = 17.8
MICROGRAD_QUOTED_NS_PER_NODE = 8800.0
LAYER_ROW_NAMES = {
    "fused": "linear_relu on a tape, fwd+bwd",
    "fused_shared": "linear_relu on a tape, leaves without a copy, fwd+bwd",
    "compiled": "linear_relu compiled (generated), fwd+bwd",
    "kernels": "fused layer rule alone, no tape",
    "blocks": "relu(X @ W + b) on a tape",
}


# Every contender on one BLAS thread: NumPy's OpenBLAS, SciPy's (which
# Numba's np.dot in fastad's fused kernels calls), MKL where NumPy has it,
# and OpenMP pools (torch's; bench/models.py sets torch's own pool to 1).
# Set, not defaulted: a report compares code, not thread pools. Numba's
# threads are left alone (the batch rows time fastad's threads=2 on purpose).
BLAS_THREAD_VARIABLES = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def run_suite(json_path, full):
    env = dict(os.environ, **BLAS_THREAD_VARIABLES)
    if not full:
        env["FASTAD_BENCH_QUICK"] = "1"
    print("threads:", " ".join(f"{k}={v}" for k, v in BLAS_THREAD_VARIABLES.items()))
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(HERE),
        "-v",
        "-p",
        "no:cacheprovider",
        "--benchmark-only",
        f"--benchmark-json={json_path}",
        "--benchmark-max-time=0.5",
        "--benchmark-min-rounds=3",
        "--benchmark-columns=min,rounds",
        "--benchmark-sort=name",
    ]
    print("running:", " ".join(command[1:]), flush=True)
    process = subprocess.run(command, env=env, cwd=HERE, text=True, stdout=subprocess.PIPE)
    for line in process.stdout.splitlines():
        if "::" in line and ("PASSED" in line or "FAILED" in line):
            print("  " + line.split("::", 1)[1], flush=True)
        elif line.startswith("SKIPPED") and "non-benchmark" not in line:
            print("  " + line, flush=True)  # e.g. CasADi not installed
    if process.returncode != 0:
        print(process.stdout[-4000:])
        raise SystemExit(f"the benchmark suite failed (exit {process.returncode})")
    return json.loads(pathlib.Path(json_path).read_text())


def index(results):
    """{(test function name, parameters string): extra_info + min seconds}."""
    table = {}
    for bench in results["benchmarks"]:
        info = dict(bench["extra_info"])
        info["seconds"] = bench["stats"]["min"]
        table[bench["name"]] = info
    return table


def find(table, prefix, **wanted):
    for name, info in sorted(table.items()):
        if name.startswith(prefix) and all(info.get(k) == v for k, v in wanted.items()):
            return info
    return None


def rows(table):
    """(target, fastad, reference, ratio, goal, passed) per performance target."""
    out = []

    def add(target, fastad, reference, ratio, goal, passed):
        out.append((target, fastad, reference, ratio, goal, passed))

    replay = find(table, "test_replay_compiled", nodes=10**5)
    casadi = find(table, "test_replay_casadi", nodes=10**5)
    if replay:
        ns = replay["ns_per_node"]
        ref, note = (
            (casadi["ns_per_node"], "CasADi SX")
            if casadi
            else (CASADI_QUOTED_NS_PER_NODE, "CasADi SX, quoted")
        )
        add(
            "replay value+grad, random DAG 1e5 nodes",
            f"{ns:.1f} ns/node",
            f"{ref:.1f} ns/node ({note})",
            ns / ref,
            "<= 0.5",
            ns / ref <= 0.5,
        )
    record = find(table, "test_record_backward_fastad")
    micrograd = find(table, "test_record_backward_micrograd")
    if record and micrograd:
        ratio = record["ns_per_node"] / micrograd["ns_per_node"]
        add(
            "recording + backward (eager)",
            f"{record['ns_per_node']:.0f} ns/node",
            f"{micrograd['ns_per_node']:.0f} ns/node (micrograd-style)",
            ratio,
            "<= 0.125",
            ratio <= 0.125,
        )
    _batch_rows(table, add)
    # linear+ReLU fwd+bwd against the NumPy composition of the same run.
    # The fused rows are what a user calls (fa.linear_relu on a fresh tape,
    # loss, backward, .grad); the kernels alone are the floor under them.
    for way, size, goal in (
        ("fused", (8, 64, 64), 1.0),
        ("fused", (64, 512, 1024), 1.05),
        ("fused_shared", (8, 64, 64), 1.0),
        ("fused_shared", (64, 512, 1024), 1.05),
        ("kernels", (8, 64, 64), 0.5),
        ("blocks", (8, 64, 64), 1.5),
        ("compiled", (8, 64, 64), 1.0),
        ("compiled", (64, 512, 1024), 1.0),
    ):
        _layer_row(table, add, way, size, goal, "dense")
    _torch_layer_row(table, add, (8, 64, 64), 0.5)
    _torch_layer_row(table, add, (8, 64, 64), 0.5, "fused_shared")
    _eager_op_rows(table, add)
    _exact_zero_layer_rows(table, add)
    loop = find(table, "test_long_lived_tape")
    if loop and "late_over_early" in loop:
        (a, b), (c, d) = loop["late_steps"], loop["early_steps"]
        ratio = loop["late_over_early"]
        add(
            f"long-lived tape, steps {a}-{b} vs {c}-{d}",
            f"{loop['late_us_per_step']:.0f} us/step",
            f"{loop['early_us_per_step']:.0f} us/step (steps {c}-{d})",
            ratio,
            "<= 1.2",
            ratio <= 1.2,
        )
    _model_rows(table, add)
    _exact_zero_model_rows(table, add)
    _second_rows(table, add)
    _gp_rows(table, add)
    _einsum_rows(table, add)
    _dask_rows(table, add)
    memory = find(table, "test_memory_per_node")
    if memory:
        b = memory["bytes_per_node"]
        add("memory per scalar node, finished tape", f"{b:.0f} B", "-", b / 32, "<= 32 B", b <= 32)
    startup = find(table, "test_import_and_first_call")
    if startup:
        s = startup["seconds_in_process"]
        add("import + first call, warm Numba cache", f"{s:.2f} s", "-", s, "<= 1 s", s <= 1.0)
    return out


def _batch_rows(table, add):
    """Example 2 at 10^6 points, one point, the Jacobian and the pendulum, both tiers."""
    numpy_batch = find(table, "test_batch_numpy[", points=10**6)
    columns = find(table, "test_batch_numpy_columns[", points=10**6)
    limit = find(table, "test_batch_limit", points=10**6)
    for tier in ("codegen", "interpret"):
        one = find(table, "test_batch_fastad", points=10**6, threads=1, backend=tier)
        two = find(table, "test_batch_fastad", points=10**6, threads=2, backend=tier)
        if not one:
            continue
        name = f"example 2 value+grad, 1e6 points, 1 thread, {tier}"
        if limit:
            ratio = one["ns_per_point"] / limit["ns_per_point"]
            add(
                name,
                f"{one['ns_per_point']:.1f} ns/pt",
                f"{limit['ns_per_point']:.1f} ns/pt (straight-line @njit, by hand)",
                ratio,
                "<= 1.3",
                ratio <= 1.3,
            )
        for reference, label, goal in (
            (columns, "NumPy, (6, N)", 0.35),
            (numpy_batch, "NumPy, (N, 6)", 0.35),
        ):
            if reference:
                ratio = one["ns_per_point"] / reference["ns_per_point"]
                add(
                    f"  ... against {label}",
                    f"{one['ns_per_point']:.1f} ns/pt",
                    f"{reference['ns_per_point']:.1f} ns/pt ({label})",
                    ratio,
                    f"<= {goal}",
                    ratio <= goal,
                )
        if two and two.get("threads") == 2:
            speedup = one["ns_per_point"] / two["ns_per_point"]
            add(
                "  ... speed-up on 2 threads",
                f"{two['ns_per_point']:.1f} ns/pt",
                f"{one['ns_per_point']:.1f} ns/pt (1 thread)",
                speedup,
                ">= 1.8",
                speedup >= 1.8,
            )
    fast = find(table, "test_batch_fastad_fast_math[", points=10**6)
    fast_out = find(table, "test_batch_fastad_fast_math_out", points=10**6)
    columns_out = find(table, "test_batch_numpy_columns_out", points=10**6)
    if fast_out and columns_out:
        ratio = fast_out["ns_per_point"] / columns_out["ns_per_point"]
        add(
            "example 2 value+grad, 1e6 points, 1 thread, fast math, out=",
            f"{fast_out['ns_per_point']:.1f} ns/pt",
            f"{columns_out['ns_per_point']:.1f} ns/pt (NumPy, (6, N), out=)",
            ratio,
            "<= 0.35",
            ratio <= 0.35,
        )
    if fast:
        for reference, label, goal in (
            (columns, "NumPy, (6, N)", 0.35),
            (limit, "straight-line @njit, by hand", None),
        ):
            if reference:
                ratio = fast["ns_per_point"] / reference["ns_per_point"]
                add(
                    "example 2 value+grad, 1e6 points, 1 thread, codegen, fast math"
                    if goal
                    else "  ... against the straight-line limit",
                    f"{fast['ns_per_point']:.1f} ns/pt",
                    f"{reference['ns_per_point']:.1f} ns/pt ({label})",
                    ratio,
                    f"<= {goal}" if goal else "",
                    ratio <= goal if goal else "a reference",
                )
    casadi_latency = find(table, "test_latency_casadi")
    for tier in ("codegen", "interpret"):
        latency = find(table, "test_latency_value_and_grad", backend=tier)
        if latency:
            us = latency["us_per_call"]
            ref = (
                f"{casadi_latency['us_per_call']:.1f} us (CasADi)"
                if casadi_latency
                else f"{CASADI_QUOTED_LATENCY_US} us (CasADi, quoted)"
            )
            add(
                f"one-point value+grad, example 2, {tier}",
                f"{us:.2f} us",
                ref,
                us,
                "<= 1 us",
                us <= 1.0,
            )
    jax = find(table, "test_jacobian_jax")
    for tier in ("codegen", "interpret"):
        jacobian = find(table, "test_jacobian_fastad", backend=tier)
        if jacobian and jax:
            ratio = jacobian["ns_per_point"] / jax["ns_per_point"]
            add(
                f"Jacobian 10 -> 10, 1e4 points, {tier}",
                f"{jacobian['ns_per_point']:.0f} ns/pt",
                f"{jax['ns_per_point']:.0f} ns/pt (JAX jit(vmap(jacfwd)))",
                ratio,
                "<= 1.5",
                ratio <= 1.5,
            )
        elif jacobian:
            add(
                f"Jacobian 10 -> 10, 1e4 points, {tier}",
                f"{jacobian['ns_per_point']:.0f} ns/pt",
                "JAX not installed",
                None,
                "<= 1.5 x JAX",
                None,
            )
    pendulum = find(table, "test_pendulum[", requested="auto")
    interpreted = find(table, "test_pendulum[", requested="interpret")
    if pendulum and interpreted:
        speedup = interpreted["ns_per_point"] / pendulum["ns_per_point"]
        add(
            f"RK4 pendulum, {pendulum['nodes']} nodes, value+grad, auto -> {pendulum['backend']}",
            f"{pendulum['ns_per_point'] / 1e3:.1f} us/pt",
            f"{interpreted['ns_per_point'] / 1e3:.1f} us/pt (interpreter)",
            speedup,
            ">= 3x the interpreter",
            speedup >= 3.0,
        )


def _second_rows(table, add):
    """HVPs and Hessians against value+grad of the same function (one run), Newton-CG."""
    for tier in ("codegen", "interpret"):
        for function in ("example2", "rosenbrock"):
            hvp = find(table, "test_second_hvp[", function=function, backend=tier)
            vg = find(table, "test_second_value_and_grad", function=function, backend=tier)
            if hvp and vg:
                ratio = hvp["ns_per_point"] / vg["ns_per_point"]
                add(
                    f"HVP, {function}, 1e5 points, 1 thread, {tier}",
                    f"{hvp['ns_per_point']:.0f} ns/pt",
                    f"{vg['ns_per_point']:.0f} ns/pt (value+grad, same function)",
                    ratio,
                    "<= 3",
                    ratio <= 3.0,
                )
        hessian = find(table, "test_second_hessian", backend=tier)
        vg = find(table, "test_batch_fastad", points=10**6, threads=1, backend=tier)
        if hessian and vg:
            ratio = hessian["ns_per_point"] / vg["ns_per_point"] / hessian["k"]
            add(
                f"Hessian, example 2 (k = 6), 1e6 points, {tier}",
                f"{hessian['ns_per_point']:.0f} ns/pt",
                f"{vg['ns_per_point']:.1f} ns/pt (value+grad), per k",
                ratio,
                "<= 2.5 per k",
                ratio <= 2.5,
            )
        latency = find(table, "test_second_latency", call="hvp", backend=tier)
        if latency:
            us = latency["us_per_call"]
            add(
                f"one-point f.hvp, example 2, {tier}", f"{us:.2f} us", "-", us, "<= 3 us", us <= 3.0
            )
    jax = find(table, "test_second_hvp_jax")
    codegen = find(table, "test_second_hvp[", function="example2", backend="codegen")
    if jax and codegen:
        ratio = codegen["ns_per_point"] / jax["ns_per_point"]
        add(
            "  ... HVP example 2, codegen against JAX",
            f"{codegen['ns_per_point']:.0f} ns/pt",
            f"{jax['ns_per_point']:.0f} ns/pt (JAX jit(vmap(jvp of grad)))",
            ratio,
            "-",
            "a peer, no goal",
        )
    for tier in ("codegen", "interpret"):  # a function of arrays, both tiers
        _ratio_row(
            add,
            f"HVP, tanh net 256x64x128x10 (function of arrays), {tier}",
            find(table, "test_array_transforms", call="hvp", backend=tier),
            find(table, "test_array_transforms", call="value_and_grad", backend=tier),
            "value+grad, same function",
            3,
        )
    _ratio_row(
        add,
        "  ... HVP, tanh net, codegen against NumPy by hand",
        find(table, "test_array_transforms", call="hvp", backend="codegen"),
        find(table, "test_array_hvp_numpy"),
        "NumPy forward-over-reverse by hand",
        1.0,
    )
    newton = find(table, "test_newton_against_lbfgs", method="Newton-CG")
    lbfgs = find(table, "test_newton_against_lbfgs", method="L-BFGS-B")
    if newton and lbfgs:
        add(
            "Newton-CG (hessp=f.hessp) on logistic regression, to |grad| <= 1e-6",
            f"{newton['iterations']} iterations, {newton['seconds'] * 1e3:.1f} ms",
            f"{lbfgs['iterations']} iterations, {lbfgs['seconds'] * 1e3:.1f} ms (L-BFGS-B)",
            newton["iterations"] / lbfgs["iterations"],
            "fewer iterations",
            newton["iterations"] < lbfgs["iterations"],
        )


def _gp_rows(table, add):
    """The Gaussian process's likelihood with its gradient (bench/test_bench_linalg.py)."""
    mine = find(table, "test_gp_value_and_grad", way="fastad")
    jax = find(table, "test_gp_value_and_grad", way="jax")
    target = "GP marginal likelihood value+grad, n=500, fastad / "
    _ratio_row(add, target + "JAX jit", mine, jax, "JAX jit", 1.5)
    by_hand = find(table, "test_gp_value_and_grad", way="numpy")
    if mine and by_hand:  # the fastest layout by hand, shown beside it (no target set)
        ratio = mine["seconds"] / by_hand["seconds"]
        add(
            target + "NumPy and SciPy by hand",
            _layer_time(mine["seconds"]),
            f"{_layer_time(by_hand['seconds'])} (NumPy and SciPy by hand)",
            ratio,
            "none set",
            True,
        )


def _einsum_rows(table, add):
    """np.einsum on blocks, forward pass, against np.einsum(optimize=True)
    (bench/test_bench_einsum.py)."""
    contractions = {
        info["contraction"]: info["spec"]
        for name, info in table.items()
        if name.startswith("test_einsum_forward")
    }
    for contraction, spec in sorted(contractions.items()):
        numpy = find(table, "test_einsum_forward", way="numpy", contraction=contraction)
        for way, what in (
            ("eager", "on a tape"),
            ("eager_shared", "on a tape, leaves without a copy"),
            ("compiled", "compiled"),
        ):
            mine = find(table, "test_einsum_forward", way=way, contraction=contraction)
            target = f"einsum {spec!r} ({contraction}), {what}, forward / NumPy"
            _ratio_row(add, target, mine, numpy, "np.einsum, optimize=True", 1.2)


def _model_rows(table, add):
    """The small-model targets (bench/test_bench_models.py), each against the same run."""
    numpy_step = find(table, "test_mlp", way="numpy", data="dense")
    for way, goal in (("eager", 1.0), ("compiled", 0.8)):
        _ratio_row(
            add,
            f"MLP 64-128-10 step, B=256, fastad {way} / NumPy",
            find(table, "test_mlp", way=way, data="dense"),
            numpy_step,
            "NumPy",
            goal,
        )
    torch_step = find(table, "test_mlp", way="torch", data="dense")
    for way, goal in (("eager", 1.0), ("compiled", 0.5)):
        mine = find(table, "test_mlp", way=way, data="dense")
        if mine and torch_step:
            ratio = mine["seconds"] / torch_step["seconds"]
            add(
                f"MLP step, fastad {way} / PyTorch float64",
                _layer_time(mine["seconds"]),
                f"{_layer_time(torch_step['seconds'])} (torch {torch_step['torch']}, 1 thread)",
                ratio,
                f"<= {goal}",
                ratio <= goal,
            )
        elif mine:
            add(
                f"MLP step, fastad {way} / PyTorch float64",
                _layer_time(mine["seconds"]),
                "-",
                None,
                f"<= {goal}",
                "torch absent",
            )
    numpy_logreg = find(table, "test_logreg", way="numpy", data="dense")
    for way in ("compiled", "fast_math"):
        _ratio_row(
            add,
            f"logreg value+grad 2000x20, {way.replace('_', ' ')} / NumPy",
            find(table, "test_logreg", way=way, data="dense"),
            numpy_logreg,
            "NumPy",
            1.0,
        )
    sizes = sorted(
        {(i["B"], i["c"]) for n, i in table.items() if n.startswith("test_cross_entropy")}
    )
    for B, c in sizes:
        fused = find(table, "test_cross_entropy", way="fused", data="dense", B=B, c=c)
        composed = [
            info
            for way in ("log_softmax", "primitives")
            if (info := find(table, "test_cross_entropy", way=way, data="dense", B=B, c=c))
        ]
        if fused and composed:
            best = min(composed, key=lambda info: info["seconds"])  # the faster composition
            ratio = fused["seconds"] / best["seconds"]
            add(
                f"cross_entropy {B}x{c} fwd+bwd, fused / composed",
                _layer_time(fused["seconds"]),
                f"{_layer_time(best['seconds'])} (composed, {best['way']})",
                ratio,
                "< 1",
                "fused faster" if ratio < 1 else "SHORT",
            )
        _ratio_row(
            add,
            f"cross_entropy {B}x{c} fwd+bwd, compiled / NumPy",
            find(table, "test_cross_entropy", way="compiled", data="dense", B=B, c=c),
            find(table, "test_cross_entropy", way="numpy", data="dense", B=B, c=c),
            "NumPy",
            1.0,
        )


def _zero_data_row(add, what, data, fastad, reference, fastad_dense, reference_dense):
    """One row: fastad's ratio to its reference on ``data``, over the same ratio on dense
    data. The reference runs the same data, so what the data do to BLAS and to the
    ReLU pattern cancels, and what is left is what exact zeros cost fastad."""
    if not (fastad and reference and fastad_dense and reference_dense):
        return
    on_data = fastad["seconds"] / reference["seconds"]
    on_dense = fastad_dense["seconds"] / reference_dense["seconds"]
    add(
        f"  ... {what}, {data} data: ratio to NumPy over the dense ratio",
        f"{_layer_time(fastad['seconds'])} ({on_data:.2f}x NumPy)",
        f"{on_dense:.2f}x NumPy on dense data",
        on_data / on_dense,
        "<= 1.1",
        on_data / on_dense <= 1.1,
    )


def _ratio_row(add, target, mine, theirs, reference, goal):
    """One row: ``mine``'s time over ``theirs`` (results of :func:`find`, None: no row),
    ``reference`` naming the second, against the goal ``ratio <= goal``."""
    if not (mine and theirs):
        return
    ratio = mine["seconds"] / theirs["seconds"]
    add(
        target,
        _layer_time(mine["seconds"]),
        f"{_layer_time(theirs['seconds'])} ({reference})",
        ratio,
        f"<= {goal}",
        ratio <= goal,
    )


def _layer_row(table, add, way, size, goal, data):
    """linear+ReLU fwd+bwd, one way against the NumPy composition on the same data
    (the compiled way, which returns the loss for H, against NumPy returning the same)."""
    B, n, h = size
    on = "" if data == "dense" else ", half-zero inputs"
    reference = "numpy_loss" if way == "compiled" else "numpy"
    _ratio_row(
        add,
        f"{LAYER_ROW_NAMES[way]} {B}x{n}x{h}{on}",
        find(table, "test_fused", way=way, data=data, B=B, n=n, h=h),
        find(table, "test_fused", way=reference, data=data, B=B, n=n, h=h),
        ("NumPy" if data == "dense" else "NumPy, same data")
        + (", with the loss" if way == "compiled" else ""),
        goal,
    )


def _torch_layer_row(table, add, size, goal, way="fused"):
    """linear+ReLU on a tape (what a user calls) against PyTorch float64 eager."""
    B, n, h = size
    mine = find(table, "test_fused", way=way, data="dense", B=B, n=n, h=h)
    theirs = find(table, "test_fused", way="torch", data="dense", B=B, n=n, h=h)
    shared = ", leaves without a copy" if way == "fused_shared" else ""
    target = f"linear_relu on a tape{shared} {B}x{n}x{h} / PyTorch eager"
    if mine and theirs:
        _ratio_row(add, target, mine, theirs, "PyTorch float64, 1 thread", goal)
    elif mine:
        add(target, _layer_time(mine["seconds"]), "-", None, f"<= {goal}", "torch absent")


EAGER_OP_GOAL_US = 5.0


def _eager_op_rows(table, add):
    """One block op on a tape, recording and backward, in microseconds per op."""
    ops = sorted({info["op"] for name, info in table.items() if name.startswith("test_eager_op")})
    for op in ops:
        record = find(table, "test_eager_op", op=op, phase="record")
        backward = find(table, "test_eager_op", op=op, phase="backward")
        if not (record and backward):
            continue
        worst = max(record["us_per_op"], backward["us_per_op"])
        add(
            f"eager {op} on (8, 16): record / backward, per op",
            f"{record['us_per_op']:.1f} / {backward['us_per_op']:.1f} us",
            "-",
            worst / EAGER_OP_GOAL_US,
            f"<= {EAGER_OP_GOAL_US:g} us each",
            worst <= EAGER_OP_GOAL_US,
        )


def _exact_zero_layer_rows(table, add):
    """linear+ReLU on inputs with exact zeros, each way against NumPy on the same data."""
    _layer_row(table, add, "fused", (64, 512, 1024), 1.05, "zeros")
    for way in ("fused", "kernels", "blocks", "compiled"):
        for B, n, h in ((8, 64, 64), (64, 512, 1024)):

            def at(way, data, B=B, n=n, h=h):
                return find(table, "test_fused", way=way, data=data, B=B, n=n, h=h)

            reference = "numpy_loss" if way == "compiled" else "numpy"
            _zero_data_row(
                add,
                f"{way} {B}x{n}x{h}",
                "half-zero",
                at(way, "zeros"),
                at(reference, "zeros"),
                at(way, "dense"),
                at(reference, "dense"),
            )


def _exact_zero_model_rows(table, add):
    """The models on data with exact zeros: each against NumPy on the same data over
    its dense ratio, and the peers on the same data."""
    for test, way in (
        ("test_mlp", "eager"),
        ("test_mlp", "compiled"),
        ("test_logreg", "compiled"),
        ("test_logreg", "fast_math"),
    ):
        for data in ("zeros", "digits"):
            _zero_data_row(
                add,
                f"{test[5:]} {way}",
                data,
                find(table, test, way=way, data=data),
                find(table, test, way="numpy", data=data),
                find(table, test, way=way, data="dense"),
                find(table, test, way="numpy", data="dense"),
            )
    sizes = sorted(
        {(i["B"], i["c"]) for n, i in table.items() if n.startswith("test_cross_entropy")}
    )
    for (B, c), way in itertools.product(sizes, ("fused", "compiled")):
        _zero_data_row(
            add,
            f"cross_entropy {way} {B}x{c}",
            "zeros",
            find(table, "test_cross_entropy", way=way, data="zeros", B=B, c=c),
            find(table, "test_cross_entropy", way="numpy", data="zeros", B=B, c=c),
            find(table, "test_cross_entropy", way=way, data="dense", B=B, c=c),
            find(table, "test_cross_entropy", way="numpy", data="dense", B=B, c=c),
        )
    for data, peer, goal in (("zeros", "torch", 1.0), ("digits", "numpy", 1.2)):
        _ratio_row(
            add,
            f"MLP step on {data} data, fastad eager / {peer}",
            find(table, "test_mlp", way="eager", data=data),
            find(table, "test_mlp", way=peer, data=data),
            f"{peer}, same data",
            goal,
        )


def _layer_time(seconds):
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def print_table(rows_):
    header = ("target", "fastad", "reference (same run)", "ratio", "goal", "")
    widths = [max(len(str(r[i])) for r in [header, *[_cells(r) for r in rows_]]) for i in range(6)]
    for row in [header, *[_cells(r) for r in rows_]]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _cells(row):
    target, fastad, reference, ratio, goal, passed = row
    if isinstance(passed, str):  # a verdict in words: "torch absent", "fused faster"
        verdict = passed
    else:
        verdict = "pass" if passed else "SHORT"
    return target, fastad, reference, "-" if ratio is None else f"{ratio:.3g}", goal, verdict


def plot(table, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no plot)")
        return
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for way in ("scalars", "blocks", "fused", "kernels", "numpy"):
        points = sorted(
            (info["B"] * info["n"] * info["h"], info["gflops"])
            for name, info in table.items()
            if name.startswith("test_fused")
            and info.get("way") == way
            and info.get("data") == "dense"
            and "gflops" in info
        )
        if points:
            axes.loglog(*zip(*points, strict=True), marker="o", label=way)
    axes.set_xlabel("layer size B*n*h (multiply-adds)")
    axes.set_ylabel("GFLOP/s, forward + backward")
    axes.set_title("linear+ReLU: scalar nodes vs blocks vs fused")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot written to {path}")


def _dask_rows(table, add):
    """fastad.dask on a 2-worker LocalCluster against one local thread, and per-chunk cost."""
    dask = find(table, "test_dask_value_and_grad")
    if dask and "speedup" in dask:
        add(
            f"fastad.dask value_and_grad, {dask['points']:,} points, 2 workers x 1 thread",
            f"{dask['ns_per_point']:.0f} ns/pt",
            f"{dask['reference_ns_per_point']:.0f} ns/pt (one local thread)",
            dask["speedup"],
            ">= 1.6x",
            dask["speedup"] >= 1.6,
        )
    overhead = find(table, "test_dask_overhead_per_chunk")
    if overhead and "overhead_ms_per_chunk" in overhead:
        ms = overhead["overhead_ms_per_chunk"]
        add(
            f"fastad.dask overhead per chunk ({overhead['chunks']} chunks of "
            f"{overhead['points_per_chunk']} points)",
            f"{ms:.1f} ms",
            "-",
            ms,
            "<= 5 ms",
            ms <= 5.0,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="every size, not the quick subset")
    parser.add_argument("--json", default=str(HERE / "results.json"))
    parser.add_argument("--plot", default=str(HERE / "fused.png"))
    args = parser.parse_args(argv)
    import numba
    import numpy

    print(f"fastad performance report, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python "
        f"{platform.python_version()}, numpy {numpy.__version__}, numba {numba.__version__}"
    )
    results = run_suite(args.json, args.full)
    table = index(results)
    threads = results.get("machine_info", {}).get("threads")
    if threads:  # recorded by bench/conftest.py: what the run's pools really had
        pools = threads.get("pools")
        if isinstance(pools, list):
            pools = ", ".join(
                f"{p['prefix']} ({pathlib.Path(p['filepath']).parent.name}) {p['num_threads']}"
                for p in pools
            )
        torch_threads = threads.get("torch_num_threads")
        print(
            f"\nthread pools in the run: {pools}; Numba threads {threads.get('numba_num_threads')}"
            + ("" if torch_threads is None else f", torch threads {torch_threads}")
        )
    print()
    print_table(rows(table))
    print(f"\nbenchmark JSON: {args.json}")
    plot(table, args.plot)


if __name__ == "__main__":
    main()
