"""``--comm-cost measured``: a ring AllReduce of g devices on k nodes takes the machine's measured
C x + D for (g, k) (derived from the ring model where (g, k) was not measured), a gradient bucket
pays D once, delta simulation still equals full simulation, the default is unchanged, and a machine
without fits is refused saying how to measure them."""

from __future__ import annotations

import pickle

import pytest

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.errors import ConfigError
from flexrt.machine import load_machine
from flexrt.machine.machine import Collective, CollectiveFit
from flexrt.simulator.collectives import (CommCost, MeasuredComm, comm_cost_of, derive_fit, ring_model,
                                          with_comm_cost)
from flexrt.simulator.cost_model import AnalyticCostModel, ProfiledCostModel, has_linear_transfers
from flexrt.simulator.lowering import Lowering
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.model import load_model
from flexrt.strategy import data_parallel
from flexrt.strategy.fusion import FusionPlan
from tests.simulator.delta_law import random_changes

from ..machine.test_collectives_yaml import BASE, GOOD

COST = AnalyticCostModel()
# measured within a node: 2 and 4 devices; across nodes: 2 devices on 2 nodes
FITS = GOOD + "    - {devices: 2, nodes: 2, c_ns_per_byte: 1.0, d_us: 40}\n"


def fit(g, k, c_ns, d_us):
    return CollectiveFit(Collective.ALLREDUCE, g, k, c_ns * 1e-9, d_us * 1e-6)


@pytest.fixture(scope="module")
def fits_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("comm") / "fits.yaml"
    path.write_text(FITS)
    return str(path)


def dense_model(batch: int, widths=(256,)):
    """Dense layers without bias (one weight each) and a softmax: one ring AllReduce per layer."""
    m = FFModel(FFConfig([]))
    t = m.create_tensor([batch, 64], DataType.DT_FLOAT)
    for i, w in enumerate(widths):
        t = m.dense(t, w, use_bias=False, name=f"fc{i}")
    m.softmax(t, name="sm")
    return m.pcg


def ring_spans(sim, result) -> dict:
    """Per AllReduce (or bucket): (first send hop's start, last sum's end, hop durations)."""
    tl, tasks, out = result.timeline, sim.graph.tasks, {}
    for t, s, e in zip(tl["ids"].tolist(), tl["start"].tolist(), tl["end"].tolist()):
        name = tasks[t].name
        if " ring " not in name:
            continue
        ring = name.split(" ring ")[0]
        lo, hi, hops = out.get(ring, (float("inf"), 0.0, []))
        out[ring] = (min(lo, s) if " hop " in name else lo, max(hi, e) if " sum @" in name else hi,
                     hops + ([e - s] if " hop " in name else []))
    return out


def test_ring_model_and_derived_fits():
    within = [fit(2, 1, 0.2, 15), fit(4, 1, 0.3, 45)]
    a, b = ring_model(within)  # C_g = a 2(g-1)/g, D_g = b 2(g-1): (0.2 + 0.3 * 1.5) / (1 + 1.5^2), 300 / 40
    assert (a, b) == (pytest.approx(0.2e-9), pytest.approx(7.5e-6))
    measured, was = derive_fit(within + [fit(2, 2, 1.0, 40)], 4, 1)
    assert was and measured == within[1]
    derived, was = derive_fit(within + [fit(2, 2, 1.0, 40)], 3, 1)  # from the groups within one node only
    assert not was and (derived.devices, derived.nodes, derived.r2) == (3, 1, None)
    assert (derived.c_s_per_byte, derived.d_s) == (pytest.approx(0.2e-9 * 4 / 3), pytest.approx(30e-6))
    across, _ = derive_fit(within + [fit(2, 2, 1.0, 40)], 8, 2)  # from the one group across nodes
    assert (across.c_s_per_byte, across.d_s) == (pytest.approx(1.75e-9), pytest.approx(280e-6))
    anywhere, _ = derive_fit(within, 8, 4)  # no group on 4 nodes: every group
    assert (anywhere.c_s_per_byte, anywhere.d_s) == (pytest.approx(0.35e-9), pytest.approx(105e-6))


@pytest.mark.parametrize("g, c_ns, d_us", [(2, 0.2, 15), (4, 0.3, 45), (3, 0.2 * 4 / 3, 30)])
def test_measured_ring_of_g_devices_takes_c_x_plus_d(fits_file, g, c_ns, d_us):
    """One weight of 64 x 256 float32 (x = 65,536 bytes), data parallel over g devices of one node:
    its ring takes C x + D of the fit for (g, 1), measured for 2 and 4, derived for 3."""
    machine = load_machine(fits_file)
    sim = Simulator(machine, COST, comm_cost="measured")
    result = sim.full(data_parallel(dense_model(12 * g), machine, g))
    start, end, hops = ring_spans(sim, result)["allreduce fc0.kernel"]
    x = 64 * 256 * 4
    assert end - start == pytest.approx(c_ns * 1e-9 * x + d_us * 1e-6, rel=1e-9)
    assert len(hops) == g and len({round(h, 15) for h in hops}) == 1  # every member's send alike
    assert sim.lowering.ring_fits.used == {(g, 1): g != 3}
    analytic = Simulator(machine, COST)
    a_start, a_end, _ = ring_spans(analytic, analytic.full(data_parallel(dense_model(12 * g), machine, g)))[
        "allreduce fc0.kernel"]
    assert a_end - a_start != pytest.approx(end - start)


