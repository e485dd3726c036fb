"""The machine model: compute devices, directional links between named endpoints, routes.

A :class:`Machine` is ``num_nodes`` identical nodes. Its compute devices are numbered node by node
(``id = node * devices_per_node + local``). Links join *endpoints*, named by strings:

- ``n{node}.gpu{local}`` / ``n{node}.cpu{local}``: a compute device (``Device.endpoint``),
- ``n{node}.cpu{socket}``: the host CPU of a socket (not a compute device; only on machines whose
  compute devices are GPUs),
- ``n{node}.sw{k}``: a switch (NVSwitch, PCIe switch), ``n{node}.nic{k}``: a network adapter,
- ``net``: the network fabric, one non-blocking switch that every NIC port reaches.

Every link is one direction of a connection and a FIFO device of its own (FlexFlow §5.1): a
full-duplex connection is two links. :meth:`Machine.route` gives the links a transfer crosses.

A machine may also carry measured collectives (:class:`CollectiveFit`: DisCo's T = C x + D of an
AllReduce over a group of devices, from ``flexrt calibrate`` under ``mpiexec`` or a machine file's
``collectives`` section), which ``--comm-cost measured`` times ring AllReduces with.

Entry points: :class:`Machine` (usually from ``flexrt.machine.load_machine``), :meth:`Machine.route`,
:class:`CollectiveFit`.
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from flexrt.errors import MachineSpecError
from flexrt.ir.datatype import DataType
from flexrt.machine.limits import check_size
from flexrt.machine.routing import Router, check_connected

GPU, CPU = "gpu", "cpu"
DEVICE_KINDS = (GPU, CPU)
NETWORK_ENDPOINT = "net"


class LinkType(enum.Enum):
    """What a link is physically; the value is its name in machine YAML."""

    NVLINK = "nvlink"
    PCIE = "pcie"
    XBUS = "xbus"        # between the CPU sockets of a node: X-Bus (POWER9), UPI / QPI (Intel)
    NIC = "nic"          # a device or host <-> its network adapter
    NETWORK = "network"  # a network adapter's port <-> the fabric between nodes
    MEMBUS = "membus"    # host memory bus (memcpy between CPU devices)
    SWITCH = "switch"    # a port of an NVSwitch or PCIe switch

    def __str__(self) -> str:
        return self.value


class _PicklesWithoutCache:
    """Pickles (MPI ranks) carry the value, not its ``_cache`` of derived data."""

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__["_cache"] = {}


class FlopsTable(_PicklesWithoutCache, Mapping):
    """Peak FLOP/s per data type: an immutable, hashable mapping ``DataType -> float``."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[DataType, float] | Any = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        table: dict[DataType, float] = {}
        for dtype, flops in pairs:
            if not isinstance(dtype, DataType):
                raise MachineSpecError(f"peak FLOP/s keys must be DataType, got {dtype!r}")
            if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not flops > 0:
                raise MachineSpecError(f"peak FLOP/s for {dtype.name} must be a positive number, got {flops!r}")
            table[dtype] = float(flops)
        self._items = tuple(sorted(table.items(), key=lambda kv: kv[0].value))

    def __getitem__(self, dtype: DataType) -> float:
        for key, value in self._items:
            if key is dtype:
                return value
        raise KeyError(dtype)

    def __iter__(self) -> Iterator[DataType]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __reduce__(self):
        return FlopsTable, (self._items,)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FlopsTable):
            return NotImplemented
        return self._items == other._items

    def __repr__(self) -> str:
        return "FlopsTable({" + ", ".join(f"{k.name}: {v:g}" for k, v in self._items) + "})"


