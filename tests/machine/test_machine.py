"""Machine presets: loading and scaling, routes (Summit, DGX-1, between nodes), determinism, the
per-node router against the whole-graph reference, frozen values."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
from importlib import resources

import pytest

from flexrt.errors import MachineSpecError
from flexrt.ir.datatype import DataType
from flexrt.machine import (Device, DeviceSpec, Link, LinkType, Machine, MachineShape, load_machine, local_machine,
                            preset_names)
from flexrt.machine.routing import Router

NVLINK, PCIE, XBUS, NIC, NETWORK, MEMBUS, SWITCH = (LinkType.NVLINK, LinkType.PCIE, LinkType.XBUS, LinkType.NIC,
                                                     LinkType.NETWORK, LinkType.MEMBUS, LinkType.SWITCH)
PRESETS = {  # name -> (default nodes, devices per node, device kind)
    "summit": (1, 6, "V100-SXM2-16GB"), "disco_a": (6, 2, "GTX-1080Ti-11GB"), "disco_b": (8, 8, "T4-16GB"), "flexflow_p100": (4, 4, "P100-SXM2-16GB"),
    "flexflow_k80": (16, 4, "K80-GK210"), "dgx1_v100": (1, 8, "V100-SXM2-16GB"),
    "dgx2h": (1, 16, "V100-SXM3-32GB"), "dgx_a100": (1, 8, "A100-SXM4-80GB"), "dgx_h100": (1, 8, "H100-SXM5-80GB"), "local": (1, 4, "host-cpu"),
}


def types(m: Machine, src: int, dst: int) -> list[str]:
    return [t.value for t in m.route_types(src, dst)]


def test_preset_names_are_the_yaml_files_of_the_installed_package():
    folder = resources.files("flexrt.configs") / "machines"
    assert set(preset_names()) == {f.name[:-5] for f in folder.iterdir() if f.name.endswith(".yaml")}
    assert set(preset_names()) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_loads_with_its_default_nodes(name):
    nodes, per_node, kind = PRESETS[name]
    m = load_machine(name)
    assert (m.name, m.num_nodes, m.devices_per_node, m.num_devices) == (name, nodes, per_node, nodes * per_node)
    assert {d.spec.name for d in m.devices} == {kind}
    assert m.shape == MachineShape(nodes, per_node)


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_preset_scales_to_nodes(name, nodes):
    per_node = PRESETS[name][1]
    m = load_machine(name, nodes=nodes)
    assert (m.num_nodes, m.num_devices) == (nodes, nodes * per_node)
    assert [(d.id, d.node, d.local) for d in m.devices] == [(i, i // per_node, i % per_node)
                                                            for i in range(nodes * per_node)]
    assert len(m.links) == nodes * len(load_machine(name, nodes=1).links)
    assert load_machine(name, nodes=1).with_nodes(nodes) == m
    assert m.with_nodes(1) == load_machine(name, nodes=1)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_pair_of_devices_has_a_route_that_connects_them(name):
    m = load_machine(name, nodes=2)
    for src in range(m.num_devices):
        for dst in range(m.num_devices):
            path = m.route(src, dst)
            if src == dst:
                assert path == ()
                continue
            links = [m.links[i] for i in path]
            assert links[0].src == m.devices[src].endpoint and links[-1].dst == m.devices[dst].endpoint
            assert all(a.dst == b.src for a, b in zip(links, links[1:]))
            assert len(set(path)) == len(path)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_per_node_routes_equal_whole_graph_routes(name):
    m = load_machine(name, nodes=3)
    fast, reference = Router(m), Router(m, by_node=False)
    assert fast.per_node is not None and reference.per_node is None
    for src in range(m.num_devices):
        for dst in range(m.num_devices):
            assert fast.route(src, dst) == reference.route(src, dst), (src, dst)


def test_routes_are_deterministic_across_fresh_machines():
    a, b = load_machine("dgx1_v100", nodes=2), load_machine("dgx1_v100", nodes=2)
    assert a is not b and a == b and hash(a) == hash(b)
    backwards = {(s, d): b.route(s, d) for s in reversed(range(16)) for d in reversed(range(16))}
    assert all(a.route(s, d) == backwards[s, d] for s in range(16) for d in range(16))


def test_summit_routes_within_a_triad_across_triads_and_across_nodes():
    m = load_machine("summit", nodes=2)
    assert types(m, 0, 1) == ["nvlink"] and types(m, 4, 5) == ["nvlink"]
    assert [m.links[i].src for i in m.route(0, 1)] == ["n0.gpu0"] and m.route_bandwidth(0, 1) == 50e9
    assert types(m, 0, 3) == ["nvlink", "xbus", "nvlink"]
    assert [(m.links[i].src, m.links[i].dst) for i in m.route(0, 3)] == [
        ("n0.gpu0", "n0.cpu0"), ("n0.cpu0", "n0.cpu1"), ("n0.cpu1", "n0.gpu3")]
    assert m.route_bandwidth(0, 3) == 32e9  # X-Bus: 64 GB/s bidirectional
    assert types(m, 0, 6) == ["nvlink", "nic", "network", "network", "nic", "nvlink"]
    assert [m.links[i].dst for i in m.route(0, 6)] == ["n0.cpu0", "n0.nic0", "net", "n1.nic0", "n1.cpu0", "n1.gpu0"]
    # The far side enters through the NIC of the destination's socket (dual rail).
    assert [m.links[i].dst for i in m.route(0, 9)][3:] == ["n1.nic1", "n1.cpu1", "n1.gpu3"]
    assert m.route_bandwidth(0, 6) == 12.5e9


def test_summit_link_counts_per_node():
    m = load_machine("summit")
    count = {t: sum(link.type is t for link in m.links) for t in LinkType}
    # 2 triads x 3 pairs + 6 GPU-CPU NVLinks, 1 X-Bus, 2 NICs: each connection two directions.
    assert count == {NVLINK: 24, XBUS: 2, NIC: 4, NETWORK: 4, PCIE: 0, MEMBUS: 0, SWITCH: 0}


DGX1_HOPS = [  # hybrid cube mesh: a quad is fully connected, GPU i also links to i + 4
    [0, 1, 1, 1, 1, 2, 2, 2], [1, 0, 1, 1, 2, 1, 2, 2], [1, 1, 0, 1, 2, 2, 1, 2], [1, 1, 1, 0, 2, 2, 2, 1],
    [1, 2, 2, 2, 0, 1, 1, 1], [2, 1, 2, 2, 1, 0, 1, 1], [2, 2, 1, 2, 1, 1, 0, 1], [2, 2, 2, 1, 1, 1, 1, 0]]


def test_dgx1_hybrid_cube_mesh_hop_counts_are_all_nvlink():
    m = load_machine("dgx1_v100")
    assert [[len(m.route(s, d)) for d in range(8)] for s in range(8)] == DGX1_HOPS
    assert all(t is NVLINK for s in range(8) for d in range(8) for t in m.route_types(s, d))


def test_dgx1_each_gpu_has_six_nvlink_bricks():
    m = load_machine("dgx1_v100")
    for d in m.devices:
        out = sum(link.bandwidth for link in m.links if link.src == d.endpoint and link.type is NVLINK)
        assert out == pytest.approx(6 * 25e9)
    assert m.route_bandwidth(0, 3) == 50e9 and m.route_bandwidth(0, 1) == 25e9  # doubled and single bricks


def test_dgx_a100_and_h100_nvswitch_and_gpudirect_nics():
    for name, switch, network in (("dgx_a100", 300e9, 25e9), ("dgx_h100", 450e9, 50e9)):
        m = load_machine(name, nodes=2)
        assert types(m, 0, 7) == ["switch", "switch"] and m.route_bandwidth(0, 7) == switch
        assert types(m, 0, 11) == ["nic", "network", "network", "nic"] and m.route_bandwidth(0, 11) == network
        assert [m.links[i].dst for i in m.route(0, 11)] == ["n0.nic0", "net", "n1.nic3", "n1.gpu3"]
    m = load_machine("dgx2h", nodes=2)        # 16 GPUs a node, a NIC per pair
    assert types(m, 0, 15) == ["switch", "switch"] and m.route_bandwidth(0, 15) == 150e9
    assert types(m, 3, 19) == ["nic", "network", "network", "nic"] and m.route_bandwidth(3, 19) == 12.5e9
    assert [m.links[i].dst for i in m.route(3, 19)] == ["n0.nic1", "net", "n1.nic1", "n1.gpu3"]


def test_k80_neighbours_share_a_switch_and_all_reach_the_cpu_through_one():
    m = load_machine("flexflow_k80", nodes=2)
    assert [m.links[i].dst for i in m.route(0, 1)] == ["n0.sw0", "n0.gpu1"]  # the board's switch
    assert [m.links[i].dst for i in m.route(0, 2)] == ["n0.sw2", "n0.gpu2"]  # the shared switch
    assert [m.links[i].dst for i in m.route(0, 4)] == ["n0.sw2", "n0.cpu0", "n0.nic0", "net", "n1.nic0",
                                                       "n1.cpu0", "n1.sw2", "n1.gpu0"]
    assert m.route_bandwidth(0, 4) == 7e9  # 56 Gb/s


def test_p100_nvlink_within_a_node_pcie_to_the_nic():
    m = load_machine("flexflow_p100")
    assert all(types(m, s, d) == ["nvlink"] for s in range(4) for d in range(4) if s != d)
    assert types(m, 0, 4) == ["pcie", "nic", "network", "network", "nic", "pcie"]


def test_local_machine_has_n_cpu_devices_on_a_memory_bus():
    m = load_machine("local")
    assert [d.endpoint for d in m.devices] == ["n0.cpu0", "n0.cpu1", "n0.cpu2", "n0.cpu3"]
    assert all(d.spec.kind == "cpu" for d in m.devices) and types(m, 0, 3) == ["membus"]
    six = local_machine(6, nodes=2)
    assert six.devices_per_node == 6 and six.num_devices == 12 and types(six, 0, 5) == ["membus"]
    assert types(six, 0, 6) == ["nic", "network", "network", "nic"]
    assert local_machine() == m


def test_device_spec_flops_and_unknown_dtype_error():
    spec = load_machine("summit").devices[0].spec
    assert spec.flops(DataType.DT_FLOAT) == 15.7e12 and spec.flops(DataType.DT_HALF) == 125e12
    assert spec.memory_bandwidth == 900e9 and spec.memory_bytes == 16 * 2**30
    assert spec.launch_overhead_s == pytest.approx(5e-6) and spec.efficiency == 0.8
    with pytest.raises(MachineSpecError, match=r"has no peak_flops for int64, which the model computes in; it gives float16, float32"):
        spec.flops(DataType.DT_INT64)
    assert hash(spec) == hash(load_machine("dgx1_v100").devices[0].spec)


def test_reference_hardware_numbers():
    flops = {name: load_machine(name).devices[0].spec for name in PRESETS}
    assert (flops["dgx_a100"].flops(DataType.DT_FLOAT), flops["dgx_a100"].flops(DataType.DT_HALF)) == (19.5e12, 312e12)
    assert flops["dgx_a100"].memory_bandwidth == 2039e9
    assert flops["dgx_h100"].flops(DataType.DT_BFLOAT16) == pytest.approx(989.4e12)
    assert flops["dgx_h100"].memory_bandwidth == 3350e9
    assert flops["flexflow_p100"].flops(DataType.DT_HALF) == pytest.approx(21.2e12)
    assert flops["flexflow_k80"].flops(DataType.DT_FLOAT) == pytest.approx(4.37e12)
    assert flops["flexflow_k80"].memory_bytes == 12 * 2**30


def test_values_are_frozen():
    m = load_machine("summit")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name = "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.links[0].bandwidth = 1.0
    with pytest.raises(TypeError):
        m.devices[0].spec.peak_flops[DataType.DT_FLOAT] = 1.0


def _tiny(links):
    spec = DeviceSpec("g", "gpu", {DataType.DT_FLOAT: 1e12}, 1e11, 2**30, 5e-6)
    devices = tuple(Device(i, 0, 0, i, spec) for i in range(3))
    return Machine("tiny", 1, devices, tuple(Link(i, t, 1e9, 0.0, s, d) for i, (t, s, d) in enumerate(links)))


def test_machine_rejects_disconnected_devices_naming_them():
    with pytest.raises(MachineSpecError, match=r"n0.gpu0 \(device 0\) and n0.gpu2 \(device 2\) are not connected"):
        _tiny([(NVLINK, "n0.gpu0", "n0.gpu1"), (NVLINK, "n0.gpu1", "n0.gpu0"), (NVLINK, "n0.gpu2", "n0.gpu1"),
               (NVLINK, "n0.gpu1", "n0.gpu2")][:3])
    with pytest.raises(MachineSpecError, match=r"device n0.gpu2 \(device 2\) has no links"):
        _tiny([(NVLINK, "n0.gpu0", "n0.gpu1"), (NVLINK, "n0.gpu1", "n0.gpu0")])


def test_machine_built_by_hand_routes_on_the_whole_graph():
    m = _tiny([(NVLINK, "n0.gpu0", "n0.gpu1"), (NVLINK, "n0.gpu1", "n0.gpu0"), (PCIE, "n0.gpu1", "n0.gpu2"),
               (PCIE, "n0.gpu2", "n0.gpu1")])
    assert m.route(0, 2) == (0, 2) and m.route(2, 0) == (3, 1)
    with pytest.raises(MachineSpecError, match=r"has devices 0..2, got device 3"):
        m.route(0, 3)
    with pytest.raises(MachineSpecError, match="no network"):
        m.with_nodes(2)


def test_route_prefers_fewest_hops_then_bandwidth_then_smallest_ids():
    spec = DeviceSpec("g", "gpu", {DataType.DT_FLOAT: 1e12}, 1e11, 2**30, 5e-6)
    devices = tuple(Device(i, 0, 0, i, spec) for i in range(2))
    raw = [("n0.gpu0", "n0.a", 1e9), ("n0.a", "n0.gpu1", 1e9),     # 2 hops, 1 GB/s
           ("n0.gpu0", "n0.b", 5e9), ("n0.b", "n0.gpu1", 5e9),     # 2 hops, 5 GB/s
           ("n0.gpu0", "n0.c", 5e9), ("n0.c", "n0.gpu1", 5e9),     # 2 hops, 5 GB/s, larger ids
           ("n0.gpu0", "n0.d", 9e9), ("n0.d", "n0.e", 9e9), ("n0.e", "n0.gpu1", 9e9),  # 3 hops
           ("n0.gpu1", "n0.gpu0", 1e9)]
    m = Machine("ties", 1, devices, tuple(Link(i, NVLINK, bw, 0.0, s, d) for i, (s, d, bw) in enumerate(raw)))
    assert m.route(0, 1) == (2, 3) and m.route(1, 0) == (9,)


MODULES = ["flexrt.machine", "flexrt.machine.machine", "flexrt.machine.views", "flexrt.machine.load"]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0


def test_numpy_integers_are_device_ids_and_pickles_drop_caches():
    import pickle

    import numpy as np

    m = load_machine("summit", nodes=2)
    assert m.route(np.int64(0), np.int32(3)) == m.route(0, 3)
    assert m.device(np.int64(7)).endpoint == "n1.gpu1"
    with pytest.raises(MachineSpecError, match="got device True"):
        m.device(True)
    copy = pickle.loads(pickle.dumps(m))
    assert copy == m and hash(copy) == hash(m) and "router" not in copy._cache
    assert copy.route(0, 9) == m.route(0, 9)
