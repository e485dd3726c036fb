"""Fusion in the simulated task graph (``simulator/fusion.py``): groups become one task per piece and
phase timed as one fused operator, duplicates are recomputed, buckets become one ring; DisCo's Fig. 3
effect (fusing backward operators delays their gradients' AllReduce)."""

from __future__ import annotations

import numpy as np
import pytest

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.machine import load_machine
from flexrt.simulator.cost_model import AnalyticCostModel, FusedMember
from flexrt.simulator.fusion import FusedGraph
from flexrt.simulator.lowering import Lowering
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy import data_parallel
from flexrt.strategy.fusion import FusionGroup, FusionPlan, gradient_order
from flexrt.simulator.actions import Fused, RingStep

COST = AnalyticCostModel()


def mlp(h=256, b=64, out=16):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([b, h], DataType.DT_FLOAT)
    t = m.dense(x, h, name="fc1")
    r = m.relu(t, name="r1")
    t = m.dense(r, h, name="fc2")
    u = m.dense(r, h, name="fc2b")
    t = m.add(t, u, name="add")
    t = m.relu(t, name="r2")
    t = m.dense(t, out, name="fc3")
    m.softmax(t, name="softmax")
    return m.pcg


@pytest.fixture(scope="module")
def dgx():
    return load_machine("dgx1_v100")


def simulate(strategy, machine):
    sim = Simulator(machine, COST)
    sim.time_full(strategy)
    return sim, sim.result()


def test_empty_plan_is_the_lowered_graph(dgx):
    s = data_parallel(mlp(), dgx, 4)
    low = Lowering(dgx, COST)
    low.build(s)
    fused = FusedGraph(low, FusionPlan())
    eng = fused.engine(low.engine_cls)
    eng.simulate_full()
    low.engine.simulate_full()
    assert len(fused) == len(low.graph) and eng.makespan() == low.engine.makespan()
    base = Simulator(dgx, COST).full(s)
    assert s.with_fusion(FusionPlan()).fusion is None
    assert timelines_equal(Simulator(dgx, COST).full(s.with_fusion(FusionPlan())), base)


def test_a_forward_group_is_one_task_per_piece_timed_as_one_fused_operator(dgx):
    s = data_parallel(mlp(), dgx, 4)
    plan = FusionPlan((FusionGroup(("fc1", "r1")),))
    base_sim, base = simulate(s, dgx)
    sim, res = simulate(s.with_fusion(plan), dgx)
    assert res.num_tasks == base.num_tasks - 4
    fused = [sim.graph.task(t) for t in sim.graph.ids() if isinstance(sim.graph.task(t).action, Fused)]
    assert len(fused) == 4 and all(t.kind is TaskKind.FORWARD for t in fused)
    assert {t.device for t in fused} == {0, 1, 2, 3}
    low = base_sim.lowering
    lay1, lay2 = low.layout("fc1"), low.layout("r1")
    a1, i1, o1 = lay1.classes[lay1.piece_class[0]]
    a2, i2, o2 = lay2.classes[lay2.piece_class[0]]
    spec = dgx.devices[0].spec
    want = COST.fused_time([FusedMember(a1, tuple(i1), tuple(o1)), FusedMember(a2, tuple(i2), tuple(o2), (0,))],
                           "forward", spec)
    assert fused[0].exe_s == pytest.approx(want, rel=1e-12)
    alone = COST.op_times(a1, i1, o1, spec).forward_s + COST.op_times(a2, i2, o2, spec).forward_s
    assert want < alone   # one launch, the intermediate read on chip
    assert [m.node for m in fused[0].action.members] == ["fc1", "r1"]
    assert res.iteration_time_s < base.iteration_time_s


def test_a_backward_group_runs_members_in_reverse(dgx):
    s = data_parallel(mlp(), dgx, 2)
    sim, _ = simulate(s.with_fusion(FusionPlan((FusionGroup(("add", "r2", "fc3"), "backward"),))), dgx)
    fused = [sim.graph.task(t) for t in sim.graph.ids() if isinstance(sim.graph.task(t).action, Fused)]
    assert len(fused) == 2 and all(t.kind is TaskKind.BACKWARD for t in fused)
    assert [m.node for m in fused[0].action.members] == ["fc3", "r2", "add"]


