"""ExecPlan: a lowered task graph made ready to run (order, dependencies, buffers, parts, aliases)."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import StrategyError
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.runtime.plan import ExecPlan
from flexrt.simulator.actions import HOST, Update
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import data_parallel, random_strategy

MACHINE = load_machine("flexflow_p100", nodes=1)


@pytest.fixture(scope="module", params=["mlp_unity_fig2", "lenet"])
def base(request):
    return load_model(request.param, ["-b", "16"]).model.pcg


def _plan(base, strategy):
    sim = Simulator(MACHINE, AnalyticCostModel(), incremental=False)
    sim.full(strategy)
    return sim.lowering.graph, sim.schedule(), ExecPlan(sim.lowering.graph, sim.schedule())


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_plan_runs_every_task_once_in_the_predicted_order_respecting_dependencies(base, seed):
    graph, schedule, plan = _plan(base, random_strategy(base, MACHINE, seed))
    assert sorted(plan.task_ids) == graph.ids() and plan.task_ids == list(schedule.task_ids)
    assert [t.id for t in plan.tasks] == plan.task_ids
    position = {t: i for i, t in enumerate(plan.task_ids)}
    succ = graph.successors()
    for i, t in enumerate(plan.task_ids):
        assert plan.succ[i] == sorted(position[s] for s in succ[t])
        assert all(j > i for j in plan.succ[i])  # the predicted order is a topological order
    preds = [0] * len(plan.task_ids)
    for ss in plan.succ:
        for j in ss:
            preds[j] += 1
    assert plan.num_preds.tolist() == preds
    for t in plan.tasks:
        assert t.device == graph.task(t.id).device and t.kind is graph.task(t.id).kind


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_every_part_reads_a_declared_buffer_and_aliases_are_exact_local_copies(base, seed):
    _, _, plan = _plan(base, random_strategy(base, MACHINE, seed))
    for bid, parts in plan.parts.items():
        for p in parts:
            assert (p.src, p.device) in plan.decl
            assert p.device == HOST or p.device == bid[1]  # parts never cross devices
    for bid, src in plan.alias.items():
        b, s = plan.decl[bid], plan.decl[src]
        assert bid[1] == src[1] != HOST and b.ranges == s.ranges and b.dtype == s.dtype
        assert plan.canonical(bid) == plan.canonical(src)
    for t in plan.tasks:
        for r in t.reads:
            assert plan.canonical(r) == r and plan.readers[r] >= 1
    assert sum(plan.readers.values()) == sum(len(t.reads) for t in plan.tasks)


def test_weights_and_inputs_persist_and_every_replica_updates(base):
    graph, _, plan = _plan(base, data_parallel(base, MACHINE))
    assert plan.weight_shapes == graph.weight_shapes and plan.loss_node == graph.loss_node
    updates = [t for t in plan.tasks if isinstance(t.action, Update)]
    assert len(updates) == len(graph.weight_shapes) * MACHINE.num_devices  # one per replica
    assert {(b.key, b.device) for b in plan.weight_instances} <= plan.persistent
    assert all(bid in plan.persistent for bid in plan.decl if bid[1] == HOST)
    assert set(plan.inputs) == set(graph.inputs)


def test_a_graph_without_detail_is_refused(base):
    sim = Simulator(MACHINE, AnalyticCostModel(), detail=False, incremental=False)
    sim.full(data_parallel(base, MACHINE))
    with pytest.raises(StrategyError, match="detail"):
        ExecPlan(sim.lowering.graph, sim.schedule())
