"""FlexFlow's machine model file (``machine_config_example``): ``key = value`` lines, ``#`` comments.

Keys (all optional unless marked):

- ``num_nodes``, ``num_sockets_per_node``, ``num_gpus_per_socket`` (required), ``num_cpus_per_socket``;
- per link type ``membus``, ``upi``, ``nic``, ``pci``, ``nvlink``: ``<link>_latency`` in milliseconds and
  ``<link>_bandwidth`` in GB/s; a missing one takes FlexFlow's measured value (nvlink 0.001 ms /
  18.52 GB/s, pci 0.001 / 12.58, nic 0.000507 / 10.94, upi 0.0004 / 10.14, membus 0.00003 / 8.75);
- ``nic_persocket`` (default 1) and ``nic_distribution`` (accepted, ignored);
- paths, each a list of ``membus upi nic pci_to_host pci_to_dev nvlink``:
  ``{intra_socket,inter_socket,inter_node}_{sys_mem,gpu_fb_mem}_to_{sys_mem,gpu_fb_mem}``;
- ``gpu_type`` (flexrt's addition): ``V100`` (the default), ``P100``, ``K80``, ``A100``, ``H100``; the
  GPU's FLOP/s, memory and bandwidth are those of the matching preset's device kind.

What flexrt builds: per socket a CPU and ``num_gpus_per_socket`` GPUs, each on its own PCIe link
(``pci``) to the CPU; sockets joined by an X-Bus link (``upi``); ``nic_persocket`` NICs per socket,
reached over PCIe (``pci``) and ported to the network at ``nic`` bandwidth, half of ``nic_latency``
on each side. The GPU-to-GPU paths decide whether GPUs have direct NVLinks: ``nvlink`` in
``intra_socket_gpu_fb_mem_to_gpu_fb_mem`` joins every GPU pair of a socket, in
``inter_socket_gpu_fb_mem_to_gpu_fb_mem`` every pair across sockets; without it (the default) GPUs
talk through their CPUs. Every other path is accepted and follows from the topology: routes are
shortest paths over the links. With ``num_gpus_per_socket = 0`` the compute devices are the CPUs
(the ``local`` preset's kind), joined by ``membus`` within a socket and ``upi`` across sockets.

Counts, bandwidths and latencies are held to :mod:`flexrt.machine.limits` (at most 4096 nodes, 1024
GPUs or CPUs per node, bandwidths 0.001..1e6 GB/s, latencies 0..1000 ms, ...), checked before the
machine is laid out; a path that joins more GPUs by NVLink than a node may have links is refused at
its line.

Entry point: :func:`load_flexflow_spec`.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from flexrt.errors import MachineSpecError
from flexrt.inputs import short
from flexrt.machine import limits
from flexrt.machine.limits import named
from flexrt.machine.machine import LinkType
from flexrt.machine.presets import preset_spec
from flexrt.machine.spec import (read_machine_file, CpuLinks, DeviceLinks, InterNodeSpec, IntraNodeSpec, LinkSpec,
                                 MachineSpec, NicAttach, SocketSpec, Topology)

LINKS = ("membus", "upi", "nic", "pci", "nvlink")
# FlexFlow's measured numbers (ms, GB/s), used where a file leaves a link out.
DEFAULT_LINKS = {"nvlink": (0.001, 18.52), "pci": (0.001, 12.58), "nic": (0.000507, 10.94),
                 "upi": (0.0004, 10.14), "membus": (0.00003, 8.75)}
# count key -> (lowest, the limit in flexrt.machine.limits it may not pass; None: any count)
COUNTS = {"num_nodes": (1, "MAX_NODES"), "num_sockets_per_node": (1, "MAX_SOCKETS_PER_NODE"),
          "num_cpus_per_socket": (0, "MAX_DEVICES_PER_NODE"), "num_gpus_per_socket": (0, "MAX_DEVICES_PER_NODE"),
          "nic_persocket": (1, "MAX_NICS_PER_NODE"), "nic_distribution": (0, None)}
PATH_WORDS = ("membus", "upi", "nic", "pci_to_host", "pci_to_dev", "nvlink")
PATHS = tuple(f"{scope}_{a}_to_{b}" for scope in ("intra_socket", "inter_socket", "inter_node")
              for a in ("sys_mem", "gpu_fb_mem") for b in ("sys_mem", "gpu_fb_mem"))
# gpu_type -> (preset, device kind) whose numbers the GPU takes.
GPU_TYPES = {"V100": ("summit", "V100-SXM2-16GB"), "P100": ("flexflow_p100", "P100-SXM2-16GB"),
             "K80": ("flexflow_k80", "K80-GK210"), "A100": ("dgx_a100", "A100-SXM4-80GB"),
             "H100": ("dgx_h100", "H100-SXM5-80GB")}
CPU_KIND = ("local", "host-cpu")
VALID_KEYS = tuple(COUNTS) + tuple(f"{link}_{what}" for link in LINKS for what in ("latency", "bandwidth")) \
    + ("gpu_type",) + PATHS
# VALID_KEYS in a line short enough for a message
VALID_KEYS_TEXT = (", ".join(COUNTS) + ", {" + ",".join(LINKS) + "}_{latency,bandwidth}, gpu_type, "
                   "{intra_socket,inter_socket,inter_node}_{sys_mem,gpu_fb_mem}_to_{sys_mem,gpu_fb_mem}")
# latencies in ms: the machine YAML range (microseconds) / 1000
LATENCY_MS = (limits.LATENCY_US[0] / 1e3, limits.LATENCY_US[1] / 1e3)
_KEY_VALUE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*(.*)")   # on a stripped line: linear time


def looks_like_flexflow(text: str) -> bool:
    """True when the first line that is not blank or a comment is ``key = value``."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return bool(_KEY_VALUE.fullmatch(stripped)) and ":" not in stripped.partition("=")[0]
    return False


