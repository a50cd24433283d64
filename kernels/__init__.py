"""fastad's compiled kernels (installed as ``fastad.kernels``).

``jit`` holds the one decorator with the Numba options and the cache,
``optable`` the op table, ``arrays`` the arrays the kernels take and
``strong_zeros`` what an edge sends. Generated from the table
(``_generate``): ``rule_helpers``, ``point_rules``, ``lane_rules``,
``lane_second_rules``, ``map_rules``, ``map_tangent_rules`` and
``map_second_rules``. Written by hand: ``tape_sweeps`` (the sweeps over a
tape), ``graph_marks`` (ancestors and descendants), ``lane_sweeps`` (compiled
functions' interpreter), ``block_reach`` (exact zeros of block products),
``fused`` (fused layers), ``blas`` (NumPy's BLAS for generated code), and
the text of generated code: ``scalar_source`` (scalar programs) and the
``array_*`` modules (functions of arrays). Kernels trust their input;
validation lives in ``fastad``.
"""
