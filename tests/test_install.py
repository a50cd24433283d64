"""Installation hygiene: where compiled kernels are cached, and clear shadowing errors.

Every case runs Python in a subprocess, because what is checked happens at
import time (the kernels get their cache when ``fastad.kernels`` is imported)
or depends on ``sys.path`` and the environment of a fresh interpreter.
"""

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fastad
from fastad.kernels import jit

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 180

# Imports fastad, runs one gradient (compiling the eager backward sweep) and
# reports, as JSON on its last line of output, where every kernel caches,
# what was hit, and the warnings fastad gave.
PROBE = r"""
import json, sys, warnings
if len(sys.argv) > 1:
    import tempfile
    tempfile.tempdir = sys.argv[1]  # the temporary folder fastad falls back to
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import fastad as fa
    from fastad.kernels import fused, jit, lane_sweeps, native_calls, tape_sweeps
    with fa.Tape():
        x = fa.var(2.0)
        y = fa.sin(x) * x
        y.backward()
dispatchers = {
    f"{module.__name__}.{name}": value
    for module in (tape_sweeps, lane_sweeps, fused, native_calls)
    for name, value in vars(module).items()
    if hasattr(value, "stats") and hasattr(value, "py_func")
}
root = jit.cache_directory()
print(json.dumps({
    "root": None if root is None else str(root),
    "kernels_folder": str(__import__("pathlib").Path(tape_sweeps.__file__).parent),
    "cache_paths": {name: d.stats.cache_path for name, d in dispatchers.items()},
    "hits": sum(tape_sweeps.backward_sweep.stats.cache_hits.values()),
    "misses": sum(tape_sweeps.backward_sweep.stats.cache_misses.values()),
    "grad": x.grad,
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
}))
"""


def clean_env(**settings):
    """The current environment without fastad/Python path settings, plus ``settings``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("FASTAD_CACHE_DIR", "PYTHONPATH", "PYTHONWARNINGS", "TMPDIR")
    }
    env.update({key: str(value) for key, value in settings.items()})
    return env


def run_python(args, cwd, env):
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def probe(cwd, env, tempdir=None):
    result = run_python(["-c", PROBE, *([str(tempdir)] if tempdir else [])], cwd, env)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def numba_files(folder):
    """Every Numba cache file under ``folder``, with its size and modification time."""
    return {
        str(path): (path.stat().st_size, path.stat().st_mtime_ns)
        for pattern in ("*.nbi", "*.nbc")
        for path in Path(folder).rglob(pattern)
    }


def expected_subfolder(kernels_folder):
    # Numba's user-wide key, written out independently: the folder's name
    # and the SHA-1 of its absolute path.
    digest = hashlib.sha1(str(Path(kernels_folder).absolute()).encode()).hexdigest()
    return f"{Path(kernels_folder).name}_{digest}"


KERNELS_FOLDER = Path(jit.__file__).parent
FASTAD_FOLDER = Path(fastad.__file__).parent


def test_kernels_cache_in_fastad_cache_dir_and_never_next_to_the_source(tmp_path):
    cache_root = tmp_path / "cache"
    before = {**numba_files(KERNELS_FOLDER), **numba_files(FASTAD_FOLDER)}
    env = clean_env(FASTAD_CACHE_DIR=cache_root)

    first = probe(tmp_path, env)
    assert first["warnings"] == []
    assert first["grad"] == pytest.approx(0.9092974268256817 + 2.0 * -0.4161468365471424)
    assert first["root"] == str(cache_root)
    folder = cache_root / "numba" / expected_subfolder(first["kernels_folder"])
    # Every kernel caches there, the parallel one included.
    assert first["cache_paths"], "the probe found no kernels"
    assert set(first["cache_paths"].values()) == {str(folder)}, first["cache_paths"]
    assert "fastad.kernels.native_calls.run_parallel" in first["cache_paths"]
    written = numba_files(folder)
    assert any("backward_sweep" in name and name.endswith(".nbi") for name in written), written
    assert any(name.endswith(".nbc") for name in written), written
    assert first["misses"] == 1 and first["hits"] == 0

    # A fresh process loads the sweep from that cache instead of compiling it.
    second = probe(tmp_path, env)
    assert (second["hits"], second["misses"]) == (1, 0), second
    assert second["grad"] == first["grad"]

    after = {**numba_files(KERNELS_FOLDER), **numba_files(FASTAD_FOLDER)}
    assert after == before, "Numba cache files appeared or changed next to fastad's source"


WARM_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from fastad.kernels.jit import is_warm
import twice_module
before = is_warm(twice_module.twice)
twice_module.twice(2.0)
print(json.dumps([before, is_warm(twice_module.twice),
                  sum(twice_module.twice.stats.cache_hits.values())]))
"""


