"""The compiled-kernel cache is invalidated by a change to any kernel file.

Numba stamps a cache entry with its defining file only; fastad's kernels call
helpers and rules defined in other files of ``kernels/``, so ``jit.py`` stamps
every kernel of that folder with a hash of all of its files.
"""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fastad.kernels import jit, tape_sweeps

KERNELS_FOLDER = Path(jit.__file__).parent
TIMEOUT_S = 300


def fresh_stamp(folder):
    """``kernels_source_stamp`` read anew (the function caches its answer per folder)."""
    return jit.kernels_source_stamp.__wrapped__(str(folder))


def copy_of_kernels(target):
    shutil.copytree(KERNELS_FOLDER, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_stamp_changes_when_any_one_kernel_file_changes(tmp_path):
    folder = copy_of_kernels(tmp_path / "kernels")
    stamp = fresh_stamp(folder)
    assert stamp == fresh_stamp(KERNELS_FOLDER)  # contents, not the folder's path
    files = sorted(folder.glob("*.py"))
    assert len(files) > 10
    for path in files:
        text = path.read_text()
        path.write_text(text.replace("\n", "\n ", 1) if text else " ")
        assert fresh_stamp(folder) != stamp, path.name
        path.write_text(text)
        os.utime(path, (0, 0))  # the same content at another time: the same stamp
        assert fresh_stamp(folder) == stamp, path.name
    (folder / "extra.py").write_text("")
    assert fresh_stamp(folder) != stamp


def test_kernels_carry_the_folder_stamp():
    locator = tape_sweeps.backward_sweep._cache._impl.locator
    assert isinstance(locator, jit.KernelCacheLocator)
    assert locator.get_source_stamp() == ("fastad.kernels", jit.kernels_source_stamp())


# Runs forward_sweep (tape_sweeps.py) on relu (point_rules.py calls
# rule_helpers.relu) from a copy of the kernels, and reports the value and the
# cache hits as JSON on its last line.
PROBE = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from copied_kernels import optable, tape_sweeps
opcode = np.array([optable.BY_NAME["input"].code, optable.BY_NAME["relu"].code], np.uint8)
in0 = np.array([-1, 0], np.int32)
in1 = np.array([-1, -1], np.int32)
val = np.array([2.0, 0.0])
tape_sweeps.forward_sweep(opcode, in0, in1, val, 0, 2)
stats = tape_sweeps.forward_sweep.stats
print(json.dumps({"value": val[1], "hits": sum(stats.cache_hits.values())}))
"""


@pytest.mark.slow
def probe_json(script, cache, *arguments, drop=("NUMBA_DISABLE_JIT",)):
    """The JSON that ``script`` prints last, run in a new process with ``cache`` as
    fastad's cache folder and the variables in ``drop`` removed; it must succeed."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env[jit.CACHE_DIR_VARIABLE] = str(cache)
    result = subprocess.run(
        [sys.executable, "-c", script, *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_editing_a_helper_recompiles_the_kernels_that_call_it(tmp_path):
    site = tmp_path / "site"
    folder = copy_of_kernels(site / "copied_kernels")

    def probe():
        return probe_json(
            PROBE, tmp_path / "cache", str(site), drop=("PYTHONPATH", "NUMBA_DISABLE_JIT")
        )

    assert probe() == {"value": 2.0, "hits": 0}
    assert probe() == {"value": 2.0, "hits": 1}  # the cache works
    helpers = folder / "rule_helpers.py"
    signature = "def relu(a: float) -> float:\n"
    text = helpers.read_text()
    assert text.count(signature) == 1
    helpers.write_text(text.replace(signature, signature + "    return 7.0\n"))
    # Only rule_helpers.py changed; forward_sweep's own file did not.
    assert probe() == {"value": 7.0, "hits": 0}


LAZY_PROBE = """
import ast
import json
import numpy as np
import fastad as fa
from fastad.kernels import map_rules, optable

with fa.Tape():
    X = fa.var(np.linspace(0.1, 1.0, 6))
    fa.tanh(X).sum().backward()
compiled = {
    kind: sorted(optable.ALL[code].name for code, k in table.items() if k.signatures)
    for kind, table in (("forward", map_rules.FORWARD), ("vjp", map_rules.VJP))
}
print(json.dumps(compiled))
"""


def test_elementwise_kernels_compile_only_for_the_ops_a_program_runs(tmp_path):
    # One kernel per op and kind: a fresh process that runs tanh on a block has
    # compiled (or loaded) tanh's forward and VJP kernels and no other op's.
    compiled = probe_json(LAZY_PROBE, tmp_path / "cache")
    assert compiled == {"forward": ["tanh"], "vjp": ["tanh"]}


def _kernel_names(trees):
    """The names of the functions decorated with ``@kernel`` (bare or with options)."""
    names = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(
                (isinstance(d, ast.Name) and d.id == "kernel")
                or (isinstance(d, ast.Call) and getattr(d.func, "id", "") == "kernel")
                for d in node.decorator_list
            ):
                names.add(node.name)
    return names


def test_kernels_call_kernels_without_int_or_bool_constants():
    # A constant argument is typed Literal[int](0) (or Literal[bool]) and compiles the
    # callee once more beside the int64 of a call from Python: 0.3-1.5 s on a cold cache.
    trees = {path.name: ast.parse(path.read_text()) for path in KERNELS_FOLDER.glob("*.py")}
    kernels = _kernel_names(trees)
    assert {"backward_sweep", "backward_range", "pairwise", "pairwise_block"} <= kernels
    found = []
    for name, tree in trees.items():
        for caller in ast.walk(tree):
            if not (isinstance(caller, ast.FunctionDef) and caller.name in kernels):
                continue
            for call in ast.walk(caller):
                callee = getattr(call, "func", None)
                if not (isinstance(call, ast.Call) and isinstance(callee, ast.Name)):
                    continue
                constants = [
                    a
                    for a in call.args
                    if isinstance(a, ast.Constant) and type(a.value) in (int, bool)
                ]
                if callee.id in kernels and constants:
                    found.append(f"{name}:{call.lineno} {ast.unparse(call)}")
    assert not found, found


def test_a_kernel_with_signatures_compiles_them_once_and_converts_writable_arrays():
    import numpy as np
    from numba import types

    readonly = types.Array(types.float64, 1, "C", readonly=True)

    @jit.kernel(signatures=(types.float64(readonly),), cache=False)
    def total(x):
        return x.sum()

    writable = np.arange(4.0)
    frozen = writable.copy()
    frozen.flags.writeable = False
    assert total(writable) == total(frozen) == 6.0
    assert total.signatures == [(readonly,)]  # one compile, the writable call converted
    with pytest.raises(TypeError):  # and no other: nothing compiles for a 2-D array
        total(np.ones((2, 2)))


def test_the_products_kernels_have_one_signature_each():
    from fastad.kernels import products

    for name in ("product", "counted_product", "linear", "matmul_vjp", "linear_relu_vjp"):
        assert len(getattr(products, name).signatures) == 1, name