def _field(key: str) -> str:
    return f"field '{key}'" if len(key) <= 60 else f"field {short(key, 60)}"


def _parse(text: str, source: str) -> dict[str, tuple[str, int]]:
    """``key -> (value, line)``; comments (``#`` to the end of a line) and blank lines skipped."""
    entries: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _KEY_VALUE.fullmatch(line)
        if m is None:
            raise MachineSpecError(f"{source}:{number}: expected 'key = value', got {short(line)}")
        key, value = m.groups()
        if key not in VALID_KEYS:
            close = difflib.get_close_matches(key, VALID_KEYS, 1) if len(key) <= 60 else []
            raise MachineSpecError(f"{source}:{number}: {_field(key)}: unknown key {short(key, 60)}; valid keys: "
                                   f"{VALID_KEYS_TEXT}" + (f"; did you mean {close[0]}?" if close else ""))
        if key in entries:
            raise MachineSpecError(f"{source}:{number}: field '{key}': given twice (first on line {entries[key][1]})")
        if not value:
            raise MachineSpecError(f"{source}:{number}: field '{key}': missing value after '='")
        entries[key] = (value, number)
    return entries


class _Fields:
    def __init__(self, entries: dict[str, tuple[str, int]], source: str) -> None:
        self.entries, self.source = entries, source

    def where(self, key: str) -> str:
        line = self.entries[key][1] if key in self.entries else 1
        return f"{self.source}:{line}: field '{key}'"

    def error(self, key: str, message: str) -> MachineSpecError:
        return MachineSpecError(f"{self.where(key)}: {message}")

    def count(self, key: str, default: int | None) -> int:
        minimum, limit = COUNTS[key]
        if key not in self.entries:
            if default is None:
                raise MachineSpecError(f"{self.source}:1: field '{key}': missing (a machine model file needs "
                                       f"num_nodes, num_sockets_per_node and num_gpus_per_socket)")
            return default
        value = self.entries[key][0]
        digits = (value.lstrip("0") or "0") if re.fullmatch(r"[0-9]+", value) else None
        count = int(digits) if digits is not None and len(digits) <= limits.MAX_INT_DIGITS else None
        if digits is None or (count is not None and count < minimum):
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            valid = f"; valid: {minimum}..{getattr(limits, limit)}" if limit else ""
            raise self.error(key, f"expected {what}, got {short(value)}{valid}")
        if count is None or (limit is not None and count > getattr(limits, limit)):
            over = f"{named(limit)}" if limit else f"{named('MAX_INT_DIGITS')} digits"
            raise self.error(key, f"{short(value)} is over the limit of {over}")
        return count

    def number(self, key: str, default: float, unit: str, bounds: tuple[float, float]) -> float:
        if key not in self.entries:
            return default
        value, (lo, hi) = self.entries[key][0], bounds
        try:
            x = float(value)
        except ValueError:
            x = float("nan")
        if not (x >= 0 if lo == 0 else x > 0):
            what = "a non-negative" if lo == 0 else "a positive"
            raise self.error(key, f"expected {what} number ({unit}), got {short(value)}; valid: between {lo:g} "
                                  f"and {hi:g}")
        if not lo <= x <= hi:
            raise self.error(key, f"expected a number between {lo:g} and {hi:g} ({unit}), got {short(value)}")
        return x

    def path(self, key: str) -> tuple[str, ...]:
        if key not in self.entries:
            return ()
        words = tuple(self.entries[key][0].split())
        for w in words:
            if w not in PATH_WORDS:
                raise self.error(key, f"unknown path element {short(w)}; valid elements: {', '.join(PATH_WORDS)}")
        return words


