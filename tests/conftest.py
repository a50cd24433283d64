import importlib.util
import pathlib

import numpy as np
import pytest
from hypothesis import settings

# Seeded, reproducible property tests: the same examples on every run.
settings.register_profile("fastad", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("fastad")


EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load_example(name):
    """``examples/<name>.py`` as a module, for the tests of an example."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session", autouse=True)
def interpreter_compiled():
    """The lanes interpreter compiled (or loaded) before any test: ``backend="auto"``
    starts on generated code only while it is cold, and the tests of the tiers must not
    depend on which test ran first."""
    import fastad as fa

    fa.compile(lambda x: 2.0 * x, backend="interpret").value_and_grad(np.ones((2, 1)))


@pytest.fixture
def rng():
    return np.random.default_rng(20261130)
