"""The task graph of one training iteration (FlexFlow §5.1), in a readable form.

Tasks are computations (forward, backward, loss, weight update, the sum of partial pieces) on compute
devices and transfers on links (one task per link hop; see ``flexrt.simulator.lowering``). Each
carries the regions it reads and writes (tensor, slice, partial-sum and replica index, device),
and an action (``flexrt.simulator.actions``) naming the device buffers it reads and writes, which
the runtime executes; the simulator only needs devices, times and dependencies, which the engine
holds in arrays. ``TaskGraph.csr`` gives the compact form.

Engine device numbering: compute devices are ``0 .. D-1`` (machine device ids) and link ``l`` is
device ``D + l``.

Every task, dependency and memory record belongs to an owner (``Owner``: an operator's pieces, an
operand edge's movement, a weight's synchronization and updates, the loss), so that a delta re-lowers
only the owners a change touches.

Entry points: ``Task``, ``TaskKind``, ``Category``, ``Owner`` (with ``OwnerKind``),
``RegionRequirement``, ``TaskGraph``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from flexrt.ir.parallel_axes import Region
from flexrt.ir.pcg import TensorRef
from flexrt.simulator._graph_core import MEMORY_KINDS as _MEMORY_KINDS, GraphCore


class TaskKind(enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"
    UPDATE = "update"
    REDUCE = "reduce"       # sums partial pieces (or gradient contributions) on one device
    LOSS = "loss"           # scores the model's output rows and seeds their gradient
    TRANSFER = "transfer"   # one hop of a transfer, on a link
    RECOMPUTE = "recompute"  # a forward run again before the backward that needs its activations


class Category(enum.Enum):
    """What a task's data movement is for (data moved is reported per category)."""

    COMPUTE = "compute"
    ACTIVATION = "activation"      # activations and their gradients between operators
    WEIGHT_SYNC = "weight_sync"    # weight-gradient synchronization and weight copies
    LOSS = "loss"                  # the model's output gathered for the loss, and its gradient sent back


class OwnerKind(enum.Enum):
    """What an owner's work is; the values order owners of one operator for tie-breaking."""

    __hash__ = object.__hash__  # members are singletons compared by identity; Enum's own hash is slow

    OP = 0        # the forward and backward tasks of an operator's pieces
    EDGE = 1      # the movement that assembles one operand of an operator from its producer
    WEIGHT = 2    # a weight's instances: copies to later users, gradient synchronization, updates
    LOSS = 3      # the loss scoring an operator's output


class Owner(NamedTuple):
    """An owner of work in the graph: its kind, the operator (or weight) it belongs to, and for an
    edge the operand index."""

    kind: OwnerKind
    name: str
    index: int = 0

    @classmethod
    def op(cls, name: str) -> "Owner":
        return cls(OwnerKind.OP, name)

    @classmethod
    def edge(cls, consumer: str, i: int) -> "Owner":
        return cls(OwnerKind.EDGE, consumer, i)

    @classmethod
    def weight(cls, name: str) -> "Owner":
        return cls(OwnerKind.WEIGHT, name)

    @classmethod
    def loss(cls, name: str) -> "Owner":
        return cls(OwnerKind.LOSS, name)


class Access(enum.Enum):
    READ = "read"
    WRITE = "write"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class RegionRequirement:
    tensor: TensorRef
    region: Region
    access: Access
    device: int
    gradient: bool = False


@dataclass(slots=True)
class Task:
    id: int
    kind: TaskKind
    device: int                    # engine device (compute device id, or D + link id)
    exe_s: float
    name: str
    node: str = ""                 # the PCG operator (or weight) the task belongs to
    piece: int = -1
    category: Category = Category.COMPUTE
    elements: int = 0              # elements moved by the transfer this hop belongs to (0 for compute)
    num_bytes: int = 0
    transfer: int = -1             # hops of one transfer share this id; -1 for compute
    link_type: str = ""
    regions: tuple[RegionRequirement, ...] = ()
    owner: object = None           # its ``Owner``
    action: object = None          # what the runtime does (``flexrt.simulator.actions``); None: holds its device only


def sorted_runs(keys: np.ndarray, values: np.ndarray):
    """(key, the values under it) for each run of equal ``keys`` (sorted, so each key is one run),
    in order; the passes that group a large graph's tasks with NumPy use it."""
    if not len(keys):
        return []
    cut = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    return zip(keys[np.r_[0, cut]].tolist(), np.split(values, cut))


def _no_hops(src, dst, num_bytes):
    raise ValueError("this task graph was made without a route function (hops=)")


