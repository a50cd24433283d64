"""fastad's compiled kernels (installed as ``fastad.kernels``).

``jit`` holds the one decorator with the Numba options, ``optable`` the op
table, ``sweeps`` the forward/backward sweeps and the rules generated from
the table. Kernels trust their input; validation lives in ``fastad``.
"""
