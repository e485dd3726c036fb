"""FlexFlow's machine model file (key = value): the machine it builds and its errors."""

from __future__ import annotations

import pytest

from flexrt.errors import MachineSpecError
from flexrt.ir.datatype import DataType
from flexrt.machine import LinkType, load_machine, load_spec

SAMPLE = """\
# FlexFlow machine model (machine_config_example)
num_nodes = 2
num_sockets_per_node = 2
num_cpus_per_socket = 20
num_gpus_per_socket = 2

# latencies in ms, bandwidths in GB/s
membus_latency = 0.000095
membus_bandwidth = 11.17
upi_latency = 0.0004
upi_bandwidth = 10.14
nic_latency = 0.000507
nic_bandwidth = 10.94
pci_latency = 0.001
pci_bandwidth = 12.58
nvlink_latency = 0.001
nvlink_bandwidth = 18.52

intra_socket_sys_mem_to_sys_mem = membus
inter_socket_sys_mem_to_sys_mem = upi
inter_node_sys_mem_to_sys_mem = nic
intra_socket_gpu_fb_mem_to_gpu_fb_mem = nvlink
inter_socket_gpu_fb_mem_to_gpu_fb_mem = pci_to_host upi pci_to_dev
inter_node_gpu_fb_mem_to_gpu_fb_mem = pci_to_host nic pci_to_dev   # through the host
"""


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / "machine_config_example"
    path.write_text(SAMPLE)
    return path


def types(m, src, dst):
    return [t.value for t in m.route_types(src, dst)]


def test_flexflow_file_builds_sockets_gpus_and_paths(sample):
    m = load_machine(str(sample))
    assert (m.name, m.num_nodes, m.devices_per_node) == ("machine_config_example", 2, 4)
    assert [d.socket for d in m.devices[:4]] == [0, 0, 1, 1]
    assert m.devices[0].spec.name == "V100-SXM2-16GB" and m.devices[0].spec.flops(DataType.DT_FLOAT) == 15.7e12
    assert types(m, 0, 1) == ["nvlink"] and m.route_bandwidth(0, 1) == pytest.approx(18.52e9)
    assert m.links[m.route(0, 1)[0]].latency_s == pytest.approx(1e-6)
    assert types(m, 0, 2) == ["pcie", "xbus", "pcie"] and m.route_bandwidth(0, 2) == pytest.approx(10.14e9)
    assert types(m, 0, 4) == ["pcie", "nic", "network", "network", "nic", "pcie"]
    net = [m.links[i] for i in m.route(0, 4) if m.links[i].type is LinkType.NETWORK]
    assert [link.bandwidth for link in net] == pytest.approx([10.94e9] * 2)
    assert sum(link.latency_s for link in net) == pytest.approx(0.507e-6)  # nic_latency across the fabric


def test_flexflow_file_scales_and_is_sniffed_by_content(sample, tmp_path):
    assert load_machine(str(sample), nodes=4).num_devices == 16
    other = tmp_path / "cluster.cfg"
    other.write_text(SAMPLE)
    assert load_spec(str(other)).nodes == 2


def test_flexflow_nvlink_across_sockets_and_gpu_type(tmp_path):
    path = tmp_path / "mm.txt"
    path.write_text(SAMPLE.replace("= pci_to_host upi pci_to_dev", "= nvlink") + "gpu_type = A100\n")
    m = load_machine(str(path))
    assert all(types(m, s, d) == ["nvlink"] for s in range(4) for d in range(4) if s != d)
    assert m.devices[0].spec.name == "A100-SXM4-80GB"


def test_flexflow_defaults_without_link_numbers(tmp_path):
    path = tmp_path / "mm"
    path.write_text("num_nodes = 1\nnum_sockets_per_node = 1\nnum_gpus_per_socket = 4\n")
    m = load_machine(str(path))
    assert types(m, 0, 1) == ["pcie", "pcie"] and m.route_bandwidth(0, 1) == pytest.approx(12.58e9)


def test_flexflow_cpu_only_machine(tmp_path):
    path = tmp_path / "mm"
    path.write_text("num_nodes = 1\nnum_sockets_per_node = 2\nnum_cpus_per_socket = 2\nnum_gpus_per_socket = 0\n")
    m = load_machine(str(path))
    assert m.num_devices == 4 and m.devices[0].spec.kind == "cpu"
    assert types(m, 0, 1) == ["membus"] and types(m, 0, 2) == ["xbus"]


@pytest.mark.parametrize("old, new, expected", [
    ("nvlink_bandwidth = 18.52", "nvlink_bandwidth = fast",
     "FILE:17: field 'nvlink_bandwidth': expected a positive number (GB/s), got 'fast'"),
    ("pci_bandwidth = 12.58", "pci_bandwidth = -3",
     "FILE:15: field 'pci_bandwidth': expected a positive number (GB/s), got '-3'"),
    ("num_nodes = 2", "num_nodes = two", "FILE:2: field 'num_nodes': expected a positive integer, got 'two'"),
    ("num_nodes = 2", "num_nodez = 2", "FILE:2: field 'num_nodez': unknown key 'num_nodez'; valid keys: num_nodes"),
    ("= nvlink\n", "= nvlink warp\n",
     "FILE:22: field 'intra_socket_gpu_fb_mem_to_gpu_fb_mem': unknown path element 'warp'; valid elements: membus"),
    ("num_sockets_per_node = 2", "num_sockets_per_node 2", "FILE:3: expected 'key = value', got"),
    ("upi_latency = 0.0004", "num_nodes = 3", "FILE:10: field 'num_nodes': given twice (first on line 2)"),
    ("num_gpus_per_socket = 2", "num_gpus_per_socket = 2\ngpu_type = Z80",
     "FILE:6: field 'gpu_type': unknown GPU type 'Z80'; valid: V100, P100, K80, A100, H100"),
])
def test_flexflow_errors_name_file_and_line(tmp_path, old, new, expected):
    assert old in SAMPLE
    path = tmp_path / "mm"
    path.write_text(SAMPLE.replace(old, new, 1))
    with pytest.raises(MachineSpecError) as info:
        load_machine(str(path))
    assert str(info.value).replace(str(path), "FILE").startswith(expected)


def test_flexflow_missing_required_key(tmp_path):
    path = tmp_path / "mm"
    path.write_text("num_nodes = 1\nnum_sockets_per_node = 1\n")
    with pytest.raises(MachineSpecError, match="field 'num_gpus_per_socket': missing"):
        load_machine(str(path))
