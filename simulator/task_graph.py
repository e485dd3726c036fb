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
from dataclasses import dataclass
from typing import Iterable

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


class TaskGraph:
    """Tasks by id plus the engine that holds their dependencies and timeline."""

    def __init__(self, num_compute_devices: int, num_links: int) -> None:
        self.num_compute_devices = num_compute_devices
        self.num_links = num_links
        self.tasks: dict[int, Task] = {}
        self.succ: dict[int, set[int]] = {}
        self.pred: dict[int, set[int]] = {}

    @property
    def num_devices(self) -> int:
        return self.num_compute_devices + self.num_links

    def is_link(self, device: int) -> bool:
        return device >= self.num_compute_devices

    def add(self, task: Task) -> None:
        self.tasks[task.id] = task
        self.succ[task.id] = set()
        self.pred[task.id] = set()

    def add_edge(self, a: int, b: int) -> bool:
        """Record a -> b; False when it was already there."""
        if b in self.succ[a]:
            return False
        self.succ[a].add(b)
        self.pred[b].add(a)
        return True

    def remove_edge(self, a: int, b: int) -> None:
        self.succ[a].discard(b)
        self.pred[b].discard(a)

    def remove(self, ids: Iterable[int]) -> None:
        for i in ids:
            for s in self.succ.pop(i):
                self.pred[s].discard(i)
            for p in self.pred.pop(i):
                self.succ[p].discard(i)
            del self.tasks[i]

    def __len__(self) -> int:
        return len(self.tasks)

    def csr(self) -> dict[str, np.ndarray]:
        """Compact arrays: task ids, devices, times, and successors in CSR form (ids sorted)."""
        ids = np.array(sorted(self.tasks), dtype=np.int64)
        index = {int(t): i for i, t in enumerate(ids)}
        succ = [sorted(index[s] for s in self.succ[int(t)]) for t in ids]
        indptr = np.zeros(len(ids) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(s) for s in succ])
        return {"ids": ids, "device": np.array([self.tasks[int(t)].device for t in ids], dtype=np.int64),
                "exe_s": np.array([self.tasks[int(t)].exe_s for t in ids]), "indptr": indptr,
                "indices": np.array([w for s in succ for w in s], dtype=np.int64)}

    def to_dot(self, limit: int = 5000) -> str:
        """Graphviz of the task graph (FlexFlow's --taskgraph); at most ``limit`` tasks."""
        lines = ["digraph taskgraph {", "  node [fontname=Helvetica fontsize=9];"]
        shown = sorted(self.tasks)[:limit]
        keep = set(shown)
        for t in shown:
            task = self.tasks[t]
            shape = "hexagon" if task.kind is TaskKind.TRANSFER else "box"
            lines.append(f'  t{t} [label="{task.name}\\n{task.exe_s * 1e6:.1f} us" shape={shape}];')
        for t in shown:
            for s in sorted(self.succ[t]):
                if s in keep:
                    lines.append(f"  t{t} -> t{s};")
        lines.append("}")
        return "\n".join(lines) + "\n"
