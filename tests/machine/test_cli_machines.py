"""``flexrt machines`` and ``flexrt machines show``: tables, --json, --nodes, errors."""

from __future__ import annotations

import json

from flexrt.cli import main
from flexrt.machine import load_machine, preset_names


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_machines_lists_presets(capsys):
    code, out, err = run(capsys, "machines")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["name", "nodes", "devices", "per", "node"]
    assert [line.split()[0] for line in lines[1:]] == list(preset_names())
    summit = next(line for line in lines if line.startswith("summit "))
    assert summit.split() == ["summit", "1", "6", "6", "x", "V100-SXM2-16GB"]
    k80 = next(line for line in lines if line.startswith("flexflow_k80 "))
    assert k80.split()[:3] == ["flexflow_k80", "16", "64"]


def test_machines_json(capsys):
    code, out, _ = run(capsys, "machines", "--json")
    assert code == 0
    rows = json.loads(out)["machines"]
    assert [r["name"] for r in rows] == list(preset_names())
    dgx = next(r for r in rows if r["name"] == "dgx_a100")
    assert (dgx["nodes"], dgx["devices"], dgx["devices_per_node"]) == (1, 8, 8)
    assert dgx["device_kind"] == "8 x A100-SXM4-80GB"
    assert dgx["description"]


def test_machines_show_summit_two_nodes(capsys):
    code, out, err = run(capsys, "machines", "show", "summit", "--nodes", "2")
    assert code == 0 and err == ""
    assert out.splitlines()[0] == "machine summit: 2 node(s) x 6 devices = 12 devices, 68 links"
    assert "    11  n1.gpu5         1      1     5  V100-SXM2-16GB" in out
    assert "     0  nvlink         50          1  n0.gpu0 -> n0.gpu1" in out
    assert "  ->    3 n0.gpu3      3 hop(s), 32 GB/s: nvlink > xbus > nvlink" in out
    assert "  ->    6 n1.gpu0      6 hop(s), 12.5 GB/s: nvlink > nic > network > network > nic > nvlink" in out
    assert sum(line.startswith("  -> ") for line in out.splitlines()) == 11


def test_machines_show_json_matches_the_machine(capsys):
    code, out, _ = run(capsys, "machines", "show", "dgx1_v100", "--nodes", "2", "--json")
    assert code == 0
    doc = json.loads(out)
    m = load_machine("dgx1_v100", nodes=2)
    assert (doc["name"], doc["nodes"], doc["num_devices"]) == ("dgx1_v100", 2, 16)
    assert len(doc["devices"]) == 16 and len(doc["links"]) == len(m.links)
    assert doc["links"][0] == {"id": 0, "type": "nvlink", "bandwidth": 25e9, "latency_s": m.links[0].latency_s,
                               "src": "n0.gpu0", "dst": "n0.gpu1"}
    routes = {r["dst"]: r for r in doc["routes"]}
    assert set(routes) == set(range(1, 16))
    assert routes[3]["links"] == list(m.route(0, 3)) and routes[3]["bottleneck_bandwidth"] == 50e9
    assert routes[5]["types"] == ["nvlink", "nvlink"]
    assert doc["device_kinds"][0]["peak_flops"]["DT_FLOAT"] == 15.7e12


def test_machines_show_a_yaml_file(capsys, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\ndevice_kinds:\n  c: {kind: cpu, peak_flops: {float32: 0.1}, memory_bandwidth: 10,"
                    " memory: 1, launch_overhead_us: 1}\nnode:\n  sockets: [{devices: {c: 2}}]\nlinks:\n"
                    "  membus: {bandwidth: 10, latency_us: 1}\n"
                    "intra_node:\n  devices: [{all_to_all: all, link: membus}]\n")
    code, out, err = run(capsys, "machines", "show", str(path))
    assert code == 0 and err == "" and "  ->    1 n0.cpu1      1 hop(s), 10 GB/s: membus" in out


def test_machines_show_errors(capsys, tmp_path):
    code, out, err = run(capsys, "machines", "show", "nope")
    assert code == 1 and out == ""
    assert err.startswith("flexrt: error: unknown machine preset 'nope'; presets: dgx1_v100")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes: -1\n")
    code, _, err = run(capsys, "machines", "show", str(bad))
    assert code == 1 and err == f"flexrt: error: {bad}:1: field '<top level>': missing key 'device_kinds'\n"
    code, _, err = run(capsys, "machines", "show", "summit", "--nodes", "two")
    assert code == 2 and "argument --nodes: expected an integer" in err and "'two'" in err
    code, _, err = run(capsys, "machines", "show", "summit", "--nodes", "10000000")
    assert code == 2 and "argument --nodes: expected an integer between 1 and 4096, got 10000000" in err
    code, _, err = run(capsys, "machines", "--bogus")
    assert code == 2 and "unrecognized arguments: --bogus" in err