_KINDS = tuple(TaskKind)
_KIND_CODE = {k: i for i, k in enumerate(_KINDS)}
KIND_CODE = _KIND_CODE        # TaskKind -> the core's code
CATEGORIES = tuple(Category)
_CATEGORY_CODE = {c: i for i, c in enumerate(CATEGORIES)}
CATEGORY_CODE = _CATEGORY_CODE  # Category -> the core's code
TRANSFER_CODE = _KIND_CODE[TaskKind.TRANSFER]


MEMORY_KINDS = _MEMORY_KINDS  # memory record kinds, by code


class _TaskView:
    """Read-only mapping task id -> ``Task`` over the live tasks (each ``Task`` made on access) of a
    ``TaskGraph`` (or a ``FusedGraph``: anything with ``task``, ``ids``, ``has_task`` and a length)."""

    def __init__(self, graph: "TaskGraph") -> None:
        self._g = graph

    def __getitem__(self, tid: int) -> Task:
        return self._g.task(tid)

    def __contains__(self, tid) -> bool:
        return self._g.has_task(tid)

    def __iter__(self):
        return iter(self._g.ids())

    def __len__(self) -> int:
        return len(self._g)

    def keys(self):
        return self._g.ids()

    def values(self):
        return [self._g.task(t) for t in self._g.ids()]

    def items(self):
        return [(t, self._g.task(t)) for t in self._g.ids()]