def as_int(value: Any) -> int | None:
    """``value`` as an int when it is an integer (Python's or NumPy's, not bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _positive(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise MachineSpecError(f"{what} must be a positive number, got {value!r}")


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One kind of compute device (``V100-SXM2-16GB``): what the analytic cost model needs.

    Example:
        >>> spec = DeviceSpec("V100", "gpu", {DataType.DT_FLOAT: 15.7e12}, 900e9, 16 * 2**30, 5e-6)
        >>> spec.flops(DataType.DT_FLOAT)
        15700000000000.0
    """

    name: str
    kind: str                          # "gpu" or "cpu"
    peak_flops: FlopsTable             # FLOP/s per dtype (a dict is converted)
    memory_bandwidth: float            # bytes/s
    memory_bytes: int
    launch_overhead_s: float           # per kernel
    efficiency: float = 0.8            # fraction of peak a large kernel reaches

    def __post_init__(self) -> None:
        if not isinstance(self.peak_flops, FlopsTable):
            object.__setattr__(self, "peak_flops", FlopsTable(self.peak_flops))
        if not isinstance(self.name, str) or not self.name:
            raise MachineSpecError(f"device kind name must be a non-empty string, got {self.name!r}")
        if self.kind not in DEVICE_KINDS:
            raise MachineSpecError(f"device kind {self.name!r}: kind must be one of {', '.join(DEVICE_KINDS)}, "
                                   f"got {self.kind!r}")
        if not self.peak_flops:
            raise MachineSpecError(f"device kind {self.name!r} has no peak FLOP/s for any data type")
        _positive(self.memory_bandwidth, f"device kind {self.name!r}: memory_bandwidth")
        _positive(self.memory_bytes, f"device kind {self.name!r}: memory_bytes")
        if isinstance(self.launch_overhead_s, bool) or not isinstance(self.launch_overhead_s, (int, float)) \
                or self.launch_overhead_s < 0:
            raise MachineSpecError(f"device kind {self.name!r}: launch_overhead_s must be >= 0, "
                                   f"got {self.launch_overhead_s!r}")
        if isinstance(self.efficiency, bool) or not isinstance(self.efficiency, (int, float)) \
                or not 0 < self.efficiency <= 1:
            raise MachineSpecError(f"device kind {self.name!r}: efficiency must be in (0, 1], "
                                   f"got {self.efficiency!r}")

    def flops(self, dtype: DataType) -> float:
        """Peak FLOP/s for ``dtype``; a MachineSpecError naming the known dtypes when it has none."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            known = ", ".join(dtype_name(d) for d in self.peak_flops)
            raise MachineSpecError(f"device kind {self.name!r} has no peak_flops for {dtype_name(dtype)}, which the "
                                   f"model computes in; it gives {known}: add {dtype_name(dtype)} to the kind's "
                                   f"peak_flops in its machine file, or choose the model's precision "
                                   f"(--precision)") from None


# A machine file's names of the data types (``peak_flops: {float32: 15.7, ...}``).
DTYPE_NAMES = {"float32": DataType.DT_FLOAT, "float16": DataType.DT_HALF, "bfloat16": DataType.DT_BFLOAT16,
               "float64": DataType.DT_DOUBLE, "int32": DataType.DT_INT32, "int64": DataType.DT_INT64}


def dtype_name(dtype: DataType) -> str:
    """The machine file's name of ``dtype`` (``float32``), else its enum name."""
    return next((n for n, d in DTYPE_NAMES.items() if d is dtype), dtype.name)


@dataclass(frozen=True, slots=True)
class Device:
    """A compute device: global ``id``, its ``node``, the ``socket`` it hangs off, its index
    within the node (``local``) and its kind."""

    id: int
    node: int
    socket: int
    local: int
    spec: DeviceSpec

    @property
    def endpoint(self) -> str:
        """The device's name as a link endpoint: ``n0.gpu1``."""
        return f"n{self.node}.{self.spec.kind}{self.local}"

    def __str__(self) -> str:
        return f"{self.endpoint} (device {self.id})"


