"""The runtime's central law: every strategy trains to the same losses and weights as one device.

For four models (an MLP, a CNN, a transformer block, a small DLRM) and strategies of every kind
(data, model placement, parameter, attribute, reduction, hybrid, random valid ones), several
training steps through the task runtime must match the whole-tensor single-device reference
(``flexrt.runtime.reference``): float64 to 1e-10 relative, float32 to 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, AggrMode, DataType, FFConfig, FFModel, PoolType
from flexrt.errors import ShapeError, StrategyError
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.machine.views import enumerate_views
from flexrt.kernels.optimizers import delayed
from flexrt.strategy.pipeline_2bw import delays_updates
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session, initial_weights
from flexrt.strategy import (OpConfig, Strategy, all_axes, apply_single, data_parallel, is_compute,
                                      random_strategy)
from flexrt.strategy.pipeline import pipeline_strategy

STEPS = 3
TOL = {DataType.DT_DOUBLE: 1e-10, DataType.DT_FLOAT: 1e-4}
SGD = {"lr": 0.05, "momentum": 0.9}


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


# ---- models ------------------------------------------------------------------------------------

def mlp(dt):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([16, 12], dt)
    t = m.dense(x, 16, ActiMode.AC_MODE_RELU, name="fc1")
    t = m.dense(t, 8, ActiMode.AC_MODE_TANH, name="fc2")
    t = m.dense(t, 6, name="fc3")
    m.softmax(t, name="softmax")
    return m, "sparse_categorical_crossentropy"


def cnn(dt):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([8, 3, 8, 8], dt)
    t = m.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, name="conv1")
    t = m.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool1")
    t = m.conv2d(t, 6, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, name="conv2")
    t = m.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_AVG, name="pool2")
    t = m.flat(t, name="flat")
    t = m.dense(t, 5, name="fc")
    m.softmax(t, name="softmax")
    return m, "sparse_categorical_crossentropy"


def transformer(dt, heads=2, head=False):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([4, 6, 8], dt)
    a = m.multihead_attention(x, x, x, 8, heads, name="attn")
    t = m.add(x, a, name="res1")
    t = m.layer_norm(t, [2], name="ln1")
    f = m.dense(t, 16, ActiMode.AC_MODE_RELU, name="ffn1")
    f = m.dense(f, 8, name="ffn2")
    t = m.add(t, f, name="res2")
    t = m.layer_norm(t, [2], name="ln2")
    if head:
        m.dense(t, 8, name="head")
    return m, "mean_squared_error_avg"


def dlrm(dt, tables=2):
    m = FFModel(FFConfig([]))
    dense_in = m.create_tensor([8, 5], dt)
    sparse = [m.create_tensor([8, 2], DataType.DT_INT64) for _ in range(tables)]
    x = m.dense(dense_in, 8, ActiMode.AC_MODE_RELU, name="bot0")
    x = m.dense(x, 4, ActiMode.AC_MODE_RELU, name="bot1")
    embs = [m.embedding(s, 10, 4, AggrMode.AGGR_MODE_SUM, name=f"emb{i}", dtype=dt) for i, s in enumerate(sparse)]
    z = m.concat([x] + embs, 1, name="interaction")
    z = m.dense(z, 8, ActiMode.AC_MODE_RELU, name="top0")
    m.dense(z, 1, ActiMode.AC_MODE_SIGMOID, name="top1")
    return m, "mean_squared_error_avg"


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer, "dlrm": dlrm}


def batch(pcg, loss, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {}
    for n in pcg.nodes:
        if n.op_type is OpType.INPUT:
            s = n.attrs.shape
            if s.dtype.is_floating:
                inputs[n.name] = rng.standard_normal(s.dims).astype(s.dtype.numpy_name)
            else:
                inputs[n.name] = rng.integers(0, 10, size=s.dims).astype(s.dtype.numpy_name)
    out = [n for n in pcg.nodes if n.op_type not in (OpType.INPUT, OpType.WEIGHT)][-1]
    shape = pcg.output_shapes(out.id)[0]
    if loss == "sparse_categorical_crossentropy":
        labels = rng.integers(0, shape.sizes[-1], size=(shape.sizes[0], 1)).astype(np.int32)
    else:
        labels = rng.standard_normal(shape.sizes).astype(shape.dtype.numpy_name)
    return inputs, labels


def weights_for(pcg, dt):
    w = initial_weights(pcg, seed=1)
    rng = np.random.default_rng(2)
    # nonzero biases, so that a bias added twice (or not at all) shows
    return {k: (v + 0.1 * rng.standard_normal(v.shape)).astype(v.dtype) if v.ndim == 1 else v for k, v in w.items()}


# ---- strategies --------------------------------------------------------------------------------

def _config(pcg, node, degrees: dict, start: int, machine) -> OpConfig:
    axes = all_axes(pcg, node)
    shape = tuple(degrees.get(a.name, 1) for a in axes)
    views = [v for v in enumerate_views(machine, shape) if v.start == start] or enumerate_views(machine, shape)
    return OpConfig(tuple(degrees.items()), views[0])


def _axis(pcg, node, kind_names):
    for a in all_axes(pcg, node):
        if a.kind.name in kind_names and not any(s.kind.name == "SUM" for _, s in a.operands):
            return a.name
    return None


PIPELINES = ("gpipe", "1f1b", "interleaved", "zb-h1", "2bw")


def strategy_of(kind: str, pcg, machine) -> Strategy:
    """A named strategy kind; operators that cannot take it stay on one device."""
    if kind == "data":
        return data_parallel(pcg, machine, 4)
    if kind in PIPELINES:       # 2 stages of 4 devices (data parallel within), 4 micro-batches
        return pipeline_strategy(pcg, machine, 2, 4, kind, chunks=2 if kind == "interleaved" else 1)
    configs = {}
    ops = [n for n in pcg.nodes if is_compute(n)]
    for i, node in enumerate(ops):
        deg = {}
        if kind == "model":  # operator placement: every operator whole, on its own device
            configs[node.id] = _config(pcg, node, {}, i % machine.num_devices, machine)
            continue
        wanted = {"parameter": {"PARAMETER"}, "attribute": {"ATTRIBUTE"}, "reduction": {"REDUCTION"},
                  "hybrid": {"PARAMETER", "ATTRIBUTE"}}[kind]
        ax = _axis(pcg, node, wanted)
        if ax is not None:
            deg[ax] = 2
        if kind == "hybrid":
            s = _axis(pcg, node, {"SAMPLE"})
            if s is not None:
                deg[s] = 2
        for d in (deg, {}):  # fall back to one device where the degrees do not fit the shapes
            try:
                apply_single(pcg, node, d)
            except (ShapeError, StrategyError):
                continue
            configs[node.id] = _config(pcg, node, d, (2 * i) % machine.num_devices, machine)
            break
    return Strategy.from_configs(pcg, configs)


def train_and_compare(model: str, dt, strategy_fn, machine, optimizer="sgd", params=SGD, mode="serial"):
    m, loss = MODELS[model](dt)
    pcg = m.pcg
    return compare_with_one_device(model, pcg, strategy_fn(pcg), machine, loss, TOL[dt], weights_for(pcg, dt),
                                   optimizer, params, mode)


def reference_update(strategy, optimizer="sgd", **params):
    """One device's optimizer step for ``strategy``: under a ``2bw`` pipeline, with PipeDream-2BW's
    one-step delay (its semantics; the law is that the pipeline computes the same gradients)."""
    update = optimizer_step(optimizer, **params)
    return delayed(update) if delays_updates(strategy) else update


def compare_with_one_device(label: str, pcg, strategy, machine, loss, tol, w0, optimizer="sgd", params=SGD,
                            mode="serial", cost_model=None):
    """``STEPS`` steps under ``strategy`` against the one-device reference from weights ``w0``: the
    losses, the weights and every replica of each weight agree within ``tol``. Returns the session."""
    inputs, labels = batch(pcg, loss)
    ref = ReferenceTrainer(pcg, w0, reference_update(strategy, optimizer, **params), loss)
    session = Session(strategy, machine, optimizer=optimizer, loss=loss, weights=w0, mode=mode,
                      cost_model=cost_model, **params)
    for step in range(STEPS):
        want = ref.step(inputs, labels)
        got = session.step(inputs, labels).loss
        assert abs(got - want) <= tol * max(1.0, abs(want)), (label, step, got, want)
    got_w = session.weights()
    for name, w in ref.weights.items():
        err = relative_error(got_w[name], w)
        assert err <= tol, f"{label}: weight {name} differs by {err:.3g} relative after {STEPS} steps"
    # every replica of a weight holds the same value (by the graph's weights: a folded one is whole)
    whole = session.executor.weights()
    for (name, ranges, dev), arr in session.executor.weight_replicas().items():
        sl = tuple(slice(a, b) for a, b in ranges)
        assert relative_error(arr, whole[name][sl]) <= tol
    return session


KINDS = ["data", "model", "parameter", "attribute", "reduction", "hybrid"]


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", KINDS)
def test_named_strategies_train_like_one_device_float64(model, kind, machine):
    train_and_compare(model, DataType.DT_DOUBLE, lambda pcg: strategy_of(kind, pcg, machine), machine)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_hybrid_float32_within_1e4(model, machine):
    train_and_compare(model, DataType.DT_FLOAT, lambda pcg: strategy_of("hybrid", pcg, machine), machine)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_adam_and_threads(model, machine):
    train_and_compare(model, DataType.DT_DOUBLE, lambda pcg: strategy_of("hybrid", pcg, machine), machine,
                      optimizer="adam", params={"alpha": 0.01}, mode="threads")


@pytest.mark.parametrize("optimizer, params", [("rmsprop", {"lr": 0.01, "alpha": 0.9}),
                                               ("adagrad", {"lr": 0.05, "lr_decay": 0.01,
                                                            "initial_accumulator_value": 0.1})])
def test_rmsprop_and_adagrad_train_like_one_device(optimizer, params, machine):
    train_and_compare("cnn", DataType.DT_DOUBLE, lambda pcg: strategy_of("hybrid", pcg, machine), machine,
                      optimizer=optimizer, params=params)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 10_000))
def test_random_valid_strategies_train_like_one_device(model, seed, machine):
    def fn(pcg):
        try:
            return random_strategy(pcg, machine, seed)
        except StrategyError:
            return data_parallel(pcg, machine, 2)
    train_and_compare(model, DataType.DT_DOUBLE, fn, machine)


def test_named_strategies_are_not_trivial(machine):
    """Each named kind really parallelizes: some operator of each model runs on more than one device
    (or, for model placement, operators sit on different devices)."""
    for model, build in MODELS.items():
        pcg = build(DataType.DT_DOUBLE)[0].pcg
        for kind in KINDS:
            s = strategy_of(kind, pcg, machine)
            if kind == "model":
                assert len({c.view.start for c in s.configs.values()}) > 1
            elif kind in ("data", "hybrid", "parameter") or (kind == "attribute" and model == "cnn") or \
                    (kind == "reduction" and model in ("mlp", "dlrm")):
                assert any(c.total_degree > 1 for c in s.configs.values()), (model, kind)


@pytest.mark.parametrize("aggr", [AggrMode.AGGR_MODE_SUM, AggrMode.AGGR_MODE_AVG, AggrMode.AGGR_MODE_NONE])
@pytest.mark.parametrize("degrees", [{"entries": 2}, {"entries": 4}, {"entries": 2, "dim0": 2},
                                     {"entries": 2, "out": 2}])
def test_tables_cut_along_their_rows_train_like_one_device(aggr, degrees, machine):
    """Embedding tables cut along their rows (the entries axis: Megatron-LM's vocabulary-parallel
    embedding, DLRM's row-wise sharding), alone or with a sample or column cut: each piece looks up
    its rows' indices, the partial outputs are summed, and training matches one device (float64)."""
    m = FFModel(FFConfig([]))
    sparse = m.create_tensor([8, 3], DataType.DT_INT64)
    e = m.embedding(sparse, 12, 4, aggr, name="emb", dtype=DataType.DT_DOUBLE)
    if aggr is AggrMode.AGGR_MODE_NONE:
        e = m.flat(e, name="flat")
    m.dense(e, 1, ActiMode.AC_MODE_SIGMOID, name="top")
    pcg = m.pcg
    configs = {}
    for i, node in enumerate(n for n in pcg.nodes if is_compute(n)):
        configs[node.id] = _config(pcg, node, degrees if node.name == "emb" else {}, i, machine)
    s = compare_with_one_device("entries", pcg, Strategy.from_configs(pcg, configs), machine,
                                "mean_squared_error_avg", TOL[DataType.DT_DOUBLE], weights_for(pcg, DataType.DT_DOUBLE))
    pieces = [k for k in s.executor.weight_replicas() if k[0].startswith("emb")]
    assert len({k[1] for k in pieces}) == degrees["entries"] * degrees.get("out", 1)   # the table really is cut
