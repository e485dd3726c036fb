"""PipeDream-2BW (``2bw``): 1F1B without a flush, double-buffered weights.

- the bubble law: with uniform stages and free communication the steady state has no bubble, the
  period being each device's work of one iteration, and 1F1B's flushed iteration is (m + p - 1) / m
  times longer;
- the unrolled graph: two iterations, 2m micro-batches, a second set of weights, no dependency of the
  second iteration on the first one's update; the period lies between the busiest device's work and
  one flushed iteration on a real machine;
- memory: a second version of the weights in the optimizer state, and the runtime's measured peak
  equals the simulator's replay;
- the update rule: ``delayed`` gives W(t+1) = W(t) - lr grad f(W(t-1)), and 2BW's weights part from
  synchronous SGD's after the first step;
- strategy files and the CLI take the schedule.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from flexrt.cli import main
from flexrt.core import DataType
from flexrt.experiments.host import UniformCost
from flexrt.kernels.optimizers import delayed, sgd_update
from flexrt.machine import load_machine, local_machine
from flexrt.model.loader import load_model
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy.io import strategy_from_json, strategy_to_json
from flexrt.strategy.pipeline import pipeline_strategy
from flexrt.strategy.pipeline_2bw import ITERATION_SUFFIX, unrolled

from tests.simulator.test_pipeline_simulation import chain


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (3, 5), (4, 4)])
def test_the_steady_state_has_no_bubble(p, m):
    machine = local_machine(p)
    pcg = chain(2 * p, 4 * m)
    times = {}
    for schedule in ("2bw", "1f1b"):
        sim = Simulator(machine, UniformCost(), "sgd")
        r = sim.full(pipeline_strategy(pcg, machine, p, m, schedule))
        times[schedule] = r.iteration_time_s
        work = max(v for k, v in r.busy_s.items() if not k.startswith("link"))
    assert work == pytest.approx(m * 2 * 3e-3, rel=1e-6)        # 2 layers a stage, 1 + 2 ms each
    assert times["2bw"] == pytest.approx(work, rel=1e-6)
    assert times["1f1b"] / times["2bw"] == pytest.approx((m + p - 1) / m, rel=1e-6)


def test_the_unrolled_graph_is_two_iterations_on_two_weight_sets():
    machine = load_machine("dgx1_v100")
    base = load_model("transformer", ["-b", "16"]).model.pcg
    s = pipeline_strategy(base, machine, 2, 4, "2bw")
    u = unrolled(s)
    assert u.pipeline.micro_batches == 8 and u.pipeline.schedule.value == "1f1b"
    weights = [n.name for n in s.base.nodes if n.op_type.value == "weight"]
    names = {n.name for n in u.base.nodes}
    assert all(w in names and w + ITERATION_SUFFIX + "1" in names for w in weights)
    assert len(u.wiring().ops) == 2 * len(s.wiring().ops)
    # every second-iteration copy is configured as its first-iteration twin
    for name in s.wiring().ops[:20]:
        base_name, j = name.rsplit(".mb", 1)
        twin = f"{base_name}.mb{int(j) + 4}"
        assert u.configs[u.base.node_by_name(twin).id] == s.configs[s.base.node_by_name(name).id]


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (2, 8)])
def test_the_period_lies_between_the_busiest_devices_work_and_a_flushed_iteration(p, m):
    machine = load_machine("dgx1_v100")
    base = load_model("transformer", ["-b", "16"]).model.pcg
    sim = Simulator(machine, AnalyticCostModel(), detail=False)
    flushed = sim.time_full(pipeline_strategy(base, machine, p, m, "1f1b"))
    r = sim.full(pipeline_strategy(base, machine, p, m, "2bw"))
    work = max(v for k, v in r.busy_s.items() if not k.startswith("link"))
    assert work * (1 - 1e-9) <= r.iteration_time_s < flushed


def test_a_second_weight_version_is_held_and_the_runtime_measures_what_the_replay_predicts():
    from tests.runtime.test_memory_peak import check_serial_exact, session_of
    machine = load_machine("dgx1_v100")
    base = load_model("transformer", ["-b", "16"]).model.pcg
    plain = Simulator(machine, AnalyticCostModel(), "momentum").full(pipeline_strategy(base, machine, 2, 4, "1f1b"))
    two = Simulator(machine, AnalyticCostModel(), "momentum").full(pipeline_strategy(base, machine, 2, 4, "2bw"))
    for d, mem in two.memory_bytes.items():
        assert mem["optimizer_state"] == 2 * mem["weights"] == 2 * plain.memory_bytes[d]["weights"]
    s, (inputs, labels) = session_of("mlp", lambda pcg: pipeline_strategy(pcg, machine, 2, 4, "2bw"))
    check_serial_exact(s, inputs, labels)


def test_delayed_applies_the_gradient_of_the_weights_one_step_older():
    """f(w) = |w - c|^2 / 2, grad f(w) = w - c: W(t+1) = W(t) - lr (W(t-1) - c), W(-1) = W(0)."""
    rng = np.random.default_rng(0)
    c, w0, lr = rng.standard_normal(5), rng.standard_normal(5), 0.3
    step = delayed(lambda xp, w, g, state: sgd_update(xp, w, g, state, lr=lr))
    w, state = w0.copy(), {}
    want_prev, want = w0.copy(), w0.copy()
    for _ in range(6):
        step(np, w, w - c, state)                     # the forwards read w: W(t-1)
        want_prev, want = want, want - lr * (want_prev - c)
        np.testing.assert_allclose(state["latest"], want, rtol=1e-14)
        np.testing.assert_allclose(w, want_prev, rtol=1e-14)


def test_2bw_trains_on_weights_one_step_old():
    from tests.runtime.test_central_law import MODELS, SGD, batch, weights_for
    from flexrt.runtime.session import Session
    machine = load_machine("dgx1_v100")
    m, loss = MODELS["mlp"](DataType.DT_DOUBLE)
    inputs, labels = batch(m.pcg, loss)
    losses = {}
    for schedule in ("1f1b", "2bw"):
        s = Session(pipeline_strategy(m.pcg, machine, 2, 4, schedule), machine, loss=loss,
                    weights=weights_for(m.pcg, DataType.DT_DOUBLE), **SGD)
        losses[schedule] = [s.step(inputs, labels).loss for _ in range(3)]
    one, two = losses["1f1b"], losses["2bw"]
    assert one[0] == pytest.approx(two[0], rel=1e-12) and two[1] == pytest.approx(one[0], rel=1e-12)
    assert abs(one[2] - two[2]) > 1e-9                  # the second step already read older weights


def test_strategy_files_and_the_cli_take_the_schedule(capsys):
    machine = load_machine("dgx1_v100")
    base = load_model("transformer", ["-b", "16"]).model.pcg
    s = pipeline_strategy(base, machine, 2, 4, "2bw")
    doc = json.loads(json.dumps(strategy_to_json(s, machine)))
    assert doc["pipeline"]["schedule"] == "2bw"
    back = strategy_from_json(doc, base, machine, "p.json")
    assert back.pipeline.schedule.delays_updates and strategy_to_json(back, machine) == doc
    cmd = ["simulate", "transformer", "-b", "16", "--machine", "dgx1_v100", "--pipeline", "2", "--json"]
    assert main(cmd + ["--schedule", "2bw"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert main(cmd) == 0
    flushed = json.loads(capsys.readouterr().out)
    assert two["iteration_time_s"] < flushed["iteration_time_s"]


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8)])
def test_two_iterations_are_already_the_steady_state(p, m):
    """One more iteration unrolled adds what the second added (within 3%): the period measured on two
    iterations is the steady state's."""
    machine = load_machine("dgx1_v100")
    base = load_model("transformer", ["-b", "16"]).model.pcg
    s = pipeline_strategy(base, machine, p, m, "2bw")
    sim = Simulator(machine, AnalyticCostModel(), detail=False, incremental=False)
    t = [sim.time_full(unrolled(s, k)) for k in (1, 2, 3)]
    assert t[2] - t[1] == pytest.approx(t[1] - t[0], rel=0.03)
    assert Simulator(machine, AnalyticCostModel(), detail=False).time_full(s) >= t[1] - t[0]


def test_disco_scores_a_2bw_pipelines_plans_by_their_steady_state():
    from flexrt.search.disco import disco
    machine = load_machine("dgx1_v100")
    base = load_model("transformer", ["-b", "16"]).model.pcg
    s = pipeline_strategy(base, machine, 2, 4, "2bw")
    cost = AnalyticCostModel()
    r = disco(base, machine, cost, budget=8, initial=[s], progress=False)
    assert r.strategy.pipeline.schedule.delays_updates
    assert r.cost_s == pytest.approx(Simulator(machine, cost, detail=False).time_full(r.strategy), rel=1e-12)
    assert r.cost_s <= Simulator(machine, cost, detail=False).time_full(s) * (1 + 1e-12)