# Who moves a message's bytes over a link type (machine YAML ``links.<type>.moved_by``):
# - "link": the link itself (a DMA engine, an offloading NIC), beside the devices' computation;
# - "receiver": the receiving device's processor, when it next polls. MPI between processes of one
#   host without a progress thread works so: a message completes inside the receiver's MPI call
#   (MPICH's single-copy CMA: the receiver reads the sender's buffer), between its tasks. A transfer
#   whose route ends in such a link also occupies the destination device for the copy.
MOVED_BY = ("link", "receiver")


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a connection; a FIFO device of its own in the simulator."""

    id: int
    type: LinkType
    bandwidth: float    # bytes/s, this direction
    latency_s: float
    src: str            # endpoint names: "n0.gpu1", "n0.cpu0", "n0.nic0", "net"
    dst: str

    def __post_init__(self) -> None:
        if not isinstance(self.type, LinkType):
            raise MachineSpecError(f"link {self.id}: type must be a LinkType, got {self.type!r}")
        _positive(self.bandwidth, f"link {self.id} ({self.src} -> {self.dst}): bandwidth")
        if isinstance(self.latency_s, bool) or not isinstance(self.latency_s, (int, float)) or self.latency_s < 0:
            raise MachineSpecError(f"link {self.id} ({self.src} -> {self.dst}): latency_s must be >= 0, "
                                   f"got {self.latency_s!r}")
        if self.src == self.dst:
            raise MachineSpecError(f"link {self.id} joins {self.src} to itself")

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over this link alone: latency + bytes / bandwidth."""
        return self.latency_s + nbytes / self.bandwidth


class Collective(enum.Enum):
    """A collective whose measured cost a machine can carry; the value is its name in machine YAML."""

    ALLREDUCE = "allreduce"

    def __str__(self) -> str:
        return self.value


def _optional_number(value: Any, what: str, low: float, high: float) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value) or not low <= value <= high):
        raise MachineSpecError(f"{what} must be a number in [{low:g}, {high:g}] or None, got {value!r}")


@dataclass(frozen=True, slots=True)
class CollectiveFit:
    """DisCo's linear model of one collective over one group of devices, T = C x + D (x bytes, T
    seconds): the group is ``devices`` devices spanning ``nodes`` nodes. ``r2``, ``max_rel_error`` and
    ``median_rel_error`` say how well the line fits the ``sizes`` message sizes it was fitted to
    (None where a machine file does not say).

    Example:
        >>> fit = CollectiveFit(Collective.ALLREDUCE, 2, 1, 0.2e-9, 15e-6)
        >>> round(fit.time_s(1_000_000) * 1e6, 3)
        215.0
    """

    collective: Collective
    devices: int
    nodes: int
    c_s_per_byte: float
    d_s: float
    r2: float | None = None
    max_rel_error: float | None = None
    median_rel_error: float | None = None
    sizes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.collective, Collective):
            raise MachineSpecError(f"a collective fit's collective must be a Collective, got {self.collective!r}")
        for name, low in (("devices", 2), ("nodes", 1)):
            value = getattr(self, name)
            if as_int(value) is None or value < low:
                raise MachineSpecError(f"{self.collective} fit: {name} must be an integer >= {low}, got {value!r}")
        if self.nodes > self.devices:
            raise MachineSpecError(f"{self.collective} fit: a group of {self.devices} devices cannot span "
                                   f"{self.nodes} nodes; nodes must be 1..{self.devices}")
        for name in ("c_s_per_byte", "d_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise MachineSpecError(f"{self.collective} fit over {self.devices} devices: {name} must be a finite "
                                       f"number >= 0, got {value!r}")
        _optional_number(self.r2, f"{self.collective} fit: r2", -math.inf, 1.0)
        _optional_number(self.max_rel_error, f"{self.collective} fit: max_rel_error", 0.0, math.inf)
        _optional_number(self.median_rel_error, f"{self.collective} fit: median_rel_error", 0.0, math.inf)
        if self.sizes is not None and (as_int(self.sizes) is None or self.sizes < 2):
            raise MachineSpecError(f"{self.collective} fit: sizes (message sizes fitted) must be an integer >= 2 "
                                   f"or None, got {self.sizes!r}")

    @property
    def key(self) -> tuple[Collective, int, int]:
        """(collective, devices, nodes): one fit per key on a machine."""
        return self.collective, self.devices, self.nodes

    def time_s(self, num_bytes: float) -> float:
        """C x + D: seconds of the collective over ``num_bytes`` bytes."""
        return self.c_s_per_byte * num_bytes + self.d_s


