"""Activation recomputation (``flexrt.strategy.recompute``, ``flexrt.simulator.recompute_lowering``):

- the law: whatever the strategy (data, tensor, hybrid, pipelined) and whichever operators are
  recomputed, training reaches one device's weights (float64 to 1e-10: recomputation repeats the
  same forward, dropout masks included);
- memory: the runtime's measured peak equals the simulator's replay with recomputation, and full
  recomputation lowers the peak of a deep chain while adding one forward per recomputed piece;
- the policy: checkpoints at the model's cuts, selective keeps compute-bound operators;
- strategy files keep the recompute set; bad names are our errors (with a fusion plan:
  test_fusion_recompute.py).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import StrategyError
from flexrt.simulator.simulate import Simulator
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.config import wiring_of
from flexrt.strategy.io import strategy_from_json, strategy_to_json
from flexrt.strategy.recompute import Granularity, checkpoint_cuts, recompute_set

from .test_central_law import MODELS, TOL, compare_with_one_device, machine, strategy_of, weights_for
from .test_memory_peak import check_serial_exact, session_of

__all__ = ["machine"]  # the fixture
F64 = DataType.DT_DOUBLE


def _law(model: str, kind: str, granularity, machine, mode="serial", segment_ops=2):
    m, loss = MODELS[model](F64)
    s = strategy_of(kind, m.pcg, machine)
    names = recompute_set(wiring_of(m.pcg), granularity, segment_ops=segment_ops)
    assert names, f"{model}: nothing recomputed"
    compare_with_one_device(f"{model} {kind} recompute {granularity}", m.pcg, s.with_recompute(names), machine,
                            loss, TOL[F64], weights_for(m.pcg, F64), mode=mode)


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", ["data", "hybrid", "1f1b", "interleaved"])
def test_full_recomputation_trains_like_one_device(model, kind, machine):
    _law(model, kind, "full", machine)


@pytest.mark.parametrize("model", ["transformer", "cnn"])
def test_selective_recomputation_with_threads_trains_like_one_device(model, machine):
    _law(model, "gpipe", "selective", machine, mode="threads")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 10_000), data=st.data())
def test_any_recompute_set_under_a_random_strategy_trains_like_one_device(model, seed, data, machine):
    m, loss = MODELS[model](F64)
    ops = wiring_of(m.pcg).ops
    names = data.draw(st.sets(st.sampled_from(ops), min_size=1), label="recomputed")
    s = random_strategy(m.pcg, machine, seed).with_recompute(names)
    compare_with_one_device(f"{model} seed {seed} recompute {sorted(names)}", m.pcg, s, machine, loss, TOL[F64],
                            weights_for(m.pcg, F64))


@pytest.mark.parametrize("model, kind", [("mlp", "data"), ("transformer", "hybrid"), ("cnn", "1f1b"),
                                         ("dlrm", "data")])
def test_measured_peak_equals_the_replay_with_recomputation(model, kind):
    def strategy_fn(pcg):
        from flexrt.machine import load_machine
        s = strategy_of(kind, pcg, load_machine("dgx1_v100"))
        return s.with_recompute(recompute_set(wiring_of(pcg), "full", segment_ops=2))
    s, (inputs, labels) = session_of(model, strategy_fn)
    assert any(t.kind is TaskKind.RECOMPUTE for t in s.plan.tasks)
    check_serial_exact(s, inputs, labels)


def deep_chain(layers=12, batch=64, width=256):
    m = FFModel(FFConfig(["-b", str(batch)]))
    t = m.create_tensor([batch, width], DataType.DT_FLOAT)
    for i in range(layers):
        t = m.dense(t, width, ActiMode.AC_MODE_RELU, name=f"fc{i}")
    m.softmax(m.dense(t, 10, name="head"), name="sm")
    return m.pcg


def test_full_recomputation_lowers_peak_memory_and_adds_one_forward_per_piece(machine):
    pcg = deep_chain(batch=2048, width=64)     # activations dominate
    sim = Simulator(machine, AnalyticCostModel())
    plain = data_parallel(pcg, machine, 4)
    names = recompute_set(wiring_of(pcg), "full")
    assert checkpoint_cuts(wiring_of(pcg)) == wiring_of(pcg).ops[:-1]   # a chain: all but the output are cuts
    assert sorted(set(wiring_of(pcg).ops) - names) == ["fc11", "fc3", "fc7", "sm"]  # ceil(sqrt(14)) = 4 a segment
    before = sim.full(plain)
    after = sim.full(plain.with_recompute(names))
    kinds = [t.kind for t in sim.graph.tasks.values()]
    assert kinds.count(TaskKind.RECOMPUTE) == 4 * len(names)
    for d in range(4):
        assert after.peak_bytes[d] < 0.7 * before.peak_bytes[d], (before.peak_bytes[d], after.peak_bytes[d])
        assert after.memory_bytes[d]["activations"] < before.memory_bytes[d]["activations"]
    assert before.iteration_time_s < after.iteration_time_s
    assert after.compute_time_s == pytest.approx(
        before.compute_time_s + sum(t.exe_s for t in sim.graph.tasks.values() if t.kind is TaskKind.RECOMPUTE))


def test_policy_checkpoints_the_residual_stream_and_selective_keeps_matmuls():
    m, _ = MODELS["transformer"](F64)
    w = wiring_of(m.pcg)
    cuts = checkpoint_cuts(w)
    assert all(w.nodes[c].op_type.value in ("add", "layer_norm", "ew_add") or c.startswith(("res", "ln"))
               for c in cuts), cuts
    full = recompute_set(w, "full", segment_ops=1)
    assert set(full).isdisjoint(cuts) and len(full) == len(w.ops) - len(cuts) - (w.sinks[-1] not in cuts)
    pcg = deep_chain(layers=4, batch=256, width=1024)      # big matmuls: compute-bound, not selected
    assert recompute_set(wiring_of(pcg), "selective", segment_ops=5) == frozenset()
    assert recompute_set(w, Granularity.NONE) == frozenset()


def test_strategy_files_keep_the_recompute_set(machine):
    m, _ = MODELS["transformer"](F64)
    names = recompute_set(wiring_of(m.pcg), "full", segment_ops=2)
    for kind in ["data", "1f1b"]:
        s = strategy_of(kind, m.pcg, machine).with_recompute(names)
        doc = json.loads(json.dumps(strategy_to_json(s, machine)))
        assert doc["recompute"] == sorted(names)
        back = strategy_from_json(doc, m.pcg, machine, "f.json")
        assert back.recompute == names
        assert strategy_to_json(back, machine) == doc


@pytest.mark.parametrize("bad, fragment", [(["nope"], "recompute: 'nope' is not a compute operator"),
                                           ([3], "recompute[0] must be a string"),
                                           ("fc1", "recompute must be a list")])
def test_bad_recompute_entries_are_named(bad, fragment, machine):
    m, _ = MODELS["mlp"](F64)
    doc = strategy_to_json(data_parallel(m.pcg, machine, 2), machine)
    doc["recompute"] = bad
    with pytest.raises(StrategyError, match="f.json: recompute") as e:
        strategy_from_json(doc, m.pcg, machine, "f.json")
    assert fragment in str(e.value) and "recompute: recompute" not in str(e.value)


def test_unknown_granularity_is_our_error():
    m, _ = MODELS["mlp"](F64)
    with pytest.raises(StrategyError, match="valid: none, full, selective"):
        recompute_set(wiring_of(m.pcg), "sometimes")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 10_000), data=st.data())
def test_the_graph_with_and_without_detail_times_alike(model, seed, data, machine):
    """A search simulates without detail (no actions or parts), the runtime's graph has them: the
    recomputation's dependencies must not depend on which."""
    from flexrt.simulator.simulate import timelines_equal
    m, _ = MODELS[model](F64)
    ops = wiring_of(m.pcg).ops
    names = data.draw(st.sets(st.sampled_from(ops), min_size=1), label="recomputed")
    s = random_strategy(m.pcg, machine, seed).with_recompute(names)
    full = [Simulator(machine, AnalyticCostModel(), detail=d, incremental=False).full(s) for d in (True, False)]
    assert timelines_equal(*full)
