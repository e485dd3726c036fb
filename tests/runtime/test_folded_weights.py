"""Folded weights (``flexrt.strategy.weights``): TASO's merged convolutions train like the model.

A model of 1 x 1 convolutions side by side (Inception's branches) is rewritten by the verified
merge rule until no match is left; the kernels the rewrites concatenate are folded into one weight.
The law: the folded graph, under any strategy, trains to the single-device weights of the original
model (float64, 1e-10), read back by the model's names; it starts from the model's initial weights.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import ConfigError, GraphError, StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops.source import WeightAttrs
from flexrt.ir.pcg import PCG
from flexrt.ir.tensor_shape import TensorShape
from flexrt.machine import load_machine
from flexrt.runtime.session import Session, initial_weights
from flexrt.search.substitutions.match import apply, find_matches
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.config import computed_weights
from flexrt.strategy.io import strategy_from_json, strategy_to_json
from flexrt.strategy.weights import fold_values, fold_weights, folded, locate, unfold_values
from tests.runtime.test_central_law import TOL, compare_with_one_device, weights_for
from tests.search.test_subst_operators import TRUE

MERGE = TRUE[0]
DT = DataType.DT_DOUBLE


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


def branches(n=4, channels=6, dt=DT, bias=False):
    """``n`` 1 x 1 convolutions with fused ReLUs of one input, concatenated, then a classifier;
    ``channels``: each branch's (one number: all alike)."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor([8, 5, 4, 4], dt)
    widths = (channels,) * n if isinstance(channels, int) else tuple(channels)
    ys = [m.conv2d(x, c, 1, 1, 1, 1, 0, 0, ActiMode.AC_MODE_RELU, use_bias=bias, name=f"b{i}")
          for i, c in enumerate(widths)]
    t = m.concat(ys, 1, name="cat")
    t = m.flat(t, name="flat")
    t = m.dense(t, 5, name="fc")
    m.softmax(t, name="softmax")
    return m.pcg


def merged(pcg: PCG) -> PCG:
    """``pcg`` merged by the rule until no valid match is left, each step's weights folded."""
    while True:
        for m in find_matches(pcg, MERGE):
            try:
                new = fold_weights(apply(pcg, MERGE, m))
            except (GraphError, ValueError):
                continue
            if not computed_weights(new, [n.id for n in new.nodes]):
                pcg = new
                break
        else:
            return pcg


def test_four_branches_fold_into_one_kernel_with_the_models_names():
    g = merged(branches(4))
    (name, attrs), = folded(g).items()
    assert sorted(attrs.parts) == ["b0.kernel", "b1.kernel", "b2.kernel", "b3.kernel"]
    assert attrs.part_sizes == (6, 6, 6, 6) and attrs.part_axis == 0 and attrs.shape.dims == (24, 5, 1, 1)
    assert len([n for n in g.nodes if n.op_type is OpType.CONV2D]) == 1
    assert computed_weights(g, [n.id for n in g.nodes]) == []
    # the model's weights by name: parts joined and cut back exactly
    w = initial_weights(branches(4), seed=3)
    f = fold_values(g, w)
    assert set(f) == {name, "fc.kernel", "fc.bias"} and f[name].shape == (24, 5, 1, 1)
    back = unfold_values(g, f)
    assert set(back) == set(w) and all(np.array_equal(back[k], w[k]) for k in w)
    # the folded graph draws the model's initial values
    assert all(np.array_equal(v, w[k]) for k, v in initial_weights(g, seed=3).items())
    fname, index = locate(g, attrs.parts[2])
    assert fname == name and index == (slice(12, 18),) and locate(g, "fc.kernel") is None


def test_a_shared_weight_and_a_sum_of_weights_do_not_fold():
    g = PCG()
    w = [g.add_node(WeightAttrs(TensorShape((4, 3))), name=f"w{i}") for i in range(2)]
    from flexrt.ir.ops import ConcatAttrs, ElementBinaryAttrs
    from flexrt.ir.pcg import TensorRef
    g.add_node(ConcatAttrs(0), [TensorRef(w[0], 0), TensorRef(w[1], 0)], name="cat")
    g.add_node(ElementBinaryAttrs(OpType.EW_ADD), [TensorRef(w[0], 0), TensorRef(w[1], 0)], name="sum")
    assert fold_weights(g) is g                                       # w0, w1 also read by the sum: tied
    h = PCG()
    v = h.add_node(WeightAttrs(TensorShape((4, 3))), name="v")
    h.add_node(ConcatAttrs(0), [TensorRef(v, 0), TensorRef(v, 0)], name="twice")
    assert fold_weights(h) is h                                       # the same weight twice


