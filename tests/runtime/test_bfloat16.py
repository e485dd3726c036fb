"""bfloat16 in the NumPy runtime (``flexrt.kernels.bfloat16``): float32 arrays of bfloat16 values.

- the rounding equals a conversion to bfloat16 (round to nearest even; infinities and NaNs kept),
  bit for bit against ml_dtypes where it is installed and on hand-made cases everywhere;
- a bfloat16 model's weights, outputs and gradients hold bfloat16 values, its weights train through
  float32 masters (no loss scaling: bfloat16 has float32's range);
- the law in bfloat16: any strategy trains to one device's weights within four bfloat16 ulps
  (partial results are summed in float32 before rounding, so summation order rounds differently),
  and bfloat16 training differs from float32 training by more than float32's rounding;
- the runtime's measured peak memory equals the replay (the masters counted).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import DataType
from flexrt.ir.precision import with_precision
from flexrt.kernels.bfloat16 import is_bfloat16_valued, to_bfloat16
from flexrt.machine import load_machine
from flexrt.runtime.session import Session
from flexrt.strategy import data_parallel

from .test_central_law import MODELS, batch, strategy_of, weights_for
from .test_memory_peak import check_serial_exact
from .test_mixed_precision import max_rel

MACHINE = load_machine("dgx1_v100")
F32 = DataType.DT_FLOAT
ULPS4 = 4 * 2.0 ** -8


def test_rounding_ties_to_even_and_keeps_special_values():
    x = np.array([1.0, 1 + 2 ** -9, 1 + 2 ** -8, 1 + 3 * 2 ** -9, 1 + 2 ** -8 + 2 ** -20, -2.5, 0.0, -0.0,
                  np.inf, -np.inf, 3.4e38, 1e-45], np.float32)
    got = to_bfloat16(np, x)
    assert got[:6].tolist() == [1.0, 1.0, 1.0, 1 + 2 ** -7, 1 + 2 ** -7, -2.5]    # ties to even, else nearest
    assert np.signbit(got[7]) and got[6] == 0 and got[8] == np.inf and got[9] == -np.inf
    assert got[10] == np.inf                      # past the largest bfloat16 (about 3.39e38)
    assert got[11] == 1e-45 or got[11] == 0.0     # subnormals round like the others
    assert np.isnan(to_bfloat16(np, np.array([np.nan, -np.nan], np.float32))).all()
    assert is_bfloat16_valued(np, got[np.isfinite(got)]) and not is_bfloat16_valued(np, x)


@settings(max_examples=50)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1, max_size=64))
def test_rounding_equals_a_bfloat16_conversion(values):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array(values, np.float32)
    got, want = to_bfloat16(np, x), x.astype(ml_dtypes.bfloat16).astype(np.float32)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all()


def bf16_model(model: str):
    m, loss = MODELS[model](F32)
    return with_precision(m.pcg, "bf16"), loss


def train(pcg, loss, strategy, steps=3, **params):
    s = Session(strategy, MACHINE, loss=loss, weights=weights_for(pcg, F32), **({"lr": 0.05} | params))
    inputs, labels = batch(pcg, loss)
    return s, [s.step(inputs, labels) for _ in range(steps)]


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", ["data", "hybrid", "1f1b"])
def test_bfloat16_strategies_train_like_one_device_within_four_ulps(model, kind):
    pcg, loss = bf16_model(model)
    one, _ = train(pcg, loss, data_parallel(pcg, MACHINE, 1))
    other, results = train(pcg, loss, strategy_of(kind, pcg, MACHINE))
    assert other.executor.scaler is None and not any(r.skipped for r in results)
    w = other.executor.weights()
    assert all(is_bfloat16_valued(np, v) for v in w.values())
    assert max_rel(w, one.executor.weights()) <= ULPS4


def test_bfloat16_rounds_what_float32_keeps():
    pcg, loss = bf16_model("mlp")
    m, _ = MODELS["mlp"](F32)
    s, _ = train(pcg, loss, data_parallel(pcg, MACHINE, 2), momentum=0.9)
    f, _ = train(m.pcg, loss, data_parallel(m.pcg, MACHINE, 2), momentum=0.9)
    w16, w32 = s.executor.weights(), f.executor.weights()
    assert 1e-5 < max_rel(w16, w32) < 0.05
    masters = {k[0].name: st["master"] for k, st in s.executor.opt_state.items() if "master" in st}
    assert set(masters) == set(w16)              # every weight trains through a float32 master
    for name, master in masters.items():
        assert np.array_equal(to_bfloat16(np, master), w16[name]) and not is_bfloat16_valued(np, master)
    s.executor.forward(batch(pcg, loss)[0])
    out = s.executor.read_output(s.loss_output)
    assert is_bfloat16_valued(np, out)


@pytest.mark.parametrize("model, kind", [("mlp", "data"), ("transformer", "hybrid")])
def test_measured_peak_equals_the_replay_in_bfloat16(model, kind):
    pcg, loss = bf16_model(model)
    s = Session(strategy_of(kind, pcg, MACHINE), MACHINE, loss=loss, weights=weights_for(pcg, F32), lr=0.05,
                momentum=0.9)
    check_serial_exact(s, *batch(pcg, loss))
