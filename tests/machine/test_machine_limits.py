"""Machine inputs that are too large, out of range, or not what they seem: limits checked before
anything is allocated, preset names that always mean the preset, files that are not regular UTF-8
files, and ``flexrt calibrate`` never leaving a file that does not load."""

from __future__ import annotations

import dataclasses
import os
import time
import tracemalloc

import pytest

from flexrt.cli import main
from flexrt.errors import ConfigError, MachineSpecError
from flexrt.machine import build_machine, limits, load_machine, load_spec, local_machine, preset_names, preset_spec
from flexrt.machine.load import is_path
from flexrt.runtime.calibrate import CalibrationResult, check_output_path, write_machine_yaml

WIDE = """\
name: wide
device_kinds:
  G: {kind: gpu, peak_flops: {float32: 10}, memory_bandwidth: 500, memory: 8, launch_overhead_us: 4}
node:
  sockets: [{cpu: null, devices: {G: COUNT}}]
links:
  nvlink: {bandwidth: BW, latency_us: LAT}
  nic: {bandwidth: 10, latency_us: 1}
  network: {bandwidth: 10, latency_us: 1}
intra_node:
  devices: [{all_to_all: all, link: nvlink}]
inter_node: {nics: 1, attach: devices}
"""


def wide(tmp_path, count=4, bw="20", lat="1"):
    path = tmp_path / "wide.yaml"
    path.write_text(WIDE.replace("COUNT", str(count)).replace("BW", bw).replace("LAT", lat))
    return str(path)


def refused(fn, *args, **kwargs) -> str:
    """The message of the MachineSpecError ``fn`` raises, checking it came fast and small."""
    tracemalloc.start()
    t = time.perf_counter()
    try:
        with pytest.raises(MachineSpecError) as info:
            fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t < 2 and peak < 20 * 2**20, (time.perf_counter() - t, peak)
    return str(info.value)


def test_a_preset_name_always_means_the_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "summit").write_text("name: [not a machine\n")
    assert load_spec("summit") == preset_spec("summit")
    with pytest.raises(MachineSpecError, match=r"^summit:2: invalid YAML"):
        load_spec("./summit")


def test_a_string_is_a_file_only_when_it_looks_like_a_path():
    assert not any(is_path(name) for name in ("summit", "local", "my.cluster", "dgx1_v100"))
    assert all(is_path(name) for name in ("./summit", "a/b", "m.yaml", "M.YML", "mm.txt", "x.conf", "x.cfg"))


def test_a_file_named_like_no_preset_says_how_to_load_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster").write_text("num_nodes = 1\n")
    with pytest.raises(MachineSpecError, match=r"unknown machine preset 'cluster'; presets: .*give \./cluster"):
        load_spec("cluster")


@pytest.mark.parametrize("bad", ["", "a\x00b.yaml", "x" * 5000 + ".yaml", 3, None])
def test_odd_names_are_refused(bad):
    with pytest.raises(MachineSpecError, match=r"a machine is a preset name or a file path"):
        load_spec(bad)


def test_special_files_and_encodings(tmp_path):
    (tmp_path / "d.yaml").mkdir()
    assert "is a directory" in refused(load_machine, str(tmp_path / "d.yaml"))
    os.mkfifo(tmp_path / "f.txt")
    assert "is not a regular file" in refused(load_machine, str(tmp_path / "f.txt"))  # and does not block
    (tmp_path / "mm.txt").write_bytes(b"num_nodes = 1\n# caf\xe9\n")
    assert refused(load_machine, str(tmp_path / "mm.txt")).endswith(
        "mm.txt:2: not valid UTF-8 text: byte 0xe9 at offset 19 (invalid continuation byte)")


def test_node_and_device_limits_are_checked_before_building():
    message = refused(load_machine, "dgx1_v100", nodes=10**7)
    assert message == ("--nodes 10000000: machine 'dgx1_v100' can have 1..4096 nodes, got 10000000; the limit is "
                       "4096 (flexrt.machine.limits.MAX_NODES)")
    machine = load_machine("summit")
    assert "can have 1..4096 nodes" in refused(machine.with_nodes, 10**7)
    assert "1..1024" in refused(local_machine, 10**7)


