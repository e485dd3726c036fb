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

Entry point: :func:`load_flexflow_spec`.
"""

from __future__ import annotations

import re
from pathlib import Path

from flexrt.errors import MachineSpecError
from flexrt.machine.machine import LinkType
from flexrt.machine.presets import preset_spec
from flexrt.machine.spec import (read_machine_file, CpuLinks, DeviceLinks, InterNodeSpec, IntraNodeSpec, LinkSpec, MachineSpec,
                                 NicAttach, SocketSpec, Topology)

LINKS = ("membus", "upi", "nic", "pci", "nvlink")
# FlexFlow's measured numbers (ms, GB/s), used where a file leaves a link out.
DEFAULT_LINKS = {"nvlink": (0.001, 18.52), "pci": (0.001, 12.58), "nic": (0.000507, 10.94),
                 "upi": (0.0004, 10.14), "membus": (0.00003, 8.75)}
COUNTS = ("num_nodes", "num_sockets_per_node", "num_cpus_per_socket", "num_gpus_per_socket", "nic_persocket",
          "nic_distribution")
PATH_WORDS = ("membus", "upi", "nic", "pci_to_host", "pci_to_dev", "nvlink")
PATHS = tuple(f"{scope}_{a}_to_{b}" for scope in ("intra_socket", "inter_socket", "inter_node")
              for a in ("sys_mem", "gpu_fb_mem") for b in ("sys_mem", "gpu_fb_mem"))
# gpu_type -> (preset, device kind) whose numbers the GPU takes.
GPU_TYPES = {"V100": ("summit", "V100-SXM2-16GB"), "P100": ("flexflow_p100", "P100-SXM2-16GB"),
             "K80": ("flexflow_k80", "K80-GK210"), "A100": ("dgx_a100", "A100-SXM4-80GB"),
             "H100": ("dgx_h100", "H100-SXM5-80GB")}
CPU_KIND = ("local", "host-cpu")
VALID_KEYS = COUNTS + tuple(f"{link}_{what}" for link in LINKS for what in ("latency", "bandwidth")) \
    + ("gpu_type",) + PATHS
_KEY_VALUE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def looks_like_flexflow(text: str) -> bool:
    """True when the first line that is not blank or a comment is ``key = value``."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return bool(_KEY_VALUE.match(stripped)) and ":" not in stripped.partition("=")[0]
    return False


def _parse(text: str, source: str) -> dict[str, tuple[str, int]]:
    """``key -> (value, line)``; comments (``#`` to the end of a line) and blank lines skipped."""
    entries: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _KEY_VALUE.match(line)
        if m is None:
            raise MachineSpecError(f"{source}:{number}: expected 'key = value', got {line!r}")
        key, value = m.groups()
        if key not in VALID_KEYS:
            raise MachineSpecError(f"{source}:{number}: field '{key}': unknown key {key!r}; valid keys: "
                                   f"{', '.join(VALID_KEYS)}")
        if key in entries:
            raise MachineSpecError(f"{source}:{number}: field '{key}': given twice (first on line {entries[key][1]})")
        if not value:
            raise MachineSpecError(f"{source}:{number}: field '{key}': missing value after '='")
        entries[key] = (value, number)
    return entries


class _Fields:
    def __init__(self, entries: dict[str, tuple[str, int]], source: str) -> None:
        self.entries, self.source = entries, source

    def error(self, key: str, message: str) -> MachineSpecError:
        line = self.entries[key][1] if key in self.entries else 1
        return MachineSpecError(f"{self.source}:{line}: field '{key}': {message}")

    def count(self, key: str, default: int | None, minimum: int) -> int:
        if key not in self.entries:
            if default is None:
                raise MachineSpecError(f"{self.source}:1: field '{key}': missing (a machine model file needs "
                                       f"num_nodes, num_sockets_per_node and num_gpus_per_socket)")
            return default
        value = self.entries[key][0]
        if not re.fullmatch(r"\d+", value) or int(value) < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.error(key, f"expected {what}, got {value!r}")
        return int(value)

    def number(self, key: str, default: float, unit: str, *, allow_zero: bool) -> float:
        if key not in self.entries:
            return default
        value = self.entries[key][0]
        try:
            x = float(value)
        except ValueError:
            x = float("nan")
        if not (x >= 0 if allow_zero else x > 0) or x == float("inf"):
            what = "a non-negative" if allow_zero else "a positive"
            raise self.error(key, f"expected {what} number ({unit}), got {value!r}")
        return x

    def path(self, key: str) -> tuple[str, ...]:
        if key not in self.entries:
            return ()
        words = tuple(self.entries[key][0].split())
        for w in words:
            if w not in PATH_WORDS:
                raise self.error(key, f"unknown path element {w!r}; valid elements: {', '.join(PATH_WORDS)}")
        return words