def _counts(f: _Fields) -> tuple[int, int, int, int, int]:
    """(nodes, sockets per node, GPUs per socket, CPUs per socket, NICs per socket), each within its
    limit, and the devices and NICs they make within theirs (before anything is built)."""
    nodes, sockets = f.count("num_nodes", None), f.count("num_sockets_per_node", None)
    gpus, cpus = f.count("num_gpus_per_socket", None), f.count("num_cpus_per_socket", 1)
    nics = f.count("nic_persocket", 1)
    f.count("nic_distribution", 0)
    key, per_socket = ("num_gpus_per_socket", gpus) if gpus else ("num_cpus_per_socket", cpus)
    per_node = sockets * per_socket
    if per_node > limits.MAX_DEVICES_PER_NODE:
        raise f.error(key, f"{sockets} sockets x {per_socket} devices = {per_node} devices per node, over the limit "
                           f"of {named('MAX_DEVICES_PER_NODE')}")
    if nodes * per_node > limits.MAX_DEVICES:
        raise f.error("num_nodes", f"{nodes} nodes x {per_node} devices = {nodes * per_node} devices, over the limit "
                                   f"of {named('MAX_DEVICES')}; give at most {limits.MAX_DEVICES // per_node} nodes")
    if sockets * nics > limits.MAX_NICS_PER_NODE:
        raise f.error("nic_persocket", f"{sockets} sockets x {nics} NICs = {sockets * nics} NICs per node, over the "
                                       f"limit of {named('MAX_NICS_PER_NODE')}")
    return nodes, sockets, gpus, cpus, nics


