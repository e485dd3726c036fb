"""An execution plan: a lowered task graph made ready to run, once per strategy.

From the ``Lowering`` (tasks, dependencies, actions, parts) and its simulated timeline the plan
derives what the executor needs on every iteration:

- the tasks in the simulated order (each device runs its tasks in the order the simulator predicted;
  the executor still waits for every dependency), with successor lists and predecessor counts;
- every buffer's declaration (device, ranges, dtype, fill) and its parts;
- aliases: a buffer assembled from one part that is exactly another buffer on the same device is
  that buffer (a consumer reading its local producer's piece makes no copy);
- per buffer, how many tasks read it, so that the executor frees it after its last use; weight
  instances and the host batch persist;
- the forward phase: the tasks that need no label, loss or gradient (every task but the loss,
  backward and update tasks and what follows them), closed under predecessors, so that a forward
  pass can run alone and the rest of the iteration after it (``forward_phase``);
- per operator output, the pieces that hold it (replica 0 of each region; partial sums flagged),
  so that its full value can be gathered after a forward pass (``output_pieces``).

Entry point: ``ExecPlan``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from flexrt.errors import StrategyError
from flexrt.simulator.actions import (HOST, Backward, Buf, BufKind, Forward, Key, Loss, Move, RingStep, Sum, Update,
                                      gathered)
from flexrt.simulator.simulate import Schedule
from flexrt.simulator.task_graph import Access, TaskGraph, TaskKind

BufId = tuple  # (key, device)


@dataclass(frozen=True, slots=True)
class PlannedTask:
    index: int
    id: int                 # the task's id in the lowering's graph
    kind: TaskKind
    device: int             # engine device (compute device, or num_devices + link)
    name: str
    action: object
    reads: tuple            # canonical buffer ids this task is the reader of (freed after their last reader)
    writes: tuple           # canonical buffer ids this task allocates
    transfer: int = -1      # the transfer its hop belongs to (-1: not a transfer)


def _box_bytes(buf: Buf) -> int:
    return math.prod(hi - lo for lo, hi in buf.ranges) * np.dtype(buf.dtype).itemsize


class ExecPlan:
    """What the executors run: built from a lowered ``TaskGraph`` (with detail: actions and parts)
    and the simulator's ``Schedule`` (the predicted order), nothing else."""

    def __init__(self, graph: TaskGraph, schedule: Schedule) -> None:
        if not graph.detail:
            raise StrategyError("the runtime needs a task graph lowered with detail (actions and parts)")
        self.task_ids = list(schedule.task_ids)
        self.predicted_start = np.asarray(schedule.start)
        self.predicted_end = np.asarray(schedule.end)
        index = {t: i for i, t in enumerate(self.task_ids)}
        tasks = [graph.task(t) for t in self.task_ids]
        succ = graph.successors()
        self.succ = [sorted(index[s] for s in succ[t]) for t in self.task_ids]
        self.num_preds = np.zeros(len(self.task_ids), dtype=np.int64)
        for ss in self.succ:
            self.num_preds[ss] += 1
        self.num_compute_devices = graph.num_compute_devices
        self.num_devices = graph.num_devices
        self.weight_shapes = graph.weight_shapes
        self.loss_node = graph.loss_node

        # parts of every assembled buffer
        self.parts: dict[BufId, list] = defaultdict(list)
        for entries in graph.parts.values():
            for key, dev, part in entries:
                self.parts[(key, dev)].append(part)

        # declarations: what each task assembles and writes
        self.decl: dict[BufId, Buf] = {}
        assembled: dict[BufId, int] = {}     # buffer -> assembling task
        written: dict[BufId, int] = {}
        self.ring_groups: dict[int, object] = {}
        for i, t in enumerate(tasks):
            a = t.action
            for b in gathered(a):
                self._declare(b)
                assembled[(b.key, b.device)] = i
            if isinstance(a, RingStep):
                self.ring_groups[a.group.id] = a.group
                for b in a.group.buffers:
                    self._declare(b)
                    assembled.setdefault((b.key, b.device), i)
            for b in self._written(a):
                self._declare(b)
                written[(b.key, b.device)] = i
            if isinstance(a, Update):
                self._declare(a.weight)
                if not a.gather_grad:
                    self._declare(a.grad)
        for name, shape in graph.inputs.items():
            self.decl[(Key.input(name), HOST)] = Buf(Key.input(name), HOST, tuple((0, n) for n in shape.dims),
                                                     shape.dtype.numpy_name)
        self.inputs = {k[0].name: b for k, b in self.decl.items() if k[0].kind is BufKind.INPUT}
        missing = [bid for bid, ps in self.parts.items() for p in ps if (p.src, p.device) not in self.decl]
        if missing:
            raise StrategyError(f"plan: parts of {missing[0][0]} read buffers no task writes")

        # aliases: one exact part on the same device, never for buffers summed in place (ring members)
        # unless their source has no other reader
        uses: dict[BufId, int] = defaultdict(int)
        for ps in self.parts.values():
            for p in ps:
                uses[(p.src, p.device)] += 1
        self.alias: dict[BufId, BufId] = {}
        for bid in assembled:
            ps = self.parts.get(bid, [])
            b = self.decl[bid]
            if len(ps) != 1:
                continue
            p = ps[0]
            src = self.decl[(p.src, p.device)]
            if p.device != b.device or p.device == HOST or src.ranges != b.ranges or p.box != b.ranges \
                    or src.dtype != b.dtype:
                continue
            if bid[0].kind is BufKind.RING and uses[(p.src, p.device)] != 1:
                continue
            self.alias[bid] = (p.src, p.device)

        # readers and writers, by canonical buffer
        planned = []
        self.readers: dict[BufId, int] = defaultdict(int)
        for i, t in enumerate(tasks):
            reads = set()
            for b in self._assembled_by(t.action):
                for p in self.parts.get((b.key, b.device), []):
                    reads.add(self.canonical((p.src, p.device)))
            for b in self._read(t.action):
                reads.add(self.canonical((b.key, b.device)))
            writes = set()
            for b in self._assembled_by(t.action):
                bid = (b.key, b.device)
                if bid not in self.alias:
                    writes.add(bid)
            for b in self._written(t.action):
                writes.add((b.key, b.device))
            reads = tuple(sorted(reads, key=repr))
            for r in reads:
                self.readers[r] += 1
            planned.append(PlannedTask(i, t.id, t.kind, t.device, t.name, t.action, reads,
                                       tuple(sorted(writes, key=repr)), t.transfer))
        self.tasks = planned
        self.persistent = {bid for bid in self.decl if bid[0].kind is BufKind.WEIGHT or bid[1] == HOST}
        self.weight_instances = sorted({(a.weight.key, a.weight.device): a.weight for t in planned
                                        if isinstance((a := t.action), Update)}.values(), key=lambda b: repr(b.key))
        self.forward_phase = forward_phase(planned, self.succ)
        self.output_pieces = output_pieces(tasks)
        self.forward_outputs = frozenset((b.key, b.device) for pieces in self.output_pieces.values()
                                         for b, _ in pieces)

    # ---- helpers ---------------------------------------------------------------------------
    def _declare(self, b: Buf) -> None:
        bid = (b.key, b.device)
        old = self.decl.get(bid)
        if old is not None and (old.ranges != b.ranges or old.dtype != b.dtype):
            raise StrategyError(f"plan: buffer {b.key} on device {b.device} declared twice differently: "
                                f"{old.ranges} {old.dtype} and {b.ranges} {b.dtype}")
        self.decl[bid] = b

    @staticmethod
    def _written(a) -> tuple:
        if isinstance(a, Forward):
            return a.outputs
        if isinstance(a, Backward):
            return tuple(b for b in a.grad_operands if b is not None)
        if isinstance(a, Move):
            return (a.dst,)
        if isinstance(a, Loss):
            return (a.grad,)
        return ()

    @staticmethod
    def _assembled_by(a) -> tuple:
        if isinstance(a, RingStep):
            return a.group.buffers if a.member == 0 else ()
        return gathered(a)

    def _read(self, a) -> tuple:
        if isinstance(a, Forward):
            return a.operands
        if isinstance(a, Backward):
            return a.operands + a.outputs + a.grad_outputs
        if isinstance(a, Move):
            return (self.decl[(a.src, a.src_device)],)
        if isinstance(a, Sum):
            return ()
        if isinstance(a, Update):
            return (a.grad,)
        if isinstance(a, Loss):
            return (a.output,)
        if isinstance(a, RingStep) and a.member == 0:
            return a.group.buffers
        return ()

    def canonical(self, bid: BufId) -> BufId:
        while bid in self.alias:
            bid = self.alias[bid]
        return bid

    def buffer_bytes(self, bid: BufId) -> int:
        return _box_bytes(self.decl[bid])

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)