def test_is_warm_tells_a_kernel_that_would_compile_from_one_that_loads(tmp_path):
    (tmp_path / "twice_module.py").write_text(
        "from fastad.kernels.jit import kernel\n\n@kernel\ndef twice(x):\n    return 2.0 * x\n"
    )
    env = clean_env(FASTAD_CACHE_DIR=tmp_path / "cache")
    runs = []
    for _ in range(2):
        result = run_python(["-c", WARM_PROBE, str(tmp_path)], tmp_path, env)
        assert result.returncode == 0, result.stderr[-2000:]
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert runs[0] == [False, True, 0]  # compiled by its first call
    assert runs[1] == [True, True, 1]  # in the cache: loaded, not compiled
    (tmp_path / "twice_module.py").write_text(
        "from fastad.kernels.jit import kernel\n\n@kernel\ndef twice(x):\n    return 3.0 * x\n"
    )
    changed = run_python(["-c", WARM_PROBE, str(tmp_path)], tmp_path, env)
    assert json.loads(changed.stdout.strip().splitlines()[-1]) == [False, True, 0]  # stale


def test_unwritable_cache_dir_falls_back_to_a_private_temp_folder(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache root's parent should be\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    before = numba_files(KERNELS_FOLDER)

    report = probe(tmp_path, clean_env(FASTAD_CACHE_DIR=blocker / "cache"), tempdir=temp)
    (fallback,) = temp.iterdir()
    assert fallback.name.startswith("fastad-")
    assert report["root"] == str(fallback)
    if hasattr(os, "getuid"):
        assert fallback.name == f"fastad-{os.getuid()}"
        assert fallback.stat().st_mode & 0o777 == 0o700
    folder = fallback / "numba" / expected_subfolder(report["kernels_folder"])
    assert any(name.endswith(".nbi") for name in numba_files(folder))
    # The user asked for a folder that does not work: one warning says so.
    assert len(report["warnings"]) == 1, report["warnings"]
    assert report["warnings"][0].startswith("RuntimeWarning: fastad: cannot use FASTAD_CACHE_DIR")
    assert str(blocker / "cache") in report["warnings"][0]
    assert str(fallback) in report["warnings"][0]
    assert numba_files(KERNELS_FOLDER) == before


def test_no_writable_folder_compiles_without_cache_and_warns_once(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("neither the cache root nor the temporary folder can be made\n")
    before = numba_files(KERNELS_FOLDER)

    report = probe(tmp_path, clean_env(FASTAD_CACHE_DIR=blocker / "cache"), tempdir=blocker)
    assert report["grad"] == pytest.approx(0.9092974268256817 + 2.0 * -0.4161468365471424)
    assert report["root"] is None
    assert set(report["cache_paths"].values()) == {None}  # Numba's NullCache
    assert len(report["warnings"]) == 1, report["warnings"]
    message = report["warnings"][0]
    assert message.startswith("RuntimeWarning: fastad: no writable cache folder")
    assert "recompile on every run" in message and "FASTAD_CACHE_DIR" in message
    assert str(blocker / "cache") in message
    assert sorted(tmp_path.iterdir()) == [blocker]
    assert numba_files(KERNELS_FOLDER) == before


def test_kernels_imported_from_a_zip_run_uncached_with_one_warning(tmp_path):
    # Numba caches only kernels whose source is a file; from a zip archive
    # every kernel would find no cache, and the user hears it once, not per kernel.
    site = tmp_path / "site"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "fastad", site / "fastad", ignore=ignore)
    archive = shutil.make_archive(str(tmp_path / "fastad"), "zip", root_dir=site)
    script = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in f.__module__]\n"
        f"sys.path.insert(0, {archive!r})\n" + PROBE
    )
    cache_root = tmp_path / "cache"
    result = run_python(["-c", script], tmp_path, clean_env(FASTAD_CACHE_DIR=cache_root))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["kernels_folder"] == str(Path(archive) / "fastad" / "kernels")
    assert report["grad"] == pytest.approx(0.9092974268256817 + 2.0 * -0.4161468365471424)
    assert set(report["cache_paths"].values()) == {None}
    assert len(report["warnings"]) == 1, report["warnings"]
    assert "is not on disk" in report["warnings"][0]
    assert "recompile on every run" in report["warnings"][0]
    assert numba_files(cache_root) == {}


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_temp_fallback_open_to_other_users_is_not_used(tmp_path):
    # Numba's cache files are pickles: loading ones another user could have
    # written would run their code, so a group/world-writable folder is refused.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x\n")
    temp = tmp_path / "tmp"
    shared = temp / f"fastad-{os.getuid()}"
    shared.mkdir(parents=True)
    shared.chmod(0o777)

    report = probe(tmp_path, clean_env(FASTAD_CACHE_DIR=blocker / "cache"), tempdir=temp)
    assert report["root"] is None
    assert len(report["warnings"]) == 1, report["warnings"]
    assert "writable by other users" in report["warnings"][0]
    assert list(shared.iterdir()) == []


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the Linux (XDG) layout")
def test_default_cache_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("FASTAD_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jit.default_cache_directory() == tmp_path / "xdg" / "fastad"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # invalid per the XDG spec
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert jit.default_cache_directory() == tmp_path / "home" / ".cache" / "fastad"
    monkeypatch.setenv("FASTAD_CACHE_DIR", str(tmp_path / "mine"))
    assert jit.default_cache_directory() == tmp_path / "mine"


def editable_install():
    """True when the fastad being tested is this checkout, installed editable."""
    # Every distribution named fastad: the checkout's own fastad.egg-info, which
    # records no install, is found first when the checkout is the current folder.
    editable = any(
        json.loads(dist.read_text("direct_url.json") or "{}")
        .get("dir_info", {})
        .get("editable", False)
        for dist in importlib.metadata.distributions(name="fastad")
    )
    return editable and FASTAD_FOLDER == REPO / "fastad"


def test_leftover_fastad_folder_does_not_hide_the_editable_install(tmp_path):
    # pip leaves site-packages/fastad/ behind when it holds files pip does not own
    # (Numba cache files, say). The editable install is a plain path (.pth), so
    # Python's path scan finds the regular package and ignores the namespace folder.
    if not editable_install():
        pytest.skip("the editable install of this checkout is what this checks")
    shadow = tmp_path / "shadow"
    leftover = shadow / "fastad" / "kernels" / "__pycache__"
    leftover.mkdir(parents=True)
    (leftover / "tape_sweeps.backward_sweep-1.py311.nbi").write_bytes(b"not owned by pip")
    probe = "import fastad, fastad.__main__; print(fastad.__file__, fastad.sin(0.0))"
    result = run_python(["-c", probe], tmp_path, clean_env(PYTHONPATH=shadow))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(REPO / "fastad" / "__init__.py"), "0.0"]