def test_devices_and_links_in_all(tmp_path):
    assert refused(load_machine, wide(tmp_path, 32), nodes=4096) == (
        "--nodes 4096: 4096 nodes x 32 devices = 131072 devices, over the limit of 65536 "
        "(flexrt.machine.limits.MAX_DEVICES); give --nodes at most 2048 nodes")
    path = wide(tmp_path, 1024)
    message = refused(load_machine, path)
    assert message.endswith("field 'intra_node.devices[0]': all_to_all over 1024 devices makes 1047552 directional "
                            "links in one node, over the limit of 65536 (flexrt.machine.limits.MAX_LINKS_PER_NODE); "
                            "join large groups through a switch (switch: [...]) instead of all_to_all or pairs")
    spec = load_spec(wide(tmp_path, 200))
    assert refused(build_machine, spec, 100) == (
        "--nodes 100: 100 nodes x 40202 links = 4020200 directional links, over the limit of 524288 "
        "(flexrt.machine.limits.MAX_LINKS); give --nodes at most 13 nodes")
    assert build_machine(spec, 2).num_devices == 400


def test_limits_hold_for_a_spec_built_in_python():
    spec = preset_spec("local")
    kind = spec.sockets[0].devices[0]
    big = dataclasses.replace(spec, sockets=(dataclasses.replace(spec.sockets[0], devices=(kind,) * 2000),))
    assert "2000 devices per node, over the limit of 1024" in refused(build_machine, big)


@pytest.mark.parametrize("bw, lat, ok", [("0.001", "0", True), ("1000000", "1000000", True), ("0.0009", "1", False),
                                         ("1.0e+7", "1", False), ("20", "1000001", False), ("20", "-0.5", False)])
def test_physical_ranges_include_their_bounds(tmp_path, bw, lat, ok):
    path = wide(tmp_path, 2, bw, lat)
    if ok:
        assert load_machine(path).num_devices == 2
    else:
        message = refused(load_machine, path)
        assert "field 'links.nvlink." in message and ("between 0.001 and 1e+06 (GB/s)" in message or
                                                      "between 0 and 1e+06" in message), message


def test_every_preset_is_within_the_limits():
    for name in preset_names():
        machine = load_machine(name)
        assert machine.num_devices <= limits.MAX_DEVICES and len(machine.links) <= limits.MAX_LINKS


def result(**changes) -> CalibrationResult:
    base = CalibrationResult(peak_flops=(("float32", 1e11), ("float64", 5e10)), memory_bandwidth=1e10,
                             launch_overhead_s=1e-6, copy_bandwidth=1e10, copy_latency_s=1e-7, throughput=(),
                             memory_bytes=16 * 2**30, cpu_count=2, quick=True, elapsed_s=0.1)
    return dataclasses.replace(base, **changes)


def test_calibrate_checks_the_file_before_writing_it(tmp_path):
    path = tmp_path / "local.yaml"
    path.write_text("previous\n")
    with pytest.raises(MachineSpecError, match=r"the calibrated machine would not load, so nothing was written: "
                                               r".*local\.yaml:\d+: field 'device_kinds\.host-cpu\.memory'"):
        write_machine_yaml(result(memory_bytes=10**20), path, 4)
    assert path.read_text() == "previous\n" and sorted(p.name for p in tmp_path.iterdir()) == ["local.yaml"]


def test_calibrate_writes_atomically_with_ordinary_permissions(tmp_path):
    path = write_machine_yaml(result(), tmp_path / "sub" / "local.yaml", 2)
    assert load_machine(path).num_devices == 2
    assert [p.name for p in path.parent.iterdir()] == ["local.yaml"]
    umask = os.umask(0o22)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("name, setup, expected", [
    ("local", None, "a machine file must end in .yaml or .yml"),
    ("d.yaml", "dir", "d.yaml is a folder; give a file name"),
    ("f.yaml/x.yaml", "file", "f.yaml is a file, not a folder"),
])
def test_check_output_path(tmp_path, name, setup, expected):
    if setup == "dir":
        (tmp_path / name).mkdir()
    elif setup == "file":
        (tmp_path / "f.yaml").write_text("x")
    with pytest.raises(ConfigError, match=expected):
        check_output_path(tmp_path / name, "--output")


def test_cli_calibrate_refuses_flags_before_measuring(tmp_path, monkeypatch, capsys):
    import flexrt.cli._calibrate as cli

    monkeypatch.setattr(cli, "calibrate", lambda *a, **k: pytest.fail("measured before checking the flags"))
    assert main(["calibrate", "--devices", "100000"]) == 2
    assert "--devices must be at most 1024" in capsys.readouterr().err
    (tmp_path / "out.yaml").mkdir()
    assert main(["calibrate", "--output", str(tmp_path / "out.yaml")]) == 1
    assert "is a folder; give a file name" in capsys.readouterr().err
    monkeypatch.setenv("FLEXRT_CACHE_DIR", str(tmp_path / "out.yaml" / "x"))
    (tmp_path / "out.yaml" / "x").write_text("")
    assert main(["calibrate"]) == 1
    assert "the calibrated machine's path (FLEXRT_CACHE_DIR)" in capsys.readouterr().err
