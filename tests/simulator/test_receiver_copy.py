"""Links whose messages the receiving device copies (``moved_by: receiver``: MPI between processes of
one host, without a progress thread): the simulator gives every transfer over such a route one more
hop, on its destination device, so the copy waits until that device is free (it polls between its
tasks) and occupies it. Laws: the hop is there exactly for those routes, with the copy's time; the
devices' FIFO timelines hold it; delta equals full; the runtime still trains like one device."""

from __future__ import annotations


import numpy as np
import pytest

from flexrt.errors import MachineSpecError
from flexrt.machine.machine import MOVED_BY, LinkType
from flexrt.machine.spec import build_machine
from flexrt.machine.yaml_format import parse_yaml_spec
from flexrt.model import load_model
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy import random_strategy
from tests.simulator.delta_law import random_changes

COST = AnalyticCostModel()

YAML = """\
name: ranks
nodes: 2
device_kinds:
  host-cpu: {{kind: cpu, peak_flops: {{float32: 0.1, float64: 0.05}}, memory_bandwidth: 20, memory: 4,
             launch_overhead_us: 1}}
node:
  sockets:
    - {{cpu: null, devices: {{host-cpu: {devices}}}}}
links:
  membus: {{bandwidth: 10, latency_us: 0.3}}
  nic: {{bandwidth: 4, latency_us: 0.01{moved}}}
  network: {{bandwidth: 4, latency_us: 1}}
intra_node:
  devices:
    - {{all_to_all: all, link: membus}}
inter_node: {{nics: 1, attach: devices}}
"""


def machine(moved: str = "receiver", devices: int = 1, nodes: int = 2):
    text = YAML.format(devices=devices, moved="" if moved is None else f", moved_by: {moved}")
    return build_machine(parse_yaml_spec(text, "ranks.yaml"), nodes)


def pcg(name="mlp_unity_fig2", *flags):
    return load_model(name, list(flags or ("-b", "16"))).model.pcg


def test_the_yaml_field_and_its_errors():
    assert MOVED_BY == ("link", "receiver")
    assert machine("receiver").receiver_moved == {LinkType.NIC}
    assert machine("link").receiver_moved == machine(None).receiver_moved == frozenset()
    assert machine("receiver", nodes=2).with_nodes(3).receiver_moved == {LinkType.NIC}
    with pytest.raises(MachineSpecError, match=r"ranks.yaml:\d+: field 'links.nic.moved_by'.*valid: link, receiver"):
        machine("sender")
    m = machine()
    assert m.copied_by_receiver(m.route(0, 1)) and not m.copied_by_receiver(())


def test_every_transfer_between_ranks_gets_one_copy_on_its_destination():
    m, plain = machine(), machine(None)
    strategy = random_strategy(pcg(), m, 3)
    sim = Simulator(m, COST)
    sim.full(strategy)
    graph = sim.lowering.graph
    tasks = list(graph.tasks.values())
    hops: dict[int, list] = {}
    for t in tasks:
        if t.kind is TaskKind.TRANSFER:
            hops.setdefault(t.transfer, []).append(t)
    assert hops, "the random strategy moves data between the ranks"
    link = m.links[m.route(0, 1)[-1]]
    for x, ts in hops.items():
        on_devices = [t for t in ts if t.device < m.num_devices]
        assert len(on_devices) == 1, [t.name for t in ts]
        copy = on_devices[0]
        links = [t for t in ts if t.device >= m.num_devices]
        dst = m.links[links[-1].device - m.num_devices].dst
        assert m.devices[copy.device].endpoint == dst
        latency = sum(m.links[t.device - m.num_devices].latency_s for t in links)
        assert copy.exe_s == pytest.approx(copy.num_bytes / link.bandwidth + latency, rel=1e-9, abs=1e-15)
    # the same strategy where the links move the bytes: no task on a device is a transfer
    sim2 = Simulator(plain, COST)
    sim2.full(strategy)
    assert not [t for t in sim2.lowering.graph.tasks.values()
                if t.kind is TaskKind.TRANSFER and t.device < plain.num_devices]


@pytest.mark.parametrize("seed", range(4))
def test_a_copy_waits_for_its_device_and_occupies_it(seed):
    m = machine(devices=2)
    strategy = random_strategy(pcg(), m, seed)
    sim = Simulator(m, COST)
    result = sim.full(strategy)
    tl = result.timeline
    graph = sim.lowering.graph
    for d in range(m.num_devices):   # a device runs one task at a time, its copies included
        sel = tl["device"] == d
        order = np.argsort(tl["start"][sel], kind="stable")
        start, end = tl["start"][sel][order], tl["end"][sel][order]
        assert np.all(start[1:] >= end[:-1] - 1e-15)
    pos = {int(t): k for k, t in enumerate(tl["ids"])}
    succ = graph.successors()
    copies = [t for t in graph.tasks.values() if t.kind is TaskKind.TRANSFER and t.device < m.num_devices]
    assert copies
    for t in copies:   # what reads the message starts after the copy
        for s in succ.get(t.id, ()):
            assert tl["start"][pos[s]] >= tl["end"][pos[t.id]] - 1e-15


@pytest.mark.parametrize("name, flags, seed", [("mlp_unity_fig2", ("-b", "16"), 0), ("alexnet", ("-b", "8"), 1),
                                               ("rnntc", ("-b", "4", "--seq-length", "3"), 2)])
def test_delta_equals_full_with_receiver_copies(name, flags, seed):
    m = machine(devices=2)
    base = pcg(name, *flags)
    strategy = random_strategy(base, m, seed)
    sim = Simulator(m, COST)
    sim.full(strategy)
    for strategy, changed in random_changes(base, m, strategy, seed, 5):
        got = sim.delta(strategy, {changed})
        assert timelines_equal(got, Simulator(m, COST).full(strategy))


@pytest.mark.parametrize("mode", ["serial", "threads"])
@pytest.mark.parametrize("model, seed", [("mlp", 0), ("cnn", 1), ("mlp", 2)])
def test_strategies_over_receiver_copied_links_train_like_one_device(model, seed, mode):
    from flexrt.core import DataType
    from tests.runtime.test_central_law import train_and_compare
    m = machine(devices=2)
    train_and_compare(model, DataType.DT_DOUBLE, lambda g: random_strategy(g, m, seed), m, mode=mode)


@pytest.mark.parametrize("receive, per_byte", [(20e-6, 0.0), (10e-6, 4e-10), (0.0, 0.0)])
def test_fit_overheads_recovers_the_receivers_time_per_message_and_byte(receive, per_byte):
    from flexrt.simulator.measured_costs import OVERHEADS, MeasuredCostModel, MeasuredTimes
    m = machine(devices=1)
    graph = pcg("mlp_unity_fig2", "-b", "64")
    times = MeasuredTimes("numpy")   # no keys: every task is the base model's time
    times.receive_s, times.receive_s_per_byte = receive, per_byte
    strategies = [random_strategy(graph, m, seed) for seed in range(6)]
    truth = [(s, Simulator(m, MeasuredCostModel(COST, times), "sgd").time_full(s)) for s in strategies]
    times.set_overheads([0.0] * len(OVERHEADS))
    got = dict(zip(OVERHEADS, times.fit_overheads(COST, m, truth)))
    fitted = [Simulator(m, MeasuredCostModel(COST, times), "sgd").time_full(s) for s in strategies]
    assert max(abs(f / t - 1) for f, (_, t) in zip(fitted, truth)) < 0.02
    assert got["receive_s"] + 1e5 * got["receive_s_per_byte"] == pytest.approx(receive + 1e5 * per_byte, abs=5e-6)
