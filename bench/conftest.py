"""One BLAS thread for every contender, and the settings recorded in the JSON.

fastad's fused kernels call BLAS through Numba (SciPy's OpenBLAS), the
NumPy references through NumPy's own OpenBLAS, PyTorch through its own
pool: left alone, each sizes its pool to every core, so a comparison would
time whoever threads best, and on a busy 2-core machine a threaded BLAS
call waits for a descheduled thread (``bench/threads.py`` measures it). A
BLAS library reads its variable once, when it is loaded, so they are set
here, before any benchmark module imports NumPy; ``setdefault`` keeps a
value the caller chose (``bench/report.py`` sets them for its subprocess).

NUMBA_NUM_THREADS is left alone: the ``batch`` group times fastad's own
``threads=2`` path on purpose, and Numba's OpenMP layer passes its thread
count to every parallel region, so OMP_NUM_THREADS does not cap it.

The effective settings (the variables, each loaded BLAS pool's size where
``threadpoolctl`` is installed, Numba's and torch's thread counts) go into
the benchmark JSON's ``machine_info["threads"]``.
"""

import os
import sys

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
BLAS_THREADS = "1"

# Too late for the variables if something (a plugin) has loaded NumPy
# already: then threadpoolctl, where installed, limits the pools instead.
_NUMPY_WAS_LOADED = "numpy" in sys.modules
for _name in BLAS_THREAD_VARIABLES:
    os.environ.setdefault(_name, BLAS_THREADS)

try:
    import threadpoolctl
except ImportError:  # optional: the variables alone do it in the usual case
    threadpoolctl = None

if _NUMPY_WAS_LOADED and threadpoolctl is not None:
    _LIMITS = threadpoolctl.threadpool_limits(int(os.environ["OPENBLAS_NUM_THREADS"]), "blas")


def thread_settings():
    """What a benchmark run's threads are: variables, pools, Numba, torch."""
    settings = {
        name: os.environ.get(name) for name in (*BLAS_THREAD_VARIABLES, "NUMBA_NUM_THREADS")
    }
    settings["numpy_loaded_before_conftest"] = _NUMPY_WAS_LOADED
    if threadpoolctl is not None:
        # SciPy's OpenBLAS (Numba's np.dot) is loaded with scipy.linalg.
        import scipy.linalg  # noqa: F401

        settings["pools"] = [
            {key: pool.get(key) for key in ("internal_api", "prefix", "num_threads", "filepath")}
            for pool in threadpoolctl.threadpool_info()
        ]
    else:
        settings["pools"] = "threadpoolctl not installed"
    numba = sys.modules.get("numba")
    if numba is not None:
        settings["numba_num_threads"] = numba.config.NUMBA_NUM_THREADS
    torch = sys.modules.get("torch")
    if torch is not None:
        settings["torch_num_threads"] = torch.get_num_threads()
    return settings


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["threads"] = thread_settings()


def pytest_report_header(config):
    values = ", ".join(f"{name}={os.environ.get(name)}" for name in BLAS_THREAD_VARIABLES)
    late = " (NumPy was loaded before bench/conftest.py)" if _NUMPY_WAS_LOADED else ""
    return f"fastad bench: {values}{late}"