def parse_flexflow_spec(text: str, source: str = "<string>") -> MachineSpec:
    """Validate a FlexFlow machine model file's ``text``; errors are ``FILE:LINE: ...``."""
    f = _Fields(_parse(text, source), source)
    nodes = f.count("num_nodes", None, 1)
    sockets_per_node = f.count("num_sockets_per_node", None, 1)
    gpus = f.count("num_gpus_per_socket", None, 0)
    cpus = f.count("num_cpus_per_socket", 1, 0)
    nics_per_socket = f.count("nic_persocket", 1, 1)
    f.count("nic_distribution", 0, 0)
    link = {name: (f.number(f"{name}_latency", DEFAULT_LINKS[name][0], "ms", allow_zero=True),
                   f.number(f"{name}_bandwidth", DEFAULT_LINKS[name][1], "GB/s", allow_zero=False))
            for name in LINKS}
    paths = {key: f.path(key) for key in PATHS}

    def spec(type_: LinkType, name: str, latency_scale: float = 1.0) -> LinkSpec:
        latency_ms, bandwidth = link[name]
        return LinkSpec(type_, bandwidth, latency_ms * 1e3 * latency_scale)

    links = [spec(LinkType.PCIE, "pci"), spec(LinkType.XBUS, "upi"), spec(LinkType.NVLINK, "nvlink"),
             spec(LinkType.MEMBUS, "membus"), spec(LinkType.NIC, "pci"), spec(LinkType.NETWORK, "nic", 0.5)]
    gpu_type = f.entries.get("gpu_type", ("V100", 0))[0]
    if gpu_type not in GPU_TYPES:
        raise f.error("gpu_type", f"unknown GPU type {gpu_type!r}; valid: {', '.join(GPU_TYPES)}")
    where = f"{source}:1: field 'machine'"
    if gpus:
        kind = preset_spec(GPU_TYPES[gpu_type][0]).kind(GPU_TYPES[gpu_type][1])
        sockets = tuple(SocketSpec("CPU", (kind.name,) * gpus) for _ in range(sockets_per_node))
        entries = []
        if "nvlink" in paths["intra_socket_gpu_fb_mem_to_gpu_fb_mem"] and gpus > 1:
            entries += [DeviceLinks(Topology.ALL_TO_ALL, LinkType.NVLINK, tuple(range(s * gpus, (s + 1) * gpus)),
                                    where=where) for s in range(sockets_per_node)]
        if "nvlink" in paths["inter_socket_gpu_fb_mem_to_gpu_fb_mem"] and sockets_per_node > 1:
            n = gpus * sockets_per_node
            pairs = tuple((a, b, 1) for a in range(n) for b in range(a + 1, n) if a // gpus != b // gpus)
            entries.append(DeviceLinks(Topology.PAIRS, LinkType.NVLINK, pairs=pairs, where=where))
        intra = IntraNodeSpec(tuple(entries), CpuLinks(LinkType.PCIE, where=where),
                              LinkType.XBUS if sockets_per_node > 1 else None, where)
        attach = NicAttach.SOCKETS
    else:
        if cpus == 0:
            raise f.error("num_cpus_per_socket" if "num_cpus_per_socket" in f.entries else "num_gpus_per_socket",
                          "a machine needs devices: num_gpus_per_socket and num_cpus_per_socket are both 0")
        kind = preset_spec(CPU_KIND[0]).kind(CPU_KIND[1])
        sockets = tuple(SocketSpec(None, (kind.name,) * cpus) for _ in range(sockets_per_node))
        n = cpus * sockets_per_node
        entries = [DeviceLinks(Topology.ALL_TO_ALL, LinkType.MEMBUS, tuple(range(s * cpus, (s + 1) * cpus)),
                               where=where) for s in range(sockets_per_node) if cpus > 1]
        if sockets_per_node > 1:
            entries.append(DeviceLinks(Topology.PAIRS, LinkType.XBUS, where=where, pairs=tuple(
                (a, b, 1) for a in range(n) for b in range(a + 1, n) if a // cpus != b // cpus)))
        intra = IntraNodeSpec(tuple(entries), None, None, where)
        attach = NicAttach.DEVICES
        if n % (nics_per_socket * sockets_per_node):
            raise f.error("nic_persocket", f"the NICs per node ({nics_per_socket * sockets_per_node}) must divide "
                                           f"the CPUs per node ({n}) when the CPUs are the devices")
    inter = InterNodeSpec(nics_per_socket * sockets_per_node, attach, where)
    return MachineSpec(Path(source).stem or "flexflow", nodes, (kind,), sockets, tuple(links), intra, inter,
                       source=source, description=f"FlexFlow machine model file {source}")


def load_flexflow_spec(path: str | Path) -> MachineSpec:
    """Read FlexFlow's machine model file at ``path``."""
    return parse_flexflow_spec(read_machine_file(path), str(path))