def test_a_duplicate_is_recomputed_and_still_runs_for_its_other_consumers(dgx):
    s = data_parallel(mlp(), dgx, 2)
    plan = FusionPlan((FusionGroup(("r1", "fc2"), duplicate=("r1",)),))
    sim, res = simulate(s.with_fusion(plan), dgx)
    g = sim.graph
    names = {g.task(t).name: t for t in g.ids()}
    assert "fwd r1[0]" in names and "fwd fc2[0]" not in names      # r1 still runs for fc2b; fc2 fused
    group = [t for t in g.ids() if isinstance(g.task(t).action, Fused) and g.task(t).device == 0][0]
    preds = [a for a, b in zip(g.src.tolist(), g.dst.tolist()) if b == group]
    assert names["fwd r1[0]"] not in preds and names["fwd fc1[0]"] in preds   # waits for what r1 waits for
    assert g.task(group).action.recomputed == (True, False)
    # one fused task replaces fc2's on each piece; recomputing r1 reads fc1's output instead of r1's
    # (as many bytes) and adds r1's FLOPs: never cheaper than fc2 alone
    base_sim, base = simulate(s, dgx)
    assert res.num_tasks == base.num_tasks
    fc2 = next(base_sim.graph.task(t) for t in base_sim.graph.ids() if base_sim.graph.task(t).name == "fwd fc2[0]")
    assert g.task(group).exe_s >= fc2.exe_s


def test_a_bucket_is_one_ring_started_when_every_member_is_ready(dgx):
    s = data_parallel(mlp(), dgx, 4)
    bucket = tuple(w for w, _ in gradient_order(s.wiring()))
    sim, res = simulate(s.with_fusion(FusionPlan((), (bucket,))), dgx)
    _, base = simulate(s, dgx)
    g = sim.graph
    rings = {g.task(t).action.group.id for t in g.ids() if isinstance(g.task(t).action, RingStep)}
    assert len(rings) == 1
    group = next(g.task(t).action.group for t in g.ids() if isinstance(g.task(t).action, RingStep))
    assert group.segments == len(bucket) and group.num_members == 4
    # the same gradient bytes cross the links (one ring over the concatenation; shares rounded per member)
    assert abs(res.moved_bytes["weight_sync"] - base.moved_bytes["weight_sync"]) <= 4 * 4 * len(bucket)
    tl = res.timeline
    start = dict(zip(tl["ids"].tolist(), tl["start"].tolist()))
    end = dict(zip(tl["ids"].tolist(), tl["end"].tolist()))
    ring_start = min(start[t] for t in g.ids() if isinstance(g.task(t).action, RingStep))
    last_backward = max(end[t] for t in g.ids() if g.task(t).kind is TaskKind.BACKWARD)
    assert ring_start >= last_backward - 1e-15    # fc1's gradient is the last to be ready
    assert len([t for t in g.ids() if g.task(t).kind is TaskKind.TRANSFER]) < \
        len([t for t in simulate(s, dgx)[0].graph.ids() if simulate(s, dgx)[0].graph.task(t).kind is TaskKind.TRANSFER])


def test_a_fused_strategy_traces(dgx):
    s = data_parallel(mlp(), dgx, 2).with_fusion(FusionPlan((FusionGroup(("add", "r2")),), (("fc3.bias", "fc3.kernel"),)))
    sim, res = simulate(s, dgx)
    trace = sim.chrome_trace(res)
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert any(n.startswith("fused fwd") for n in names) and any(n.startswith("bucket 0 ring") for n in names)
    assert "digraph" in sim.graph.to_dot()


def _fc2_allreduce_start(sim, res):
    tl = res.timeline
    return min(st for tid, st in zip(tl["ids"].tolist(), tl["start"].tolist())
               if "allreduce fc2.kernel" in sim.graph.task(tid).name)


def chain(h, b=64):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([b, h], DataType.DT_FLOAT)
    t = m.relu(m.dense(x, h, name="fc1"), name="r1")
    t = m.relu(m.dense(t, h, name="fc2"), name="r2")
    m.softmax(m.dense(t, 16, name="fc3"), name="softmax")
    return m.pcg


def test_fig3_fusing_backward_delays_allreduce_and_can_slow_the_iteration():
    """DisCo's Fig. 3: fusing fc2's backward with fc1's makes fc2's gradient ready only when fc1's
    backward ends. With large weights on a slow network the delay costs more than fusion saves;
    with tiny ones on one node (launch-bound) fusion wins."""
    machine = load_machine("disco_a")
    plan = FusionPlan((FusionGroup(("fc1", "r1", "fc2"), "backward"),))
    s = data_parallel(chain(4096), machine, machine.num_devices)
    sim0, r0 = simulate(s, machine)
    sim1, r1 = simulate(s.with_fusion(plan), machine)
    assert _fc2_allreduce_start(sim1, r1) > _fc2_allreduce_start(sim0, r0)   # the gradient waits for fc1
    assert r1.iteration_time_s > r0.iteration_time_s                        # and the iteration is slower
    assert r1.compute_time_s < r0.compute_time_s                            # though the fused compute is cheaper
    small = data_parallel(chain(64), machine, 2)   # one node: the ring's latency does not hide the compute
    assert simulate(small.with_fusion(plan), machine)[1].iteration_time_s < simulate(small, machine)[1].iteration_time_s