def _check_collectives(name: str, fits: tuple) -> None:
    seen = set()
    for fit in fits:
        if not isinstance(fit, CollectiveFit):
            raise MachineSpecError(f"machine {name!r}: collectives must be CollectiveFit values, got {fit!r}")
        if fit.key in seen:
            raise MachineSpecError(f"machine {name!r}: two {fit.collective} fits for {fit.devices} devices on "
                                   f"{fit.nodes} node(s); give one per group")
        seen.add(fit.key)


@dataclass(frozen=True, slots=True)
class MachineShape:
    """A machine without its devices (JAX's ``AbstractMesh``): hashable, cheap, for caches."""

    num_nodes: int
    devices_per_node: int

    @property
    def num_devices(self) -> int:
        return self.num_nodes * self.devices_per_node


@dataclass(frozen=True)
class Machine(_PicklesWithoutCache):
    """``num_nodes`` identical nodes of compute devices joined by directional links.

    Example:
        >>> from flexrt.machine import load_machine
        >>> m = load_machine("summit", nodes=2)
        >>> [m.links[i].type.value for i in m.route(0, 3)]
        ['nvlink', 'xbus', 'nvlink']
    """

    name: str
    num_nodes: int
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    collectives: tuple[CollectiveFit, ...] = ()   # measured collectives (``--comm-cost measured``)
    receiver_moved: frozenset = frozenset()       # link types whose messages the receiver copies (``MOVED_BY``)
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "links", tuple(self.links))
        object.__setattr__(self, "collectives", tuple(self.collectives))
        object.__setattr__(self, "receiver_moved", frozenset(self.receiver_moved))
        if not all(isinstance(t, LinkType) for t in self.receiver_moved):
            raise MachineSpecError(f"machine {self.name!r}: receiver_moved must hold LinkTypes, got "
                                   f"{sorted(map(repr, self.receiver_moved))}")
        _check_collectives(self.name, self.collectives)
        if isinstance(self.num_nodes, bool) or not isinstance(self.num_nodes, int) or self.num_nodes < 1:
            raise MachineSpecError(f"machine {self.name!r}: num_nodes must be a positive integer, "
                                   f"got {self.num_nodes!r}")
        if not self.devices or len(self.devices) % self.num_nodes:
            raise MachineSpecError(f"machine {self.name!r}: {len(self.devices)} devices cannot be split evenly "
                                   f"over {self.num_nodes} nodes")
        per_node = len(self.devices) // self.num_nodes
        for i, d in enumerate(self.devices):
            if (d.id, d.node, d.local) != (i, i // per_node, i % per_node):
                raise MachineSpecError(f"machine {self.name!r}: device {i} must have id {i}, node {i // per_node} "
                                       f"and local index {i % per_node}, got {d!r}")
        for i, link in enumerate(self.links):
            if link.id != i:
                raise MachineSpecError(f"machine {self.name!r}: link {i} has id {link.id}; ids must be 0..n-1")
        check_connected(self)

    # --- shape ---

    @property
    def devices_per_node(self) -> int:
        return len(self.devices) // self.num_nodes

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def shape(self) -> MachineShape:
        return MachineShape(self.num_nodes, self.devices_per_node)

    def __hash__(self) -> int:
        h = self._cache.get("hash")
        if h is None:
            h = self._cache["hash"] = hash((self.name, self.num_nodes, self.devices, self.links, self.collectives))
        return h

    def fits(self, collective: Collective = Collective.ALLREDUCE) -> tuple[CollectiveFit, ...]:
        """The machine's measured fits of ``collective`` (``()`` when it has none)."""
        return tuple(f for f in self.collectives if f.collective is collective)

    def device(self, device_id: int) -> Device:
        """The device with id ``device_id`` (any integer type, NumPy's too); a MachineSpecError
        naming the valid range otherwise."""
        index = as_int(device_id)
        if index is None or not 0 <= index < len(self.devices):
            raise MachineSpecError(f"machine {self.name!r} has devices 0..{len(self.devices) - 1}, "
                                   f"got device {device_id!r}")
        return self.devices[index]

    # --- routes ---

    def copied_by_receiver(self, route: tuple[int, ...]) -> bool:
        """Whether a transfer over ``route`` (link ids) is copied by its destination device: its last
        link's type is moved by the receiver (``MOVED_BY``)."""
        return bool(route) and self.links[route[-1]].type in self.receiver_moved

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids a transfer from compute device ``src`` to ``dst`` crosses, in order.

        The path has the fewest hops; among those the highest bottleneck bandwidth; among those the
        lexicographically smallest sequence of link ids (see :mod:`flexrt.machine.routing`). ``()``
        when ``src == dst``. Cached.
        """
        router = self._cache.get("router")
        if router is None:
            router = self._cache["router"] = Router(self)
        hit = router.routes.get((src, dst))
        if hit is not None:
            return hit
        return router.route(self.device(src).id, self.device(dst).id)  # range checks with a clear message

    def route_types(self, src: int, dst: int) -> tuple[LinkType, ...]:
        """The link types of :meth:`route`, in order."""
        return tuple(self.links[i].type for i in self.route(src, dst))

    def route_bandwidth(self, src: int, dst: int) -> float:
        """The bottleneck bandwidth (bytes/s) of the route; ``inf`` when ``src == dst``."""
        return min((self.links[i].bandwidth for i in self.route(src, dst)), default=float("inf"))

    def ring_channels(self, devices) -> tuple[tuple[int, ...], ...]:
        """The member orders of the rings that a ring AllReduce over ``devices`` (in ring order) runs
        at once, each on an equal share of the data: NCCL's channels on nodes with several network
        adapters (NVIDIA/nccl#412: one flow per adapter, entering and leaving every node through it).

        A single ring enters each node through one adapter and leaves through one, leaving the other
        adapters' ports idle. Here each node's members keep their cyclic order, and channel k starts
        every node at its first member reached through adapter k, so channel k enters each node
        through adapter k and leaves it through the adapter of the member before. On summit (adapter
        k on socket k), the rings [0..5 | 6..11 | ...] and [3, 4, 5, 0, 1, 2 | 9, 10, 11, 6, 7, 8 | ...]
        between them use both adapters of every node in both directions.

        One channel (``devices`` itself) when the members are on one node, when the nodes' members
        are not in runs of the same local devices, or when a node's members all use one adapter.
        """
        devs = tuple(int(d) for d in devices)
        key = ("channels", devs)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._ring_channels(devs)
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def _ring_channels(self, devs: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        runs: list[list[int]] = []
        for d in devs:
            node = self.device(d).node
            if runs and self.devices[runs[-1][0]].node == node:
                runs[-1].append(d)
            else:
                runs.append([d])
        if len(runs) < 2 or len({self.devices[r[0]].node for r in runs}) != len(runs):
            return (devs,)
        local = [tuple(self.devices[d].local for d in r) for r in runs]
        if any(x != local[0] for x in local[1:]):
            return (devs,)
        starts, seen = [], set()
        for i, d in enumerate(runs[0]):
            adapter = self._adapter_of(d)
            if adapter is not None and adapter not in seen:
                seen.add(adapter)
                starts.append(i)
        if len(starts) < 2 or starts[0] != 0:
            return (devs,)
        return tuple(tuple(x for r in runs for x in r[s:] + r[:s]) for s in starts)

    def _adapter_of(self, device: int) -> str | None:
        """The network adapter through which transfers from other nodes reach ``device`` (its
        endpoint name, e.g. 'n0.nic1'), or None when no network link is on the way."""
        per = self.devices_per_node
        other = (device + per) % len(self.devices)
        for l in self.route(other, device):
            link = self.links[l]
            if link.type is LinkType.NETWORK and link.src == NETWORK_ENDPOINT:
                return link.dst
        return None

    # --- scaling ---

    def with_nodes(self, n: int) -> Machine:
        """The same machine with ``n`` nodes: node 0's devices and links, repeated per node.

        Every link must stay within one node or join a node's endpoint to the network (``net``),
        which is what the YAML and FlexFlow readers build.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise MachineSpecError(f"the number of nodes must be a positive integer, got {n!r}")
        if n == self.num_nodes:
            return self
        template = node_template(self)
        if n > 1 and not any(NETWORK_ENDPOINT in (t[3], t[4]) for t in template[1]):
            raise MachineSpecError(f"machine {self.name!r} has no network (no NIC links to '{NETWORK_ENDPOINT}'), "
                                   f"so it cannot span {n} nodes; describe inter_node in its YAML")
        return instantiate(self.name, n, *template, collectives=self.collectives, receiver_moved=self.receiver_moved)


# --- node templates: what with_nodes and the builders share ---

# A device template: (socket, local, spec); a link template: (type, bandwidth, latency_s, src, dst)
# with endpoints relative to node 0 ("n0.gpu1") or "net".
DeviceTemplate = tuple[int, int, DeviceSpec]
LinkTemplate = tuple[LinkType, float, float, str, str]


def _node_of(endpoint: str) -> int | None:
    if endpoint == NETWORK_ENDPOINT:
        return None
    head, dot, _ = endpoint.partition(".")
    if not dot or head[:1] != "n" or not head[1:].isdigit():
        raise MachineSpecError(f"link endpoint {endpoint!r} is not 'n<node>.<name>' or '{NETWORK_ENDPOINT}'")
    return int(head[1:])


def node_template(machine: Machine) -> tuple[tuple[DeviceTemplate, ...], tuple[LinkTemplate, ...]]:
    """Node 0's devices and links (and its links to the network) of ``machine``."""
    devices = tuple((d.socket, d.local, d.spec) for d in machine.devices if d.node == 0)
    links = []
    for link in machine.links:
        nodes = {_node_of(link.src), _node_of(link.dst)} - {None}
        if len(nodes) > 1:
            raise MachineSpecError(f"machine {machine.name!r}: link {link.id} joins {link.src} and {link.dst} "
                                   f"directly; only links within a node or to '{NETWORK_ENDPOINT}' can be scaled")
        if nodes == {0}:
            links.append((link.type, link.bandwidth, link.latency_s, link.src, link.dst))
    return devices, tuple(links)


def _rename(endpoint: str, node: int) -> str:
    return endpoint if endpoint == NETWORK_ENDPOINT else f"n{node}." + endpoint.partition(".")[2]


def instantiate(name: str, num_nodes: int, devices: tuple[DeviceTemplate, ...],
                links: tuple[LinkTemplate, ...], collectives: tuple[CollectiveFit, ...] = (),
                receiver_moved: frozenset = frozenset()) -> Machine:
    """A machine of ``num_nodes`` copies of one node; devices and links are numbered node by node.
    Its size is checked against :mod:`flexrt.machine.limits` before anything is allocated. The
    ``collectives`` fits are the machine's whatever its node count (a fit names its group's size)."""
    per_node = len(devices)
    check_size(name, num_nodes, per_node, len(links))
    all_devices = tuple(Device(node * per_node + local, node, socket, local, spec)
                        for node in range(num_nodes) for socket, local, spec in devices)
    all_links = []
    for node in range(num_nodes):
        for type_, bandwidth, latency, src, dst in links:
            all_links.append(Link(len(all_links), type_, bandwidth, latency, _rename(src, node), _rename(dst, node)))
    return Machine(name, num_nodes, all_devices, tuple(all_links), tuple(collectives), frozenset(receiver_moved))
