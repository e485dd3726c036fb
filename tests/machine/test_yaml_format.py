"""Machine YAML: a valid file builds the machine it describes; every error names file:line and field."""

from __future__ import annotations

import textwrap

import pytest

from flexrt.errors import MachineSpecError
from flexrt.machine import LinkType, load_machine, load_spec, preset_spec

GOOD = """\
name: two_by_two
nodes: 2
device_kinds:
  G:
    kind: gpu
    peak_flops: {float32: 10, float16: 20}
    memory_bandwidth: 500
    memory: 8
    launch_overhead_us: 4
node:
  sockets:
    - cpu: X
      devices: [G, G]
    - cpu: X
      devices: {G: 2}
links:
  nvlink: {bandwidth: 20, latency_us: 1}
  pcie: {bandwidth: 10, latency_us: 2}
  xbus: {bandwidth: 15, latency_us: 0.5}
  nic: {bandwidth: 10, latency_us: 0.5}
  network: {bandwidth: 5, latency_us: 1}
intra_node:
  devices:
    - {pairs: [[0, 1, 2], [2, 3]], link: nvlink}
  to_cpu: {link: pcie}
  between_sockets: xbus
inter_node:
  nics: 1
"""


def write(tmp_path, text, name="m.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path, text) -> str:
    path = write(tmp_path, text)
    with pytest.raises(MachineSpecError) as info:
        load_machine(str(path))
    return str(info.value).replace(str(path), "FILE")


def test_good_file_builds_its_machine(tmp_path):
    m = load_machine(str(write(tmp_path, GOOD)))
    assert (m.name, m.num_nodes, m.devices_per_node) == ("two_by_two", 2, 4)
    spec = m.devices[0].spec
    assert (spec.memory_bandwidth, spec.memory_bytes, spec.launch_overhead_s) == (500e9, 8 * 2**30, 4e-6)
    assert [d.socket for d in m.devices[:4]] == [0, 0, 1, 1]
    assert [t.value for t in m.route_types(0, 1)] == ["nvlink"] and m.route_bandwidth(0, 1) == 40e9  # 2 lanes
    assert [t.value for t in m.route_types(0, 2)] == ["pcie", "xbus", "pcie"]
    assert [m.links[i].latency_s for i in m.route(0, 2)] == pytest.approx([2e-6, 0.5e-6, 2e-6])
    assert load_machine(str(write(tmp_path, GOOD)), nodes=3).num_devices == 12


def test_spec_records_where_each_part_was_described(tmp_path):
    path = write(tmp_path, GOOD)
    spec = load_spec(str(path))
    assert spec.intra_node.where == f"{path}:22: field 'intra_node'"
    assert spec.intra_node.devices[0].pairs == ((0, 1, 2), (2, 3, 1))
    assert [link.type for link in spec.links] == [LinkType.NVLINK, LinkType.PCIE, LinkType.XBUS, LinkType.NIC,
                                                  LinkType.NETWORK]


@pytest.mark.parametrize("old, new, expected", [
    ("  nvlink: {bandwidth: 20,", "  nvlink: {bandwidth: fast,",
     "FILE:17: field 'links.nvlink.bandwidth': expected a positive number (GB/s), got 'fast'"),
    ("  pcie: {bandwidth: 10,", "  pcie: {bandwidth: -10,",
     "FILE:18: field 'links.pcie.bandwidth': expected a positive number (GB/s), got -10"),
    ("    memory: 8\n", "    memory: 8\n    colour: red\n",
     "FILE:9: field 'device_kinds.G.colour': unknown key 'colour'; valid keys: kind, peak_flops, memory_bandwidth, "
     "memory, launch_overhead_us, efficiency"),
    ("  xbus: {", "  qpi: {",
     "FILE:19: field 'links.qpi': unknown link type 'qpi'; valid link types: nvlink, pcie, xbus, nic, network, "
     "membus, switch"),
    ("  between_sockets: xbus", "  between_sockets: upi",
     "FILE:26: field 'intra_node.between_sockets': unknown link type 'upi'; valid link types: nvlink, pcie"),
    ("  to_cpu: {link: pcie}", "  to_cpu: {link: membus}",
     "FILE:25: field 'intra_node.to_cpu.link': link type 'membus' has no entry in links; add links.membus"),
    ("[[0, 1, 2], [2, 3]]", "[[0, 1, 2], [2, 4]]",
     "FILE:24: field 'intra_node.devices[0].pairs[1]': expected a device index 0..3, got 4"),
    ("[[0, 1, 2], [2, 3]]", "[[0, 1], [1, 0]]",
     "FILE:24: field 'intra_node.devices[0].pairs[1]': [1, 0] is listed twice"),
    ("      devices: {G: 2}", "      devices: {H: 2}",
     "FILE:15: field 'node.sockets[1].devices[0]': unknown device kind 'H'; device_kinds defines: G"),
    ("    peak_flops: {float32: 10, float16: 20}", "    peak_flops: {fp32: 10}",
     "FILE:6: field 'device_kinds.G.peak_flops.fp32': unknown dtype 'fp32'; valid dtypes: float32, float16"),
    ("    kind: gpu", "    kind: tpu", "FILE:5: field 'device_kinds.G.kind': expected one of gpu, cpu, got 'tpu'"),
    ("nodes: 2", "nodes: 0", "FILE:2: field 'nodes': expected a positive integer, got 0"),
    ("inter_node:\n  nics: 1\n", "", "FILE:2: field 'nodes': 2 nodes need an inter_node section with nics > 0"),
    ("  nics: 1", "  nics: 1\n  attach: wires",
     "FILE:29: field 'inter_node.attach': expected one of sockets, devices, got 'wires'"),
    ("  nics: 1", "  nics: 3\n  attach: devices",
     "FILE:28: field 'inter_node.nics': attach: devices needs the NIC count to divide the 4 devices per node"),
    ("name: two_by_two\n", "", "FILE:1: field '<top level>': missing key 'name'"),
    ("  nvlink: {bandwidth: 20, latency_us: 1}", "  nvlink: {bandwidth: 20, latency_us: 1}\n  nvlink: {}",
     "FILE:18: invalid YAML: found duplicate key 'nvlink'"),
])
def test_error_names_file_line_and_field(tmp_path, old, new, expected):
    assert old in GOOD
    assert error_of(tmp_path, GOOD.replace(old, new, 1)).startswith(expected)


def test_malformed_yaml_gives_the_parser_line(tmp_path):
    message = error_of(tmp_path, "name: x\ndevice_kinds: {G: [1, 2\nnode: {}\n")
    assert message.startswith("FILE:3: invalid YAML: ") and "expected ',' or ']'" in message
    assert error_of(tmp_path, "name: x\n  bad: 1\n").startswith("FILE:2: invalid YAML: mapping values are not allowed")


def test_merge_keys_follow_yaml(tmp_path):
    """``<<: *anchor`` brings a mapping's keys; a key given beside it overrides, and of a list of merged
    mappings the earlier wins; a key given twice, or two ``<<`` keys, are refused at their line."""
    links = ("  nvlink: &fast {bandwidth: 20, latency_us: 1}\n"
             "  pcie: {<<: *fast, bandwidth: 10, latency_us: 2}\n"
             "  xbus: {<<: [{bandwidth: 15}, *fast], latency_us: 0.5}\n")
    old = ("  nvlink: {bandwidth: 20, latency_us: 1}\n  pcie: {bandwidth: 10, latency_us: 2}\n"
           "  xbus: {bandwidth: 15, latency_us: 0.5}\n")
    assert old in GOOD
    merged = load_spec(str(write(tmp_path, GOOD.replace(old, links))))
    plain = load_spec(str(write(tmp_path, GOOD, "plain.yaml")))
    assert merged.links == plain.links
    assert error_of(tmp_path, GOOD.replace(old, links.replace("bandwidth: 10,", "bandwidth: 10, bandwidth: 9,"))) \
        .startswith("FILE:18: invalid YAML: found duplicate key 'bandwidth'")
    assert error_of(tmp_path, GOOD.replace(old, links.replace("{<<: *fast,", "{<<: *fast, <<: *fast,"))) \
        .startswith("FILE:18: invalid YAML: found duplicate key '<<'")


def test_top_level_must_be_a_mapping(tmp_path):
    assert error_of(tmp_path, "- 1\n- 2\n").startswith("FILE:1: field '<top level>': expected a mapping")
    assert error_of(tmp_path, "").startswith("FILE:1: field '<top level>': expected a mapping")


def test_unsafe_tags_are_refused(tmp_path):
    message = error_of(tmp_path, "name: !!python/object/apply:os.system ['true']\n")
    assert message.startswith("FILE:1: invalid YAML: ") and "could not determine a constructor" in message


def test_disconnected_devices_name_both_devices_and_the_topology_line(tmp_path):
    text = GOOD.replace("  to_cpu: {link: pcie}\n", "")
    assert error_of(tmp_path, text) == (
        "FILE:22: field 'intra_node': machine 'two_by_two': devices n0.gpu0 (device 0) and n0.gpu2 (device 2) "
        "are not connected (no route from n0.gpu0 to n0.gpu2)")


def test_switch_groups_must_stay_within_a_socket(tmp_path):
    text = GOOD.replace("  to_cpu: {link: pcie}", "  to_cpu: {link: pcie, switches: [[0, 1, 2], [3]]}")
    assert error_of(tmp_path, text).startswith("FILE:25: field 'intra_node.to_cpu.switches[0]': devices [0, 1, 2] "
                                               "hang off different sockets")


def test_cpu_devices_cannot_have_a_socket_cpu(tmp_path):
    text = GOOD.replace("    kind: gpu", "    kind: cpu")
    assert error_of(tmp_path, text).startswith("FILE:12: field 'node.sockets[0].cpu': a socket cpu cannot be given")


def test_every_preset_is_valid_and_documented():
    for name in ("summit", "dgx1_v100", "local"):
        spec = preset_spec(name)
        assert spec.description and spec.source.endswith(f"machines/{name}.yaml")


def test_unknown_preset_lists_the_presets():
    with pytest.raises(MachineSpecError, match=r"unknown machine preset 'summmit'; presets: dgx1_v100, dgx2h, dgx_a100"):
        load_machine("summmit")
    with pytest.raises(MachineSpecError, match=r"machine file nowhere/m.yaml does not exist"):
        load_machine("nowhere/m.yaml")
