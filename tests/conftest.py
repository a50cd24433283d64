import numpy as np
import pytest
from hypothesis import settings

import fastad
from fastad._install_check import require_regular_package

# Before any test module imports fastad: a folder named fastad without
# __init__.py ahead of the editable install would otherwise surface as
# "module 'fastad' has no attribute 'sin'" in every test file.
require_regular_package(fastad)

# Seeded, reproducible property tests: the same examples on every run.
settings.register_profile("fastad", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("fastad")


@pytest.fixture
def rng():
    return np.random.default_rng(20261130)
