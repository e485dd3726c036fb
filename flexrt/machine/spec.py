"""A validated machine description (what the YAML and FlexFlow readers produce) and the builder
that turns it into a :class:`~flexrt.machine.machine.Machine`.

The description is one node (sockets, devices, how they connect) plus how nodes reach the network;
:func:`build_machine` lays it out once and repeats it per node, so every machine built here scales
with :meth:`Machine.with_nodes`. Entry point: :func:`build_machine`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from flexrt.errors import MachineSpecError
from flexrt.inputs import listing, read_text, short
from flexrt.machine.limits import MAX_FILE_BYTES, check_links, check_size
from flexrt.machine.machine import (CPU, NETWORK_ENDPOINT, CollectiveFit, DeviceSpec, DeviceTemplate, LinkTemplate,
                                    LinkType, Machine, instantiate)

GB = 1e9     # link and memory bandwidths: GB/s
US = 1e-6    # latencies: microseconds


class Topology(enum.Enum):
    """How a group of devices within a node is joined."""

    ALL_TO_ALL = "all_to_all"  # one link (each direction) between every pair of the group
    PAIRS = "pairs"            # explicit pairs, e.g. a hybrid cube mesh
    SWITCH = "switch"          # one link (each direction) from every device to a new switch


class NicAttach(enum.Enum):
    """What a node's network adapters hang off."""

    SOCKETS = "sockets"  # NIC k on the CPU of socket k mod #sockets
    DEVICES = "devices"  # NIC k directly on devices [k*g, (k+1)*g), g = devices per node / NICs (GPUDirect)


@dataclass(frozen=True, slots=True)
class LinkSpec:
    type: LinkType
    bandwidth_gbs: float   # GB/s, one direction, one lane
    latency_us: float
    moved_by: str = "link"  # who moves a message's bytes: the link ("link"), or the receiving device's
                            # processor when it next polls ("receiver": see ``MOVED_BY``)


@dataclass(frozen=True, slots=True)
class SocketSpec:
    cpu: str | None                 # a label for the host CPU (None: not modelled)
    devices: tuple[str, ...]        # device kind names, in local-index order


@dataclass(frozen=True, slots=True)
class DeviceLinks:
    """One entry of ``intra_node.devices``: a topology over node-local device indices."""

    topology: Topology
    link: LinkType
    devices: tuple[int, ...] = ()                    # ALL_TO_ALL / SWITCH: the group
    pairs: tuple[tuple[int, int, int], ...] = ()     # PAIRS: (a, b, lanes)
    lanes: int = 1
    where: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class CpuLinks:
    """How devices reach their socket's CPU: directly, or through switches shared by device groups."""

    link: LinkType
    switches: tuple[tuple[int, ...], ...] | None = None   # None: a direct link per device
    lanes: int = 1
    where: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class IntraNodeSpec:
    devices: tuple[DeviceLinks, ...] = ()
    to_cpu: CpuLinks | None = None
    between_sockets: LinkType | None = None
    where: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class InterNodeSpec:
    nics: int
    attach: NicAttach
    where: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class MachineSpec:
    """One node's layout and the number of nodes; ``where`` fields are ``file:line`` for errors."""

    name: str
    nodes: int
    device_kinds: tuple[DeviceSpec, ...]
    sockets: tuple[SocketSpec, ...]
    links: tuple[LinkSpec, ...]
    intra_node: IntraNodeSpec
    inter_node: InterNodeSpec | None = None
    source: str = field(default="", compare=False)
    description: str = field(default="", compare=False)
    nodes_where: str = field(default="", compare=False)   # "file:line: field 'nodes'", for size errors
    collectives: tuple[CollectiveFit, ...] = ()          # measured collectives, kept on the Machine

    def kind(self, name: str) -> DeviceSpec:
        for spec in self.device_kinds:
            if spec.name == name:
                return spec
        raise MachineSpecError(f"{self.source}: unknown device kind {short(name)}; "
                               f"known: {listing(k.name for k in self.device_kinds)}")

    def link(self, type_: LinkType, where: str) -> LinkSpec:
        for spec in self.links:
            if spec.type is type_:
                return spec
        raise MachineSpecError(f"{where}: link type '{type_.value}' has no entry in links; add "
                               f"links.{type_.value} with bandwidth (GB/s per direction) and latency_us")


def _fail(where: str, message: str) -> MachineSpecError:
    return MachineSpecError(f"{where}: {message}" if where else message)


