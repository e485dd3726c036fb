"""A fusion plan and activation recomputation in one strategy (DisCo's groups and buckets with
Megatron-style recomputation):

- the law: every named plan of the fusion law's models, with full recomputation, and random valid
  plans with random recompute sets, train to one device's weights (float64, 1e-10);
- a forward group whose members one segment recomputes is recomputed as one fused task, timed as
  the fused forward of those members;
- a backward group merging a segment's backward with its consumer's moves the segment's trigger to
  what enters the fused task (else a cycle), and the graph times alike with and without detail;
- memory: the runtime's measured peak equals the simulator's replay;
- strategy files keep both.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.simulator.actions import Fused
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy import data_parallel
from flexrt.strategy.config import wiring_of
from flexrt.strategy.fusion import FusionGroup, FusionPlan
from flexrt.strategy.io import strategy_from_json, strategy_to_json
from flexrt.strategy.recompute import recompute_set

from .test_fusion_central_law import (CASES, MACHINE, _valid, fused_tasks, pcg_of, plan_of, random_plans,
                                      train_like_one_device)
from .test_memory_peak import check_serial_exact, session_of

G = FusionGroup


def _recomputed(model: str, strategy, plan, names=None):
    names = recompute_set(wiring_of(pcg_of(model)), "full", segment_ops=2) if names is None else names
    return strategy.with_fusion(plan).with_recompute(names)


@pytest.mark.parametrize("model, name", CASES)
def test_fused_plans_with_full_recomputation_train_like_one_device(model, name):
    strategy = data_parallel(pcg_of(model), MACHINE, 4)
    s = _recomputed(model, strategy, plan_of(model, name, strategy))
    session = train_like_one_device(model, s)
    assert any(t.kind is TaskKind.RECOMPUTE for t in session.plan.tasks)
    plan = s.fusion
    assert len(fused_tasks(session)) >= 4 * len(plan.groups)  # with fused recomputations
    assert len([g for g in session.plan.ring_groups.values() if g.segments > 1]) == len(plan.buckets)


def test_a_forward_group_recomputed_by_one_segment_is_one_fused_task():
    """(fc1, s1, s2, t1) fused and all four recomputed: one RECOMPUTE task per piece runs the four
    forwards again, timed as their fused forward (less than their four recompute tasks)."""
    strategy = data_parallel(pcg_of("mlp"), MACHINE, 4)
    group = ("fc1", "s1", "s2", "t1")
    plan = FusionPlan((G(group),))
    fused = _recomputed("mlp", strategy, plan, group)
    session = train_like_one_device("mlp", fused)
    rec = [t for t in session.plan.tasks if t.kind is TaskKind.RECOMPUTE]
    assert len(rec) == 4 and all(isinstance(t.action, Fused) for t in rec)
    assert [m.node for m in rec[0].action.members] == list(group)
    sim = Simulator(MACHINE, AnalyticCostModel(), detail=True)
    sim.full(fused)
    tasks = list(sim.graph.tasks.values())
    again = {t.action.members[0].outputs[0].key.piece: t.exe_s for t in tasks
             if t.kind is TaskKind.RECOMPUTE and isinstance(t.action, Fused)}
    first = {t.action.members[0].outputs[0].key.piece: t.exe_s for t in tasks
             if t.kind is TaskKind.FORWARD and isinstance(t.action, Fused)}
    assert len(again) == 4 and again == pytest.approx(first)   # the same kernel, run again
    plain = Simulator(MACHINE, AnalyticCostModel(), detail=True)
    plain.full(strategy.with_recompute(group))
    unfused = [t.exe_s for t in plain.graph.tasks.values() if t.kind is TaskKind.RECOMPUTE]
    assert len(unfused) == 16 and sum(again.values()) < sum(unfused)


def test_a_backward_group_across_a_segment_boundary_moves_the_trigger():
    """fc2 and r2 recomputed (one segment), their backward fused with fc3's (r2's consumer outside the
    segment): the recomputation waits for what enters the fused backward, not for fc3's backward."""
    strategy = data_parallel(pcg_of("mlp"), MACHINE, 4)
    plan = FusionPlan((G(("fc2", "r2", "fc3"), "backward"),))
    s = _recomputed("mlp", strategy, plan, ("fc2", "r2"))
    session = train_like_one_device("mlp", s)
    assert sum(t.kind is TaskKind.RECOMPUTE for t in session.plan.tasks) == 8
    full = [Simulator(MACHINE, AnalyticCostModel(), detail=d, incremental=False).full(s) for d in (True, False)]
    assert timelines_equal(*full)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data(), model=st.sampled_from(["mlp", "cnn", "transformer"]))
