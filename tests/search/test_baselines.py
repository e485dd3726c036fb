"""Named baseline strategies (search/baselines.py): each does what its expert does, is valid and
simulates on the zoo models it is the expert strategy for (FlexFlow's P100 cluster, 4 and 16
devices), and a small instance of each trains to the same weights as one device.
"""

from __future__ import annotations

import math
from functools import cache

import pytest

from flexrt.core import ActiMode, AggrMode, DataType, FFConfig, FFModel, PoolType
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.machine.views import view_devices
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session
from flexrt.search import baselines
from flexrt.search.baselines import (BASELINES, expert_name, expert_strategy, megatron, model_parallel, neo_dlrm,
                                     one_weird_trick, wu_rnn)
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import simulate
from flexrt.strategy import axis_degrees, data_parallel, is_compute
from flexrt.strategy import strategy_from_text, strategy_to_text
from tests.runtime.test_central_law import SGD, STEPS, TOL, batch, dlrm, transformer, weights_for

SEQ_MODELS = {"rnnlm", "rnntc", "nmt", "transformer", "bert_large"}


@cache
def zoo_pcg(name: str, batch_size: int = 16):
    mod = __import__(f"flexrt.examples.{name}", fromlist=["build_model"])
    kwargs = {"seq_length": 4} if name in SEQ_MODELS else {}
    return mod.build_model(FFConfig(["-b", str(batch_size)]), **kwargs).pcg