def shown(text: str, limit: int = 200) -> str:
    """A path or name for a message: as it is when short and printable, else shortened and quoted."""
    return text if len(text) <= limit and text.isprintable() else short(text, limit)


class _NodeBuilder:
    """Lays out node 0: endpoints and link templates in a fixed order (device links, CPU links,
    socket links, NICs), so that ids are deterministic."""

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.devices: list[DeviceTemplate] = []
        self.socket_of: list[int] = []
        for s, socket in enumerate(spec.sockets):
            for kind_name in socket.devices:
                self.devices.append((s, len(self.devices), spec.kind(kind_name)))
                self.socket_of.append(s)
        self.links: list[LinkTemplate] = []
        self.switches = 0

    def dev(self, local: int) -> str:
        return f"n0.{self.devices[local][2].kind}{local}"

    def cpu(self, socket: int) -> str:
        return f"n0.cpu{socket}"

    def new_switch(self) -> str:
        self.switches += 1
        return f"n0.sw{self.switches - 1}"

    def duplex(self, a: str, b: str, type_: LinkType, lanes: int, where: str) -> None:
        spec = self.spec.link(type_, where)
        check_links(len(self.links) + 2, where, f"this {type_.value} connection")
        bandwidth, latency = spec.bandwidth_gbs * GB * lanes, spec.latency_us * US
        self.links.append((type_, bandwidth, latency, a, b))
        self.links.append((type_, bandwidth, latency, b, a))

    def check_local(self, local: int, where: str, what: str) -> None:
        n = len(self.devices)
        if not 0 <= local < n:
            raise _fail(where, f"{what}: device index {local} is out of range; a node has devices 0..{n - 1}")

    def device_links(self, entry: DeviceLinks) -> None:
        if entry.topology is Topology.PAIRS:
            seen = set()
            for a, b, lanes in entry.pairs:
                for i in (a, b):
                    self.check_local(i, entry.where, "pairs")
                if a == b or (min(a, b), max(a, b)) in seen:
                    raise _fail(entry.where, f"pairs: [{a}, {b}] " + (
                        "joins a device to itself" if a == b else "is listed twice; give the lane count instead"))
                seen.add((min(a, b), max(a, b)))
                self.duplex(self.dev(a), self.dev(b), entry.link, lanes, entry.where)
            return
        group = entry.devices or tuple(range(len(self.devices)))
        for i in group:
            self.check_local(i, entry.where, entry.topology.value)
        if len(set(group)) != len(group):
            raise _fail(entry.where, f"{entry.topology.value}: device indices {short(list(group))} repeat")
        if entry.topology is Topology.ALL_TO_ALL:
            check_links(len(self.links) + len(group) * (len(group) - 1), entry.where,
                        f"all_to_all over {len(group)} devices")
            for x, a in enumerate(group):
                for b in group[x + 1:]:
                    self.duplex(self.dev(a), self.dev(b), entry.link, entry.lanes, entry.where)
        else:
            switch = self.new_switch()
            for a in group:
                self.duplex(self.dev(a), switch, entry.link, entry.lanes, entry.where)

    def cpu_links(self, to_cpu: CpuLinks) -> None:
        if any(socket.cpu is None and socket.devices for socket in self.spec.sockets):
            s = next(i for i, socket in enumerate(self.spec.sockets) if socket.cpu is None and socket.devices)
            raise _fail(to_cpu.where, f"to_cpu: socket {s} has devices but no cpu (node.sockets[{s}].cpu is null)")
        groups = to_cpu.switches
        if groups is None:
            for local in range(len(self.devices)):
                self.duplex(self.dev(local), self.cpu(self.socket_of[local]), to_cpu.link, to_cpu.lanes,
                            to_cpu.where)
            return
        covered: list[int] = []
        for group in groups:
            for i in group:
                self.check_local(i, to_cpu.where, "to_cpu.switches")
            sockets = {self.socket_of[i] for i in group}
            if len(sockets) != 1:
                raise _fail(to_cpu.where, f"to_cpu.switches: devices {short(list(group))} hang off different "
                                          f"sockets {short(sorted(sockets))}; a switch serves one socket")
            covered += group
            switch = self.new_switch()
            for i in group:
                self.duplex(self.dev(i), switch, to_cpu.link, to_cpu.lanes, to_cpu.where)
            self.duplex(switch, self.cpu(sockets.pop()), to_cpu.link, to_cpu.lanes, to_cpu.where)
        if sorted(covered) != list(range(len(self.devices))):
            raise _fail(to_cpu.where, f"to_cpu.switches must list every device of the node once "
                                      f"(0..{len(self.devices) - 1}), got {short(sorted(covered))}")

    def socket_links(self, type_: LinkType, where: str) -> None:
        cpus = [s for s, socket in enumerate(self.spec.sockets) if socket.cpu is not None]
        check_links(len(self.links) + len(cpus) * (len(cpus) - 1), where, f"between_sockets over {len(cpus)} CPUs")
        for x, a in enumerate(cpus):
            for b in cpus[x + 1:]:
                self.duplex(self.cpu(a), self.cpu(b), type_, 1, where)

    def nic_links(self, inter: InterNodeSpec) -> None:
        n_dev, sockets = len(self.devices), self.spec.sockets
        if inter.attach is NicAttach.DEVICES and n_dev % inter.nics:
            raise _fail(inter.where, f"attach: devices needs the NIC count to divide the devices per node; "
                                     f"{inter.nics} NICs, {n_dev} devices")
        for k in range(inter.nics):
            nic = f"n0.nic{k}"
            if inter.attach is NicAttach.SOCKETS:
                s = k % len(sockets)
                if sockets[s].cpu is None:
                    raise _fail(inter.where, f"attach: sockets puts NIC {k} on socket {s}, which has no cpu; "
                                             f"use attach: devices")
                self.duplex(self.cpu(s), nic, LinkType.NIC, 1, inter.where)
            else:
                per_nic = n_dev // inter.nics
                for local in range(k * per_nic, (k + 1) * per_nic):
                    self.duplex(self.dev(local), nic, LinkType.NIC, 1, inter.where)
            self.duplex(nic, NETWORK_ENDPOINT, LinkType.NETWORK, 1, inter.where)