def test_random_plans_and_recompute_sets_train_like_one_device(data, model):
    strategy = data_parallel(pcg_of(model), MACHINE, 4)
    plan = data.draw(random_plans(strategy))
    if not _valid(strategy, plan):
        plan = FusionPlan(plan.groups)
        if not _valid(strategy, plan):
            plan = FusionPlan()
    ops = wiring_of(pcg_of(model)).ops
    names = data.draw(st.sets(st.sampled_from(ops), min_size=1), label="recomputed")
    s = strategy.with_fusion(plan).with_recompute(names)
    full = [Simulator(MACHINE, AnalyticCostModel(), detail=d, incremental=False).full(s) for d in (True, False)]
    assert timelines_equal(*full)
    train_like_one_device(model, s)


def test_measured_peak_equals_the_replay_with_fusion_and_recomputation():
    def strategy_fn(pcg):
        s = data_parallel(pcg, MACHINE, 4)
        plan = FusionPlan((G(("fc1", "fc2")), G(("fc2", "fc3"), "backward")))
        return s.with_fusion(plan).with_recompute(recompute_set(wiring_of(pcg), "full", segment_ops=2))
    s, (inputs, labels) = session_of("mlp", strategy_fn)
    assert any(t.kind is TaskKind.RECOMPUTE for t in s.plan.tasks)
    assert any(isinstance(t.action, Fused) for t in s.plan.tasks)
    check_serial_exact(s, inputs, labels)


def test_strategy_files_keep_fusion_and_recomputation():
    strategy = data_parallel(pcg_of("mlp"), MACHINE, 4)
    s = _recomputed("mlp", strategy, plan_of("mlp", "everything", strategy))
    doc = json.loads(json.dumps(strategy_to_json(s, MACHINE)))
    assert doc["recompute"] == sorted(s.recompute) and doc["fusion"]
    back = strategy_from_json(doc, pcg_of("mlp"), MACHINE, "f.json")
    assert back.recompute == s.recompute and back.fusion == s.fusion
    assert strategy_to_json(back, MACHINE) == doc


def test_segments_a_plan_recomputes_together_are_charged_together():
    """The zoo transformer under full recomputation has two segments; xla's backward groups join them
    into one trigger group, so both are recomputed, and live, at once: the static charge grows by
    what the joined group holds beyond the largest segment, and the replayed peak grows too."""
    from flexrt.model import load_model
    from flexrt.search.fusion_policies import apply_policy
    from flexrt.simulator.recompute_lowering import fused_working_set, trigger_groups
    base = load_model("transformer", ["-b", "16"]).model.pcg
    cost = AnalyticCostModel()
    s = data_parallel(base, MACHINE)
    names = recompute_set(wiring_of(base), "full")
    fused = apply_policy("xla", s, MACHINE, cost)
    sim = Simulator(MACHINE, cost)
    alone = sim.full(s.with_recompute(names))
    both = sim.full(fused.with_recompute(names))
    low = sim.lowering
    assert len(trigger_groups(low, fused.fusion)) < len(low.recompute_segments)
    extra = fused_working_set(low, trigger_groups(low, fused.fusion))
    assert extra and all(v > 0 for v in extra.values())
    for d, v in extra.items():
        assert both.memory_bytes[d]["activations"] == alone.memory_bytes[d]["activations"] + v
    assert max(both.peak_bytes.values()) > max(alone.peak_bytes.values())


@pytest.mark.parametrize("policy", ["xla", "jax"])
def test_a_policy_on_a_recomputing_strategy_keeps_its_segments_apart(policy):
    """Applied after recomputation is chosen, the policies' backward groups stay within one segment
    (or outside them all): no segments are joined, and the static activations stay recomputation's."""
    from flexrt.model import load_model
    from flexrt.search.fusion_policies import apply_policy
    from flexrt.simulator.recompute_lowering import trigger_groups
    base = load_model("transformer", ["-b", "16"]).model.pcg
    cost = AnalyticCostModel()
    s = data_parallel(base, MACHINE).with_recompute(recompute_set(wiring_of(base), "full"))
    fused = apply_policy(policy, s, MACHINE, cost)
    assert any(g.phase == "backward" for g in fused.fusion.groups)
    sim = Simulator(MACHINE, cost, detail=False)
    fused_r = sim.full(fused)
    low = sim.lowering
    assert trigger_groups(low, fused.fusion) is low.recompute_segments
    alone = Simulator(MACHINE, cost, detail=False).full(s)
    assert all(fused_r.memory_bytes[d]["activations"] == alone.memory_bytes[d]["activations"] for d in range(8))
