"""The measured-cost model: runtime-traced task times, keyed as the lowering asks its cost model.

Laws: every task whose key was harvested is simulated at exactly the median of its traced
durations; a key never harvested gets the base model's time x its kind's fitted ratio; delta
simulation equals full simulation with it; the table round-trips through its file exactly; bad
files raise ConfigError."""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import ConfigError
from flexrt.machine import local_machine
from flexrt.model.accuracy import MODELS, batch_for, validation_strategies
from flexrt.runtime.session import Session
from flexrt.simulator.cost_model import AnalyticCostModel, has_linear_transfers
from flexrt.ir import TensorShape
from flexrt.simulator.measured_costs import (RENDEZVOUS_BYTES, MeasuredCostModel, MeasuredTimes, harvest, op_key,
                                            update_key)
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy import data_parallel, random_strategy
from tests.simulator.delta_law import random_changes

BASE = AnalyticCostModel()
MACHINE = local_machine(2)


@pytest.fixture(scope="module")
def harvested():
    build, batch = MODELS["mlp"]
    pcg = build(batch)
    strategy = data_parallel(pcg, MACHINE, 2)
    session = Session(strategy, MACHINE, cost_model=BASE, optimizer="sgd", lr=0.01)
    inputs, labels = batch_for(session.plan, batch)
    times = MeasuredTimes("numpy")
    runs = [session.step(inputs, labels) for _ in range(3)]
    for r in runs:
        assert harvest(times, session.simulator, session.plan.tasks, r.end - r.start, session.optimizer) > 0
    times.fit(BASE, MACHINE)
    return pcg, strategy, session, runs, times


def test_harvested_tasks_are_simulated_at_their_median_traced_time(harvested):
    pcg, strategy, session, runs, times = harvested
    sim = Simulator(MACHINE, MeasuredCostModel(BASE, times), "sgd")
    sim.time_full(strategy)
    by_key: dict = {}
    for t, *durations in zip(session.plan.tasks, *[r.end - r.start for r in runs]):
        task = session.simulator.graph.task(t.id)
        if task.kind in (TaskKind.FORWARD, TaskKind.BACKWARD) and task.node:
            lay = session.simulator.lowering.layout(task.node)
            attrs, ins, outs = lay.classes[lay.piece_class[task.piece]]
            key = op_key(task.kind.value, attrs, ins, outs, MACHINE.devices[0].spec.name)
            by_key.setdefault((task.node, task.piece, task.kind), (key, []))[1].extend(durations)
    assert by_key
    checked = 0
    for (node, piece, kind), (key, _) in by_key.items():
        want = times.get(key)
        low = sim.lowering
        tasks = low.op_tasks[node][0 if kind is TaskKind.FORWARD else 1]
        got = sim.graph.task(tasks[piece]).exe_s
        assert got == pytest.approx(want, rel=1e-12)
        checked += 1
    assert checked >= 8


def test_a_key_never_measured_is_the_base_time_times_its_kinds_ratio(harvested):
    pcg, strategy, session, runs, times = harvested
    assert {"forward", "backward", "update", "forward:linear"} <= set(times.fits)
    cost = MeasuredCostModel(BASE, times)
    other = validation_strategies(pcg, MACHINE, ())[1][1]          # model parallel: other piece shapes
    low = Simulator(MACHINE, cost, "sgd")
    low.time_full(other)
    spec = MACHINE.devices[0].spec
    lay = low.lowering.layout("fc1")
    attrs, ins, outs = lay.classes[lay.piece_class[0]]
    assert times.get(op_key("forward", attrs, ins, outs, spec.name)) is None
    t = cost.op_times(attrs, ins, outs, spec)
    base = BASE.op_times(attrs, ins, outs, spec)
    for phase, x in (("forward", base.forward_s), ("backward", base.backward_s)):
        a, b, c = times.fits[f"{phase}:linear"]
        assert getattr(t, f"{phase}_s") == pytest.approx(a + b * x ** c, rel=1e-12)
    assert t.source == "measured+scaled" and cost.misses > 0


@pytest.mark.parametrize("dispatch", [0.0, 30e-6])
def test_a_fused_task_never_measured_is_its_members_measured_times_scaled_by_the_bases_fusion(harvested, dispatch):
    """Members' measured times (less the time per task) x the base's fused / summed ratio, plus the
    time per task once; a measured fused key is its median, plus the time per task."""
    from flexrt.simulator.cost_model import FusedMember
    from flexrt.simulator.measured_costs import fused_key
    pcg, strategy, session, runs, times = harvested
    times.dispatch_s = dispatch
    try:
        cost = MeasuredCostModel(BASE, times)
        spec = MACHINE.devices[0].spec
        low = session.simulator.lowering
        lay1, lay2 = low.layout("fc1"), low.layout("fc2")
        a1, i1, o1 = lay1.classes[lay1.piece_class[0]]
        a2, i2, o2 = lay2.classes[lay2.piece_class[0]]
        members = [FusedMember(a1, tuple(i1), tuple(o1), (), False, (-1, -1, -1)),
                   FusedMember(a2, tuple(i2), tuple(o2), (0,), False, (0, -1, -1))]
        for phase in ("forward", "backward"):
            own = [getattr(cost.op_times(m.attrs, list(m.inputs), list(m.outputs), spec), f"{phase}_s") - dispatch
                   for m in members]
            alone = sum(getattr(BASE.op_times(m.attrs, list(m.inputs), list(m.outputs), spec), f"{phase}_s")
                        for m in members)
            want = sum(own) * BASE.fused_time(members, phase, spec) / alone + dispatch
            assert cost.fused_time(members, phase, spec) == pytest.approx(want, rel=1e-12)
            assert BASE.fused_time(members, phase, spec) < alone      # the analytic base saves the intermediates
        times.add(fused_key(members, "forward", spec.name), 123e-6)
        assert cost.fused_time(members, "forward", spec) == pytest.approx(123e-6 + dispatch, rel=1e-12)
    finally:
        times.dispatch_s = 0.0
        times.samples.pop(fused_key(members, "forward", spec.name), None)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_delta_simulation_equals_full_with_measured_costs(harvested, seed):
    pcg, strategy, _, _, times = harvested
    cost = MeasuredCostModel(BASE, times)
    sim = Simulator(MACHINE, cost, "sgd")
    sim.full(strategy)
    for strategy, changed in random_changes(pcg, MACHINE, strategy, seed, 4):
        assert timelines_equal(sim.delta(strategy, {changed}), Simulator(MACHINE, cost, "sgd").full(strategy))