def _device_links(f: _Fields, link: LinkType, within: bool, across: bool, sockets: int, per_socket: int,
                  keys: tuple[str, str], where: str) -> list[DeviceLinks]:
    """Every pair of devices of a socket (``within``) and of different sockets (``across``) joined by
    ``link``; the links they make are counted against ``MAX_LINKS_PER_NODE`` first (``keys``: the
    fields that asked for each)."""
    n = sockets * per_socket
    entries = []
    if within and per_socket > 1:
        limits.check_links(sockets * per_socket * (per_socket - 1), f.where(keys[0]), f"{link.value} within sockets")
        entries += [DeviceLinks(Topology.ALL_TO_ALL, link, tuple(range(s * per_socket, (s + 1) * per_socket)),
                                where=where) for s in range(sockets)]
    if across and sockets > 1:
        limits.check_links(n * (n - 1) - sockets * per_socket * (per_socket - 1), f.where(keys[1]),
                           f"{link.value} between the devices of different sockets")
        entries.append(DeviceLinks(Topology.PAIRS, link, where=where, pairs=tuple(
            (a, b, 1) for a in range(n) for b in range(a + 1, n) if a // per_socket != b // per_socket)))
    return entries


def parse_flexflow_spec(text: str, source: str = "<string>") -> MachineSpec:
    """Validate a FlexFlow machine model file's ``text``; errors are ``FILE:LINE: ...``."""
    f = _Fields(_parse(text, source), source)
    nodes, sockets_per_node, gpus, cpus, nics_per_socket = _counts(f)
    link = {name: (f.number(f"{name}_latency", DEFAULT_LINKS[name][0], "ms", LATENCY_MS),
                   f.number(f"{name}_bandwidth", DEFAULT_LINKS[name][1], "GB/s", limits.BANDWIDTH_GBS))
            for name in LINKS}
    paths = {key: f.path(key) for key in PATHS}

    def spec(type_: LinkType, name: str, latency_scale: float = 1.0) -> LinkSpec:
        latency_ms, bandwidth = link[name]
        return LinkSpec(type_, bandwidth, latency_ms * 1e3 * latency_scale)

    links = [spec(LinkType.PCIE, "pci"), spec(LinkType.XBUS, "upi"), spec(LinkType.NVLINK, "nvlink"),
             spec(LinkType.MEMBUS, "membus"), spec(LinkType.NIC, "pci"), spec(LinkType.NETWORK, "nic", 0.5)]
    gpu_type = f.entries.get("gpu_type", ("V100", 0))[0]
    if gpu_type not in GPU_TYPES:
        raise f.error("gpu_type", f"unknown GPU type {short(gpu_type)}; valid: {', '.join(GPU_TYPES)}")
    where = f"{source}:1: field 'machine'"
    if gpus:
        kind = preset_spec(GPU_TYPES[gpu_type][0]).kind(GPU_TYPES[gpu_type][1])
        sockets = tuple(SocketSpec("CPU", (kind.name,) * gpus) for _ in range(sockets_per_node))
        keys = ("intra_socket_gpu_fb_mem_to_gpu_fb_mem", "inter_socket_gpu_fb_mem_to_gpu_fb_mem")
        entries = _device_links(f, LinkType.NVLINK, "nvlink" in paths[keys[0]], "nvlink" in paths[keys[1]],
                                sockets_per_node, gpus, keys, where)
        intra = IntraNodeSpec(tuple(entries), CpuLinks(LinkType.PCIE, where=where),
                              LinkType.XBUS if sockets_per_node > 1 else None, where)
        attach = NicAttach.SOCKETS
    else:
        if cpus == 0:
            raise f.error("num_cpus_per_socket" if "num_cpus_per_socket" in f.entries else "num_gpus_per_socket",
                          "a machine needs devices: num_gpus_per_socket and num_cpus_per_socket are both 0")
        kind = preset_spec(CPU_KIND[0]).kind(CPU_KIND[1])
        sockets = tuple(SocketSpec(None, (kind.name,) * cpus) for _ in range(sockets_per_node))
        keys = ("num_cpus_per_socket", "num_sockets_per_node")
        entries = _device_links(f, LinkType.MEMBUS, True, False, sockets_per_node, cpus, keys, where) \
            + _device_links(f, LinkType.XBUS, False, True, sockets_per_node, cpus, keys, where)
        intra = IntraNodeSpec(tuple(entries), None, None, where)
        attach = NicAttach.DEVICES
        n = cpus * sockets_per_node
        if n % (nics_per_socket * sockets_per_node):
            raise f.error("nic_persocket", f"the NICs per node ({nics_per_socket * sockets_per_node}) must divide "
                                           f"the CPUs per node ({n}) when the CPUs are the devices")
    inter = InterNodeSpec(nics_per_socket * sockets_per_node, attach, where)
    return MachineSpec(Path(source).stem or "flexflow", nodes, (kind,), sockets, tuple(links), intra, inter,
                       source=source, description=f"FlexFlow machine model file {source}",
                       nodes_where=f.where("num_nodes"))


def load_flexflow_spec(path: str | Path) -> MachineSpec:
    """Read FlexFlow's machine model file at ``path``."""
    return parse_flexflow_spec(read_machine_file(path), str(path))