@dataclass(frozen=True, slots=True)
class OutputPieces:
    """The pieces that hold one output of one operator: their buffers and whether they are partial
    sums to add (else disjoint boxes to copy); ``dims`` is the whole tensor's shape."""

    pieces: tuple           # (Buf, add) per piece, in piece order
    dims: tuple

    def __iter__(self):
        return iter(self.pieces)


def output_pieces(tasks) -> dict[tuple[str, int], OutputPieces]:
    """(operator, output index) -> the pieces of every replica 0 that hold it, from the forward tasks'
    actions and write regions (a replica holds the same values; a region with a partial-sum index
    is one addend of the value)."""
    found: dict = defaultdict(list)
    for t in tasks:
        a = t.action
        if not isinstance(a, Forward):
            continue
        writes = [r.region for r in t.regions if r.access is Access.WRITE]
        for k, b in enumerate(a.outputs):
            region = writes[k] if k < len(writes) else None
            copy, summed = (region.copy_index, region.sum_index) if region is not None else (0, 0)
            found[(a.node, k)].append((b.key.piece, copy, summed, b))
    out = {}
    for key, entries in found.items():
        entries.sort(key=lambda e: e[0])
        add = any(s > 0 for _, _, s, _ in entries)
        pieces = tuple((b, add) for _, copy, _, b in entries if copy == 0)
        dims = tuple(max(b.ranges[d][1] for _, _, _, b in entries) for d in range(len(entries[0][3].ranges)))
        out[key] = OutputPieces(pieces, dims)
    return out


def forward_phase(tasks, succ) -> list[bool]:
    """Per task: whether it belongs to the forward pass, i.e. it is no loss, backward or update task
    and every task it depends on belongs too. A ring collective whose members would straddle the
    two phases goes wholly to the second (with what follows it)."""
    n = len(tasks)
    preds: list[list[int]] = [[] for _ in range(n)]
    for p, ss in enumerate(succ):
        for s in ss:
            preds[s].append(p)
    order, ready = [], [i for i in range(n) if not preds[i]]
    left = [len(ps) for ps in preds]
    while ready:
        i = ready.pop()
        order.append(i)
        for s in succ[i]:
            left[s] -= 1
            if left[s] == 0:
                ready.append(s)
    excluded = {i for i, t in enumerate(tasks) if isinstance(t.action, (Loss, Backward, Update))}
    groups: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(tasks):
        if isinstance(t.action, RingStep):
            groups[t.action.group.id].append(i)
    while True:
        fwd = [False] * n
        for i in order:
            fwd[i] = i not in excluded and all(fwd[p] for p in preds[i])
        mixed = [ms for ms in groups.values() if len({fwd[m] for m in ms}) > 1]
        if not mixed:
            return fwd
        excluded.update(m for ms in mixed for m in ms)
