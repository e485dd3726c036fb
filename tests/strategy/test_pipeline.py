"""Pipelined strategies as values: micro-batched models, stages and the schedules' orders."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.strategy.pipeline import (Schedule, device_order, micro_batch_pcg, pipeline_strategy, split_batch)


def mlp(batch=16, layers=4):
    m = FFModel(FFConfig([]))
    t = m.create_tensor([batch, 8], DataType.DT_FLOAT)
    for i in range(layers):
        t = m.dense(t, 8, ActiMode.AC_MODE_RELU, name=f"fc{i}")
    m.softmax(t, name="sm")
    return m.pcg


def test_micro_batched_model_shares_weights_and_splits_inputs():
    pcg = mlp()
    mb = micro_batch_pcg(pcg, 4)
    weights = [n for n in mb.pcg.nodes if n.op_type is OpType.WEIGHT]
    assert sorted(n.name for n in weights) == sorted(n.name for n in pcg.nodes if n.op_type is OpType.WEIGHT)
    inputs = [n for n in mb.pcg.nodes if n.op_type is OpType.INPUT]
    assert [n.attrs.shape.dims for n in inputs] == [(4, 8)] * 4
    assert mb.copies["fc2"] == ("fc2.mb0", "fc2.mb1", "fc2.mb2", "fc2.mb3")
    assert mb.losses == {"sm.mb0": (0, 4), "sm.mb1": (4, 4), "sm.mb2": (8, 4), "sm.mb3": (12, 4)}
    w = next(n for n in weights if n.name.startswith("fc1"))
    assert {mb.pcg.node(c).name for c in mb.pcg.consumers(w.id)} == set(mb.copies["fc1"])


def test_micro_batches_must_divide_the_batch():
    with pytest.raises(StrategyError, match="divide into 3 micro-batches"):
        micro_batch_pcg(mlp(16), 3)
    with pytest.raises(StrategyError, match="micro-batches must be an integer >= 1"):
        micro_batch_pcg(mlp(16), 0)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 12), sched=st.sampled_from(["gpipe", "1f1b"]))
def test_every_block_runs_each_micro_batch_once_forward_then_backward(p, m, sched):
    for b in range(p):
        order = device_order(sched, p, m, 1, b)
        assert sorted(order) == sorted((ph, b, j) for ph in "FB" for j in range(m))
        assert all(order.index(("F", b, j)) < order.index(("B", b, j)) for j in range(m))
        in_flight = max(sum(1 for u in order[:k + 1] if u[0] == "F") - sum(1 for u in order[:k + 1] if u[0] == "B")
                        for k in range(len(order)))
        assert in_flight == (m if sched == "gpipe" else min(p - b, m))


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 4), groups=st.integers(1, 3), v=st.integers(2, 3))
def test_interleaved_order_visits_every_chunk_and_micro_batch(p, groups, v):
    m = p * groups
    for b in range(p):
        order = device_order("interleaved", p, m, v, b)
        stages = range(b, p * v, p)
        assert sorted(order) == sorted((ph, s, j) for ph in "FB" for s in stages for j in range(m))
        for s in stages:     # each stage's micro-batches forward in order, backward in order
            assert [j for ph, t, j in order if ph == "F" and t == s] == list(range(m))
            assert [j for ph, t, j in order if ph == "B" and t == s] == list(range(m))


def test_schedule_arguments_are_checked():
    with pytest.raises(StrategyError, match="unknown pipeline schedule 'zb'; valid: gpipe, 1f1b, interleaved"):
        Schedule.parse("zb")
    with pytest.raises(StrategyError, match="micro-batches divisible by the 4 stages"):
        device_order("interleaved", 4, 6, 2)
    with pytest.raises(StrategyError, match="use the interleaved schedule"):
        device_order("1f1b", 4, 8, 2)


def test_pipeline_strategy_places_stages_on_device_blocks():
    machine = load_machine("dgx1_v100")
    s = pipeline_strategy(mlp(32), machine, 4, 4, "1f1b")
    plan = s.pipeline
    assert plan.micro_batches == 4 and plan.stages == 4
    assert sorted(set(plan.stage_of.values())) == [0, 1, 2, 3]
    order = [plan.stage_of[n] for n in ("fc0", "fc1", "fc2", "fc3", "sm")]
    assert order == sorted(order)
    for name in s.wiring().ops:
        stage, _ = plan.unit_of(name)
        start = s.view(name).start
        assert start == (stage % 4) * 2           # block of 2 devices per stage
        assert dict(s.configs[s.base.node_by_name(name).id].degrees).get("sample", 1) in (1, 2)
    with pytest.raises(StrategyError, match="3 pipeline stages do not divide the machine's 8 devices"):
        pipeline_strategy(mlp(32), machine, 3, 4)
    with pytest.raises(StrategyError, match="need at least 6 operators"):
        pipeline_strategy(mlp(32, layers=2), machine, 2, 4, "interleaved", chunks=3)


@pytest.mark.parametrize("nodes,stages,batch,micro_batches", [(2, 2, 48, 4), (4, 2, 48, 4), (4, 4, 48, 8),
                                                            (4, 2, 48, 8), (3, 3, 36, 6), (2, 1, 24, 2),
                                                            (8, 8, 96, 16), (6, 6, 36, 6)])
def test_every_stage_runs_on_its_own_block_of_devices_on_many_nodes(nodes, stages, batch, micro_batches):
    """Stage s of p runs on devices s*n/p .. (s+1)*n/p - 1 only (a node or a run of whole nodes), not
    one device per node across the machine; a micro-batch that does not divide over the block is split
    over the largest part of it that it divides over."""
    from flexrt.ir.parallel_tensor import divisors
    from flexrt.machine.views import view_devices
    from flexrt.strategy.space import all_axes
    machine = load_machine("summit", nodes=nodes)                     # 6 devices a node
    s = pipeline_strategy(mlp(batch, layers=8), machine, stages, micro_batches)
    width, rows = machine.num_devices // stages, batch // micro_batches
    want = max(d for d in divisors(width) if rows % d == 0)
    for name in s.wiring().ops:
        stage, _ = s.pipeline.unit_of(name)
        node = s.base.node_by_name(name)
        degrees = dict(s.configs[node.id].degrees)
        devices = view_devices(machine, s.view(name), [degrees.get(a.name, 1) for a in all_axes(s.base, node)])
        assert set(devices) <= set(range(stage * width, (stage + 1) * width)), (name, devices)
        assert len(set(devices)) == want == degrees.get("sample", degrees.get("dim0", 1)), (name, devices)


def test_split_batch_gives_each_micro_batch_its_rows():
    import numpy as np
    s = pipeline_strategy(mlp(16), load_machine("dgx1_v100"), 2, 4)
    x = np.arange(16 * 8).reshape(16, 8)
    name = next(iter(s.pipeline.model.inputs.values()))[0]
    got = split_batch(s.pipeline, {name: x})
    assert [v.tolist() for v in got.values()] == [x[4 * j:4 * j + 4].tolist() for j in range(4)]


def test_pipelined_strategy_files_round_trip(tmp_path):
    from flexrt.strategy import load_strategy, save_strategy
    machine = load_machine("dgx1_v100")
    pcg = mlp(32)
    stage_of = {"fc0": 0, "fc1": 0, "fc2": 0, "fc3": 1, "sm": 1}
    s = pipeline_strategy(pcg, machine, 2, 8, "gpipe", stage_of=stage_of,
                          degrees={"fc0": {"sample": 2}, "fc1": {"sample": 2}})
    path = tmp_path / "p.json"
    save_strategy(str(path), s, machine)
    back = load_strategy(str(path), pcg, machine)
    plan = back.pipeline
    assert (plan.stages, plan.micro_batches, plan.schedule, plan.chunks) == (2, 8, Schedule.GPIPE, 1)
    assert dict(plan.stage_of) == stage_of
    assert back.configs == s.configs
    with pytest.raises(StrategyError, match="made for another model"):
        load_strategy(str(path), mlp(16), machine)


def test_pipeline_mcmc_moves_stage_boundaries_deterministically_and_keeps_the_best():
    from flexrt.search import SearchRequest, search
    from flexrt.simulator.cost_model import AnalyticCostModel
    machine = load_machine("dgx1_v100")
    pcg = mlp(64, layers=6)
    runs = [search("pipeline", SearchRequest(pcg, machine, AnalyticCostModel(), budget=30, seed=3))
            for _ in range(2)]
    a, b = runs
    assert a.cost_s == b.cost_s and a.strategy.pipeline.describe() == b.strategy.pipeline.describe()
    best = [e.best_cost_s for e in a.log.entries]
    assert len(best) == 31 and best == sorted(best, reverse=True) and a.cost_s == best[-1]
    assert a.log.proposals == 30 and 0 < a.log.accepted <= 30
    assert a.strategy.pipeline is not None and a.cost_s > 0


@pytest.mark.parametrize("preset,nodes,model,batch", [
    ("dgx1_v100", 1, "mlp", 48), ("summit", 2, "mlp", 48), ("dgx1_v100", 1, "transformer", 16),
    ("dgx1_v100", 1, "lenet", 48)])
def test_a_pipelines_lower_bound_never_exceeds_its_simulation_and_pruning_keeps_the_best(preset, nodes, model,
                                                                                          batch):
    """``lower_bound`` <= the simulated iteration for every candidate of ``pipeline_candidates`` (every
    schedule, 2BW's steady state included); so ``best_pipeline``, which skips candidates whose bound
    cannot beat the best, finds the same candidate as simulating them all."""
    from flexrt.model import load_model
    from flexrt.search.pipelines import FLUSHED, SCHEDULES, _time, best_pipeline, lower_bound, pipeline_candidates
    from flexrt.simulator.cost_model import AnalyticCostModel
    from flexrt.simulator.simulate import Simulator
    machine, cost = load_machine(preset, nodes=nodes), AnalyticCostModel()
    pcg = mlp(batch, layers=8) if model == "mlp" else load_model(model, ["-b", str(batch)]).model.pcg
    sim = Simulator(machine, cost, detail=False, incremental=False)
    times = {}
    schedules = SCHEDULES if model != "transformer" else FLUSHED     # 2bw simulates twice: the small ones
    for label, kwargs in pipeline_candidates(pcg, machine, schedules):
        try:
            strategy = pipeline_strategy(pcg, machine, cost_model=cost, **kwargs)
        except StrategyError:
            continue
        times[label] = _time(sim, strategy)
        assert 0 < lower_bound(strategy, machine, cost) <= times[label] * (1 + 1e-9), label
    assert len(times) >= 8
    notes = {}
    best_pipeline(pcg, machine, cost, "sgd", budget=0, log_notes=notes, schedules=schedules)
    cands = {k: t for k, t in notes["pipeline_candidates_s"].items() if not k.endswith(", stages by work")}
    found = min(cands, key=cands.get)
    assert times[found] == min(times.values())
    assert set(cands) | set(notes["pipeline_candidates_bounded_out"]) == set(times)


BAD_VALUES = [None, "x", -1, 0, 3.5, True, [], {}, {"a": 1}, 10**9, "1f1b", 2, 8, 16]


@pytest.mark.parametrize("path", [("stages",), ("micro_batches",), ("schedule",), ("chunks",), ("stage_of",),
                                  ("operators",), ("stage_of", "fc0"), ("operators", "fc0"),
                                  ("operators", "fc0", "degrees"), ("operators", "fc0", "view"),
                                  ("operators", "fc0", "view", "start"), ("operators", "fc0", "view", "strides"),
                                  ("operators", "fc0", "degrees", "sample")])
def test_a_bad_pipeline_in_a_strategy_file_raises_only_our_error(path):
    import copy

    from flexrt.errors import FlexrtError
    from flexrt.strategy import strategy_from_json, strategy_to_json
    machine = load_machine("dgx1_v100")
    pcg = mlp(32)
    doc = strategy_to_json(pipeline_strategy(pcg, machine, 2, 4), machine)
    for value in BAD_VALUES:
        d = copy.deepcopy(doc)
        target = d["pipeline"]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        try:
            strategy_from_json(d, pcg, machine, "p.json")
        except FlexrtError as e:
            assert "p.json" in str(e) or "stage" in str(e) or "micro" in str(e), (path, value, str(e))


def test_a_cost_model_balances_stages_by_its_seconds_not_by_flops():
    """``pipeline_strategy(cost_model=...)`` cuts stages of equal seconds per iteration (each piece's
    forward and backward times the micro-batches, plus its updates): with every operator costing the
    same, stages get equal operator counts, where FLOPs would give the wide first layer a stage alone."""
    from flexrt.simulator.cost_model import OpTimes

    class Flat:
        name = "flat"

        def op_times(self, attrs, inputs, outputs, device):
            return OpTimes(1e-3, 2e-3)

        def update_time(self, weight, device, optimizer=None):
            return 1e-9

    m = FFModel(FFConfig([]))
    t = m.create_tensor([16, 512], DataType.DT_FLOAT)
    t = m.dense(t, 512, ActiMode.AC_MODE_RELU, name="wide")
    for i in range(6):
        t = m.dense(t, 4, ActiMode.AC_MODE_RELU, name=f"fc{i}")
    m.softmax(t, name="sm")
    machine = load_machine("dgx1_v100")
    by_flops = pipeline_strategy(m.pcg, machine, 4, 4).pipeline.stage_of
    by_time = pipeline_strategy(m.pcg, machine, 4, 4, cost_model=Flat()).pipeline.stage_of
    assert [by_flops[n] for n in ("wide", "fc0")] == [0, 1]
    counts = [sum(1 for v in by_time.values() if v == s) for s in range(4)]
    assert counts == [2, 2, 2, 2], by_time


def test_a_plan_lists_its_stages_in_the_models_order_whatever_the_order_it_was_given():
    """A search moves stage boundaries by rebuilding ``stage_of`` with the moved operator first;
    the plan keeps the model's order, so ``describe`` names each stage's first and last operator
    (it printed "0: fc2..fc1" for a stage running fc0..fc2)."""
    machine = load_machine("dgx1_v100")
    given = {"fc2": 0, "sm": 1, "fc3": 1, "fc0": 0, "fc1": 0}
    plan = pipeline_strategy(mlp(32), machine, 2, 4, "1f1b", stage_of=given).pipeline
    assert list(plan.stage_of) == ["fc0", "fc1", "fc2", "fc3", "sm"] and dict(plan.stage_of) == given
    assert plan.describe().endswith("stages 0: fc0..fc2; 1: fc3..sm")


@pytest.mark.parametrize("batch, stages, chunks, expected", [
    (64, 4, 1, 16),       # 4p where it divides the batch
    (8, 4, 1, 8),         # else the most below 4p that divide it
    (6, 2, 1, 6),
    (80, 8, 1, 20),
    (6, 2, 2, 6),         # interleaved: multiples of p
    (12, 4, 2, 12),
    (7, 4, 1, 7),
])
def test_default_micro_batches_are_4p_or_the_most_below_that_divide_the_batch(batch, stages, chunks, expected):
    from flexrt.strategy.pipeline import default_micro_batches
    assert default_micro_batches(mlp(batch), stages, chunks) == expected


@pytest.mark.parametrize("batch, stages, replicas, expected", [
    (8, 2, 2, 4),         # a micro-batch of 1 would not split over 2 replicas
    (64, 2, 2, 8),        # 4p: micro-batches of 8, 4 per replica
    (32, 2, 3, 8),        # no micro-batch divides over 3 replicas: the plain default
])
def test_default_micro_batches_divide_over_the_data_parallel_replicas_first(batch, stages, replicas, expected):
    """Megatron-LM's global batch is micro-batch x m x d: its default micro-batches (``megatron_lm``)
    leave each of d replicas whole samples where the batch allows."""
    from flexrt.strategy.pipeline import default_micro_batches
    assert default_micro_batches(mlp(batch), stages, replicas=replicas) == expected


def test_default_micro_batches_say_when_no_multiple_of_the_stages_divides_the_batch():
    from flexrt.strategy.pipeline import default_micro_batches
    with pytest.raises(StrategyError, match="batch of 6 into multiples of the 4 pipeline stages"):
        default_micro_batches(mlp(6), 4, 2)


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_strategy_file_loads_into_its_model_in_any_precision(tmp_path, pipelined):
    """Searched in float32, trained in mixed precision (and back): the operators' axes and splits do
    not depend on their floating-point type (it was 'made for another model'). Another model is
    still refused."""
    from flexrt.ir.precision import with_precision
    from flexrt.strategy import data_parallel, load_strategy, save_strategy
    machine = load_machine("dgx1_v100")
    pcg = mlp(32)
    s = pipeline_strategy(pcg, machine, 2, 4) if pipelined else data_parallel(pcg, machine)
    path = tmp_path / "s.json"
    save_strategy(str(path), s, machine)
    for precision in ("fp16", "bf16"):
        low = with_precision(pcg, precision)
        assert low.structural_hash() != pcg.structural_hash()
        back = load_strategy(str(path), low, machine)
        assert back.configs == s.configs
        save_strategy(str(tmp_path / "low.json"), back, machine)
        assert load_strategy(str(tmp_path / "low.json"), pcg, machine).configs == s.configs
    with pytest.raises(StrategyError, match="made for another model"):
        load_strategy(str(path), with_precision(mlp(16), "fp16"), machine)