class TaskGraph:
    """The tasks of one lowered iteration as a struct of arrays, with their dependencies.

    The columns live in a compiled core (``core``: ``simulator/_graph_core.pyx``): per task (by id;
    ids count up and are never reused, so an incremental update keeps the others) its kind, device,
    exe time, priority (the simulator's tie-break), owner, and the transfer its hop belongs to; per
    transfer its elements, bytes and data-movement category. Every task, dependency and memory
    record belongs to an owner (``owner``): ``drop`` removes an owner's work. Dependencies are counted
    (two owners may need one). With ``detail`` (what the runtime and traces need) tasks also carry a
    name, operator, piece, regions and action (``annotate``). The engine is built from the graph
    (``engine``) and kept in step by the change set since then (``sync``). The runtime reads
    ``parts`` (the pieces that assemble each buffer), ``inputs``, ``weight_shapes`` and
    ``loss_node`` from here too, so the graph is all it needs.

    ``hops(src, dst, num_bytes)`` gives the engine devices and times of a transfer's hops; with
    ``routes(src, dst)`` (devices, latencies, bandwidths, summed latency per hop) transfers cost
    latency plus bytes over bandwidth, computed in the core (``GraphCore``). Without
    ``incremental`` the graph is built once (no ``drop``, no ``sync``): less memory.
    """

    def __init__(self, num_compute_devices: int, num_links: int, detail: bool = True, hops=None, routes=None,
                 incremental: bool = True) -> None:
        self.num_compute_devices = num_compute_devices
        self.num_links = num_links
        self.detail = detail
        self.core = GraphCore(num_compute_devices + num_links, hops if hops is not None else _no_hops, routes,
                              incremental)
        self.owner_keys: list = []       # owner id -> its key (an ``Owner``)
        self.names: dict[int, str] = {}  # with detail: task id -> name
        self.info: dict[int, tuple] = {}  # with detail: task id -> (node, piece, regions, action)
        self.parts: dict = {}            # owner key -> [(buffer key, device, Part)], with detail
        self.inputs: dict = {}           # model input name -> full TensorShape
        self.weight_shapes: dict = {}    # weight name -> TensorShape
        self.loss_node = None
        self.link_types: list[str] = [""] * num_links  # link id -> its type's name

    @property
    def num_devices(self) -> int:
        return self.num_compute_devices + self.num_links

    def is_link(self, device: int) -> bool:
        return device >= self.num_compute_devices

    def owner(self, key, rank: int) -> int:
        """A new owner (``key`` names it: an ``Owner``) whose tasks get priorities from ``rank``."""
        oid = self.core.owner(rank)
        self.owner_keys.append(key)
        return oid

    def drop(self, oid: int) -> None:
        """Remove the owner's tasks, dependencies, memory records and parts."""
        if self.detail:
            for t in self.core.owner_tasks(oid):
                self.names.pop(t, None)
                self.info.pop(t, None)
        self.core.drop(oid)
        self.parts.pop(self.owner_keys[oid], None)

    def add_task(self, oid: int, kind: TaskKind, device: int, exe_s: float, name=None, node: str = "",
                 piece: int = -1, regions: tuple = (), action=None) -> int:
        tid = self.core.task(oid, _KIND_CODE[kind], device, exe_s)
        if self.detail:
            self.annotate(tid, name, node, piece, regions, action)
        return tid

    def annotate(self, tid: int, name: str, node: str = "", piece: int = -1, regions: tuple = (),
                 action=None) -> None:
        """The task's name, operator, piece, regions and action (with ``detail``)."""
        self.names[tid] = name
        self.info[tid] = (node, piece, regions, action)

    def add_edge(self, oid: int, a: int, b: int) -> None:
        self.core.edge(oid, a, b)

    def ids(self) -> list[int]:
        return np.flatnonzero(self.core.columns()["alive"]).tolist()

    def has_task(self, tid: int) -> bool:
        return self.core.is_alive(tid)

    def columns(self) -> dict:
        """NumPy copies of the columns (see ``GraphCore.columns``)."""
        return self.core.columns()

    def task(self, tid: int) -> Task:
        if not self.core.is_alive(tid):
            raise KeyError(tid)
        kind, d, exe, _, x, _, oid = self.core.row(tid)
        link_type = self.link_types[d - self.num_compute_devices] if d >= self.num_compute_devices else ""
        node, piece, regions, action = self.info.get(tid, ("", -1, (), None))
        if x >= 0:
            elements, num_bytes, cat = self.core.transfer_row(x)
            category = CATEGORIES[cat]
        else:
            category, elements, num_bytes = Category.COMPUTE, 0, 0
        return Task(tid, _KINDS[kind], d, exe, self.names.get(tid, f"task {tid}"), node=node, piece=piece,
                    category=category, elements=elements, num_bytes=num_bytes, transfer=x, link_type=link_type,
                    regions=regions, owner=self.owner_keys[oid], action=action)

    @property
    def tasks(self) -> _TaskView:
        return _TaskView(self)

    def __len__(self) -> int:
        return self.core.live

    def memory_by_device(self) -> dict[int, dict[str, int]]:
        """device -> memory kind ("weights", "gradients", "activations") -> bytes."""
        return self.core.memory_by_device()

    # -- the engine ---------------------------------------------------------------------------------
    def _edge_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.core.edge_arrays()

    def engine(self, engine_cls):
        """A new engine holding this graph (every task must be alive: a fresh lowering)."""
        if self.core.live != self.core.size:
            raise ValueError("engine(): the graph has removed tasks; build it afresh")
        device, exe, priority = self.core.engine_columns()
        src, dst = self.core.edge_arrays()
        trusted = getattr(engine_cls, "from_graph_arrays", None)   # the compiled engine: the core's arrays
        build = trusted if trusted is not None else engine_cls.from_arrays   # need no re-checking
        eng = build(self.num_devices, device, exe, src, dst, priority)
        self.core.start_tracking()
        return eng

    def sync(self, eng) -> None:
        """Apply the changes since the engine was last in step: removed tasks, new tasks, and edges
        that appeared or went."""
        eng.apply_changes(self.core.changes())

    # -- compact forms ------------------------------------------------------------------------------
    def successors(self) -> dict[int, list[int]]:
        """Live task id -> its successors, sorted."""
        src, dst = self._edge_arrays()
        out: dict[int, list[int]] = {t: [] for t in self.ids()}
        for a, b in zip(src.tolist(), dst.tolist()):
            out[a].append(b)
        return out

    def csr(self) -> dict[str, np.ndarray]:
        """Compact arrays: task ids, devices, times, and successors in CSR form (ids sorted)."""
        c = self.core.columns()
        ids = np.flatnonzero(c["alive"]).astype(np.int64)
        index = np.full(len(c["alive"]), -1, dtype=np.int64)
        index[ids] = np.arange(len(ids))
        src, dst = self._edge_arrays()  # sorted by (src, dst); the renumbering keeps that order
        indptr = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(index[src], minlength=len(ids)), out=indptr[1:])
        return {"ids": ids, "device": c["device"][ids], "exe_s": c["exe"][ids], "indptr": indptr,
                "indices": index[dst]}

    def to_dot(self, limit: int = 5000) -> str:
        """Graphviz of the task graph (FlexFlow's --taskgraph); at most ``limit`` tasks."""
        lines = ["digraph taskgraph {", "  node [fontname=Helvetica fontsize=9];"]
        shown = self.ids()[:limit]
        keep = set(shown)
        succ = self.successors()
        for t in shown:
            task = self.task(t)
            shape = "hexagon" if task.kind is TaskKind.TRANSFER else "box"
            lines.append(f'  t{t} [label="{task.name}\\n{task.exe_s * 1e6:.1f} us" shape={shape}];')
        for t in shown:
            for s in succ[t]:
                if s in keep:
                    lines.append(f"  t{t} -> t{s};")
        lines.append("}")
        return "\n".join(lines) + "\n"
