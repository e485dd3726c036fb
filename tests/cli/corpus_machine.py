"""Bad machine descriptions and machine flags (the corpus of ``badinput.py``): machine YAML files
(encoding, syntax, nesting, aliases, every field's type, range and limit), FlexFlow's key = value
machine files, ``--machine``/``--nodes`` of ``flexrt simulate`` and ``flexrt machines show``, and the
flags of ``flexrt calibrate`` that are refused before anything is measured. Each message must name
the file and line (or the flag), the field, the bad value and what is valid."""

import os

from .badinput import case
from ..machine.test_yaml_format import GOOD as MACHINE_YAML

# A valid two-node machine; the cases below change one thing in it (the line numbers are the file's).
GOOD = MACHINE_YAML.replace("name: two_by_two", "name: tiny")  # tests/machine/test_yaml_format.py's
KINDS = GOOD[GOOD.index("device_kinds:"):GOOD.index("node:")]
NODE = GOOD[GOOD.index("node:"):GOOD.index("links:")]
SOCKETS = NODE[NODE.index("  sockets:"):]
LINKS = GOOD[GOOD.index("links:"):GOOD.index("intra_node:")]

# One socket of N devices joined all-to-all (for the size limits).
WIDE = """\
name: wide
nodes: 1
device_kinds:
  G: {kind: gpu, peak_flops: {float32: 10}, memory_bandwidth: 500, memory: 8, launch_overhead_us: 4}
node:
  sockets:
    - {cpu: null, devices: {G: N}}
links:
  nvlink: {bandwidth: 20, latency_us: 1}
  nic: {bandwidth: 10, latency_us: 0.5}
  network: {bandwidth: 5, latency_us: 1}
intra_node:
  devices:
    - {all_to_all: all, link: nvlink}
inter_node:
  nics: 1
  attach: devices
"""

FLEXFLOW = """\
# FlexFlow machine model
num_nodes = 2
num_sockets_per_node = 2
num_gpus_per_socket = 2
nvlink_latency = 0.001
nvlink_bandwidth = 18.52
pci_bandwidth = 12.58
intra_socket_gpu_fb_mem_to_gpu_fb_mem = nvlink
"""

SHOW = "machines show {m.yaml}"
SIM = "simulate mlp --data-parallel --machine"
FIELD = r"m\.yaml:{line}: field '{field}': "


def _yaml(id: str, old: str, new: str, line: int, field: str, expect: str, cmd: str = SHOW, text: str = GOOD):
    """A case of ``text`` with ``old`` replaced by ``new``; the error must name ``line`` and ``field``."""
    assert old in text, old
    where = FIELD.format(line=line, field=field.replace(".", r"\.").replace("[", r"\[").replace("]", r"\]"))
    return case(f"machine-yaml-{id}", cmd, where + expect, {"m.yaml": text.replace(old, new, 1)})


def _raw(id: str, content, expect: str):
    return case(f"machine-yaml-{id}", SHOW, expect, {"m.yaml": content})


def _ff(id: str, old: str, new: str, expect: str, text: str = FLEXFLOW):
    assert old in text, old
    return case(f"machine-flexflow-{id}", "machines show {mm.txt}", r"mm\.txt:" + expect,
                {"mm.txt": text.replace(old, new, 1)})


def _mkfifo(name: str):
    return lambda folder: os.mkfifo(folder / name)


def _mkdir(name: str):
    return lambda folder: (folder / name).mkdir()


