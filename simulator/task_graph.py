"""The task graph of one training iteration (FlexFlow §5.1), in a readable form.

Tasks are computations (forward, backward, loss, weight update, the sum of partial pieces) on compute
devices and transfers on links (one task per link hop; see ``flexrt.simulator.lowering``). Each
carries the regions it reads and writes (tensor, slice, partial-sum and replica index, device),
and an action (``flexrt.simulator.actions``) naming the device buffers it reads and writes, which
the runtime executes; the simulator only needs devices, times and dependencies, which the engine
holds in arrays. ``TaskGraph.csr`` gives the compact form.

Engine device numbering: compute devices are ``0 .. D-1`` (machine device ids) and link ``l`` is
device ``D + l``.

Entry points: ``Task``, ``TaskKind``, ``Category``, ``RegionRequirement``, ``TaskGraph``.
"""

from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass

import numpy as np

from flexrt.ir.parallel_axes import Region
from flexrt.ir.pcg import TensorRef


class TaskKind(enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"
    UPDATE = "update"
    REDUCE = "reduce"       # sums partial pieces (or gradient contributions) on one device
    LOSS = "loss"           # scores the model's output rows and seeds their gradient
    TRANSFER = "transfer"   # one hop of a transfer, on a link


class Category(enum.Enum):
    """What a task's data movement is for (data moved is reported per category)."""

    COMPUTE = "compute"
    ACTIVATION = "activation"      # activations and their gradients between operators
    WEIGHT_SYNC = "weight_sync"    # weight-gradient synchronization and weight copies
    LOSS = "loss"                  # the model's output gathered for the loss, and its gradient sent back


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
    owner: tuple = ()
    action: object = None          # what the runtime does (``flexrt.simulator.actions``); None: holds its device only


_KINDS = tuple(TaskKind)
_KIND_CODE = {k: i for i, k in enumerate(_KINDS)}
CATEGORIES = tuple(Category)
_CATEGORY_CODE = {c: i for i, c in enumerate(CATEGORIES)}
TRANSFER_CODE = _KIND_CODE[TaskKind.TRANSFER]


def edge_key(a: int, b: int) -> int:
    """One int per edge a -> b (task ids stay below 2**32)."""
    return (a << 32) | b


class _TaskView:
    """Read-only mapping task id -> ``Task`` over the live tasks (each ``Task`` made on access)."""

    def __init__(self, graph: "TaskGraph") -> None:
        self._g = graph

    def __getitem__(self, tid: int) -> Task:
        return self._g.task(tid)

    def __contains__(self, tid) -> bool:
        return 0 <= tid < len(self._g.alive) and bool(self._g.alive[tid])

    def __iter__(self):
        return iter(self._g.ids())

    def __len__(self) -> int:
        return self._g.live

    def keys(self):
        return self._g.ids()

    def values(self):
        return [self._g.task(t) for t in self._g.ids()]

    def items(self):
        return [(t, self._g.task(t)) for t in self._g.ids()]


class TaskGraph:
    """The tasks of one lowered iteration as a struct of arrays, with their dependencies.

    Per task (by id; ids count up and are never reused, so an incremental update keeps the others):
    kind, device, exe time, priority (the simulator's tie-break), owner, data-movement category,
    elements and bytes moved, and the transfer its hop belongs to. With ``detail`` (what the runtime
    and traces need) also its name, operator, piece, regions and action. Dependencies are a set of
    edges with a count of the owners that need each (``add_edge``/``remove_edge``). The engine is built
    from the graph (``engine``) and kept in step by the change set since then (``sync``). The runtime
    reads ``parts`` (the pieces that assemble each buffer), ``inputs``, ``weight_shapes`` and
    ``loss_node`` from here too, so the graph is all it needs.
    """

    def __init__(self, num_compute_devices: int, num_links: int, detail: bool = True) -> None:
        self.num_compute_devices = num_compute_devices
        self.num_links = num_links
        self.detail = detail
        self.kind = array("b")
        self.device = array("q")
        self.exe = array("d")
        self.priority = array("q")
        self.transfer = array("q")       # the transfer a hop belongs to, -1 for computations
        self.alive = bytearray()
        self.xfer_elements = array("q")  # per transfer (by id): elements and bytes moved, category
        self.xfer_bytes = array("q")
        self.xfer_category = array("b")
        self.owner: list = []
        self.names: list = []
        self.info: list = []   # per task with detail: (node, piece, regions, action)
        self.edges: dict[int, int] = {}
        self.live = 0
        self.parts: dict = {}            # owner -> [(buffer key, device, Part)], with detail
        self.inputs: dict = {}           # model input name -> full TensorShape
        self.weight_shapes: dict = {}    # weight name -> TensorShape
        self.loss_node = None
        self.link_types: list[str] = [""] * num_links  # link id -> its type's name
        self._synced = 0                 # tasks [0, _synced) are in the engine
        self._tracking = False           # an engine exists: record changed edges
        self._dead: list[int] = []       # removed since the last sync, below _synced
        self._touched: set[int] = set()  # edge keys changed since the last sync

    @property
    def num_devices(self) -> int:
        return self.num_compute_devices + self.num_links

    def is_link(self, device: int) -> bool:
        return device >= self.num_compute_devices

    def add_transfer(self, elements: int, num_bytes: int, category: Category) -> int:
        """A new transfer (its hops are tasks that name it); returns its id."""
        self.xfer_elements.append(elements)
        self.xfer_bytes.append(num_bytes)
        self.xfer_category.append(_CATEGORY_CODE[category])
        return len(self.xfer_bytes) - 1

    def add_task(self, kind: TaskKind, device: int, exe_s: float, priority: int, owner, name=None,
                 transfer: int = -1, node: str = "", piece: int = -1, regions: tuple = (), action=None) -> int:
        tid = len(self.kind)
        self.kind.append(_KIND_CODE[kind])
        self.device.append(device)
        self.exe.append(exe_s)
        self.priority.append(priority)
        self.transfer.append(transfer)
        self.alive.append(1)
        self.owner.append(owner)
        if self.detail:
            self.names.append(name)
            self.info.append((node, piece, regions, action))
        self.live += 1
        return tid

    def add_edge(self, a: int, b: int) -> int:
        """Count one more need of the edge a -> b; returns its key."""
        key = (a << 32) | b
        c = self.edges.get(key)
        if c is None:
            self.edges[key] = 1
            if self._tracking:
                self._touched.add(key)
        else:
            self.edges[key] = c + 1
        return key

    def remove_edge(self, key: int) -> None:
        """Count one need less of an edge (by key); it goes when none is left."""
        c = self.edges.get(key)
        if c is None:
            return
        if c == 1:
            del self.edges[key]
            self._touched.add(key)
        else:
            self.edges[key] = c - 1

    def remove(self, ids) -> None:
        for t in ids:
            if self.alive[t]:
                self.alive[t] = 0
                self.live -= 1
                if t < self._synced:
                    self._dead.append(t)

    def ids(self) -> list[int]:
        return [t for t, a in enumerate(self.alive) if a]

    def task(self, tid: int) -> Task:
        if not (0 <= tid < len(self.alive) and self.alive[tid]):
            raise KeyError(tid)
        kind = _KINDS[self.kind[tid]]
        d = self.device[tid]
        link_type = self.link_types[d - self.num_compute_devices] if d >= self.num_compute_devices else ""
        node, piece, regions, action = self.info[tid] if self.detail else ("", -1, (), None)
        x = self.transfer[tid]
        category, elements, num_bytes = (CATEGORIES[self.xfer_category[x]], self.xfer_elements[x],
                                         self.xfer_bytes[x]) if x >= 0 else (Category.COMPUTE, 0, 0)
        return Task(tid, kind, self.device[tid], self.exe[tid], self.names[tid] if self.detail else f"task {tid}",
                    node=node, piece=piece, category=category, elements=elements, num_bytes=num_bytes,
                    transfer=x, link_type=link_type, regions=regions, owner=self.owner[tid], action=action)

    @property
    def tasks(self) -> _TaskView:
        return _TaskView(self)

    def __len__(self) -> int:
        return self.live

    # -- the engine ---------------------------------------------------------------------------------
    def _edge_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        keys = np.fromiter(self.edges.keys(), dtype=np.int64, count=len(self.edges))
        src, dst = keys >> 32, keys & 0xFFFFFFFF
        alive = np.frombuffer(bytes(self.alive), dtype=np.uint8).astype(bool)
        ok = alive[src] & alive[dst]
        order = np.lexsort((dst[ok], src[ok]))
        return src[ok][order], dst[ok][order]

    def engine(self, engine_cls):
        """A new engine holding this graph (every task must be alive: a fresh lowering)."""
        if self.live != len(self.alive):
            raise ValueError("engine(): the graph has removed tasks; build it afresh")
        src, dst = self._edge_arrays()
        eng = engine_cls.from_arrays(self.num_devices, np.frombuffer(self.device, dtype=np.int64),
                                     np.frombuffer(self.exe, dtype=np.float64), src, dst,
                                     np.frombuffer(self.priority, dtype=np.int64))
        self._synced, self._dead, self._touched = len(self.kind), [], set()
        self._tracking = True
        return eng

    def sync(self, eng) -> None:
        """Apply the changes since the engine was last in step: removed tasks, new tasks, and edges
        that appeared or went."""
        for t in self._dead:
            eng.remove_task(t)
        for t in range(self._synced, len(self.kind)):
            got = eng.add_task(self.device[t], self.exe[t], self.priority[t])
            if got != t:
                raise RuntimeError(f"engine and task graph disagree on task ids ({got} vs {t})")
            if not self.alive[t]:
                eng.remove_task(t)
        alive = self.alive
        for key in self._touched:
            a, b = key >> 32, key & 0xFFFFFFFF
            if not (alive[a] and alive[b]):
                continue
            if key in self.edges:
                eng.add_edge(a, b)
            elif eng.has_edge(a, b):
                eng.remove_edge(a, b)
        self._synced, self._dead, self._touched = len(self.kind), [], set()

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
        ids = np.array(self.ids(), dtype=np.int64)
        index = np.full(len(self.alive), -1, dtype=np.int64)
        index[ids] = np.arange(len(ids))
        src, dst = self._edge_arrays()  # sorted by (src, dst); the renumbering keeps that order
        indptr = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(index[src], minlength=len(ids)), out=indptr[1:])
        return {"ids": ids, "device": np.frombuffer(self.device, dtype=np.int64)[ids].copy(),
                "exe_s": np.frombuffer(self.exe, dtype=np.float64)[ids].copy(), "indptr": indptr,
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