def test_measured_ring_across_nodes_takes_the_fit_of_its_node_count(fits_file):
    """Eight devices on two nodes: the ring's sends cross nic and network links (several hops, each
    held for the whole send), and it takes the fit derived for (8, 2) from the (2, 2) group."""
    machine = load_machine(fits_file, nodes=2)
    sim = Simulator(machine, with_comm_cost(COST, "measured"))
    spans = ring_spans(sim, sim.full(data_parallel(dense_model(64, (256, 128)), machine)))
    assert set(spans) == {"allreduce fc0.kernel", "allreduce fc1.kernel"}
    assert sim.lowering.ring_fits.used == {(8, 2): False}
    start, end, hops = spans["allreduce fc1.kernel"]    # last gradient: its ring runs alone
    assert len(hops) > 8                                # multi-hop sends between the nodes
    assert end - start == pytest.approx(1.75e-9 * 256 * 128 * 4 + 280e-6, rel=1e-9)


def test_a_gradient_bucket_is_one_ring_that_pays_d_once(fits_file):
    machine = load_machine(fits_file)
    strategy = data_parallel(dense_model(48, (256, 128)), machine, 4)
    sim = Simulator(machine, COST, comm_cost=CommCost.MEASURED)
    spans = ring_spans(sim, sim.full(strategy.with_fusion(FusionPlan((), (("fc0.kernel", "fc1.kernel"),)))))
    (start, end, hops), = spans.values()
    x = (64 * 256 + 256 * 128) * 4
    assert len(hops) == 4 and end - start == pytest.approx(0.3e-9 * x + 45e-6, rel=1e-9)


def test_analytic_is_the_default_and_ignores_the_fits(fits_file, tmp_path):
    plain_path = tmp_path / "plain.yaml"
    plain_path.write_text(BASE)
    plain, with_fits = load_machine(str(plain_path)), load_machine(fits_file)
    strategy = data_parallel(dense_model(48, (256, 128)), with_fits, 4)
    assert timelines_equal(Simulator(plain, COST).full(strategy), Simulator(with_fits, COST).full(strategy))
    assert Lowering(with_fits, COST).comm_cost is CommCost.ANALYTIC
    assert Lowering(with_fits, with_comm_cost(COST, "measured")).comm_cost is CommCost.MEASURED
    assert Lowering(with_fits, with_comm_cost(COST, "measured"), comm_cost="analytic").ring_fits is None


@pytest.mark.parametrize("name, flags, seed", [("mlp_unity_fig2", ["-b", "64"], 0), ("alexnet", ["-b", "16"], 1)])
def test_delta_equals_full_with_measured_comm_cost(fits_file, name, flags, seed):
    machine = load_machine(fits_file, nodes=2)
    base = load_model(name, flags).model.pcg
    cost = with_comm_cost(COST, "measured")
    strategy = data_parallel(base, machine)
    sim = Simulator(machine, cost)
    sim.full(strategy)
    for strategy, changed in random_changes(base, machine, strategy, seed, 6):
        result = sim.delta(strategy, {changed})
        fresh = Simulator(machine, cost, incremental=False).full(strategy)
        assert timelines_equal(result, fresh)
    assert sim.lowering.ring_fits.used  # rings were timed by fits
    assert Simulator(machine, COST).full(strategy).iteration_time_s != result.iteration_time_s


def test_measured_without_fits_says_how_to_measure_them():
    dgx = load_machine("dgx1_v100")
    with pytest.raises(ConfigError) as info:
        Simulator(dgx, COST, comm_cost="measured")
    message = str(info.value)
    assert "machine 'dgx1_v100' has no measured AllReduce fits" in message
    assert "`mpiexec -n N flexrt calibrate`" in message and "--comm-cost analytic" in message
    with pytest.raises(ConfigError, match="unknown comm cost 'fast'; valid: analytic, measured"):
        Lowering(dgx, COST, comm_cost="fast")


def test_the_measured_cost_model_answers_as_its_base():
    wrapped = with_comm_cost(COST, "measured")
    assert isinstance(wrapped, MeasuredComm) and comm_cost_of(wrapped) is CommCost.MEASURED
    assert comm_cost_of(COST) is CommCost.ANALYTIC and with_comm_cost(wrapped, "analytic") is COST
    assert with_comm_cost(wrapped, "measured").base is COST                  # never wrapped twice
    assert has_linear_transfers(wrapped) and hasattr(wrapped, "fused_time")
    profiled = ProfiledCostModel()
    assert has_linear_transfers(with_comm_cost(profiled, "measured")) == has_linear_transfers(profiled)
    assert with_comm_cost(profiled, "measured").cache is profiled.cache     # everything else is the base's
    back = pickle.loads(pickle.dumps(wrapped))
    assert comm_cost_of(back) is CommCost.MEASURED and back.base == COST and has_linear_transfers(back)