NON_EDITABLE_IMPORT = r"""
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in f.__module__]
sys.path.insert(1, sys.argv[1])
import fastad
print(fastad.__file__, fastad.sin(0.0))
"""


def test_checkout_whose_kernels_link_is_a_plain_file_is_a_clear_import_error(tmp_path):
    # Where git makes no symbolic links it writes fastad/kernels as a text file
    # holding the link's target.
    ignore = shutil.ignore_patterns("__pycache__", "kernels")
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "fastad", checkout / "fastad", ignore=ignore)
    shutil.copytree(
        REPO / "kernels", checkout / "kernels", ignore=shutil.ignore_patterns("__pycache__")
    )
    (checkout / "fastad" / "kernels").write_text("../kernels")
    env = clean_env(FASTAD_CACHE_DIR=tmp_path / "cache")

    # Control: with the link in place the same checkout imports and works.
    linked = tmp_path / "linked"
    shutil.copytree(checkout, linked, ignore=shutil.ignore_patterns("kernels"))
    shutil.copytree(
        REPO / "kernels", linked / "kernels", ignore=shutil.ignore_patterns("__pycache__")
    )
    (linked / "fastad" / "kernels").symlink_to("../kernels")
    works = run_python(["-c", NON_EDITABLE_IMPORT, str(tmp_path / "nowhere")], linked, env)
    assert works.returncode == 0, works.stderr
    assert works.stdout.split()[0] == str(linked / "fastad" / "__init__.py")

    inside = run_python(["-c", NON_EDITABLE_IMPORT, str(tmp_path / "nowhere")], checkout, env)
    assert inside.returncode != 0
    last_line = inside.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError: fastad was imported from "), inside.stderr
    assert str(checkout / "fastad") in last_line
    assert "symbolic link to ../kernels" in last_line and "core.symlinks" in last_line