@cache
def p100(devices: int):
    return load_machine("flexflow_p100", devices // 4)


def pieces(strategy, node_id, machine):
    """Devices of a base node's pieces under ``strategy``."""
    nid = strategy.origin[node_id]
    return view_devices(machine, strategy.views[nid], axis_degrees(strategy.pcg, strategy.pcg.node(nid)))


def compute(pcg, op_type=None):
    return [n for n in pcg.nodes if is_compute(n) and (op_type is None or n.op_type is op_type)]


# ---- each baseline on its zoo models simulates at 4 and 16 devices ------------------------------

CASES = [("one_weird_trick", "alexnet"), ("one_weird_trick", "lenet"), ("one_weird_trick", "resnet50"),
         ("wu_rnn", "rnnlm"), ("wu_rnn", "rnnlm_2step"), ("wu_rnn", "nmt"),
         ("megatron", "transformer"), pytest.param("megatron", "bert_large", marks=pytest.mark.slow),
         ("neo_dlrm", "dlrm"), ("neo_dlrm", "xdl"),
         ("model_parallel", "alexnet"), ("model_parallel", "rnnlm_2step"), ("data_parallel", "alexnet")]


@pytest.mark.parametrize("devices", [4, 16])
@pytest.mark.parametrize("baseline, model", CASES)
def test_baseline_simulates_on_its_zoo_model_p100(baseline, model, devices):
    machine = p100(devices)
    pcg = zoo_pcg(model)
    s = BASELINES[baseline](pcg, machine)
    s.check_views(machine)
    assert set(s.configs) == {n.id for n in compute(pcg)}
    result = simulate(s, machine, AnalyticCostModel())
    assert 0 < result.iteration_time_s < 10 and math.isfinite(result.iteration_time_s)
    used = {d for nid in s.configs for d in pieces(s, nid, machine)}
    assert len(used) > 1, f"{baseline} on {model} uses only devices {used}"


@pytest.mark.parametrize("model", ["alexnet", "dlrm"])
def test_expert_beats_data_parallel_on_16_p100(model):
    """Where the experts' point is plain: large dense layers (AlexNet) and embedding tables (DLRM)
    make data parallelism synchronize hundreds of MB per iteration, the experts keep them whole."""
    machine = p100(16)
    pcg = zoo_pcg(model, 64)
    expert = simulate(expert_strategy(model, pcg, machine), machine, AnalyticCostModel()).iteration_time_s
    dp = simulate(data_parallel(pcg, machine), machine, AnalyticCostModel()).iteration_time_s
    assert expert < dp / 2, (expert, dp)


# ---- each baseline does what its expert does ----------------------------------------------------

@pytest.mark.parametrize("devices", [4, 16])
def test_one_weird_trick_dense_parameter_parallel_convs_sample_parallel(devices):
    machine, pcg = p100(devices), zoo_pcg("alexnet")
    s = one_weird_trick(pcg, machine)
    for n in compute(pcg, OpType.LINEAR):
        deg = s.configs[n.id].degree_map
        assert deg.get("out", 1) > 1 and "dim0" not in deg, (n.name, deg)
    assert s.configs[pcg.node_by_name("fc6").id].degree_map == {"out": devices}
    for n in compute(pcg, OpType.CONV2D) + compute(pcg, OpType.POOL2D):
        assert s.configs[n.id].degree_map == {"sample": devices}, n.name


@pytest.mark.parametrize("devices", [4, 16])
def test_wu_rnn_puts_each_layer_on_its_own_gpu_and_splits_batch_across_nodes(devices):
    machine, pcg = p100(devices), zoo_pcg("rnnlm")
    s = wu_rnn(pcg, machine)
    local = {}
    for n in compute(pcg):
        layer = n.name.split(".t")[0] if n.op_type in (OpType.LSTM, OpType.EMBEDDING, OpType.LINEAR) else None
        devs = pieces(s, n.id, machine)
        assert len(devs) == machine.num_nodes  # one piece per node
        assert [d // machine.devices_per_node for d in devs] == list(range(machine.num_nodes))
        assert len({d % machine.devices_per_node for d in devs}) == 1
        if layer is not None:
            local.setdefault(layer, set()).add(devs[0] % machine.devices_per_node)
    # embed, lstm.l0, lstm.l1, linear: four layers, every unrolled step of a layer on its GPU
    assert sorted(local) == ["embed", "linear", "lstm.l0", "lstm.l1"]
    assert all(len(v) == 1 for v in local.values())
    assert len({min(v) for v in local.values()}) == 4


@pytest.mark.parametrize("devices", [4, 16])
def test_megatron_splits_heads_and_ffn_within_node(devices):
    machine, pcg = p100(devices), zoo_pcg("transformer")
    s = megatron(pcg, machine)
    sample_deg = {"dim0": machine.num_nodes} if machine.num_nodes > 1 else {}
    for n in compute(pcg, OpType.MULTIHEAD_ATTENTION):
        assert s.configs[n.id].degree_map == {"heads": 4, **({"sample": machine.num_nodes}
                                                              if machine.num_nodes > 1 else {})}
    fc1 = [n for n in compute(pcg, OpType.LINEAR) if n.name.endswith(".ffn.fc1")]
    fc2 = [n for n in compute(pcg, OpType.LINEAR) if n.name.endswith(".ffn.fc2")]
    assert len(fc1) == len(fc2) == 12
    assert all(s.configs[n.id].degree_map == {"out": 4, **sample_deg} for n in fc1)
    assert all(s.configs[n.id].degree_map == {"in": 4, **sample_deg} for n in fc2)
    # LayerNorms between the split blocks run replicated on every device of a node
    norms = [n for n in compute(pcg, OpType.LAYER_NORM) if s.configs[n.id].degree_map.get("replica") == 4]
    assert len(norms) >= 2 * 12
    # the tensor-parallel pieces of one operator share a node
    for n in fc1:
        devs = pieces(s, n.id, machine)
        for k in range(0, len(devs), 4):
            assert len({d // machine.devices_per_node for d in devs[k:k + 4]}) == 1


@pytest.mark.parametrize("devices", [4, 16])
def test_neo_dlrm_tables_whole_and_spread_mlps_data_parallel(devices):
    machine, pcg = p100(devices), zoo_pcg("dlrm")
    s = neo_dlrm(pcg, machine)
    tables = compute(pcg, OpType.EMBEDDING)
    assert len(tables) == 26
    where = [pieces(s, n.id, machine) for n in tables]
    assert all(len(w) == 1 for w in where)
    assert sorted({w[0] for w in where}) == list(range(devices))
    for n in compute(pcg, OpType.LINEAR):
        assert s.configs[n.id].degree_map == {"dim0": devices}, n.name


@pytest.mark.parametrize("devices", [4, 16])
def test_model_parallel_contiguous_stages_whole_operators(devices):
    machine, pcg = p100(devices), zoo_pcg("alexnet")
    s = model_parallel(pcg, machine)
    order = [nid for nid in pcg.topological_order() if is_compute(pcg.node(nid))]
    stages = [pieces(s, nid, machine) for nid in order]
    assert all(len(p) == 1 for p in stages)
    flat = [p[0] for p in stages]
    assert flat == sorted(flat) and flat[0] == 0 and len(set(flat)) > 1


def test_expert_strategy_names():
    assert {m: expert_name(m) for m in ("alexnet", "vgg19", "resnet50", "inception_v3", "lenet")} == \
        dict.fromkeys(("alexnet", "vgg19", "resnet50", "inception_v3", "lenet"), "one_weird_trick")
    assert {expert_name(m) for m in ("rnnlm", "rnntc", "nmt", "rnnlm_2step")} == {"wu_rnn"}
    assert {expert_name(m) for m in ("transformer", "bert_large")} == {"megatron"}
    assert {expert_name(m) for m in ("dlrm", "xdl")} == {"neo_dlrm"}
    assert expert_strategy("mlp", zoo_pcg("lenet"), p100(4)) is None
    assert expert_strategy("candle_uno", zoo_pcg("lenet"), p100(4)) is None
    assert baselines.data_parallel is data_parallel


def test_baseline_falls_back_when_degrees_do_not_divide():
    """A dense layer of 10 outputs cannot be split 4 or 16 ways: the largest degree that fits (2)."""
    machine, pcg = p100(16), zoo_pcg("lenet")
    s = one_weird_trick(pcg, machine)
    assert s.configs[pcg.node_by_name("fc3").id].degree_map == {"out": 2}
    assert s.configs[pcg.node_by_name("fc1").id].degree_map == {"out": 8}   # 120 = 8 x 15


# ---- small instances train like one device (float64) --------------------------------------------

def tiny_cnn(dt):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([8, 3, 8, 8], dt)
    t = m.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, name="conv1")
    t = m.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool1")
    t = m.flat(t, name="flat")
    t = m.dense(t, 8, ActiMode.AC_MODE_RELU, name="fc1")
    t = m.dense(t, 8, name="fc2")
    m.softmax(t, name="softmax")
    return m, "sparse_categorical_crossentropy"


def tiny_rnn(dt):
    """RNNLM in miniature: 2 steps, 2 LSTM layers; steps share each layer's weights."""
    m = FFModel(FFConfig([]))
    tokens = m.create_tensor([8, 2], DataType.DT_INT64)
    zeros = m.create_tensor([8, 4], dt)
    xs, table = [], None
    for t, piece in enumerate(m.split(tokens, 2, 1, name="split")):
        e = m.embedding(piece, 10, 4, AggrMode.AGGR_MODE_SUM, shared_op=table, name=f"embed.t{t}", dtype=dt)
        table = table or e.owner_op
        xs.append(e)
    for layer in range(2):
        h, c, cell, outs = zeros, zeros, None, []
        for t, x in enumerate(xs):
            h, c = m.lstm(x, h, c, 4, shared_op=cell, name=f"lstm.l{layer}.t{t}")
            cell = cell or h.owner_op
            outs.append(h)
        xs = outs
    t = m.dense(xs[-1], 6, name="linear")
    m.softmax(t, name="softmax")
    return m, "sparse_categorical_crossentropy"


def tiny_transformer(dt):
    return transformer(dt, heads=4, head=True)


def tiny_dlrm(dt):
    return dlrm(dt, tables=3)


TRAIN_CASES = [("one_weird_trick", tiny_cnn), ("model_parallel", tiny_cnn), ("wu_rnn", tiny_rnn),
               ("megatron", tiny_transformer), ("neo_dlrm", tiny_dlrm), ("data_parallel", tiny_dlrm)]


@pytest.mark.parametrize("baseline, build", TRAIN_CASES, ids=[c[0] for c in TRAIN_CASES])
def test_baseline_trains_like_one_device_float64(baseline, build):
    machine = load_machine("flexflow_p100", 2)   # 2 nodes x 4: exercises within- and across-node splits
    dt = DataType.DT_DOUBLE
    m, loss = build(dt)
    pcg = m.pcg
    strategy = BASELINES[baseline](pcg, machine)
    assert any(c.total_degree > 1 for c in strategy.configs.values()) or \
        len({c.view.start for c in strategy.configs.values()}) > 1, "the baseline parallelizes nothing"
    if baseline == "megatron":  # the operators between the split ones are replicated within a node
        replicated = {pcg.node(nid).name for nid, c in strategy.configs.items() if "replica" in c.degree_map}
        assert replicated == {"res1", "ln1", "res2", "ln2"}
    w0 = weights_for(pcg, dt)
    inputs, labels = batch(pcg, loss)
    ref = ReferenceTrainer(pcg, w0, optimizer_step("sgd", **SGD), loss)
    session = Session(strategy, machine, optimizer="sgd", loss=loss, weights=w0, **SGD)
    for step in range(STEPS):
        want = ref.step(inputs, labels)
        got = session.step(inputs, labels).loss
        assert abs(got - want) <= TOL[dt] * max(1.0, abs(want)), (baseline, step, got, want)
    got_w = session.weights()
    for name, w in ref.weights.items():
        assert relative_error(got_w[name], w) <= TOL[dt], f"{baseline}: weight {name}"


@pytest.mark.parametrize("baseline", sorted(BASELINES))
def test_baselines_round_trip_through_flexflow_text(baseline):
    """Every baseline can be written in FlexFlow's text format and read back unchanged (Megatron's
    replicated operators and row-wise linears use the extra replica dimension)."""
    machine = load_machine("flexflow_p100", 2)
    for build in (tiny_cnn, tiny_rnn, tiny_transformer, tiny_dlrm):
        pcg = build(DataType.DT_DOUBLE)[0].pcg
        s = BASELINES[baseline](pcg, machine)
        text = strategy_to_text(s, machine)
        assert strategy_from_text(text, pcg, machine).configs == s.configs


def test_megatron_tensor_degree_must_divide_the_heads_and_its_best_is_the_fastest_supported():
    from flexrt.errors import StrategyError
    from flexrt.search.baselines import megatron_best, megatron_lm, tensor_degrees
    machine = load_machine("summit")                 # 6 devices a node; the transformer's heads: 8
    pcg = zoo_pcg("transformer", 12)
    heads = {n.attrs.num_heads for n in compute(pcg, OpType.MULTIHEAD_ATTENTION)}
    assert tensor_degrees(pcg, machine) == [t for t in (6, 3, 2, 1) if all(h % t == 0 for h in heads)]
    assert max(tensor_degrees(pcg, machine)) == 2
    with pytest.raises(StrategyError, match=r"tensor parallel degree 6 must divide the attention heads \(\[8\]\).*"
                                            r"valid here: 2, 1"):
        megatron_lm(pcg, machine, tensor=6)
    default = megatron(pcg, machine)                  # the largest supported degree, data parallel over the rest
    for n in compute(pcg, OpType.MULTIHEAD_ATTENTION):
        assert default.configs[n.id].degree_map == {"heads": 2, "sample": 3}
    # with a pipeline, the largest supported degree that leaves whole blocks (t 2 x p 2 does not divide 6)
    # and micro-batches that leave each of d = 6 / (t p) replicas whole samples (12 / (4 x 3) at p 2)
    for p, t, m in ((2, 1, 4), (3, 2, 12)):
        piped = megatron_lm(pcg, machine, pipeline=p)
        attention = [nid for nid in piped.configs if piped.base.node(nid).op_type is OpType.MULTIHEAD_ATTENTION]
        assert piped.pipeline.stages == p and piped.pipeline.micro_batches == m and attention
        assert {piped.configs[nid].degree_map.get("heads", 1) for nid in attention} == {t}
    one_group = megatron_lm(pcg, machine, tensor=2, data=1)   # Megatron's weak-scaling runs: the first t devices
    assert {d for n in compute(pcg) for d in pieces(one_group, n.id, machine)} == {0, 1}
    cost = AnalyticCostModel()
    best = megatron_best(pcg, machine, cost)
    tried = best.log.notes["configurations"]
    assert {"t2 p1", "t1 p1"} <= set(tried) and best.cost_s == min(tried.values())
    assert tried["t1 p1"] == pytest.approx(simulate(data_parallel(pcg, machine), machine, cost).iteration_time_s)


@pytest.mark.parametrize("vocab, short, t", [(64, {}, 4), (66, {"lm_head": 2}, 4), (67, {"lm_head": 1}, 4),
                                             (67, {}, 1)])
def test_megatron_shortfalls_name_a_head_the_vocabulary_does_not_let_split(vocab, short, t):
    """Megatron-LM pads the vocabulary to a multiple of 128 t; unpadded, the head splits fewer ways
    and the residual stream before it is no longer replicated over the tensor group (its consumers
    do not all take copies), which ``megatron_shortfalls`` (and the CLI's warning) names. A tensor
    group of one device (pure data parallelism) falls short of nothing."""
    from flexrt.model import load_model
    from flexrt.search.baselines import megatron_lm, megatron_shortfalls
    pcg = load_model("gpt", ["-b", "4", "--config", "gpt-tiny", "--vocab", str(vocab)]).model.pcg
    machine = load_machine("dgx_a100")
    assert megatron_shortfalls(pcg, machine, t) == short
    if t == 1:
        return
    s = megatron_lm(pcg, machine, tensor=t)
    replicated = {pcg.node(nid).name for nid, c in s.configs.items() if c.degree_map.get("replica") == t}
    assert ("ln_f" in replicated) == (not short)
    assert ("h.1.mlp.add" in replicated) == (not short)


@pytest.mark.parametrize("layers, stages", [(4, 2), (4, 4), (6, 3), (8, 2), (6, 4), (3, 2)])
def test_megatron_pipeline_stages_are_whole_transformer_layers(layers, stages):
    """Megatron-LM gives each stage L / p layers, the embedding to the first and the head to the
    last; where the layers do not divide, the stages are balanced by FLOPs instead."""
    from flexrt.model import load_model
    from flexrt.search.baselines import megatron_lm, megatron_stages
    pcg = load_model("gpt", ["-b", "8", "--config", "gpt-tiny", "--layers", str(layers)]).model.pcg
    got = megatron_stages(pcg, stages)
    if layers % stages:
        assert got is None
        return
    per = layers // stages
    attention = [name for name in got if name.endswith(".attn")]
    assert [got[name] for name in attention] == [i // per for i in range(layers)]
    assert got["wte"] == 0 and got["lm_head"] == got["softmax"] == stages - 1
    assert all(got[f"h.{i}.ln1"] == got[f"h.{i}.mlp.add"] == i // per for i in range(layers))
    s = megatron_lm(pcg, load_machine("dgx_a100", nodes=stages), tensor=4, pipeline=stages, micro_batches=2)
    assert s.pipeline.stage_of == got


def test_megatron_stages_fall_back_where_layers_are_not_separated():
    """An encoder-decoder's decoder layers all read the encoder's output: no cut separates them."""
    from flexrt.search.baselines import megatron_stages
    assert megatron_stages(zoo_pcg("transformer", 4), 2) is None


def test_megatron_micro_batches_without_a_pipeline_accumulate_gradients():
    """Megatron-LM with one stage and m micro-batches runs them in turn and sums their gradients: a
    one-stage pipeline of m micro-batches (they were ignored before), the tensor split unchanged."""
    from flexrt.model import load_model
    from flexrt.search.baselines import megatron_lm
    pcg = load_model("gpt", ["-b", "32", "--config", "gpt-tiny"]).model.pcg
    machine = load_machine("dgx_a100")
    s = megatron_lm(pcg, machine, tensor=2, micro_batches=4)
    assert s.pipeline.stages == 1 and s.pipeline.micro_batches == 4
    heads = {c.degree_map.get("heads") for nid, c in s.configs.items() if s.base.node(nid).op_type is OpType.MULTIHEAD_ATTENTION}
    assert heads == {2}
    assert getattr(megatron_lm(pcg, machine, tensor=2), "pipeline", None) is None
