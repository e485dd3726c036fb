"""Machine YAML: the format, and its reader.

A machine file describes one node and how many of them there are; every node is the same. Units:
FLOP/s in TFLOP/s (1e12), bandwidths in GB/s (1e9 bytes/s) *per direction*, device memory in GiB
(2**30 bytes, what vendors call "16 GB"), latencies and launch overheads in microseconds.
``configs/machines/summit.yaml`` is a fully commented example; every preset there is one.

.. code-block:: yaml

    name: summit                      # required
    description: Unity's testbed      # optional, shown by `flexrt machines`
    nodes: 1                          # default 1; load_machine(..., nodes=N) overrides it
    device_kinds:                     # required: name -> one kind of compute device
      V100-SXM2-16GB:
        kind: gpu                     # gpu | cpu
        peak_flops: {float32: 15.7, float16: 125, float64: 7.8}   # TFLOP/s per dtype
        memory_bandwidth: 900         # GB/s
        memory: 16                    # GiB
        launch_overhead_us: 5         # per kernel
        efficiency: 0.8               # optional (0.8): fraction of peak a large kernel reaches
    node:
      sockets:                        # required: one entry per CPU socket, devices in local-index order
        - cpu: POWER9                 # a label for the host CPU, or null (not modelled)
          devices: [V100-SXM2-16GB, V100-SXM2-16GB, V100-SXM2-16GB]   # or {V100-SXM2-16GB: 3}
        - {cpu: POWER9, devices: {V100-SXM2-16GB: 3}}
    links:                            # per link type used below: one lane, one direction
      nvlink: {bandwidth: 50, latency_us: 1.0}
      xbus: {bandwidth: 32, latency_us: 0.4}
      nic: {bandwidth: 15.75, latency_us: 0.5}
      network: {bandwidth: 12.5, latency_us: 1.0}
      # membus: {bandwidth: 13.9, latency_us: 0.3, moved_by: receiver}   # optional: who moves a
      #   message's bytes, the link (default) or the receiving device when it next polls (MPI ranks
      #   on one host: `flexrt calibrate` writes it)
    intra_node:
      devices:                        # device <-> device links; the entries add up
        - {all_to_all: [0, 1, 2], link: nvlink}     # every pair of the group ("all": every device)
        - {all_to_all: [3, 4, 5], link: nvlink, lanes: 1}
        # - {pairs: [[0, 1], [0, 3, 2]], link: nvlink}   # explicit pairs; a third number bonds lanes
        # - {switch: all, link: switch}                  # a new switch, one link per device
      to_cpu: {link: nvlink}          # devices <-> their socket's CPU, one link each; or through
                                      # switches: {link: pcie, switches: [[0, 1], [2, 3]]} or
                                      # switches: per_socket (one switch per socket)
      between_sockets: xbus           # CPUs of the node, every pair
    inter_node:
      nics: 2                         # network adapters per node
      attach: sockets                 # sockets: NIC k on socket k mod #sockets' CPU;
                                      # devices: NIC k on devices [k*g, (k+1)*g), g = devices / NICs
    collectives:                      # optional: measured collectives (`flexrt calibrate` under mpiexec
      allreduce:                      # writes them), used by --comm-cost measured
        # DisCo's T = C x + D per device group: `devices` devices spanning `nodes` nodes (one entry
        # per group); r2, max_rel_error, median_rel_error and sizes (how well the line fits the
        # message sizes measured) are optional
        - {devices: 2, nodes: 1, c_ns_per_byte: 0.17, d_us: 14.7, r2: 0.999, max_rel_error: 0.08,
           median_rel_error: 0.02, sizes: 7}

Link types: nvlink, pcie, xbus (X-Bus / UPI / QPI), nic (host or device <-> adapter), network
(adapter port <-> fabric), membus (memory bus), switch (NVSwitch / PCIe switch port). Each
connection becomes two directional links with ``lanes * bandwidth``. A NIC has a ``nic`` link to
what it attaches to and a ``network`` link to the fabric (``net``), so a transfer between nodes
crosses ``... nic, network, network, nic ...``.

Sizes and values have limits (:mod:`flexrt.machine.limits`): at most 4096 nodes, 1024 devices per
node and 65,536 in all, 256 sockets and 1024 NICs per node, 64 lanes, 65,536 directional links per
node (an ``all_to_all`` of more than 256 devices needs a ``switch``) and 524,288 in all; FLOP/s
1e-9..1e6 TFLOP/s, bandwidths 0.001..1e6 GB/s, memory 1e-6..1e6 GiB, latencies and launch overheads
0..1e6 us, efficiency 0.001..1; a collective fit's C 0..1e6 ns per byte, D 0..1e6 us, r2 at most 1,
relative errors 0..1e6, at most 4096 fits per collective. The counts are checked before any list is
made.

The file (a regular UTF-8 file of at most 128 KiB) is read through ``flexrt.inputs.parse_yaml``
(nesting and alias expansion capped) with a ``yaml.SafeLoader`` subclass that also records the line
of every key, into frozen dataclasses. Every error is a :class:`~flexrt.errors.MachineSpecError` of
the form ``FILE:LINE: field 'links.nvlink.bandwidth': expected a positive number (GB/s), got 'fast';
valid: between 0.001 and 1e+06``, with values in messages shortened.

Entry points: :func:`load_yaml_spec` (file -> MachineSpec), :func:`parse_yaml_spec` (text).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from flexrt.errors import MachineSpecError
from flexrt.inputs import LineMap, LineSeq, line_loader, listing, parse_yaml, short
from flexrt.machine import limits
from flexrt.machine.limits import named
from flexrt.machine.machine import (CPU, DEVICE_KINDS, DTYPE_NAMES, MOVED_BY, Collective, CollectiveFit, DeviceSpec,
                                    LinkType)
from flexrt.machine.spec import (read_machine_file, CpuLinks, DeviceLinks, InterNodeSpec, IntraNodeSpec,
                                 LinkSpec, MachineSpec, NicAttach, SocketSpec, Topology)

LINK_NAMES = {t.value: t for t in LinkType}


def _as_text(value: Any) -> str:
    """A hint for a number YAML read as text (YAML 1.1 takes ``1e2`` as a string, ``1.0e2`` as a number)."""
    if not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    return f" (YAML read {_show(value)} as text; write {number:g} or {number:.1e})" if math.isfinite(number) else ""
TFLOPS, GB, GIB, US = 1e12, 1e9, 2**30, 1e-6


# --- a SafeLoader that remembers lines ---

_Map, _Seq = LineMap, LineSeq


class _LineLoader(line_loader()):
    """The shared line-numbering loader (:func:`flexrt.inputs.line_loader`), with integers of more than
    ``MAX_INT_DIGITS`` digits refused at their line."""


def _construct_int(loader: _LineLoader, node: yaml.ScalarNode) -> int:
    digits = sum(c.isdigit() for c in node.value)
    if digits > limits.MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(None, None, f"an integer of {digits} digits; machine files "
                                                f"need at most {named('MAX_INT_DIGITS')}", node.start_mark)
    return line_loader().yaml_constructors["tag:yaml.org,2002:int"](loader, node)   # the shared checks


_LineLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _load_yaml(text: str, source: str) -> Any:
    """The document of ``text`` through ``flexrt.inputs.parse_yaml`` (depth and alias-expansion caps)."""
    return parse_yaml(text, source, _LineLoader, MachineSpecError)


# --- validation helpers ---

def _show(value: Any) -> str:
    return "null" if value is None else short(value)


def _seg(key: Any) -> str:
    """A mapping key as a segment of a field path: the key itself, or shortened."""
    return key if isinstance(key, str) and len(key) <= 40 and key.isprintable() else short(key, 40)


def _at(path: str, key: Any) -> str:
    return f"{path}.{_seg(key)}" if path else _seg(key)


class _Reader:
    """Validates the loaded document against the format; every error names file, line and field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def where(self, line: int, path: str) -> str:
        return f"{self.source}:{line}: field '{path}'"

    def error(self, line: int, path: str, message: str) -> MachineSpecError:
        return MachineSpecError(f"{self.where(line, path)}: {message}")

    def line(self, m: _Map, key: str) -> int:
        return m.key_lines.get(key, m.line)

    def mapping(self, value: Any, line: int, path: str, what: str = "a mapping") -> _Map:
        if not isinstance(value, _Map):
            raise self.error(getattr(value, "line", line), path, f"expected {what}, got {_show(value)}")
        return value

    def sequence(self, value: Any, line: int, path: str, what: str) -> _Seq:
        if not isinstance(value, _Seq):
            raise self.error(getattr(value, "line", line), path, f"expected {what}, got {_show(value)}")
        return value

    def keys(self, m: _Map, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        valid = required + optional
        for key in m:
            if key not in valid:
                raise self.error(self.line(m, key), _at(path, key),
                                 f"unknown key {short(key)}; valid keys: {', '.join(valid)}")
        for key in required:
            if key not in m:
                raise self.error(m.line, path or "<top level>", f"missing key {key!r}")

    def number(self, m: _Map, key: str, path: str, unit: str, bounds: tuple[float, float]) -> float:
        """``m[key]``, a number of ``unit`` within ``bounds`` (a lowest of 0 allows zero; else it must be > 0)."""
        value, (lo, hi) = m[key], bounds
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
            value >= 0 if lo == 0 else value > 0)
        if ok and not lo <= value <= hi:
            raise self.error(self.line(m, key), _at(path, key),
                             f"expected a number between {lo:g} and {hi:g} ({unit}), got {_show(value)}")
        if not ok:
            what = "a non-negative" if lo == 0 else "a positive"
            raise self.error(self.line(m, key), _at(path, key), f"expected {what} number ({unit}), got {_show(value)}; "
                                                                f"valid: between {lo:g} and {hi:g}{_as_text(value)}")
        return float(value)

    def integer(self, value: Any, line: int, path: str, *, minimum: int, limit: str | None = None) -> int:
        """``value``, an integer >= ``minimum`` and, with ``limit`` (a name in :mod:`flexrt.machine.limits`),
        at most that limit."""
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            valid = f"; valid: {minimum}..{getattr(limits, limit)}" if limit else ""
            raise self.error(line, path, f"expected {what}, got {_show(value)}{valid}")
        if limit is not None and value > getattr(limits, limit):
            raise self.error(line, path, f"{_show(value)} is over the limit of {named(limit)}")
        return value

    def name(self, m: _Map, key: str, path: str) -> str:
        value = m[key]
        if not isinstance(value, str) or not value.strip():
            raise self.error(self.line(m, key), _at(path, key), f"expected a non-empty string, got {_show(value)}")
        return value

    def label(self, value: Any, line: int, path: str, what: str) -> str:
        """A name that appears in messages and endpoints: one line of at most ``MAX_NAME_CHARS``."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(line, path, f"{what} must be a non-empty string, got {_show(value)}")
        if len(value) > limits.MAX_NAME_CHARS or not value.isprintable():
            raise self.error(line, path, f"{what} must be one line of at most {named('MAX_NAME_CHARS')} "
                                         f"characters, got {_show(value)}")
        return value

    def link_type(self, value: Any, line: int, path: str) -> LinkType:
        if not isinstance(value, str) or value not in LINK_NAMES:
            raise self.error(line, path, f"unknown link type {_show(value)}; valid link types: "
                                         f"{', '.join(LINK_NAMES)}")
        return LINK_NAMES[value]


# --- sections ---

def _device_kind(r: _Reader, name: Any, m: Any, line: int, path: str) -> DeviceSpec:
    r.label(name, line, path, "a device kind name")
    m = r.mapping(m, line, path, "a mapping of kind, peak_flops, memory_bandwidth, memory, launch_overhead_us")
    r.keys(m, path, ("kind", "peak_flops", "memory_bandwidth", "memory", "launch_overhead_us"), ("efficiency",))
    kind = m["kind"]
    if not isinstance(kind, str) or kind not in DEVICE_KINDS:
        raise r.error(r.line(m, "kind"), f"{path}.kind",
                      f"expected one of {', '.join(DEVICE_KINDS)}, got {_show(kind)}")
    flops_map = r.mapping(m["peak_flops"], r.line(m, "peak_flops"), f"{path}.peak_flops",
                          "a mapping dtype -> TFLOP/s")
    if not flops_map:
        raise r.error(flops_map.line, f"{path}.peak_flops", "expected at least one dtype")
    flops = {}
    for dtype_name in flops_map:
        if dtype_name not in DTYPE_NAMES:
            raise r.error(r.line(flops_map, dtype_name), _at(f"{path}.peak_flops", dtype_name),
                          f"unknown dtype {_show(dtype_name)}; valid dtypes: {', '.join(DTYPE_NAMES)}")
        flops[DTYPE_NAMES[dtype_name]] = r.number(flops_map, dtype_name, f"{path}.peak_flops", "TFLOP/s",
                                                  limits.PEAK_TFLOPS) * TFLOPS
    efficiency = 0.8
    if "efficiency" in m:
        efficiency = r.number(m, "efficiency", path, "fraction of peak", limits.EFFICIENCY)
    return DeviceSpec(name, kind, flops, r.number(m, "memory_bandwidth", path, "GB/s", limits.BANDWIDTH_GBS) * GB,
                      int(round(r.number(m, "memory", path, "GiB", limits.MEMORY_GIB) * GIB)),
                      r.number(m, "launch_overhead_us", path, "microseconds", limits.LATENCY_US) * US, efficiency)


def _device_counts(r: _Reader, value: _Map, path: str, before: int) -> tuple[list, list[int]]:
    """The device names and their lines of the mapping form ``{name: count}``, counted against
    ``MAX_DEVICES_PER_NODE`` (``before`` devices are in earlier sockets) before any list is made."""
    total = before
    for name in value:
        count = r.integer(value[name], r.line(value, name), _at(path, name), minimum=0, limit="MAX_DEVICES_PER_NODE")
        total += count
        if total > limits.MAX_DEVICES_PER_NODE:
            raise r.error(r.line(value, name), _at(path, name), f"{count} devices bring the node to {total} "
                          f"devices, over the limit of {named('MAX_DEVICES_PER_NODE')} devices per node")
    names = [name for name in value for _ in range(value[name])]
    return names, [r.line(value, name) for name in value for _ in range(value[name])]


def _socket(r: _Reader, m: Any, line: int, path: str, kinds: dict[str, DeviceSpec], before: int) -> SocketSpec:
    m = r.mapping(m, line, path, "a mapping with cpu and devices")
    r.keys(m, path, ("devices",), ("cpu",))
    cpu = m.get("cpu")
    if cpu is not None:
        r.label(cpu, r.line(m, "cpu"), f"{path}.cpu", "a CPU label (or null)")
    value, dline, dpath = m["devices"], r.line(m, "devices"), f"{path}.devices"
    if isinstance(value, _Map):
        names, lines = _device_counts(r, value, dpath, before)
    else:
        value = r.sequence(value, dline, dpath, "a list of device kind names or a mapping name -> count")
        if before + len(value) > limits.MAX_DEVICES_PER_NODE:
            raise r.error(value.line, dpath, f"{len(value)} devices bring the node to {before + len(value)} devices, "
                                             f"over the limit of {named('MAX_DEVICES_PER_NODE')} devices per node")
        names, lines = list(value), value.item_lines
    for i, (name, item_line) in enumerate(zip(names, lines)):
        if not isinstance(name, str) or name not in kinds:
            raise r.error(item_line, f"{dpath}[{i}]", f"unknown device kind {_show(name)}; "
                                                      f"device_kinds defines: {listing(kinds)}")
        if cpu is not None and kinds[name].kind == CPU:
            raise r.error(r.line(m, "cpu"), f"{path}.cpu", "a socket cpu cannot be given when its devices are of "
                                                           "kind 'cpu' (the devices are the host); use cpu: null")
    return SocketSpec(cpu, tuple(names))


def _links(r: _Reader, m: Any, line: int) -> dict[LinkType, LinkSpec]:
    m = r.mapping(m, line, "links", "a mapping link type -> {bandwidth, latency_us}")
    links = {}
    for name in m:
        path = _at("links", name)
        type_ = r.link_type(name, r.line(m, name), path)
        entry = r.mapping(m[name], r.line(m, name), path, "a mapping with bandwidth and latency_us")
        r.keys(entry, path, ("bandwidth", "latency_us"), ("moved_by",))
        moved_by = entry.get("moved_by", "link")
        if moved_by not in MOVED_BY:
            raise r.error(r.line(entry, "moved_by"), _at(path, "moved_by"),
                          f"expected who moves a message's bytes, got {_show(moved_by)}; valid: {', '.join(MOVED_BY)}")
        links[type_] = LinkSpec(type_, r.number(entry, "bandwidth", path, "GB/s", limits.BANDWIDTH_GBS),
                                r.number(entry, "latency_us", path, "microseconds", limits.LATENCY_US), moved_by)
    return links


class _IntraReader:
    def __init__(self, r: _Reader, links: dict[LinkType, LinkSpec], devices: int, socket_of: list[int]) -> None:
        self.r, self.links, self.n, self.socket_of = r, links, devices, socket_of
        self.all = tuple(range(devices))  # one tuple for every "all", however many entries say it

    def link(self, m: _Map, key: str, path: str) -> LinkType:
        type_ = self.r.link_type(m[key], self.r.line(m, key), f"{path}.{key}")
        if type_ not in self.links:
            raise self.r.error(self.r.line(m, key), f"{path}.{key}", f"link type '{type_.value}' has no entry in "
                               f"links; add links.{type_.value} with bandwidth (GB/s per direction) and latency_us")
        return type_

    def index(self, value: Any, line: int, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.n:
            raise self.r.error(line, path, f"expected a device index 0..{self.n - 1}, got {_show(value)}")
        return value

    def group(self, value: Any, line: int, path: str) -> tuple[int, ...]:
        if value == "all":
            return self.all
        seq = self.r.sequence(value, line, path, "a list of device indices or 'all'")
        if len(seq) > self.n:
            raise self.r.error(seq.line, path, f"a group of {len(seq)} devices in a node of {self.n} devices; "
                                               f"give at most {self.n} indices 0..{self.n - 1}, each once")
        group = tuple(self.index(v, seq.item_lines[i], f"{path}[{i}]") for i, v in enumerate(seq))
        if len(set(group)) != len(group):
            raise self.r.error(seq.line, path, f"device indices repeat: {short(list(group))}")
        if not group:
            raise self.r.error(seq.line, path, "expected at least one device index")
        return group

    def lanes(self, m: _Map, path: str) -> int:
        if "lanes" not in m:
            return 1
        return self.r.integer(m["lanes"], self.r.line(m, "lanes"), f"{path}.lanes", minimum=1, limit="MAX_LANES")

    def entry(self, m: Any, line: int, path: str) -> DeviceLinks:
        r = self.r
        m = r.mapping(m, line, path, "a mapping with one of all_to_all, pairs, switch and a link")
        kinds = [t for t in Topology if t.value in m]
        if len(kinds) != 1:
            raise r.error(m.line, path, f"expected exactly one of {', '.join(t.value for t in Topology)}, "
                                        f"got {', '.join(t.value for t in kinds) or 'none'}")
        topology = kinds[0]
        key = topology.value
        r.keys(m, path, (key, "link"), () if topology is Topology.PAIRS else ("lanes",))
        link, where = self.link(m, "link", path), r.where(m.line, path)
        if topology is not Topology.PAIRS:
            return DeviceLinks(topology, link, self.group(m[key], r.line(m, key), f"{path}.{key}"),
                               lanes=self.lanes(m, path), where=where)
        seq = r.sequence(m[key], r.line(m, key), f"{path}.pairs", "a list of [a, b] or [a, b, lanes]")
        limits.check_links(2 * len(seq), r.where(seq.line, f"{path}.pairs"), f"a list of {len(seq)} pairs")
        pairs, seen = [], set()
        for i, item in enumerate(seq):
            ipath, iline = f"{path}.pairs[{i}]", seq.item_lines[i]
            if not isinstance(item, _Seq) or len(item) not in (2, 3):
                raise r.error(iline, ipath, f"expected [a, b] or [a, b, lanes], got {_show(item)}")
            a, b = (self.index(v, iline, ipath) for v in item[:2])
            lanes = r.integer(item[2], iline, ipath + "[2]", minimum=1, limit="MAX_LANES") if len(item) == 3 else 1
            if a == b or (min(a, b), max(a, b)) in seen:
                raise r.error(iline, ipath, f"[{a}, {b}] " + ("joins a device to itself" if a == b else
                                                              "is listed twice; give a lane count instead"))
            seen.add((min(a, b), max(a, b)))
            pairs.append((a, b, lanes))
        return DeviceLinks(topology, link, pairs=tuple(pairs), where=where)

    def to_cpu(self, m: Any, line: int, sockets: tuple[SocketSpec, ...]) -> CpuLinks:
        r, path = self.r, "intra_node.to_cpu"
        m = r.mapping(m, line, path, "a mapping with link (and switches, lanes)")
        r.keys(m, path, ("link",), ("switches", "lanes"))
        for s, socket in enumerate(sockets):
            if socket.cpu is None and socket.devices:
                raise r.error(m.line, path, f"socket {s} has devices but no cpu (node.sockets[{s}].cpu is null), "
                                            f"so its devices cannot reach a CPU")
        switches = None
        if "switches" in m:
            value, sline, spath = m["switches"], r.line(m, "switches"), f"{path}.switches"
            if value == "per_socket":
                switches = tuple(tuple(i for i in range(self.n) if self.socket_of[i] == s)
                                 for s in range(len(sockets)) if s in self.socket_of)
            else:
                seq = r.sequence(value, sline, spath, "'per_socket' or a list of device index lists")
                switches = tuple(self.group(g, seq.item_lines[i], f"{spath}[{i}]") for i, g in enumerate(seq))
                for i, g in enumerate(switches):
                    if len({self.socket_of[d] for d in g}) != 1:
                        raise r.error(seq.item_lines[i], f"{spath}[{i}]", f"devices {short(list(g))} hang off "
                                      f"different sockets; a switch serves one socket")
                covered = sorted(d for g in switches for d in g)
                if covered != list(range(self.n)):
                    raise r.error(sline, spath, f"expected every device 0..{self.n - 1} in exactly one switch, "
                                                f"got {short(covered)}")
        return CpuLinks(self.link(m, "link", path), switches, self.lanes(m, path), r.where(line, path))


def _intra_node(r: _Reader, m: Any, line: int, links: dict[LinkType, LinkSpec],
                sockets: tuple[SocketSpec, ...]) -> IntraNodeSpec:
    m = r.mapping(m, line, "intra_node", "a mapping with devices, to_cpu, between_sockets")
    r.keys(m, "intra_node", (), ("devices", "to_cpu", "between_sockets"))
    socket_of = [s for s, socket in enumerate(sockets) for _ in socket.devices]
    ir = _IntraReader(r, links, len(socket_of), socket_of)
    entries: tuple[DeviceLinks, ...] = ()
    if "devices" in m:
        seq = r.sequence(m["devices"], r.line(m, "devices"), "intra_node.devices", "a list of topology entries")
        entries = tuple(ir.entry(e, seq.item_lines[i], f"intra_node.devices[{i}]") for i, e in enumerate(seq))
    to_cpu = ir.to_cpu(m["to_cpu"], r.line(m, "to_cpu"), sockets) if "to_cpu" in m else None
    between = None
    if "between_sockets" in m:
        between = ir.link(m, "between_sockets", "intra_node")
    return IntraNodeSpec(entries, to_cpu, between, r.where(line, "intra_node"))


def _inter_node(r: _Reader, m: Any, line: int, links: dict[LinkType, LinkSpec],
                sockets: tuple[SocketSpec, ...], devices: int) -> InterNodeSpec:
    path = "inter_node"
    m = r.mapping(m, line, path, "a mapping with nics and attach")
    r.keys(m, path, ("nics",), ("attach",))
    nics = r.integer(m["nics"], r.line(m, "nics"), f"{path}.nics", minimum=0, limit="MAX_NICS_PER_NODE")
    attach = NicAttach.SOCKETS
    if "attach" in m:
        valid = {a.value: a for a in NicAttach}
        if not isinstance(m["attach"], str) or m["attach"] not in valid:
            raise r.error(r.line(m, "attach"), f"{path}.attach", f"expected one of {', '.join(valid)}, "
                                                                 f"got {_show(m['attach'])}")
        attach = valid[m["attach"]]
    if nics:
        for type_ in (LinkType.NIC, LinkType.NETWORK):
            if type_ not in links:
                raise r.error(m.line, path, f"NICs need links.{type_.value} (bandwidth GB/s per direction, "
                                            f"latency_us)")
        if attach is NicAttach.SOCKETS:
            for k in range(nics):
                if sockets[k % len(sockets)].cpu is None:
                    raise r.error(r.line(m, "attach") if "attach" in m else m.line, f"{path}.attach",
                                  f"NIC {k} would hang off socket {k % len(sockets)}, which has no cpu; "
                                  f"use attach: devices")
        elif devices % nics:
            raise r.error(r.line(m, "nics"), f"{path}.nics", f"attach: devices needs the NIC count to divide the "
                                                             f"{devices} devices per node, got {nics}")
    return InterNodeSpec(nics, attach, r.where(line, path))


FIT_KEYS, FIT_OPTIONAL = ("devices", "nodes", "c_ns_per_byte", "d_us"), ("r2", "max_rel_error", "median_rel_error",
                                                                        "sizes")


def _collective_fit(r: _Reader, collective: Collective, m: Any, line: int, path: str) -> CollectiveFit:
    m = r.mapping(m, line, path, f"a mapping with {', '.join(FIT_KEYS)} (and {', '.join(FIT_OPTIONAL)})")
    r.keys(m, path, FIT_KEYS, FIT_OPTIONAL)
    devices = r.integer(m["devices"], r.line(m, "devices"), f"{path}.devices", minimum=2, limit="MAX_DEVICES")
    nodes = r.integer(m["nodes"], r.line(m, "nodes"), f"{path}.nodes", minimum=1, limit="MAX_NODES")
    if nodes > devices:
        raise r.error(r.line(m, "nodes"), f"{path}.nodes", f"a group of {devices} devices spans at most {devices} "
                                                           f"nodes, got {nodes}; valid: 1..{devices}")
    c = r.number(m, "c_ns_per_byte", path, "ns per byte", limits.FIT_NS_PER_BYTE) * 1e-9
    d = r.number(m, "d_us", path, "microseconds", limits.FIT_US) * US
    r2 = None
    if "r2" in m:
        value, (lo, hi) = m["r2"], limits.FIT_R2
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise r.error(r.line(m, "r2"), f"{path}.r2", f"expected a number between {lo:g} and {hi:g} (r squared of "
                                                         f"the fit), got {_show(value)}")
        r2 = float(value)
    errors = [r.number(m, k, path, "relative error, 0.08 = 8%", limits.FIT_REL_ERROR) if k in m else None
              for k in ("max_rel_error", "median_rel_error")]
    sizes = r.integer(m["sizes"], r.line(m, "sizes"), f"{path}.sizes", minimum=2,
                      limit="MAX_FIT_SIZES") if "sizes" in m else None
    return CollectiveFit(collective, devices, nodes, c, d, r2, errors[0], errors[1], sizes)


def _collectives(r: _Reader, value: Any, line: int) -> tuple[CollectiveFit, ...]:
    """``collectives``: per collective a list of fits, one per (devices, nodes) group."""
    valid = {c.value: c for c in Collective}
    m = r.mapping(value, line, "collectives", f"a mapping collective -> list of fits ({', '.join(valid)})")
    fits: list[CollectiveFit] = []
    for name in m:
        path = _at("collectives", name)
        if name not in valid:
            raise r.error(r.line(m, name), path, f"unknown collective {_show(name)}; valid: {', '.join(valid)}")
        seq = r.sequence(m[name], r.line(m, name), path, "a list of fits {devices, nodes, c_ns_per_byte, d_us}")
        if len(seq) > limits.MAX_COLLECTIVE_FITS:
            raise r.error(seq.line, path, f"{len(seq)} fits, over the limit of {named('MAX_COLLECTIVE_FITS')}")
        first: dict[tuple, int] = {}
        for i, item in enumerate(seq):
            fit = _collective_fit(r, valid[name], item, seq.item_lines[i], f"{path}[{i}]")
            if fit.key in first:
                raise r.error(seq.item_lines[i], f"{path}[{i}]", f"a second fit for {fit.devices} devices on "
                                                                 f"{fit.nodes} node(s) (the first is on line "
                                                                 f"{first[fit.key]}); give one per group")
            first[fit.key] = seq.item_lines[i]
            fits.append(fit)
    return tuple(fits)


def _nodes(r: _Reader, top: _Map, devices: int) -> int:
    """``nodes`` (default 1), within ``MAX_NODES`` and, with ``devices`` per node, ``MAX_DEVICES``."""
    if "nodes" not in top:
        return 1
    line = r.line(top, "nodes")
    nodes = r.integer(top["nodes"], line, "nodes", minimum=1, limit="MAX_NODES")
    if nodes * devices > limits.MAX_DEVICES:
        raise r.error(line, "nodes", f"{nodes} nodes x {devices} devices = {nodes * devices} devices, over the limit "
                                     f"of {named('MAX_DEVICES')}; give at most {limits.MAX_DEVICES // devices} nodes")
    return nodes


def _sockets(r: _Reader, node: _Map, kinds: dict[str, DeviceSpec]) -> tuple[SocketSpec, ...]:
    seq = r.sequence(node["sockets"], r.line(node, "sockets"), "node.sockets", "a list of sockets")
    if len(seq) > limits.MAX_SOCKETS_PER_NODE:
        raise r.error(seq.line, "node.sockets", f"{len(seq)} sockets, over the limit of "
                                                f"{named('MAX_SOCKETS_PER_NODE')} per node")
    sockets: list[SocketSpec] = []
    for i, s in enumerate(seq):
        before = sum(len(socket.devices) for socket in sockets)
        sockets.append(_socket(r, s, seq.item_lines[i], f"node.sockets[{i}]", kinds, before))
    if not any(socket.devices for socket in sockets):
        raise r.error(seq.line, "node.sockets", "expected at least one device in some socket")
    return tuple(sockets)


def parse_yaml_spec(text: str, source: str = "<string>") -> MachineSpec:
    """Validate machine YAML ``text``; ``source`` names it in errors (``FILE:LINE: field ...``)."""
    doc = _load_yaml(text, source)
    r = _Reader(source)
    top = r.mapping(doc, 1, "<top level>", "a mapping with name, device_kinds, node, links")
    r.keys(top, "", ("name", "device_kinds", "node", "links"),
           ("description", "nodes", "intra_node", "inter_node", "collectives"))
    name = r.label(top["name"], r.line(top, "name"), "name", "the machine's name")
    description = r.name(top, "description", "") if "description" in top else ""
    kinds_map = r.mapping(top["device_kinds"], r.line(top, "device_kinds"), "device_kinds",
                          "a mapping name -> device kind")
    if not kinds_map:
        raise r.error(kinds_map.line, "device_kinds", "expected at least one device kind")
    kinds = {k: _device_kind(r, k, kinds_map[k], r.line(kinds_map, k), _at("device_kinds", k)) for k in kinds_map}
    node = r.mapping(top["node"], r.line(top, "node"), "node", "a mapping with sockets")
    r.keys(node, "node", ("sockets",))
    sockets = _sockets(r, node, kinds)
    devices = sum(len(s.devices) for s in sockets)
    nodes = _nodes(r, top, devices)
    links = _links(r, top["links"], r.line(top, "links"))
    if "intra_node" in top:
        intra = _intra_node(r, top["intra_node"], r.line(top, "intra_node"), links, sockets)
    else:
        intra = IntraNodeSpec(where=r.where(r.line(top, "node"), "node"))
    inter = None
    if "inter_node" in top:
        inter = _inter_node(r, top["inter_node"], r.line(top, "inter_node"), links, sockets, devices)
    if nodes > 1 and (inter is None or not inter.nics):
        raise r.error(r.line(top, "nodes"), "nodes", f"{nodes} nodes need an inter_node section with nics > 0")
    collectives = _collectives(r, top["collectives"], r.line(top, "collectives")) if "collectives" in top else ()
    return MachineSpec(name, nodes, tuple(kinds.values()), sockets, tuple(links.values()), intra, inter,
                       source=source, description=description, nodes_where=r.where(r.line(top, "nodes"), "nodes"),
                       collectives=collectives)


def load_yaml_spec(path: str | Path) -> MachineSpec:
    """Read and validate the machine YAML file at ``path``."""
    return parse_yaml_spec(read_machine_file(path), str(path))