def test_profiled_like_cost_models_scale_members_by_the_analytic_ratio(dgx):
    class NoFused:
        """A cost model without fused_time: the analytic model's other answers, times doubled."""
        name = "doubled"
        linear_transfers = True

        def op_times(self, attrs, ins, outs, spec):
            t = COST.op_times(attrs, ins, outs, spec)
            return type(t)(2 * t.forward_s, 2 * t.backward_s, "doubled")

        def __getattr__(self, name):
            if name == "fused_time":
                raise AttributeError(name)
            return getattr(COST, name)

    s = data_parallel(mlp(), dgx, 2).with_fusion(FusionPlan((FusionGroup(("fc1", "r1")),)))
    a = Simulator(dgx, COST)
    a.time_full(s)
    b = Simulator(dgx, NoFused())
    b.time_full(s)
    fa = [a.graph.task(t).exe_s for t in a.graph.ids() if isinstance(a.graph.task(t).action, Fused)]
    fb = [b.graph.task(t).exe_s for t in b.graph.ids() if isinstance(b.graph.task(t).action, Fused)]
    assert np.allclose(fb, [2 * x for x in fa], rtol=1e-12)


# ---- profiled fused tasks ------------------------------------------------------------------------

def test_profiled_fused_task_runs_the_real_fused_kernel_once_then_caches(tmp_path, monkeypatch):
    from flexrt.ir.op_type import OpType
    from flexrt.ir.ops import ElementBinaryAttrs, ElementUnaryAttrs
    from flexrt.ir.tensor_shape import TensorShape
    from flexrt.kernels import fused as fused_kernels
    from flexrt.simulator import profiling
    from flexrt.simulator.cost_model import ProfiledCostModel
    from tests.simulator.test_cost_model import CPU

    s = TensorShape((64, 128))
    add, relu = ElementBinaryAttrs(OpType.EW_ADD), ElementUnaryAttrs(OpType.RELU)
    chain = [FusedMember(add, (s, s), (s,), (), False, (-1, -1)), FusedMember(relu, (s,), (s,), (0,), False, (0,))]
    evaluated, kernels = [], []
    real_eval, real_fwd = fused_kernels.ElementwiseChain.evaluate, profiling.run_forward
    monkeypatch.setattr(fused_kernels.ElementwiseChain, "evaluate",
                        lambda self, xp, ins: evaluated.append(1) or real_eval(self, xp, ins))
    monkeypatch.setattr(profiling, "run_forward", lambda xp, a, ops: kernels.append(a.op_type) or real_fwd(xp, a, ops))
    model = ProfiledCostModel(cache_path=tmp_path / "p.json", repeats=3, warmup=1, flush_interval_s=0)
    t = model.fused_time(chain, "forward", CPU)
    assert t > 0 and model.measurements == 1 and len(evaluated) == 4 and not kernels   # one numexpr pass per run
    assert model.fused_time(chain, "forward", CPU) == t and model.measurements == 1    # cached
    ratio = COST.fused_time(chain, "backward", CPU) / COST.fused_time(chain, "forward", CPU)
    assert model.fused_time(chain, "backward", CPU) == pytest.approx(t * ratio)
    again = ProfiledCostModel(cache_path=tmp_path / "p.json")
    assert again.fused_time(chain, "forward", CPU) == t and again.measurements == 0    # on disk
    # a group that is not one element-wise chain runs its members' kernels one after the other
    lin = FusedMember(*_linear(), (), False, (-1, -1))
    model.fused_time([lin, FusedMember(relu, (s,), (s,), (0,), False, (0,))], "forward", CPU)
    assert kernels[:2] == [OpType.LINEAR, OpType.RELU]


def _linear():
    from flexrt.ir.ops import LinearAttrs
    from flexrt.ir.tensor_shape import TensorShape
    return LinearAttrs(128, use_bias=False), (TensorShape((64, 32)), TensorShape((32, 128))), (TensorShape((64, 128)),)


def test_a_gpu_machine_falls_back_to_the_analytic_fused_time(tmp_path, dgx):
    from flexrt.simulator.cost_model import ProfiledCostModel
    s = data_parallel(mlp(), dgx, 2).with_fusion(FusionPlan((FusionGroup(("fc1", "r1")),)))
    a, p = Simulator(dgx, COST), Simulator(dgx, ProfiledCostModel(cache_path=tmp_path / "p.json"))
    assert a.time_full(s) == p.time_full(s)
