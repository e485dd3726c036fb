"""The central law for FlexFlow's fused normalization layers (rms_norm, residual_rms_norm,
residual_layer_norm, add_bias_residual_layer_norm, sigmoid_silu_multi, built from RMSNorm, BiasAdd,
LayerNorm and element-wise operators): a model using all five trains to one device's losses and
weights under data parallelism, a partitioned strategy (attribute cuts, the bias cut with its
dimension, operators on different devices) and random valid strategies."""

from __future__ import annotations

import numpy as np
import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.machine.views import enumerate_views
from flexrt.strategy import OpConfig, Strategy, all_axes, data_parallel, is_compute, random_strategy
from tests.runtime._mse_law import train_like_one_device

FUSED = (OpType.RMS_NORM, OpType.BIAS_ADD, OpType.LAYER_NORM)


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


def model():
    """x [8, 4, 6] -> two dense -> every fused layer in turn -> dense: each sits between weights, so a
    wrong piece anywhere changes the gradients."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor([8, 4, 6], DataType.DT_DOUBLE)
    t = m.dense(x, 6, ActiMode.AC_MODE_TANH, name="fc1")
    u = m.dense(x, 6, name="fc2")
    s = m.sigmoid_silu_multi(t, u, name="ssm")
    added, n = m.residual_rms_norm(s, t, 1e-3, 6, name="rrms")
    r = m.rms_norm(n, 1e-3, 6, name="rms")
    added2, ln = m.residual_layer_norm(r, added, n, True, [0], name="rln")
    _, ln2 = m.add_bias_residual_layer_norm(ln, added2, [0], name="abr")
    m.dense(ln2, 4, name="fc3")
    return m.pcg


def _nodes(pcg, types=FUSED):
    return [n for n in pcg.nodes if n.op_type in types]


def partitioned_strategy(pcg, machine) -> Strategy:
    """BiasAdd cut in two along its last dimension (the bias cut with it), every other compute operator
    cut in two along dimension 1; operator i on devices 2i, 2i+1 (mod 8), so tensors move between them."""
    configs = {}
    for i, node in enumerate(n for n in pcg.nodes if is_compute(n)):
        axes = all_axes(pcg, node)
        cut = "dim2" if node.op_type is OpType.BIAS_ADD else "dim1"
        shape = tuple(2 if a.name == cut else 1 for a in axes)
        start = (2 * i) % 8
        configs[node.id] = OpConfig(((cut, 2),), next(v for v in enumerate_views(machine, shape) if v.start == start))
    return Strategy.from_configs(pcg, configs)


def train_and_compare(pcg, strategy, machine):
    def perturb(w, rng):
        return {k: v + (rng.uniform(0.5, 1.5, v.shape) if v.ndim == 1 else 0.1) for k, v in w.items()}
    return train_like_one_device(pcg, strategy, machine, (8, 4, 4), perturb, must_train=True)


def test_model_uses_every_fused_layer():
    pcg = model()
    assert [n.name for n in _nodes(pcg)] == ["rrms", "rms", "rln", "abr.bias_add", "abr"]
    weights = {n.name: n.attrs.shape.dims for n in pcg.nodes if n.op_type is OpType.WEIGHT}
    assert {k: v for k, v in weights.items() if not k.startswith("fc")} == {
        "rrms.gamma": (6,), "rms.gamma": (6,), "rln.gamma": (6,), "rln.beta": (6,), "abr.bias_add.bias": (6,),
        "abr.gamma": (6,), "abr.beta": (6,)}


def test_fused_model_trains_like_one_device_data_parallel(machine):
    pcg = model()
    strategy = data_parallel(pcg, machine, 4)
    assert [dict(strategy.configs[n.id].degrees) for n in _nodes(pcg)] == [{"dim0": 4}] * 5
    train_and_compare(pcg, strategy, machine)


def test_fused_model_trains_like_one_device_partitioned(machine):
    pcg = model()
    strategy = partitioned_strategy(pcg, machine)
    assert [dict(strategy.configs[n.id].degrees) for n in _nodes(pcg)] == [{"dim1": 2}] * 3 + [{"dim2": 2},
                                                                                               {"dim1": 2}]
    train_and_compare(pcg, strategy, machine)


@pytest.mark.parametrize("seed", range(8))
def test_fused_model_trains_like_one_device_random_strategies(seed, machine):
    pcg = model()
    strategy = random_strategy(pcg, machine, seed)
    train_and_compare(pcg, strategy, machine)


def test_random_strategies_cut_the_fused_parts_beyond_the_sample_dimension(machine):
    pcg = model()
    cuts = {(n.op_type, name) for seed in range(8) for n in _nodes(pcg)
            for name, _ in random_strategy(pcg, machine, seed).configs[n.id].degrees}
    assert {(t, "dim1") for t in FUSED} | {(OpType.BIAS_ADD, "dim2")} <= cuts  # the bias cut with its dimension


def test_normalization_scales_start_at_one_and_shifts_at_zero():
    """FlexFlow's (and PyTorch's) start: batch, layer and RMS norms begin as the identity transform;
    a given initializer still wins."""
    from flexrt.core import FFConfig, FFModel, UniformInitializer
    from flexrt.model.training import model_initial_weights
    m = FFModel(FFConfig(["-b", "4"]))
    m.batch_norm(m.conv2d(m.create_tensor([4, 3, 8, 8]), 4, 3, 3, 1, 1, 1, 1))
    m.layer_norm(m.create_tensor([4, 6]), [1])
    m.layer_norm(m.create_tensor([4, 5, 6]), [1, 2])
    m.layer_norm(m.create_tensor([4, 6]), [1], use_bias=False)
    m.rms_norm(m.create_tensor([4, 6]), 1e-6, 6)
    m.dense(m.create_tensor([4, 6]), 3, bias_initializer=UniformInitializer(1, 2.0, 2.0))
    layers = m.get_layers()
    w = model_initial_weights(m.pcg, layers if isinstance(layers, list) else list(layers.values()))
    ones = ["batch_norm_1.scale", "layer_norm_1.gamma", "layer_norm_2.gamma", "layer_norm_3.gamma", "rms_norm_1.gamma"]
    zeros = ["batch_norm_1.bias", "layer_norm_1.beta", "layer_norm_2.beta", "conv2d_1.bias"]
    assert all(np.all(w[k] == 1) for k in ones) and all(np.all(w[k] == 0) for k in zeros)
    assert np.all(w["dense_1.bias"] == 2) and np.std(w["dense_1.kernel"]) > 0
