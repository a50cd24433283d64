import numpy as np
import pytest
from hypothesis import settings

# Seeded, reproducible property tests: the same examples on every run.
settings.register_profile("fastad", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("fastad")


@pytest.fixture
def rng():
    return np.random.default_rng(20261130)
