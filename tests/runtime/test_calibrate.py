"""``flexrt.runtime.calibrate`` and ``flexrt calibrate``: quick measurements, the machine file they
write, and the ``local`` preset picking that file up."""

from __future__ import annotations

import json
import math
import os

import pytest

from flexrt.cli import main
from flexrt.ir.datatype import DataType
from flexrt.machine import (
    calibrated_local_path,
    load_machine,
    load_spec,
    local_machine,
    preset_spec,
)
from flexrt.machine.machine import LinkType
from flexrt.runtime.calibrate import CalibrationResult, calibrate, write_machine_yaml


@pytest.fixture(scope="module")
def quick() -> CalibrationResult:
    return calibrate(devices=4, quick=True)


def test_calibrate_quick_gives_positive_finite_numbers(quick):
    numbers = [f for _, f in quick.peak_flops] + [quick.memory_bandwidth, quick.launch_overhead_s,
                                                  quick.copy_bandwidth, quick.copy_latency_s]
    numbers += [t.rate for t in quick.throughput]
    assert all(math.isfinite(x) and x > 0 for x in numbers), numbers
    assert {name for name, _ in quick.peak_flops} == {"float32", "float64", "float16", "bfloat16", "int32", "int64"}
    assert [t.op_class for t in quick.throughput] == ["matmul", "conv2d", "elementwise", "reduction"]
    assert quick.quick and quick.elapsed_s < 5
    assert quick.launch_overhead_s < 1e-2 and quick.copy_latency_s < 1e-2  # microseconds, not seconds


def test_calibrate_rejects_a_non_positive_device_count():
    with pytest.raises(Exception, match="positive integer, got 0"):
        calibrate(devices=0, quick=True)


@pytest.mark.parametrize("devices", [1, 3])
def test_write_machine_yaml_loads_with_n_cpu_devices_and_the_measured_numbers(quick, tmp_path, devices):
    path = write_machine_yaml(quick, tmp_path / "sub" / "m.yaml", devices)
    m = load_machine(path)
    assert m.num_devices == devices and all(d.spec.kind == "cpu" for d in m.devices)
    spec = m.devices[0].spec
    assert spec.flops(DataType.DT_FLOAT) == pytest.approx(quick.flops("float32") / devices, rel=1e-5)
    assert spec.flops(DataType.DT_DOUBLE) == pytest.approx(quick.flops("float64") / devices, rel=1e-5)
    assert spec.memory_bandwidth == pytest.approx(quick.memory_bandwidth / devices, rel=1e-5)
    assert spec.launch_overhead_s == pytest.approx(quick.launch_overhead_s, rel=1e-5)
    assert spec.efficiency == 1.0
    membus = [link for link in m.links if link.type is LinkType.MEMBUS]
    assert len(membus) == devices * (devices - 1)  # one per direction of every pair
    assert all(link.bandwidth == pytest.approx(quick.copy_bandwidth, rel=1e-5) for link in membus)
    assert all(link.latency_s == pytest.approx(quick.copy_latency_s, rel=1e-5) for link in membus)
    assert load_machine(path, nodes=2).num_devices == 2 * devices  # nic/network links kept


def test_load_machine_local_prefers_the_calibrated_file(quick, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEXRT_CACHE_DIR", str(tmp_path))
    assert calibrated_local_path() == tmp_path / "local.yaml"
    assert load_spec("local") == preset_spec("local")  # no file yet: the built-in estimate
    assert "estimated" in load_spec("local").description
    write_machine_yaml(quick, calibrated_local_path(), 4)
    m = load_machine("local")
    assert "calibrated" in load_spec("local").description
    assert m.devices[0].spec.flops(DataType.DT_FLOAT) == pytest.approx(quick.flops("float32") / 4, rel=1e-5)
    assert local_machine(4) == m and local_machine(6).num_devices == 6
    assert local_machine(6).devices[0].spec == m.devices[0].spec


def test_calibrated_local_path_falls_back_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("FLEXRT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert calibrated_local_path() == tmp_path / "flexrt" / "local.yaml"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert calibrated_local_path() == tmp_path / "home" / ".cache" / "flexrt" / "local.yaml"


def test_cli_calibrate_quick_json_writes_the_output_file(tmp_path, capsys):
    out = tmp_path / "calibrated.yaml"
    assert main(["calibrate", "--quick", "--json", "--devices", "2", "--output", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["machine_file"] == str(out) and doc["devices"] == 2
    assert doc["host"]["peak_flops"]["float32"] > 0 and doc["host"]["copy_latency_s"] > 0
    m = load_machine(out)
    assert m.num_devices == 2
    assert m.devices[0].spec.flops(DataType.DT_FLOAT) == pytest.approx(doc["host"]["peak_flops"]["float32"] / 2,
                                                                      rel=1e-5)


def test_cli_calibrate_table_defaults_to_the_calibrated_local_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLEXRT_CACHE_DIR", str(tmp_path))
    assert main(["calibrate", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "peak float32" in out and "copy latency" in out and "reduction" in out
    assert f"wrote {tmp_path / 'local.yaml'}" in out
    assert (tmp_path / "local.yaml").is_file() and "calibrated" in load_spec("local").description


def test_cli_calibrate_rejects_zero_devices(capsys):
    assert main(["calibrate", "--quick", "--devices", "0"]) == 2
    assert "--devices must be a positive integer, got 0" in capsys.readouterr().err


def test_the_collective_fit_recovers_a_linear_model_and_links_are_point_to_point(quick, tmp_path):
    """DisCo's T = C x + D: fitted from (bytes, seconds); the machine file's inter-rank links are the
    measured point-to-point messages (what the runtime sends, a ring spanning ranks included),
    whatever AllReduce fit was measured beside them."""
    import dataclasses
    from flexrt.machine import load_machine
    from flexrt.runtime.calibrate import fit_linear, machine_yaml
    c, d = 2e-10, 30e-6
    sizes = [8, 4096, 1 << 20, 16 << 20]
    fitted = fit_linear(sizes, [c * x + d for x in sizes])
    assert fitted[0] == pytest.approx(c, rel=1e-9) and fitted[1] == pytest.approx(d, rel=1e-6) and fitted[2] > 0.999
    with pytest.raises(Exception, match="two or more message sizes"):
        fit_linear([8], [1e-5])
    result = dataclasses.replace(quick, allreduce=tuple((x, c * x + d) for x in sizes), allreduce_ranks=2,
                                 mpi_bandwidth=5e9, mpi_latency_s=8e-6)
    path = tmp_path / "local.yaml"
    path.write_text(machine_yaml(result, 1))
    assert "MPI messages between two ranks measured here" in path.read_text()
    m = load_machine(str(path), 2)
    route = m.route(0, 1)
    assert sum(m.links[link].latency_s for link in route) == pytest.approx(8e-6, rel=1e-3)
    assert min(m.links[link].bandwidth for link in route) == pytest.approx(5e9, rel=1e-3)


def test_cli_calibrate_without_mpi_makes_one_worker_per_core(tmp_path, monkeypatch, capsys):
    from flexrt.runtime import mpi
    monkeypatch.setenv("FLEXRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mpi, "find_mpiexec", lambda: None)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert main(["calibrate", "--quick"]) == 0
    assert "calibrating this host as" not in capsys.readouterr().out
    m = load_machine("local")
    assert (m.num_nodes, m.num_devices) == (1, 3)