def _check_names(spec: MachineSpec) -> None:
    has_cpu_devices = any(spec.kind(k).kind == CPU for s in spec.sockets for k in s.devices)
    if has_cpu_devices and any(s.cpu is not None for s in spec.sockets):
        raise _fail(spec.intra_node.where or spec.source,
                    "a socket cpu cannot be given when compute devices are of kind 'cpu' (the devices are the "
                    "host); set node.sockets[*].cpu to null")


def build_machine(spec: MachineSpec, nodes: int | None = None) -> Machine:
    """The machine ``spec`` describes, with ``nodes`` nodes (default: ``spec.nodes``; given, it is
    ``--nodes`` and the messages say so). Its size is checked against :mod:`flexrt.machine.limits`
    before anything is allocated."""
    n = spec.nodes if nodes is None else nodes
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise MachineSpecError(f"machine {short(spec.name)}: the number of nodes must be a positive integer, "
                               f"got {short(n)}")
    where = "" if nodes is not None else spec.nodes_where or spec.source
    check_size(spec.name, n, sum(len(socket.devices) for socket in spec.sockets), 0, where, nodes is not None)
    b = _NodeBuilder(spec)
    if not b.devices:
        raise _fail(spec.source, f"machine {short(spec.name)}: node.sockets list no devices")
    _check_names(spec)
    intra = spec.intra_node
    for entry in intra.devices:
        b.device_links(entry)
    if intra.to_cpu is not None:
        b.cpu_links(intra.to_cpu)
    if intra.between_sockets is not None:
        b.socket_links(intra.between_sockets, intra.where)
    if spec.inter_node is not None and spec.inter_node.nics:
        b.nic_links(spec.inter_node)
    elif n > 1:
        raise _fail(spec.source, f"machine {short(spec.name)} has {n} nodes but no inter_node section (NICs), "
                                 f"so its nodes cannot reach each other")
    check_size(spec.name, n, len(b.devices), len(b.links), where, nodes is not None)
    try:
        return instantiate(spec.name, n, tuple(b.devices), tuple(b.links), spec.collectives,
                           frozenset(link.type for link in spec.links if link.moved_by == "receiver"))
    except MachineSpecError as e:  # a disconnected layout: say where the topology was described
        raise _fail(intra.where or spec.source, str(e)) from None


def read_machine_file(path) -> str:
    """The text of a machine description file (a regular file of at most ``MAX_FILE_BYTES``, UTF-8);
    anything else is a MachineSpecError naming the file (and the line and byte of a bad byte)."""
    return read_text(path, "machine file", MachineSpecError, max_bytes=MAX_FILE_BYTES)