@pytest.mark.parametrize("bad, match", [
    (dict(parts=("a",), part_sizes=(4,), part_ids=(1,)), "2 or more"),
    (dict(parts=("a", "b"), part_sizes=(1, 2), part_ids=(1, 2)), "add up"),
    (dict(parts=("a", "a"), part_sizes=(2, 2), part_ids=(1, 2)), "twice"),
    (dict(parts=("a", "b"), part_sizes=(2, 2), part_ids=(1, 2), part_axis=2), "part_axis"),
    (dict(parts=("a", "b"), part_sizes=(2, 2)), "same"),
])
def test_malformed_folded_weights_are_graph_errors(bad, match):
    with pytest.raises(GraphError, match=match):
        WeightAttrs(TensorShape((4, 3)), **bad)


def test_missing_part_values_name_the_part(machine):
    g = merged(branches(2))
    w = initial_weights(branches(2))
    del w["b1.kernel"]
    with pytest.raises(StrategyError, match="'b1.kernel', part"):
        fold_values(g, w)


def _law(strategy, machine, optimizer="sgd", params=None, n=4, channels=6):
    base = branches(n, channels)
    kw = {} if params is None else {"params": params}
    return compare_with_one_device("folded", base, strategy, machine, "sparse_categorical_crossentropy", TOL[DT],
                                   weights_for(base, DT), optimizer, **kw)


@pytest.mark.parametrize("optimizer, params", [("sgd", None), ("adam", {"alpha": 0.01, "weight_decay": 0.01})])
def test_folded_graph_trains_like_the_model_data_parallel(optimizer, params, machine):
    g = merged(branches(4))
    s = _law(data_parallel(g, machine, 4), machine, optimizer, params)
    assert "b0.kernel" in s.weights() and not any("+" in k for k in s.weights())
    assert s.weight("b2.kernel").shape == (6, 5, 1, 1)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.sampled_from([2, 4]))
def test_folded_graph_trains_like_the_model_random_strategies(seed, n, machine):
    g = merged(branches(n))
    assert folded(g)
    try:
        strategy = random_strategy(g, machine, seed)
    except StrategyError:
        strategy = data_parallel(g, machine, 2)
    _law(strategy, machine, n=n)


INCEPTION = (6, 4, 6, 2)   # Mixed_5b's 1 x 1 branches are 64, 48 and 64 channels wide


def test_unequal_branches_fold_into_one_kernel_cut_where_each_ends():
    g = merged(branches(4, INCEPTION))
    (name, attrs), = folded(g).items()
    assert len([n for n in g.nodes if n.op_type is OpType.CONV2D]) == 1 and attrs.shape.dims == (18, 5, 1, 1)
    widths = dict(zip(attrs.parts, attrs.part_sizes))
    assert widths == {f"b{i}.kernel": c for i, c in enumerate(INCEPTION)}
    w = initial_weights(branches(4, INCEPTION), seed=1)
    back = unfold_values(g, fold_values(g, w))
    assert all(np.array_equal(back[k], w[k]) for k in w)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), optimizer=st.sampled_from(["sgd", "adam"]))
def test_unequal_branches_train_like_the_model(seed, optimizer, machine):
    g = merged(branches(4, INCEPTION))
    try:
        strategy = random_strategy(g, machine, seed)
    except StrategyError:
        strategy = data_parallel(g, machine, 4)
    params = {"alpha": 0.01, "weight_decay": 0.01} if optimizer == "adam" else None
    s = _law(strategy, machine, optimizer, params, n=4, channels=INCEPTION)
    assert s.weight("b1.kernel").shape == (4, 5, 1, 1)


def test_set_weight_writes_a_part_and_penalties_need_one_factor(machine):
    g = merged(branches(2))
    base = branches(2)
    s = Session(data_parallel(g, machine, 2), machine, weights=weights_for(base, DT))
    new = np.full((6, 5, 1, 1), 0.25)
    s.set_weight("b1.kernel", new)
    assert np.array_equal(s.weight("b1.kernel"), new) and np.array_equal(s.weights()["b1.kernel"], new)
    assert not np.array_equal(s.weight("b0.kernel"), new)
    with pytest.raises(ConfigError, match="shape"):
        s.set_weight("b0.kernel", np.zeros((3, 5, 1, 1)))
    with pytest.raises(ConfigError, match="penalties must be equal"):
        Session(data_parallel(g, machine, 2), machine, penalties={"b0.kernel": ("l2", 0.1)})
    Session(data_parallel(g, machine, 2), machine, penalties={"b0.kernel": ("l2", 0.1), "b1.kernel": ("l2", 0.1)})


def test_a_folded_strategy_file_round_trips(machine):
    from flexrt.search.unity.search import sequential
    base = branches(2)
    r = sequential(base, machine, AnalyticCostModel(), budget=10, rules=[MERGE], progress=False)
    assert folded(r.strategy.pcg) and r.log.notes["folded_weights"] >= 1
    back = strategy_from_json(strategy_to_json(r.strategy, machine), base, machine)
    assert back.pcg == r.strategy.pcg and folded(back.pcg) == folded(r.strategy.pcg)
    _law(back, machine, n=2)


