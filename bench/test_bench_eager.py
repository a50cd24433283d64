"""The ``eager_ops`` group: one block op on a tape, recording and backward, per op.

``python -m pytest bench -k eager``. Each case (``bench/eager_ops.py``)
checks its chain's loss and gradients once against NumPy with
hand-written gradients (1e-12 relative), which also warms the JIT, then
times either recording the chain (``phase="record"``) or its
``backward()`` alone (``phase="backward"``, each round on a chain
recorded in the round's setup, outside the timing). ``us_per_op`` in
``extra_info`` is the best round over the chain's length.
"""

import eager_ops
import numpy as np
import pytest

RTOL = 1e-12
ROUNDS = 200
CASES = [(op, phase) for op in eager_ops.OPS for phase in ("record", "backward")]


@pytest.mark.parametrize("op, phase", CASES, ids=[f"{op}-{phase}" for op, phase in CASES])
def test_eager_op(benchmark, op, phase):
    inputs = eager_ops.chain_inputs()
    loss, grads = eager_ops.gradients(op, *inputs)
    want_loss, want_grads = eager_ops.numpy_chain(op, *inputs)
    assert loss == pytest.approx(want_loss, rel=RTOL)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.abs(want).max())
    benchmark.group = "eager ops"
    benchmark.extra_info.update(op=op, phase=phase, chain=eager_ops.CHAIN)
    if phase == "record":
        benchmark.pedantic(eager_ops.record_chain, args=(op, *inputs), rounds=ROUNDS)
    else:

        def recorded():
            return (eager_ops.record_chain(op, *inputs)[0],), {}

        benchmark.pedantic(lambda L: L.backward(), setup=recorded, rounds=ROUNDS)
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_op"] = benchmark.stats.stats.min * 1e6 / eager_ops.CHAIN