def _laughs(levels: int, used: str) -> str:
    """The "billion laughs": each anchor is a list of nine aliases of the one before."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, cur in zip("abcdefghij", "bcdefghijk"[:levels]):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + f"\nname: *{used}\n"


def _laughs_in_name(levels: int) -> str:
    """Smaller laughs (9 ** (levels + 1) strings), all inside ``name``: a value not to print whole."""
    anchors = _laughs(levels, "a").splitlines()[:-1]
    return "name:\n" + "".join(f"  - {line.partition(': ')[2]}\n" for line in anchors)


def _deep_block(levels: int) -> str:
    return "".join(f"{' ' * i}k{i}:\n" for i in range(levels)) + " " * levels + "x: 1\n"


PRESETS = r"presets: dgx1_v100, dgx2h, dgx_a100, dgx_h100, disco_a, disco_b, flexflow_k80, flexflow_p100, local, summit"
NUMBER = r"expected a number between {lo} and {hi} \({unit}\), got {value}"
POSITIVE = r"expected a positive number \({unit}\), got {value}; valid: between {lo} and {hi}"
TFLOPS, GBS, GIB, US = ("1e-09", "1e\\+06", "TFLOP/s"), ("0.001", "1e\\+06", "GB/s"), \
    ("1e-06", "1e\\+06", "GiB"), ("0", "1e\\+06", "microseconds")


def _num(values, value):
    lo, hi, unit = values
    return NUMBER.format(lo=lo, hi=hi, unit=unit, value=value)


def _pos(values, value, positive=True):
    lo, hi, unit = values
    text = POSITIVE.format(lo=lo, hi=hi, unit=unit, value=value)
    return text if positive else text.replace("a positive", "a non-negative")


CASES = [
    # -- reading the file: encoding, kind of file, size
    _raw("not-utf8", b"name: \xff\n", r"m\.yaml:1: not valid UTF-8 text: byte 0xff at offset 6 \(invalid start byte\)"),
    _raw("latin1-line-12", GOOD.replace("cpu: X", "cpu: X\xe9", 1).encode("latin-1"),
         r"m\.yaml:12: not valid UTF-8 text: byte 0xe9 at offset \d+"),
    _raw("utf16", GOOD.encode("utf-16"), r"m\.yaml:1: not valid UTF-8 text: byte 0xff at offset 0"),
    case("machine-yaml-directory", "machines show {dir}/d.yaml", r"machine file .*d\.yaml is a directory, not a file",
         setup=_mkdir("d.yaml")),
    case("machine-yaml-fifo", "machines show {dir}/f.yaml",
         r"machine file .*f\.yaml is not a regular file \(a FIFO, socket or device\); give a file",
         setup=_mkfifo("f.yaml")),
    case("machine-yaml-missing", "machines show {dir}/none.yaml",
         rf"machine file .*none\.yaml does not exist \({PRESETS}\)"),
    _raw("too-large", "# " + "x" * 140000 + "\n", r"machine file .*m\.yaml is 140003 bytes; the limit is 131072"),
    _raw("empty", "",
         r"m\.yaml:1: field '<top level>': expected a mapping with name, device_kinds, node, links, got null"),
    _raw("top-level-list", "- 1\n- 2\n",
         r"m\.yaml:1: field '<top level>': expected a mapping with name, .*got \[1, 2\]"),
    # -- YAML syntax, nesting, aliases, tags, scalars PyYAML cannot build
    _raw("unclosed-flow", "name: x\ndevice_kinds: {G: [1, 2\nnode: {}\n",
         r"m\.yaml:3: invalid YAML: expected ',' or ']'"),
    _raw("tab-indent", "name: x\nnode:\n\tsockets: []\n", r"m\.yaml:3: invalid YAML: .*'\\t'"),
    _raw("deep-flow-50000", "name: " + "[" * 50000 + "]" * 50000 + "\n",
         r"m\.yaml:1: nested more than 64 levels deep; flexrt.s files need far fewer"),
    _raw("deep-block-100", _deep_block(100), r"m\.yaml:65: nested more than 64 levels deep"),
    _raw("billion-laughs", _laughs(9, "j"), r"m\.yaml:7: the document expands to more than 1000000 values"),
    _raw("laughs-in-message", _laughs_in_name(4) + GOOD.replace("name: tiny\n", ""),
         r"m\.yaml:1: field 'name': the machine's name must be a non-empty string, "
         r"got \[\['lol', .{40,}\.\.\. \(\d{6} characters\)$"),
    _raw("recursive-alias", "name: &a [*a]\n", r"m\.yaml:1: an alias refers to a value that contains it"),
    _raw("python-tag", "name: !!python/object/apply:os.system ['true']\n",
         r"m\.yaml:1: invalid YAML: could not determine a constructor for the tag "
         r"'tag:yaml.org,2002:python/object/apply:os.system'"),
    case("machine-yaml-duplicate-key", SHOW, r"m\.yaml:18: invalid YAML: found duplicate key 'nvlink'",
         {"m.yaml": GOOD.replace("  pcie: {", "  nvlink: {", 1)}),
    case("machine-yaml-unhashable-key", SHOW, r"m\.yaml:15: invalid YAML: found an unhashable key",
         {"m.yaml": GOOD.replace("devices: {G: 2}", "devices: {[G]: 2}", 1)}),
    case("machine-yaml-5000-digit-int", SHOW,
         r"m\.yaml:8: invalid YAML: an integer of 5000 digits; machine files need at "
         r"most 30 \(flexrt\.machine\.limits\.MAX_INT_DIGITS\)",
         {"m.yaml": GOOD.replace("memory: 8", "memory: " + "9" * 5000, 1)}),
    case("machine-yaml-octal", SHOW, r"m\.yaml:8: invalid YAML: '010' is a YAML 1\.1 octal number \(8\); write the "
         r"decimal number you mean", {"m.yaml": GOOD.replace("memory: 8", "memory: 010", 1)}),
    case("machine-yaml-base-60", SHOW, r"m\.yaml:8: invalid YAML: '1:30' is a YAML 1\.1 base-60 number \(90\)",
         {"m.yaml": GOOD.replace("memory: 8", "memory: 1:30", 1)}),
    case("machine-yaml-bad-date", SHOW,
         r"m\.yaml:1: invalid YAML: cannot read '2020-13-45' as timestamp: month must be in 1\.\.12",
         {"m.yaml": GOOD.replace("name: tiny", "name: 2020-13-45", 1)}),
    # -- top level
    _yaml("unknown-top-key", "nodes: 2\n", "nodes: 2\ncolour: red\n", 3, "colour",
          r"unknown key 'colour'; valid keys: name, device_kinds, node, links, description, nodes, intra_node, "
          r"inter_node"),
    case("machine-yaml-missing-name", SHOW, r"m\.yaml:1: field '<top level>': missing key 'name'",
         {"m.yaml": GOOD.replace("name: tiny\n", "", 1)}),
    _yaml("name-list", "name: tiny", "name: [a, b]", 1, "name",
          r"the machine's name must be a non-empty string, got \['a', 'b'\]"),
    _yaml("name-date", "name: tiny", "name: 2020-01-01", 1, "name",
          r"the machine's name must be a non-empty string, got datetime\.date\(2020, 1, 1\)"),
    _yaml("name-too-long", "name: tiny", "name: " + "n" * 300, 1, "name",
          r"the machine's name must be one line of at most 200 \(flexrt\.machine\.limits\.MAX_NAME_CHARS\) characters, "
          r"got 'nnnn.*\(302 characters\)"),
    _yaml("description-list", "nodes: 2", "nodes: 2\ndescription: [a]", 3, "description",
          r"expected a non-empty string, got \['a'\]"),
    _yaml("nodes-zero", "nodes: 2", "nodes: 0", 2, "nodes", r"expected a positive integer, got 0; valid: 1\.\.4096"),
    _yaml("nodes-ten-million", "nodes: 2", "nodes: 10000000", 2, "nodes",
          r"10000000 is over the limit of 4096 \(flexrt\.machine\.limits\.MAX_NODES\)"),
    _yaml("nodes-fraction", "nodes: 2", "nodes: 2.5", 2, "nodes",
          r"expected a positive integer, got 2\.5; valid: 1\.\.4096"),
    _yaml("nodes-text", "nodes: 2", "nodes: two", 2, "nodes",
          r"expected a positive integer, got 'two'; valid: 1\.\.4096"),
    _yaml("nodes-bool", "nodes: 2", "nodes: true", 2, "nodes",
          r"expected a positive integer, got True; valid: 1\.\.4096"),
    _yaml("nodes-overflow", "nodes: 2", "nodes: 1.0e+400", 2, "nodes",
          r"expected a positive integer, got inf; valid: 1\.\.4096"),
    _yaml("nodes-times-devices", "nodes: 2", "nodes: 4096", 2, "nodes",
          r"4096 nodes x 32 devices = 131072 devices, over the limit of 65536 "
          r"\(flexrt\.machine\.limits\.MAX_DEVICES\); "
          r"give at most 2048 nodes", text=GOOD.replace("{G: 2}", "{G: 30}")),
    _yaml("nodes-times-links", "nodes: 1", "nodes: 100", 2, "nodes",
          r"100 nodes x 10102 links = 1010200 directional links, over the limit of 524288 "
          r"\(flexrt\.machine\.limits\.MAX_LINKS\); use at most 51 nodes", text=WIDE.replace("{G: N}", "{G: 100}")),
    _yaml("nodes-without-network", "inter_node:\n  nics: 1\n", "", 2, "nodes",
          r"2 nodes need an inter_node section with nics > 0"),
    # -- device kinds
    _yaml("kinds-list", KINDS, "device_kinds: [G]\n", 3, "device_kinds",
          r"expected a mapping name -> device kind, got \['G'\]"),
    _yaml("kinds-empty", KINDS, "device_kinds: {}\n", 3, "device_kinds", r"expected at least one device kind"),
    _yaml("kind-name-int", "  G:\n", "  1:\n", 4, "device_kinds.1",
          r"a device kind name must be a non-empty string, got 1"),
    _yaml("kind-not-mapping", KINDS, "device_kinds:\n  G: fast\n", 4, "device_kinds.G",
          r"expected a mapping of kind, peak_flops, memory_bandwidth, memory, launch_overhead_us, got 'fast'"),
    _yaml("kind-tpu", "kind: gpu", "kind: tpu", 5, "device_kinds.G.kind", r"expected one of gpu, cpu, got 'tpu'"),
    _yaml("kind-list", "kind: gpu", "kind: [gpu]", 5, "device_kinds.G.kind",
          r"expected one of gpu, cpu, got \['gpu'\]"),
    _yaml("kind-unknown-key", "    memory: 8\n", "    memory: 8\n    colour: red\n", 9, "device_kinds.G.colour",
          r"unknown key 'colour'; valid keys: kind, peak_flops, memory_bandwidth, memory, launch_overhead_us, "
          r"efficiency"),
    _yaml("kind-missing-memory", "    memory: 8\n", "", 5, "device_kinds.G", r"missing key 'memory'"),
    _yaml("flops-list", "{float32: 10, float16: 20}", "[10, 20]", 6, "device_kinds.G.peak_flops",
          r"expected a mapping dtype -> TFLOP/s, got \[10, 20\]"),
    _yaml("flops-empty", "{float32: 10, float16: 20}", "{}", 6, "device_kinds.G.peak_flops",
          r"expected at least one dtype"),
    _yaml("flops-dtype", "{float32: 10,", "{fp32: 10,", 6, "device_kinds.G.peak_flops.fp32",
          r"unknown dtype 'fp32'; valid dtypes: float32, float16, bfloat16, float64, int32, int64"),
    _yaml("flops-zero", "{float32: 10,", "{float32: 0,", 6, "device_kinds.G.peak_flops.float32", _pos(TFLOPS, "0")),
    _yaml("flops-huge", "{float32: 10,", "{float32: 1.0e+300,", 6, "device_kinds.G.peak_flops.float32",
          _num(TFLOPS, r"1e\+300")),
    _yaml("flops-huge-int", "{float32: 10,", "{float32: " + "1" + "0" * 25 + ",", 6,
          "device_kinds.G.peak_flops.float32",
          _num(TFLOPS, "1" + "0" * 25)),
    _yaml("flops-nan", "{float32: 10,", "{float32: .nan,", 6, "device_kinds.G.peak_flops.float32", _pos(TFLOPS, "nan")),
    _yaml("flops-inf", "{float32: 10,", "{float32: .inf,", 6, "device_kinds.G.peak_flops.float32", _num(TFLOPS, "inf")),
    _yaml("memory-overflow", "memory: 8", "memory: 1.0e+308", 8, "device_kinds.G.memory", _num(GIB, r"1e\+308")),
    _yaml("memory-negative", "memory: 8", "memory: -8", 8, "device_kinds.G.memory", _pos(GIB, "-8")),
    _yaml("memory-text", "memory: 8", "memory: 16 GB", 8, "device_kinds.G.memory", _pos(GIB, "'16 GB'")),
    _yaml("memory-bandwidth-tiny", "memory_bandwidth: 500", "memory_bandwidth: 1.0e-300", 7,
          "device_kinds.G.memory_bandwidth", _num(GBS, "1e-300")),
    _yaml("launch-negative", "launch_overhead_us: 4", "launch_overhead_us: -1", 9, "device_kinds.G.launch_overhead_us",
          _pos(US, "-1", positive=False)),
    _yaml("launch-huge", "launch_overhead_us: 4", "launch_overhead_us: 1.0e+9", 9, "device_kinds.G.launch_overhead_us",
          _num(US, r"1000000000\.0")),
    _yaml("efficiency-over-one", "    memory: 8\n", "    memory: 8\n    efficiency: 2\n", 9,
          "device_kinds.G.efficiency",
          r"expected a number between 0\.001 and 1 \(fraction of peak\), got 2"),
    _yaml("efficiency-tiny", "    memory: 8\n", "    memory: 8\n    efficiency: 1.0e-300\n", 9,
          "device_kinds.G.efficiency",
          r"expected a number between 0\.001 and 1 \(fraction of peak\), got 1e-300"),
    # -- node and sockets
    _yaml("node-list", NODE, "node: [1]\n", 10, "node",
          r"expected a mapping with sockets, got \[1\]"),
    _yaml("sockets-mapping", SOCKETS, "  sockets: {cpu: X}\n", 11, "node.sockets",
          r"expected a list of sockets, got \{'cpu': 'X'\}"),
    _yaml("device-name-list", "devices: [G, G]", "devices: [G, [G]]", 13, "node.sockets[0].devices[1]",
          r"unknown device kind \['G'\]; device_kinds defines: G"),
    _yaml("device-unknown-kind", "devices: {G: 2}", "devices: {H: 2}", 15, "node.sockets[1].devices[0]",
          r"unknown device kind 'H'; device_kinds defines: G"),
    _yaml("device-count-negative", "devices: {G: 2}", "devices: {G: -2}", 15, "node.sockets[1].devices.G",
          r"expected an integer >= 0, got -2; valid: 0\.\.1024"),
    _yaml("device-count-billion", "devices: {G: 2}", "devices: {G: 1000000000}", 15, "node.sockets[1].devices.G",
          r"1000000000 is over the limit of 1024 \(flexrt\.machine\.limits\.MAX_DEVICES_PER_NODE\)"),
    _yaml("device-counts-add-up", "devices: {G: 2}", "devices: {G: 1000, H: 30}", 15, "node.sockets[1].devices.H",
          r"30 devices bring the node to 1032 devices, over the limit of 1024 "
          r"\(flexrt\.machine\.limits\.MAX_DEVICES_PER_NODE\) devices per node"),
    _yaml("device-list-too-long", "devices: [G, G]", "devices: [" + ", ".join(["G"] * 1030) + "]", 13,
          "node.sockets[0].devices", r"1030 devices bring the node to 1030 devices, over the limit of 1024"),
    _yaml("devices-text", "devices: [G, G]", "devices: G", 13, "node.sockets[0].devices",
          r"expected a list of device kind names or a mapping name -> count, got 'G'"),
    _yaml("cpu-list", "    - cpu: X\n", "    - cpu: [X]\n", 12, "node.sockets[0].cpu",
          r"a CPU label \(or null\) must be a non-empty string, got \['X'\]"),
    _yaml("no-devices", "      devices: [G, G]\n    - cpu: X\n      devices: {G: 2}",
          "      devices: []\n    - cpu: X\n"
          "      devices: {G: 0}", 12, "node.sockets", r"expected at least one device in some socket"),
    _yaml("too-many-sockets", SOCKETS, "  sockets: [" + ", ".join(["{cpu: X, devices: []}"] * 300) + "]\n", 11,
          "node.sockets",
          r"300 sockets, over the limit of 256 \(flexrt\.machine\.limits\.MAX_SOCKETS_PER_NODE\) per node"),
    _yaml("cpu-kind-with-cpu", "kind: gpu", "kind: cpu", 12, "node.sockets[0].cpu",
          r"a socket cpu cannot be given when its devices are of kind 'cpu'"),
    # -- links
    _yaml("links-list", LINKS, "links: [nvlink]\n", 16, "links",
          r"expected a mapping link type -> \{bandwidth, latency_us\}, got \['nvlink'\]"),
    _yaml("link-type-unknown", "  xbus: {", "  qpi: {", 19, "links.qpi",
          r"unknown link type 'qpi'; valid link types: nvlink, pcie, xbus, nic, network, membus, switch"),
    _yaml("bandwidth-text", "nvlink: {bandwidth: 20,", "nvlink: {bandwidth: fast,", 17, "links.nvlink.bandwidth",
          _pos(GBS, "'fast'")),
    _yaml("bandwidth-tiny-simulate", "nvlink: {bandwidth: 20,", "nvlink: {bandwidth: 1.0e-300,", 17,
          "links.nvlink.bandwidth", _num(GBS, "1e-300"), cmd=f"{SIM} {{m.yaml}}"),
    _yaml("bandwidth-huge", "nvlink: {bandwidth: 20,", "nvlink: {bandwidth: 1.0e+30,", 17, "links.nvlink.bandwidth",
          _num(GBS, r"1e\+30")),
    _yaml("latency-huge", "latency_us: 2}", "latency_us: 1.0e+7}", 18, "links.pcie.latency_us",
          _num(US, r"10000000\.0")),
    _yaml("latency-negative", "latency_us: 2}", "latency_us: -2}", 18, "links.pcie.latency_us", _pos(US, "-2", False)),
    _yaml("link-unknown-key", "latency_us: 2}", "latency_us: 2, jitter: 1}", 18, "links.pcie.jitter",
          r"unknown key 'jitter'; valid keys: bandwidth, latency_us"),
    _yaml("link-entry-list", "  pcie: {bandwidth: 10, latency_us: 2}", "  pcie: [10, 2]", 18, "links.pcie",
          r"expected a mapping with bandwidth and latency_us, got \[10, 2\]"),
    # -- intra_node
    _yaml("pair-out-of-range", "[[0, 1, 2], [2, 3]]", "[[0, 1, 2], [2, 4]]", 24, "intra_node.devices[0].pairs[1]",
          r"expected a device index 0\.\.3, got 4"),
    _yaml("pair-text", "[[0, 1, 2], [2, 3]]", "[[0, 1, 2], a]", 24, "intra_node.devices[0].pairs[1]",
          r"expected \[a, b\] or \[a, b, lanes\], got 'a'"),
    _yaml("pair-nested-list", "[[0, 1, 2], [2, 3]]", "[[0, 1, 2], [[2], 3]]", 24, "intra_node.devices[0].pairs[1]",
          r"expected a device index 0\.\.3, got \[2\]"),
    _yaml("pair-self", "[[0, 1, 2], [2, 3]]", "[[0, 1, 2], [1, 1]]", 24, "intra_node.devices[0].pairs[1]",
          r"\[1, 1\] joins a device to itself"),
    _yaml("pair-twice", "[[0, 1, 2], [2, 3]]", "[[0, 1], [1, 0]]", 24, "intra_node.devices[0].pairs[1]",
          r"\[1, 0\] is listed twice; give a lane count instead"),
    _yaml("pair-lanes-zero", "[[0, 1, 2], [2, 3]]", "[[0, 1, 0], [2, 3]]", 24, "intra_node.devices[0].pairs[0][2]",
          r"expected a positive integer, got 0; valid: 1\.\.64"),
    _yaml("pair-lanes-huge", "[[0, 1, 2], [2, 3]]", "[[0, 1, 1000], [2, 3]]", 24, "intra_node.devices[0].pairs[0][2]",
          r"1000 is over the limit of 64 \(flexrt\.machine\.limits\.MAX_LANES\)"),
    _yaml("two-topologies", "{pairs: [[0, 1, 2], [2, 3]], link: nvlink}",
          "{pairs: [[0, 1]], all_to_all: all, link: nvlink}",
          24, "intra_node.devices[0]", r"expected exactly one of all_to_all, pairs, switch, got all_to_all, pairs"),
    _yaml("group-text", "{pairs: [[0, 1, 2], [2, 3]], link: nvlink}", "{all_to_all: everything, link: nvlink}", 24,
          "intra_node.devices[0].all_to_all", r"expected a list of device indices or 'all', got 'everything'"),
    _yaml("group-repeats", "{pairs: [[0, 1, 2], [2, 3]], link: nvlink}", "{switch: [0, 0], link: nvlink}", 24,
          "intra_node.devices[0].switch", r"device indices repeat: \[0, 0\]"),
    _yaml("group-too-large", "{pairs: [[0, 1, 2], [2, 3]], link: nvlink}",
          "{all_to_all: [0, 1, 2, 3, 0], link: nvlink}",
          24, "intra_node.devices[0].all_to_all",
          r"a group of 5 devices in a node of 4 devices; give at most 4 indices 0\.\.3"),
    _yaml("group-lanes-huge", "{pairs: [[0, 1, 2], [2, 3]], link: nvlink}",
          "{all_to_all: all, link: nvlink, lanes: 65}",
          24, "intra_node.devices[0].lanes", r"65 is over the limit of 64 \(flexrt\.machine\.limits\.MAX_LANES\)"),
    _yaml("link-without-entry", "link: nvlink}", "link: membus}", 24, "intra_node.devices[0].link",
          r"link type 'membus' has no entry in links; add links\.membus with bandwidth"),
    _yaml("intra-devices-mapping", "  devices:\n    - {pairs: [[0, 1, 2], [2, 3]], link: nvlink}\n",
          "  devices: {pairs: []}\n", 23, "intra_node.devices",
          r"expected a list of topology entries, got \{'pairs': \[\]\}"),
    _yaml("switch-across-sockets", "  to_cpu: {link: pcie}", "  to_cpu: {link: pcie, switches: [[0, 1, 2], [3]]}", 25,
          "intra_node.to_cpu.switches[0]",
          r"devices \[0, 1, 2\] hang off different sockets; a switch serves one socket"),
    _yaml("switch-not-covering", "  to_cpu: {link: pcie}", "  to_cpu: {link: pcie, switches: [[0, 1]]}", 25,
          "intra_node.to_cpu.switches", r"expected every device 0\.\.3 in exactly one switch, got \[0, 1\]"),
    _yaml("switch-typo", "  to_cpu: {link: pcie}", "  to_cpu: {link: pcie, switches: per_sockets}", 25,
          "intra_node.to_cpu.switches", r"expected 'per_socket' or a list of device index lists, got 'per_sockets'"),
    _yaml("between-sockets-unknown", "between_sockets: xbus", "between_sockets: upi", 26, "intra_node.between_sockets",
          r"unknown link type 'upi'; valid link types: nvlink, pcie, xbus, nic, network, membus, switch"),
    _yaml("intra-unknown-key", "  between_sockets: xbus", "  between_sockets: xbus\n  mesh: 2", 27, "intra_node.mesh",
          r"unknown key 'mesh'; valid keys: devices, to_cpu, between_sockets"),
    _yaml("all-to-all-300", "devices: {G: N}", "devices: {G: 300}", 14, "intra_node.devices[0]",
          r"all_to_all over 300 devices makes 89700 directional links in one node, over the limit of 65536 "
          r"\(flexrt\.machine\.limits\.MAX_LINKS_PER_NODE\); join large groups through a switch", text=WIDE),
    _yaml("all-to-all-ten-million", "devices: {G: N}", "devices: {G: 10000000}", 7, "node.sockets[0].devices.G",
          r"10000000 is over the limit of 1024 \(flexrt\.machine\.limits\.MAX_DEVICES_PER_NODE\)", text=WIDE),
    # -- inter_node
    _yaml("nics-negative", "  nics: 1", "  nics: -1", 28, "inter_node.nics",
          r"expected an integer >= 0, got -1; valid: 0\.\.1024"),
    _yaml("nics-huge", "  nics: 1", "  nics: 5000", 28, "inter_node.nics",
          r"5000 is over the limit of 1024 \(flexrt\.machine\.limits\.MAX_NICS_PER_NODE\)"),
    _yaml("attach-unknown", "  nics: 1", "  nics: 1\n  attach: wires", 29, "inter_node.attach",
          r"expected one of sockets, devices, got 'wires'"),
    _yaml("attach-list", "  nics: 1", "  nics: 1\n  attach: [devices]", 29, "inter_node.attach",
          r"expected one of sockets, devices, got \['devices'\]"),
    _yaml("attach-devices-divide", "  nics: 1", "  nics: 3\n  attach: devices", 28, "inter_node.nics",
          r"attach: devices needs the NIC count to divide the 4 devices per node, got 3"),
    _yaml("nics-without-link", "  nic: {bandwidth: 10, latency_us: 0.5}\n", "", 27, "inter_node",
          r"NICs need links\.nic \(bandwidth GB/s per direction, latency_us\)"),
    # -- FlexFlow's key = value file
    case("machine-flexflow-not-utf8", "machines show {mm.txt}", r"mm\.txt:3: not valid UTF-8 text: byte 0xe9",
         {"mm.txt": FLEXFLOW.replace("sockets_per_node = 2", "sockets_per_node = 2 # caf\xe9").encode("latin-1")}),
    case("machine-flexflow-directory", "machines show {dir}/mm.txt",
         r"machine file .*mm\.txt is a directory, not a file",
         setup=_mkdir("mm.txt")),
    case("machine-flexflow-fifo", "machines show {dir}/mm.conf", r"machine file .*mm\.conf is not a regular file",
         setup=_mkfifo("mm.conf")),
    _ff("unknown-key", "num_nodes = 2", "num_nodez = 2",
        r"2: field 'num_nodez': unknown key 'num_nodez'; valid keys: num_nodes, .*; did you mean num_nodes\?"),
    _ff("no-equals", "num_sockets_per_node = 2", "num_sockets_per_node 2",
        r"3: expected 'key = value', got 'num_sockets_per_node 2'"),
    _ff("given-twice", "nvlink_latency = 0.001", "num_nodes = 3",
        r"5: field 'num_nodes': given twice \(first on line 2\)"),
    _ff("missing-required", "num_gpus_per_socket = 2\n", "",
        r"1: field 'num_gpus_per_socket': missing \(a machine model file needs num_nodes, num_sockets_per_node and "
        r"num_gpus_per_socket\)"),
    _ff("nodes-trillion", "num_nodes = 2", "num_nodes = 1000000000000",
        r"2: field 'num_nodes': '1000000000000' is over the limit of 4096 \(flexrt\.machine\.limits\.MAX_NODES\)"),
    _ff("nodes-5000-digits", "num_nodes = 2", "num_nodes = " + "7" * 5000,
        r"2: field 'num_nodes': '7777.*\(5002 characters\) is over the limit of 4096"),
    _ff("nodes-text", "num_nodes = 2", "num_nodes = two",
        r"2: field 'num_nodes': expected a positive integer, got 'two'; "
        r"valid: 1\.\.4096"),
    _ff("nodes-negative", "num_nodes = 2", "num_nodes = -1",
        r"2: field 'num_nodes': expected a positive integer, got '-1'; valid: 1\.\.4096"),
    _ff("gpus-huge", "num_gpus_per_socket = 2", "num_gpus_per_socket = 2000",
        r"4: field 'num_gpus_per_socket': '2000' is over the limit of 1024 "
        r"\(flexrt\.machine\.limits\.MAX_DEVICES_PER_NODE\)"),
    _ff("devices-per-node", "num_sockets_per_node = 2\nnum_gpus_per_socket = 2",
        "num_sockets_per_node = 64\nnum_gpus_per_socket = 32",
        r"4: field 'num_gpus_per_socket': 64 sockets x 32 devices = 2048 devices per node, over the limit of 1024"),
    _ff("devices-in-all", "num_nodes = 2\nnum_sockets_per_node = 2\nnum_gpus_per_socket = 2",
        "num_nodes = 4096\nnum_sockets_per_node = 1\nnum_gpus_per_socket = 32",
        r"2: field 'num_nodes': 4096 nodes x 32 devices = 131072 devices, over the limit of 65536 "
        r"\(flexrt\.machine\.limits\.MAX_DEVICES\); give at most 2048 nodes"),
    _ff("bandwidth-tiny", "nvlink_bandwidth = 18.52", "nvlink_bandwidth = 1e-300",
        r"6: field 'nvlink_bandwidth': expected a number between 0\.001 and 1e\+06 \(GB/s\), got '1e-300'"),
    _ff("bandwidth-nan", "pci_bandwidth = 12.58", "pci_bandwidth = nan",
        r"7: field 'pci_bandwidth': expected a positive number \(GB/s\), got 'nan'; valid: between 0\.001 and 1e\+06"),
    _ff("latency-huge", "nvlink_latency = 0.001", "nvlink_latency = 5000",
        r"5: field 'nvlink_latency': expected a number between 0 and 1000 \(ms\), got '5000'"),
    _ff("path-element", "= nvlink\n", "= nvlink warp\n",
        r"8: field 'intra_socket_gpu_fb_mem_to_gpu_fb_mem': unknown path element 'warp'; "
        r"valid elements: membus, upi, nic"),
    _ff("gpu-type", "num_gpus_per_socket = 2", "num_gpus_per_socket = 2\ngpu_type = Z80",
        r"5: field 'gpu_type': unknown GPU type 'Z80'; valid: V100, P100, K80, A100, H100"),
    _ff("nvlink-across-sockets", "num_sockets_per_node = 2\nnum_gpus_per_socket = 2",
        "num_sockets_per_node = 64\nnum_gpus_per_socket = 16\ninter_socket_gpu_fb_mem_to_gpu_fb_mem = nvlink",
        r"5: field 'inter_socket_gpu_fb_mem_to_gpu_fb_mem': nvlink between the devices of different sockets "
        r"makes 1032192 "
        r"directional links in one node, over the limit of 65536 \(flexrt\.machine\.limits\.MAX_LINKS_PER_NODE\)"),
    _ff("no-devices", "num_gpus_per_socket = 2", "num_gpus_per_socket = 0\nnum_cpus_per_socket = 0",
        r"5: field 'num_cpus_per_socket': a machine needs devices: num_gpus_per_socket and num_cpus_per_socket "
        r"are both 0"),
    _ff("nic-persocket-zero", "num_gpus_per_socket = 2", "num_gpus_per_socket = 2\nnic_persocket = 0",
        r"5: field 'nic_persocket': expected a positive integer, got '0'; valid: 1\.\.1024"),
    _ff("nic-distribution-digits", "num_gpus_per_socket = 2", "num_gpus_per_socket = 2\nnic_distribution = " + "9" * 40,
        r"5: field 'nic_distribution': '9999.* is over the limit of 30 "
        r"\(flexrt\.machine\.limits\.MAX_INT_DIGITS\) digits"),
    # -- --machine and --nodes
    case("machine-flag-file-without-path", f"{SIM} mymachine",
         rf"unknown machine preset 'mymachine'; {PRESETS}; "
         r"to load the file mymachine here give \./mymachine \(a machine "
         r"file's path has a '/' or ends in \.yaml, \.yml", {"mymachine": GOOD}),
    case("machine-flag-unknown-preset", f"{SIM} summmit",
         rf"unknown machine preset 'summmit'; {PRESETS} \(or a machine file: a machine file's path has a '/'"),
    case("machine-flag-missing-file", f"{SIM} nowhere/m.yaml",
         rf"machine file nowhere/m\.yaml does not exist \({PRESETS}\)"),
    case("machine-flag-empty", "simulate mlp --data-parallel --machine=",
         r"a machine is a preset name or a file path, got ''"),
    case("machine-flag-directory", f"{SIM} ./sub", r"machine file sub is a directory, not a file", setup=_mkdir("sub")),
    case("nodes-flag-ten-million", f"{SIM} dgx1_v100 --nodes 10000000",
         r"(--nodes 10000000: machine 'dgx1_v100' can have 1\.\.4096 nodes, got 10000000; the limit is 4096 "
         r"\(flexrt\.machine\.limits\.MAX_NODES\)"
         r"|argument --nodes: expected an integer between 1 and 4096, got 10000000)"),
    case("nodes-flag-4097", f"{SIM} summit --nodes 4097",
         r"(--nodes 4097: machine 'summit' can have 1\.\.4096 nodes"
         r"|argument --nodes: expected an integer between 1 and 4096)"),
    case("nodes-flag-devices", f"{SIM} {{m.yaml}} --nodes 4096",
         r"--nodes 4096: 4096 nodes x 32 devices = 131072 devices, over the limit of 65536 "
         r"\(flexrt\.machine\.limits\.MAX_DEVICES\); give --nodes at most 2048 nodes",
         {"m.yaml": GOOD.replace("{G: 2}", "{G: 30}")}),
    case("nodes-flag-links", f"{SIM} {{m.yaml}} --nodes 100",
         r"--nodes 100: 100 nodes x 10102 links = 1010200 directional links, over the limit of 524288 "
         r"\(flexrt\.machine\.limits\.MAX_LINKS\); give --nodes at most 51 nodes",
         {"m.yaml": WIDE.replace("{G: N}", "{G: 100}")}),
    case("machines-show-nodes-huge", "machines show summit --nodes 10000000",
         r"flexrt machines show: error: argument --nodes: expected an integer between 1 and 4096, got 10000000"),
    case("machines-show-nodes-zero", "machines show summit --nodes 0",
         r"flexrt machines show: error: argument --nodes: expected an integer between 1 and 4096, got 0"),
    case("machines-show-nodes-text", "machines show dgx1_v100 --nodes two",
         r"flexrt machines show: error: argument --nodes: expected an integer between 1 and 4096, got 'two'"),
    case("machines-show-unknown", "machines show dgx2", rf"unknown machine preset 'dgx2'; {PRESETS}"),
    # -- flexrt calibrate: refused before anything is measured
    case("calibrate-devices-zero", "calibrate --quick --devices 0",
         r"flexrt calibrate: error: --devices must be a positive integer, got 0; valid: 1\.\.1024"),
    case("calibrate-devices-negative", "calibrate --quick --devices -3",
         r"flexrt calibrate: error: --devices must be a positive integer, got -3; valid: 1\.\.1024"),
    case("calibrate-devices-huge", "calibrate --quick --devices 100000",
         r"flexrt calibrate: error: --devices must be at most 1024 \(flexrt\.machine\.limits\.MAX_DEVICES_PER_NODE\), "
         r"the devices of one node, got 100000"),
    case("calibrate-devices-text", "calibrate --quick --devices many",
         r"argument --devices: invalid int value: 'many'"),
    case("calibrate-output-no-suffix", "calibrate --quick --output {dir}/local",
         r"--output .*/local: a machine file must end in \.yaml or \.yml"),
    case("calibrate-output-folder", "calibrate --quick --output {dir}/out.yaml",
         r"--output .*/out\.yaml is a folder; give a file name", setup=_mkdir("out.yaml")),
    case("calibrate-output-fifo", "calibrate --quick --output {dir}/f.yaml",
         r"--output .*/f\.yaml is not a regular file \(a FIFO, socket or device\); give a file", setup=_mkfifo("f.yaml")),
    case("calibrate-output-under-a-file", "calibrate --quick --output {m.yaml}/local.yaml",
         r"--output .*m\.yaml/local\.yaml: .*m\.yaml is a file, not a folder", {"m.yaml": GOOD}),
    case("calibrate-cache-dir-is-a-file", "calibrate --quick --output {m.yaml}/sub/local.yml",
         r"--output .*m\.yaml/sub/local\.yml: .*m\.yaml is a file, not a folder", {"m.yaml": GOOD}),
    case("calibrate-unknown-flag", "calibrate --quick --workers 4",
         r"flexrt calibrate: error: unrecognized arguments: --workers 4"),
]
