"""Machine YAML's ``collectives`` section: measured AllReduce fits load onto the Machine (kept when
it is scaled), and every bad entry is a MachineSpecError naming file:line and field."""

from __future__ import annotations


import pytest

from flexrt.errors import MachineSpecError
from flexrt.machine import load_machine, load_spec
from flexrt.machine.machine import Collective, CollectiveFit
from tests.machine.test_yaml_format import error_of, write

BASE = """\
name: fits
device_kinds:
  host-cpu:
    kind: cpu
    peak_flops: {float32: 0.1}
    memory_bandwidth: 20
    memory: 4
    launch_overhead_us: 2
node:
  sockets:
    - {cpu: null, devices: {host-cpu: 4}}
links:
  membus: {bandwidth: 10, latency_us: 0.5}
  nic: {bandwidth: 5, latency_us: 0.001}
  network: {bandwidth: 5, latency_us: 10}
intra_node:
  devices:
    - {all_to_all: all, link: membus}
inter_node:
  nics: 1
  attach: devices
"""
GOOD = BASE + """\
collectives:
  allreduce:
    - {devices: 2, nodes: 1, c_ns_per_byte: 0.2, d_us: 15, r2: 0.999, max_rel_error: 0.08, median_rel_error: 0.02, sizes: 7}
    - {devices: 4, nodes: 1, c_ns_per_byte: 0.3, d_us: 45}
"""
ENTRY_LINE = 24  # the first fit's line in GOOD


def test_collectives_load_onto_the_machine_in_si_units(tmp_path):
    m = load_machine(str(write(tmp_path, GOOD)))
    first, second = m.fits()
    assert (first.collective, first.devices, first.nodes, first.r2, first.max_rel_error, first.median_rel_error,
            first.sizes) == (Collective.ALLREDUCE, 2, 1, 0.999, 0.08, 0.02, 7)
    assert (first.c_s_per_byte, first.d_s) == (pytest.approx(0.2e-9), pytest.approx(15e-6))
    assert (second.devices, second.nodes, second.r2, second.max_rel_error, second.sizes) == (4, 1, None, None, None)
    assert second.time_s(1_000_000) == pytest.approx(0.3e-9 * 1e6 + 45e-6)
    assert m.fits(Collective.ALLREDUCE) == m.collectives
    # kept when the machine is scaled (a fit names its group), and a part of the machine's identity
    assert load_machine(str(write(tmp_path, GOOD)), nodes=3).collectives == m.collectives
    assert m.with_nodes(2).collectives == m.collectives
    plain = load_machine(str(write(tmp_path, BASE, "plain.yaml")))
    assert plain.collectives == () and plain.fits() == ()
    assert plain != m and (plain.links, plain.devices) == (m.links, m.devices)
    assert load_spec(str(write(tmp_path, GOOD))).collectives == m.collectives


def test_a_machine_refuses_two_fits_for_one_group():
    fit = CollectiveFit(Collective.ALLREDUCE, 2, 1, 1e-9, 1e-5)
    m = load_machine("dgx1_v100")
    with pytest.raises(MachineSpecError, match="two allreduce fits for 2 devices on 1 node"):
        type(m)(m.name, m.num_nodes, m.devices, m.links, (fit, fit))
    with pytest.raises(MachineSpecError, match="cannot span 3 nodes; nodes must be 1..2"):
        CollectiveFit(Collective.ALLREDUCE, 2, 3, 1e-9, 1e-5)
    with pytest.raises(MachineSpecError, match="d_s must be a finite number >= 0"):
        CollectiveFit(Collective.ALLREDUCE, 2, 1, 1e-9, -1.0)


ENTRY = "    - {devices: 2, nodes: 1, c_ns_per_byte: 0.2, d_us: 15, r2: 0.999, max_rel_error: 0.08, median_rel_error: 0.02, sizes: 7}"


@pytest.mark.parametrize("old, new, expected", [
    ("devices: 2, nodes: 1, c_ns", "devices: 1, nodes: 1, c_ns",
     f"FILE:{ENTRY_LINE}: field 'collectives.allreduce[0].devices': expected an integer >= 2, got 1; "
     f"valid: 2..65536"),
    ("devices: 2, nodes: 1, c_ns", "devices: 2, nodes: 3, c_ns",
     f"FILE:{ENTRY_LINE}: field 'collectives.allreduce[0].nodes': a group of 2 devices spans at most 2 nodes, "
     f"got 3; valid: 1..2"),
    ("c_ns_per_byte: 0.2,", "c_ns_per_byte: -0.2,",
     f"FILE:{ENTRY_LINE}: field 'collectives.allreduce[0].c_ns_per_byte': expected a non-negative number "
     f"(ns per byte), got -0.2; valid: between 0 and 1e+06"),
    ("d_us: 15,", "d_us: fast,",
     f"FILE:{ENTRY_LINE}: field 'collectives.allreduce[0].d_us': expected a non-negative number (microseconds), "
     f"got 'fast'; valid: between 0 and 1e+06"),
    ("r2: 0.999,", "r2: 1.5,",
     f"FILE:{ENTRY_LINE}: field 'collectives.allreduce[0].r2': expected a number between -1e+06 and 1 "
     f"(r squared of the fit), got 1.5"),
    ("sizes: 7}", "sizes: 1}",
     f"FILE:{ENTRY_LINE}: field 'collectives.allreduce[0].sizes': expected an integer >= 2, got 1; valid: 2..10000"),
    ("sizes: 7}", "points: 7}",
     f"FILE:{ENTRY_LINE}: field 'collectives.allreduce[0].points': unknown key 'points'; valid keys: devices, "
     f"nodes, c_ns_per_byte, d_us, r2, max_rel_error, median_rel_error, sizes"),
    ("    - {devices: 4, nodes: 1, c_ns_per_byte: 0.3, d_us: 45}", "    - {devices: 4, nodes: 1, d_us: 45}",
     f"FILE:{ENTRY_LINE + 1}: field 'collectives.allreduce[1]': missing key 'c_ns_per_byte'"),
    ("    - {devices: 4, nodes: 1, c_ns_per_byte: 0.3, d_us: 45}",
     "    - {devices: 2, nodes: 1, c_ns_per_byte: 0.3, d_us: 45}",
     f"FILE:{ENTRY_LINE + 1}: field 'collectives.allreduce[1]': a second fit for 2 devices on 1 node(s) (the first "
     f"is on line {ENTRY_LINE}); give one per group"),
    ("  allreduce:", "  allgather:",
     f"FILE:{ENTRY_LINE - 1}: field 'collectives.allgather': unknown collective 'allgather'; valid: allreduce"),
    ("  allreduce:\n" + ENTRY + "\n    - {devices: 4, nodes: 1, c_ns_per_byte: 0.3, d_us: 45}\n", "  allreduce: 3\n",
     f"FILE:{ENTRY_LINE - 1}: field 'collectives.allreduce': expected a list of fits "
     f"{{devices, nodes, c_ns_per_byte, d_us}}, got 3"),
])
def test_bad_collectives_name_file_line_and_field(tmp_path, old, new, expected):
    assert old in GOOD
    assert error_of(tmp_path, GOOD.replace(old, new, 1)) == expected


def test_collectives_must_be_a_mapping(tmp_path):
    assert error_of(tmp_path, BASE + "collectives: [1, 2]\n") == (
        "FILE:22: field 'collectives': expected a mapping collective -> list of fits (allreduce), got [1, 2]")