def test_an_ffmodel_trains_an_imported_folded_strategy_like_one_device(tmp_path):
    """Through the FFModel API: ``--import`` a strategy whose graph folds the branches' kernels;
    ``get_weights`` answers by the model's names, ``init_layers`` starts over from the model's
    initial weights, and training matches the single-device reference (float64)."""
    from flexrt.model import LossType, SGDOptimizer
    from flexrt.runtime.executor import optimizer_step
    from flexrt.runtime.reference import ReferenceTrainer
    from flexrt.strategy import GraphStrategy, save_strategy

    def model(argv):
        m = FFModel(FFConfig(["-b", "8", *argv]))
        x = m.create_tensor([8, 5, 4, 4], DT)
        ys = [m.conv2d(x, 6, 1, 1, 1, 1, 0, 0, ActiMode.AC_MODE_RELU, use_bias=False, name=f"b{i}") for i in range(2)]
        m.softmax(m.dense(m.flat(m.concat(ys, 1, name="cat"), name="flat"), 5, name="fc"), name="softmax")
        return m

    machine = load_machine("local")
    path = tmp_path / "folded.json"
    dp = data_parallel(merged(model([]).pcg), machine, 2)   # a rewritten graph: saved whole, as Unity's are
    save_strategy(str(path), GraphStrategy(dp.pcg, dp.views), machine)
    m = model(["--import", str(path)])
    m.compile(optimizer=SGDOptimizer(m, 0.05), loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
    assert folded(m.session.base) and set(m.get_weights()) == {"b0.kernel", "b1.kernel", "fc.kernel", "fc.bias"}
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 5, 4, 4)), rng.integers(0, 5, (16, 1)).astype(np.int32)
    ref = ReferenceTrainer(m.pcg, m._initial, optimizer_step("sgd", lr=0.05), "sparse_categorical_crossentropy")
    m.fit(x=x, y=y, epochs=1)
    for lo in (0, 8):
        ref.step({"input_1": x[lo:lo + 8]}, y[lo:lo + 8])
    for name, w in m.get_weights().items():
        np.testing.assert_allclose(w, ref.weights[name], rtol=0, atol=1e-10, err_msg=name)
    m.init_layers()
    for name, w in m.get_weights().items():
        np.testing.assert_array_equal(w, m._initial[name])


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_pipelined_folded_graph_trains_like_the_model(schedule, machine):
    from flexrt.strategy.pipeline import pipeline_strategy
    g = merged(branches(4))
    _law(pipeline_strategy(g, machine, 2, 2, schedule), machine)


def test_a_folded_graph_in_float16_trains_like_the_model(machine):
    """Mixed precision: float32 master weights of the folded kernel, loss scale 256; within two
    float16 ulps of the model's single-device reference (as the MPI law's float16 cases)."""
    from flexrt.ir.precision import with_precision
    from flexrt.runtime.executor import optimizer_step, relative_error
    from flexrt.runtime.reference import ReferenceTrainer
    from tests.runtime.test_central_law import SGD, batch
    base = with_precision(branches(4, dt=DataType.DT_FLOAT), "fp16")
    g = with_precision(merged(branches(4, dt=DataType.DT_FLOAT)), "fp16")
    assert folded(g)
    w0 = weights_for(base, DataType.DT_FLOAT)
    inputs, labels = batch(base, "sparse_categorical_crossentropy")
    ref = ReferenceTrainer(base, w0, optimizer_step("sgd", **SGD), "sparse_categorical_crossentropy", loss_scale=256.0)
    s = Session(data_parallel(g, machine, 4), machine, weights=w0, loss_scale=256.0, **SGD)
    for _ in range(3):
        assert abs(ref.step(inputs, labels) - s.step(inputs, labels).loss) <= 1e-3
    got = s.weights()
    assert set(got) == set(ref.weights)
    assert max(relative_error(got[k], ref.weights[k]) for k in got) <= 2 * 2.0 ** -10


def test_a_malformed_folded_weight_in_a_strategy_file_is_located(tmp_path, machine):
    import json
    from flexrt.errors import FlexrtError
    from flexrt.strategy import GraphStrategy, load_strategy, save_strategy
    dp = data_parallel(merged(branches(2)), machine, 2)
    path = tmp_path / "s.json"
    save_strategy(str(path), GraphStrategy(dp.pcg, dp.views), machine)
    data = json.loads(path.read_text())
    (node,) = [n for n in data["pcg"]["nodes"] if n["op"] == "weight" and "parts" in n["attrs"]]
    node["attrs"]["part_sizes"] = [6, 5]
    path.write_text(json.dumps(data))
    with pytest.raises(FlexrtError, match=r"s\.json: pcg: nodes\[\d+\] .*attrs: folded weight of 'b0.kernel', "
                                          r"'b1.kernel': part_sizes \[6, 5\] must be >= 1 and add up"):
        load_strategy(str(path), branches(2), machine)