def test_the_table_round_trips_through_its_file(harvested, tmp_path):
    times = harvested[4]
    times.strategies = ["mlp/data2"]
    path = tmp_path / "times.json"
    times.save(path)
    again = MeasuredTimes.load(path)
    assert again.to_json() == times.to_json()
    assert all(again.get(k) == times.get(k) for k in times.samples)


@pytest.mark.parametrize("a, b, c", [(0.0, 3.0, 1.0), (0.0, 0.02, 0.7), (0.0, 40.0, 1.3)])
def test_fit_recovers_a_known_power_law(a, b, c):
    times = MeasuredTimes("numpy")
    spec = MACHINE.devices[0].spec
    for n in (16, 128, 512, 1024, 2048):
        w = TensorShape((n, n))
        times.add(update_key(w, "sgd", spec.name), a + b * BASE.update_time(w, spec) ** c)
    fits = times.fit(BASE, MACHINE)
    assert set(fits) == {"update"}
    assert fits["update"] == (pytest.approx(a, abs=1e-9), pytest.approx(b, rel=1e-6), pytest.approx(c, rel=1e-9))
    w = TensorShape((1000, 3))
    x = BASE.update_time(w, spec)
    assert times.predict("update", None, x) == pytest.approx(a + b * x ** c)


@pytest.mark.parametrize("dispatch, message, rendezvous", [(0.0, 0.0, 0.0), (14e-6, 0.0, 0.0), (6e-6, 30e-6, 0.0),
                                                          (0.0, 20e-6, 0.0), (6e-6, 10e-6, 40e-6), (0.0, 0.0, 50e-6)])
def test_fit_overheads_recovers_the_runtimes_time_per_task_and_message(harvested, dispatch, message, rendezvous):
    pcg, strategy, _, _, times = harvested
    others = [random_strategy(pcg, MACHINE, seed) for seed in range(5)] + [strategy]
    times.dispatch_s, times.message_s, times.rendezvous_s = dispatch, message, rendezvous
    truth = [(s, Simulator(MACHINE, MeasuredCostModel(BASE, times), "sgd").time_full(s)) for s in others]
    times.dispatch_s = times.message_s = times.rendezvous_s = 0.0
    # linearized (one simulated step each): exact where the critical path keeps its tasks, close otherwise;
    # what it promises is simulated iterations that match the measured ones
    got = times.fit_overheads(BASE, MACHINE, truth)
    fitted = [Simulator(MACHINE, MeasuredCostModel(BASE, times), "sgd").time_full(s) for s in others]
    assert max(abs(f / t - 1) for f, (_, t) in zip(fitted, truth)) < 0.02
    assert got[0] == pytest.approx(dispatch, abs=5e-6)
    cost = MeasuredCostModel(BASE, times)
    spec = MACHINE.devices[0].spec
    w = TensorShape((300, 7))
    assert cost.update_time(w, spec) == pytest.approx(times.predict("update", None, BASE.update_time(w, spec)) + got[0])
    assert cost.ring_sum_time(w, spec) == pytest.approx(BASE.reduce_time(w, 2, spec) + got[0])
    link = MACHINE.links[0]
    assert cost.transfer_time(link, 1000) == pytest.approx(BASE.transfer_time(link, 1000) + got[1])
    big = RENDEZVOUS_BYTES
    assert cost.transfer_time(link, big) == pytest.approx(BASE.transfer_time(link, big) + got[1] + got[2])
    assert has_linear_transfers(cost) == (got[1] == 0 and got[2] == 0)
    times.dispatch_s = times.message_s = times.rendezvous_s = 0.0


def test_few_keys_give_the_median_ratio():
    times = MeasuredTimes("numpy")
    spec = MACHINE.devices[0].spec
    for n, r in ((16, 2.0), (64, 4.0)):
        w = TensorShape((n, n))
        times.add(update_key(w, "sgd", spec.name), r * BASE.update_time(w, spec))
    assert times.fit(BASE, MACHINE) == {"update": (0.0, pytest.approx(8 ** 0.5), 1.0)}   # geometric median of 2, 4


@pytest.mark.parametrize("text, match", [
    ("not json", "not a measured-times file"),
    ('{"format": 99}', "format 1"),
    ('{"format": 1, "backend": "numpy", "host": "h", "samples": {"k": ["x"]}}', "bad measured-times entry"),
    ('{"format": 1, "backend": "numpy", "host": "h", "samples": {"k": [-1.0]}}', "bad measured-times entry|seconds"),
])
def test_bad_files_raise_config_errors(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        MeasuredTimes.load(path)
    with pytest.raises(ConfigError, match="no such measured-times file"):
        MeasuredTimes.load(tmp_path / "missing.json")


def test_measured_cost_model_refuses_a_table_of_the_wrong_type():
    with pytest.raises(ConfigError, match="expected MeasuredTimes"):
        MeasuredCostModel(BASE, {"k": 1.0})
