"""Gradient synchronization after the backward pass (``flexrt.simulator.sync_lowering``): in the
simulated timeline no weight's synchronization starts before its device's last backward-phase task
ends; delta equals full; training under it matches one device; the choice travels with the cost model
and the CLI; a 2bw pipeline is refused."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.cli import main
from flexrt.core import DataType
from flexrt.errors import ConfigError, StrategyError
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.simulator.sync_lowering import BARRIER, grad_sync_of, parse_grad_sync, with_grad_sync
from flexrt.simulator.task_graph import KIND_CODE, OwnerKind, TaskKind
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.pipeline import pipeline_strategy
from tests.runtime.test_central_law import MODELS, TOL, compare_with_one_device, machine, weights_for

__all__ = ["machine"]  # the fixture
AFTER = with_grad_sync(AnalyticCostModel(), "after_backward")


def _late_syncs(sim) -> tuple[int, int]:
    """(weight tasks that wait for a backward task, those of them starting before their device's
    last backward-phase task ends) in the last simulated timeline."""
    low = sim.lowering
    cols = low.graph.columns()
    ids, _, _, start, end = sim.engine.timeline()
    begin, finish = np.full(len(cols["kind"]), np.nan), np.full(len(cols["kind"]), np.nan)
    begin[ids], finish[ids] = start, end
    backward = np.isin(cols["kind"], [KIND_CODE[TaskKind.BACKWARD], KIND_CODE[TaskKind.RECOMPUTE]]) & cols["alive"] \
        & (cols["device"] < low.num_compute)
    last = {int(d): float(finish[backward & (cols["device"] == d)].max()) for d in np.unique(cols["device"][backward])}
    of_weight = np.array([k.kind is OwnerKind.WEIGHT for k in low.graph.owner_keys])[cols["owner"]]
    src, dst = low.core.edge_arrays()
    waits = backward[src] & of_weight[dst]
    early = [b for a, b in zip(src[waits], dst[waits]) if begin[b] < last[int(cols["device"][a])] - 1e-12]
    return int(waits.sum()), len(early)


def _strategies(name, machine, seed):
    pcg = MODELS[name](DataType.DT_FLOAT)[0].pcg
    return pcg, [data_parallel(pcg, machine), random_strategy(pcg, machine, seed),
                 pipeline_strategy(pcg, machine, 2, 2, "1f1b")]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 10**6))
def test_no_synchronization_starts_before_the_devices_backward_pass_ends(name, seed, machine):
    _, strategies = _strategies(name, machine, seed)
    for s in strategies:
        sim = Simulator(machine, AFTER)
        sim.full(s)
        waits, early = _late_syncs(sim)
        assert early == 0, (name, seed, waits, early)
        assert sum(1 for t in sim.graph.tasks.values() if t.name.startswith(BARRIER)) > 0 or waits == 0


def test_overlap_starts_synchronization_during_the_backward_pass(machine):
    """The default overlaps: data parallelism's first gradients are on their way before the backward
    pass ends, so the law above can fail; the barrier costs data parallelism its overlap."""
    pcg = MODELS["cnn"](DataType.DT_FLOAT)[0].pcg
    s = data_parallel(pcg, machine)
    over = Simulator(machine, AnalyticCostModel())
    t_over = over.time_full(s)
    assert _late_syncs(over)[1] > 0
    t_after = Simulator(machine, AFTER).time_full(s)
    assert t_after > t_over


def test_delta_equals_full(machine):
    pcg = MODELS["transformer"](DataType.DT_FLOAT)[0].pcg
    base = data_parallel(pcg, machine)
    sim = Simulator(machine, AFTER)
    sim.full(base)
    other = random_strategy(pcg, machine, 3)
    changed = {n for n in other.wiring().ops if other.view(n) != base.view(n) or other.shapes(n) != base.shapes(n)}
    assert sim.time_delta(other, changed) == pytest.approx(Simulator(machine, AFTER).time_full(other), rel=1e-12)


@pytest.mark.parametrize("name", ["mlp", "transformer"])
@pytest.mark.parametrize("kind", ["data", "random", "pipeline"])
def test_training_after_the_backward_pass_matches_one_device(name, kind, machine):
    m, loss = MODELS[name](DataType.DT_DOUBLE)
    pcg = m.pcg
    s = {"data": lambda: data_parallel(pcg, machine), "random": lambda: random_strategy(pcg, machine, 7),
         "pipeline": lambda: pipeline_strategy(pcg, machine, 2, 2, "1f1b")}[kind]()
    session = compare_with_one_device(f"{name} {kind}", pcg, s, machine, loss, TOL[DataType.DT_DOUBLE],
                                      weights_for(pcg, DataType.DT_DOUBLE), mode="threads", cost_model=AFTER)
    assert any(t.name.startswith(BARRIER) for t in session.simulator.graph.tasks.values())


def test_the_choice_travels_with_the_cost_model():
    base = AnalyticCostModel()
    assert grad_sync_of(base) == "overlap" and grad_sync_of(AFTER) == "after_backward"
    assert with_grad_sync(AFTER, "overlap") is base or with_grad_sync(AFTER, "overlap") == base
    assert grad_sync_of(pickle.loads(pickle.dumps(AFTER))) == "after_backward"
    from flexrt.simulator.collectives import with_comm_cost
    assert grad_sync_of(with_comm_cost(AFTER, "measured")) == "after_backward"
    assert parse_grad_sync("after-backward") == "after_backward"
    with pytest.raises(ConfigError, match="expected one of overlap, after_backward"):
        parse_grad_sync("later")


def test_a_2bw_pipeline_is_refused(machine):
    pcg = MODELS["mlp"](DataType.DT_FLOAT)[0].pcg
    with pytest.raises(StrategyError, match="2bw pipeline"):
        Simulator(machine, AFTER).time_full(pipeline_strategy(pcg, machine, 2, 2, "2bw"))


def test_cli(capsys):
    times = {}
    for g in ("overlap", "after-backward"):
        assert main(["simulate", "mlp", "-b", "64", "--machine", "dgx1_v100", "--data-parallel", "--grad-sync", g,
                     "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["grad_sync"] == g.replace("-", "_")
        times[g] = doc["iteration_time_s"]
    assert times["after-backward"] > times["overlap"]
    assert main(["search", "mlp", "-b", "64", "--machine", "dgx1_v100", "--algo", "pipeline", "--budget", "2",
                 "--pipeline-schedules", "1f1b, 2bw", "--grad-sync", "after-backward"]) == 1
    assert "--pipeline-schedules 2bw with --grad-sync after-backward" in capsys.readouterr().err
