"""Mixed precision (``flexrt.ir.precision``, ``kernels.optimizers.master_step`` / ``LossScaler``,
``simulator.precision_lowering``):

- the model transformation: every floating tensor 16-bit, integer tensors kept, names and wiring kept;
- the simulator: 16-bit kernels at the devices' tensor-core peaks, half the activation bytes, float32
  master weights and optimizer state in memory, and an overflow check that every update waits for;
- the law in float16: any strategy trains to one device's weights within two float16 ulps (2e-3
  relative: summation order rounds differently), with float32 master weights that keep updates
  smaller than an ulp;
- dynamic loss scaling: an overflowing step is skipped on every device (weights bit-identical) and
  the scale halves; the runtime's peak memory equals the simulator's replay.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from flexrt.cli import main
from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import ConfigError
from flexrt.ir.precision import Precision, with_precision
from flexrt.kernels.optimizers import LossScaler
from flexrt.machine import load_machine
from flexrt.runtime.session import Session
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy import data_parallel

from .test_central_law import MODELS, batch, strategy_of, weights_for
from .test_memory_peak import check_serial_exact

MACHINE = load_machine("dgx1_v100")
F32 = DataType.DT_FLOAT
ULPS2 = 2 * 2.0 ** -10


def half_model(model: str):
    m, loss = MODELS[model](F32)
    return with_precision(m.pcg, "fp16"), loss


def train(pcg, loss, strategy, steps=3, loss_scale=256, mode="serial", **params):
    s = Session(strategy, MACHINE, loss=loss, weights=weights_for(pcg, F32), mode=mode, loss_scale=loss_scale,
                **({"lr": 0.05} | params))
    inputs, labels = batch(pcg, loss)
    results = [s.step(inputs, labels) for _ in range(steps)]
    return s, results


def max_rel(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))))
               / max(float(np.max(np.abs(b[k].astype(np.float64)))), 1e-30) for k in b)


def test_with_precision_makes_floating_tensors_16_bit_and_keeps_the_rest():
    m, _ = MODELS["dlrm"](F32)
    for p, dt in ((Precision.FP16, DataType.DT_HALF), (Precision.BF16, DataType.DT_BFLOAT16)):
        half = with_precision(m.pcg, p)
        assert [n.name for n in half.nodes] == [n.name for n in m.pcg.nodes]
        for a, b in zip(m.pcg.nodes, half.nodes):
            for k, s in enumerate(m.pcg.output_shapes(a.id)):
                t = half.output_shapes(b.id)[k]
                assert t.tensor_shape.dims == s.tensor_shape.dims
                assert t.tensor_shape.dtype == (dt if s.tensor_shape.dtype.is_floating else s.tensor_shape.dtype)
    assert with_precision(m.pcg, "fp32") is m.pcg
    with pytest.raises(ConfigError, match="valid: fp32, fp16, bf16"):
        with_precision(m.pcg, "fp8")


def big_mlp(batch=256, width=2048):
    m = FFModel(FFConfig(["-b", str(batch)]))
    t = m.create_tensor([batch, width], F32)
    for i in range(3):
        t = m.dense(t, width, ActiMode.AC_MODE_RELU, name=f"fc{i}")
    m.softmax(m.dense(t, 16, name="head"), name="sm")
    return m.pcg


def test_simulator_times_16_bit_kernels_at_tensor_core_peaks_and_counts_master_weights():
    a100 = load_machine("dgx_a100")
    sim = Simulator(a100, AnalyticCostModel(), "adam")
    pcg = big_mlp(batch=4096)

    def kernels(result):      # forward and backward time: what the tensor cores speed up
        return sum(t.exe_s for t in sim.graph.tasks.values() if t.kind in (TaskKind.FORWARD, TaskKind.BACKWARD))
    full = sim.full(data_parallel(pcg, a100, 8))
    full_kernels = kernels(full)
    half = sim.full(data_parallel(with_precision(pcg, "bf16"), a100, 8))
    assert kernels(half) < full_kernels / 8                     # 312 vs 19.5 TFLOP/s
    for d in range(8):
        f, h = full.memory_bytes[d], half.memory_bytes[d]
        assert 2 * h["activations"] == f["activations"] and 2 * h["weights"] == f["weights"]
        assert h["optimizer_state"] == (2 + 1) * 2 * h["weights"]  # Adam's two moments and the master, float32
        assert f["optimizer_state"] == 2 * f["weights"]
    checks = [t for t in sim.graph.tasks.values() if t.name.startswith("overflow check")]
    assert len(checks) == 8
    updates = [tid for tid, t in sim.graph.tasks.items() if t.kind is TaskKind.UPDATE]
    start = dict(zip(half.timeline["ids"].tolist(), half.timeline["start"].tolist()))
    end = dict(zip(half.timeline["ids"].tolist(), half.timeline["end"].tolist()))
    last_check = max(end[tid] for tid, t in sim.graph.tasks.items() if t.name.startswith("overflow check"))
    assert min(start[u] for u in updates) >= last_check


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", ["data", "hybrid", "1f1b"])
def test_float16_strategies_train_like_one_device_within_two_ulps(model, kind):
    pcg, loss = half_model(model)
    one, _ = train(pcg, loss, data_parallel(pcg, MACHINE, 1))
    other, results = train(pcg, loss, strategy_of(kind, pcg, MACHINE))
    assert not any(r.skipped for r in results)
    w = other.executor.weights()
    assert all(v.dtype == np.float16 for v in w.values())
    assert max_rel(w, one.executor.weights()) <= ULPS2


@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_default_dynamic_scale_skips_the_same_steps_on_one_device_and_many(model):
    """GradScaler's 2^16 is past float16's largest value (65504): the loss gradient is scaled in float32,
    then rounded. Scaled in float16 it was infinite on one device (scale x 1) but finite on four
    (scale / 4 each), so only one device skipped its steps."""
    pcg, loss = half_model(model)
    one, r1 = train(pcg, loss, data_parallel(pcg, MACHINE, 1), loss_scale=None)
    other, r4 = train(pcg, loss, data_parallel(pcg, MACHINE, 4), loss_scale=None)
    assert [r.skipped for r in r1] == [r.skipped for r in r4]
    assert one.executor.scaler.scale == other.executor.scaler.scale
    assert max_rel(other.executor.weights(), one.executor.weights()) <= ULPS2


def test_master_weights_keep_updates_smaller_than_an_ulp():
    pcg, loss = half_model("mlp")
    s, _ = train(pcg, loss, data_parallel(pcg, MACHINE, 2), steps=1, lr=1e-5)
    w1 = s.executor.weights()
    inputs, labels = batch(pcg, loss)
    for _ in range(40):
        s.step(inputs, labels)
    masters = {k[0].name: st["master"] for k, st in s.executor.opt_state.items() if "master" in st}
    assert masters and all(v.dtype == np.float32 for v in masters.values())
    w = s.executor.weights()
    moved = [k for k in w if np.any(w[k] != w1[k])]
    assert moved                                      # steps of 1e-5 x grad, each below half an ulp, added up
    for name, master in masters.items():    # data parallel: every instance is the whole weight
        assert master.shape == w[name].shape and np.array_equal(master.astype(np.float16), w[name])


@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_dynamic_loss_scaling_skips_overflowing_steps_everywhere_and_backs_off(mode):
    pcg, loss = half_model("transformer")
    s = Session(strategy_of("hybrid", pcg, MACHINE), MACHINE, loss=loss, weights=weights_for(pcg, F32), mode=mode,
                lr=0.05)
    s.executor.scaler = LossScaler(2.0 ** 40, growth_interval=3)
    inputs, labels = batch(pcg, loss)
    w0 = s.executor.weights()
    replicas0 = s.executor.weight_replicas()
    first = s.step(inputs, labels)
    assert first.skipped and s.executor.scaler.scale == 2.0 ** 39
    assert all(np.array_equal(w0[k], v) for k, v in s.executor.weights().items())
    assert all(np.array_equal(a, b) for k in replicas0 for a, b in zip(replicas0[k], s.executor.weight_replicas()[k]))
    outcomes = [True]
    for _ in range(45):               # every skip keeps every weight and halves the scale; 3 good steps double it
        before, scale, good = s.executor.weights(), s.executor.scaler.scale, s.executor.scaler.good_steps
        r = s.step(inputs, labels)
        outcomes.append(r.skipped)
        same = all(np.array_equal(before[k], v) for k, v in s.executor.weights().items())
        assert same == r.skipped
        want = scale / 2 if r.skipped else (scale * 2 if good == 2 else scale)
        assert s.executor.scaler.scale == want
    assert outcomes.count(False) >= 3 and outcomes[:8] == [True] * 8     # 2^40 overflows for a while


def test_loss_scaler_and_session_options_are_checked():
    with pytest.raises(ConfigError, match="finite number > 0"):
        LossScaler(0.0)
    with pytest.raises(ConfigError, match="growth_factor"):
        LossScaler(backoff_factor=1.5)
    for scale in (1e-40, 2.0 ** -25, 2.0 ** 65):    # 1e-40: 1 / scale is infinite in float32 and the weights went NaN
        with pytest.raises(ConfigError, match=r"outside 2\^-24 \.\. 2\^64"):
            LossScaler(scale)
    assert LossScaler(2.0 ** -24).scale == 2.0 ** -24 and LossScaler(2.0 ** 64).scale == 2.0 ** 64
    m, loss = MODELS["mlp"](F32)
    with pytest.raises(ConfigError, match="applies to models with float16 weights"):
        Session(data_parallel(m.pcg, MACHINE, 1), MACHINE, loss=loss, loss_scale=128.0)


@pytest.mark.parametrize("model, kind", [("mlp", "data"), ("transformer", "hybrid"), ("cnn", "1f1b")])
def test_measured_peak_equals_the_replay_in_float16(model, kind):
    pcg, loss = half_model(model)
    s = Session(strategy_of(kind, pcg, MACHINE), MACHINE, loss=loss, weights=weights_for(pcg, F32), lr=0.05,
                momentum=0.9, loss_scale=128)
    check_serial_exact(s, *batch(pcg, loss))


def test_precision_flags_on_simulate_and_train(capsys):
    base = ["simulate", "transformer", "-b", "64", "--machine", "dgx_a100", "--json"]
    assert main(base) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(base + ["--precision", "bf16"]) == 0
    half = json.loads(capsys.readouterr().out)
    assert full["precision"] == "fp32" and half["precision"] == "bf16"
    assert half["compute_time_s"] < full["compute_time_s"] / 2
    train = ["train", "mlp_unity_fig2", "-b", "16", "--machine", "local", "--steps", "2", "--lr", "0.1"]
    assert main(train + ["--precision", "fp16", "--loss-scale", "64"]) == 0
    assert "loss scale 64" in capsys.readouterr().out
    assert main(train + ["--loss-scale", "64"]) == 1
    assert "--loss-scale applies to --precision fp16" in capsys.readouterr().err
    assert main(train + ["--precision", "fp16", "--loss-scale", "-3"]) == 1
    assert "give dynamic or a number > 0" in capsys.readouterr().err
