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
    from fastad.kernels import fused, jit, sweeps
    with fa.Tape():
        x = fa.var(2.0)
        y = fa.sin(x) * x
        y.backward()
dispatchers = {
    f"{module.__name__}.{name}": value
    for module in (sweeps, fused)
    for name, value in vars(module).items()
    if hasattr(value, "stats") and hasattr(value, "py_func")
}
root = jit.cache_directory()
print(json.dumps({
    "root": None if root is None else str(root),
    "kernels_folder": str(__import__("pathlib").Path(sweeps.__file__).parent),
    "cache_paths": {name: d.stats.cache_path for name, d in dispatchers.items()},
    "hits": sum(sweeps.backward_sweep.stats.cache_hits.values()),
    "misses": sum(sweeps.backward_sweep.stats.cache_misses.values()),
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
    assert "fastad.kernels.sweeps.sweep_points_parallel" in first["cache_paths"]
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
    shutil.copytree(REPO / "kernels", site / "fastad" / "kernels", ignore=ignore)
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
    try:
        direct_url = importlib.metadata.distribution("fastad").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return False
    editable = json.loads(direct_url or "{}").get("dir_info", {}).get("editable", False)
    return editable and FASTAD_FOLDER == REPO / "fastad"


needs_editable = pytest.mark.skipif(
    not editable_install(),
    reason="a namespace folder can only hide an editable install (a regular one wins)",
)


def make_namespace_shadow(tmp_path):
    """A folder ``fastad/`` without __init__.py, as pip leaves site-packages/fastad/."""
    shadow = tmp_path / "shadow"
    leftover = shadow / "fastad" / "kernels" / "__pycache__"
    leftover.mkdir(parents=True)
    (leftover / "sweeps.backward_sweep-1.py311.nbi").write_bytes(b"not owned by pip")
    return shadow


@needs_editable
def test_namespace_shadow_is_a_clear_import_error_in_the_command_line(tmp_path):
    shadow = make_namespace_shadow(tmp_path)
    control = run_python(["-c", "import fastad.__main__"], tmp_path, clean_env())
    assert control.returncode == 0, control.stderr

    shadowed = clean_env(PYTHONPATH=shadow)
    # Without the check this import succeeds and fails only later, obscurely.
    result = run_python(["-c", "import fastad.__main__"], tmp_path, shadowed)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError: 'import fastad' found the folder(s)"), result.stderr
    assert str(shadow / "fastad") in last_line
    assert "no __init__.py" in last_line and "Rename or remove" in last_line

    console_script = Path(sys.executable).with_name("fastad")
    if console_script.exists():
        demo = subprocess.run(
            [str(console_script), "demo"],
            cwd=tmp_path,
            env=shadowed,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert demo.returncode != 0
        assert str(shadow / "fastad") in demo.stderr and "ImportError" in demo.stderr


@needs_editable
def test_namespace_shadow_is_a_clear_import_error_in_the_test_run(tmp_path):
    shadow = make_namespace_shadow(tmp_path)
    # Collecting only this file loads tests/conftest.py first, as a full run does.
    args = ["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    args.append(str(Path(__file__).resolve()))
    result = run_python(args, tmp_path, clean_env(PYTHONPATH=shadow))
    output = result.stdout + result.stderr
    assert result.returncode not in (0, 5), output
    assert "ImportError: 'import fastad' found the folder(s)" in output, output
    assert str(shadow / "fastad") in output
    assert "has no attribute" not in output


# Imports fastad the way a non-editable install is seen: the editable finder
# removed, an installed copy (package with kernels inside) on sys.path right
# after the current directory, which `python -c` puts first.
NON_EDITABLE_IMPORT = r"""
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in f.__module__]
sys.path.insert(1, sys.argv[1])
import fastad
print(fastad.__file__, fastad.sin(0.0))
"""


def test_source_checkout_ahead_of_a_non_editable_install_is_a_clear_import_error(tmp_path):
    ignore = shutil.ignore_patterns("__pycache__")
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "fastad", checkout / "fastad", ignore=ignore)
    shutil.copytree(REPO / "kernels", checkout / "kernels", ignore=ignore)
    site = tmp_path / "site"
    shutil.copytree(REPO / "fastad", site / "fastad", ignore=ignore)
    shutil.copytree(REPO / "kernels", site / "fastad" / "kernels", ignore=ignore)
    env = clean_env(FASTAD_CACHE_DIR=tmp_path / "cache")

    # Control: from elsewhere the installed copy imports and works.
    elsewhere = run_python(["-c", NON_EDITABLE_IMPORT, str(site)], tmp_path, env)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert elsewhere.stdout.split()[0] == str(site / "fastad" / "__init__.py")

    inside = run_python(["-c", NON_EDITABLE_IMPORT, str(site)], checkout, env)
    assert inside.returncode != 0
    last_line = inside.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError: fastad was imported from "), inside.stderr
    assert str(checkout / "fastad") in last_line
    assert "source folder of a fastad checkout" in last_line
    assert "pip install -e ." in last_line and "another directory" in last_line
