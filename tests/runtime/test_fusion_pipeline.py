"""Fusion plans on pipelined strategies (a plan over the micro-batched copies, ``x.mb0``):

- the law: every schedule (GPipe, 1F1B, interleaved, ZB-H1) with the fusion policies' plans, with
  and without full recomputation, trains to one device's weights (float64, 1e-10);
- a group stays in one unit of the schedule (one stage, one micro-batch): others are refused by
  ``check_fusion`` naming both operators' units;
- strategy files keep the pipeline, the plan and the recompute set; ``simulate --pipeline
  --fusion`` simulates the fused pipeline.
"""

from __future__ import annotations

import json

import pytest

from flexrt.cli import main
from flexrt.core import DataType
from flexrt.search.fusion_policies import apply_policy
from flexrt.simulator.actions import Fused
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.strategy.config import wiring_of
from flexrt.strategy.fusion import FusionError, FusionGroup, FusionPlan, check_fusion
from flexrt.strategy.io import strategy_from_json, strategy_to_json
from flexrt.strategy.recompute import recompute_set

from .test_central_law import MODELS, PIPELINES, TOL, compare_with_one_device, machine, strategy_of, weights_for

__all__ = ["machine"]  # the fixture
F64 = DataType.DT_DOUBLE


def _fused_pipeline(model: str, kind: str, policy: str, machine, recompute: bool):
    m, loss = MODELS[model](F64)
    s = strategy_of(kind, m.pcg, machine)
    if recompute:
        s = s.with_recompute(recompute_set(wiring_of(m.pcg), "full", segment_ops=2))
    return m, loss, apply_policy(policy, s, machine, AnalyticCostModel())


@pytest.mark.parametrize("kind", PIPELINES)
@pytest.mark.parametrize("model, policy, recompute", [("transformer", "xla", False), ("cnn", "jax", True),
                                                      ("mlp", "jax", False), ("transformer", "jax", True)])
def test_fused_pipelines_train_like_one_device(model, policy, recompute, kind, machine):
    m, loss, s = _fused_pipeline(model, kind, policy, machine, recompute)
    assert s.fusion and s.pipeline is not None
    session = compare_with_one_device(f"{model} {kind} {policy}", m.pcg, s, machine, loss, TOL[F64],
                                      weights_for(m.pcg, F64))
    fused = [t for t in session.plan.tasks if isinstance(t.action, Fused)]
    assert len(fused) >= sum(len(session.simulator.lowering.layout(g.ops[0]).devices) for g in s.fusion.groups)
    rings = [g for g in session.plan.ring_groups.values() if g.segments > 1]
    assert len(rings) >= len(s.fusion.buckets) and (not s.fusion.buckets or rings)
    timed = [Simulator(machine, AnalyticCostModel(), detail=d, incremental=False).full(s) for d in (True, False)]
    assert timelines_equal(*timed)


def test_a_group_spanning_micro_batches_or_stages_is_refused(machine):
    m, _ = MODELS["transformer"](F64)
    s = strategy_of("1f1b", m.pcg, machine)
    plan = s.pipeline
    copies = [c for c in s.wiring().ops]
    by_unit = {}
    for c in copies:
        by_unit.setdefault(plan.unit_of(c), []).append(c)
    (u0, ops0), (u1, ops1) = [(u, ops) for u, ops in sorted(by_unit.items()) if u[0] == 0][:2]
    assert u0[0] == u1[0] and u0[1] != u1[1]
    with pytest.raises(FusionError, match=r"micro-batch 1 and .* micro-batch 0; a pipelined strategy's group stays "
                                          r"in one stage and one micro-batch"):
        check_fusion(s, FusionPlan((FusionGroup((ops0[-1], ops1[0])),)), machine)
    last = max(u[0] for u in by_unit)
    a, b = by_unit[(0, 0)][-1], by_unit[(last, 0)][0]
    with pytest.raises(FusionError):
        check_fusion(s, FusionPlan((FusionGroup((a, b)),)), machine)


def test_strategy_files_keep_pipeline_fusion_and_recompute(machine):
    m, _, s = _fused_pipeline("transformer", "1f1b", "xla", machine, True)
    doc = json.loads(json.dumps(strategy_to_json(s, machine)))
    assert {"pipeline", "fusion", "recompute"} <= set(doc)
    back = strategy_from_json(doc, m.pcg, machine, "p.json")
    assert back.fusion == s.fusion and back.recompute == s.recompute
    assert strategy_to_json(back, machine) == doc
    assert Simulator(machine, AnalyticCostModel()).time_full(back) == Simulator(machine, AnalyticCostModel()).time_full(s)


def test_simulate_cli_fuses_a_pipeline(capsys):
    base = ["simulate", "transformer", "-b", "16", "--machine", "dgx1_v100", "--pipeline", "2", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(base + ["--fusion", "xla", "--recompute", "full"]) == 0
    fused = json.loads(capsys.readouterr().out)
    assert fused["fusion"] == "xla" and fused["recompute"]["granularity"] == "full"
    assert fused["iteration_time_s"] != plain["iteration_time_s"]
