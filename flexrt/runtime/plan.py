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

A fused task (``Fused``: a fusion group's members on one piece) reads what its members' parts read
except the task's private buffers (a recomputed member's operands and outputs, which live inside
the task only), and writes what its non-recomputed members write; a buffer it assembles from a
private source is never an alias (its value exists only inside the task). A gradient bucket's ring
(``RingGroup.segments`` > 1) has several buffers per member, assembled into one flat buffer by the
executor, so they are never aliases either. A backward reads only the operands and outputs its
kernel reads (``flexrt.kernels.fused.backward_reads``), so that an intermediate no backward reads
can stay inside a fused forward task.

Entry point: ``ExecPlan``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from flexrt.errors import StrategyError
from typing import Optional

from flexrt.kernels.fused import CHAIN_OPS, ChainStep, ElementwiseChain, backward_reads
from flexrt.simulator.actions import (HOST, Backward, Buf, BufKind, Forward, Fused, Key, Loss, Move, RingStep, Sum,
                                      Update, gathered)
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


@dataclass(frozen=True, slots=True)
class FusedChain:
    """A fused forward task that runs as one element-wise expression: ``chain``'s inputs are the
    operand buffers ``inputs`` ((member index, operand index) each), its result the last member's
    output; ``internal`` are the intermediates (buffer ids) that no other task reads and that the
    expression never writes."""

    chain: ElementwiseChain
    inputs: tuple
    internal: frozenset


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

        self.alias = self._aliases(assembled, tasks)

        # readers and writers, by canonical buffer
        self.tasks = self._plan_tasks(tasks)
        planned = self.tasks
        self.persistent = {bid for bid in self.decl if bid[0].kind is BufKind.WEIGHT or bid[1] == HOST}
        self.weight_instances = sorted({(a.weight.key, a.weight.device): a.weight for t in planned
                                        if isinstance((a := t.action), Update)}.values(), key=lambda b: repr(b.key))
        self.chains: dict[int, FusedChain] = {}
        for t in planned:
            chain = self._chain(t)
            if chain is not None:
                self.chains[t.index] = chain
        self.forward_phase = forward_phase(planned, self.succ)
        self.output_pieces = output_pieces(tasks, _member_regions(graph, tasks))
        self.forward_outputs = frozenset((b.key, b.device) for pieces in self.output_pieces.values()
                                         for b, _ in pieces)

    # ---- helpers ---------------------------------------------------------------------------
    def _aliases(self, assembled: dict, tasks) -> dict:
        """One exact part on the same device makes a buffer its source; never for buffers summed in
        place (ring members) unless their source has no other reader, for a bucket's segments (they
        live in one flat buffer), nor for a buffer a fused task assembles from its private buffers."""
        uses: dict[BufId, int] = defaultdict(int)
        for ps in self.parts.values():
            for p in ps:
                uses[(p.src, p.device)] += 1
        never = set()
        for t in tasks:
            a = t.action
            if isinstance(a, RingStep) and a.group.segments > 1:
                never.update((b.key, b.device) for b in a.group.buffers)
            elif isinstance(a, Fused) and any(r for r in a.recomputed):
                private = a.private
                never.update((b.key, b.device) for b in gathered(a)
                             if any((p.src, p.device) in private for p in self.parts.get((b.key, b.device), ())))
        alias: dict[BufId, BufId] = {}
        for bid in assembled:
            ps = self.parts.get(bid, [])
            b = self.decl[bid]
            if len(ps) != 1 or bid in never:
                continue
            p = ps[0]
            src = self.decl[(p.src, p.device)]
            if p.device != b.device or p.device == HOST or src.ranges != b.ranges or p.box != b.ranges \
                    or src.dtype != b.dtype:
                continue
            if bid[0].kind is BufKind.RING and uses[(p.src, p.device)] != 1:
                continue
            alias[bid] = (p.src, p.device)
        return alias

    def _plan_tasks(self, tasks) -> list:
        """Per task its reads and writes by canonical buffer, and every buffer's reader count."""
        planned = []
        self.readers: dict[BufId, int] = defaultdict(int)
        for i, t in enumerate(tasks):
            reads = set()
            for src in self._part_sources(t.action):
                reads.add(self.canonical(src))
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
        return planned

    def _chain(self, t: PlannedTask) -> Optional[FusedChain]:
        """``t`` as one element-wise expression, or None: every member of a forward fused task is a
        chainable element-wise operator (``CHAIN_OPS``) with one output, no zeroed operand, and
        operands and output of one box and floating dtype; a member's operand from another member
        is that member's output exactly; one member, the last and not recomputed, is the result;
        and no task but ``t`` reads an intermediate (a recomputed member's are the task's own)."""
        a = t.action
        if not isinstance(a, Fused) or not isinstance(a.members[0], Forward):
            return None
        first = a.members[0].outputs[0]
        if np.dtype(first.dtype).kind != "f":
            return None
        step_of: dict = {}
        steps, inputs, internal = [], [], set()
        for k, (m, r) in enumerate(zip(a.members, a.recomputed)):
            if m.attrs.op_type not in CHAIN_OPS or m.zeroed or len(m.outputs) != 1 or \
                    any(b.ranges != first.ranges or b.dtype != first.dtype for b in m.operands + m.outputs):
                return None
            args = []
            for j, b in enumerate(m.operands):
                ps = self.parts.get((b.key, b.device), ())
                inner = [p for p in ps if (p.src, p.device) in step_of]
                if not inner:
                    args.append(("in", len(inputs)))
                    inputs.append((k, j))
                    continue
                p = ps[0]
                if len(ps) != 1 or p.box != b.ranges or (p.add and b.fill != 0.0):
                    return None
                args.append(("step", step_of[(p.src, p.device)]))
                if not r:
                    internal.add((b.key, b.device))
            step_of[(m.outputs[0].key, m.outputs[0].device)] = k
            steps.append(ChainStep(m.attrs, tuple(args)))
            if not r and k < len(a.members) - 1:
                internal.add((m.outputs[0].key, m.outputs[0].device))
        used = {j for s in steps for kind, j in s.args if kind == "step"}
        if used != set(range(len(steps) - 1)) or a.recomputed[-1]:
            return None
        canon = {self.canonical(bid) for bid in internal}
        if any(self.readers.get(c, 0) != (1 if c in t.reads else 0) for c in canon):
            return None
        chain = ElementwiseChain(tuple(steps))
        return FusedChain(chain, tuple(inputs), frozenset(internal | canon)) if chain.fits() else None

    def _part_sources(self, a) -> list:
        """The sources of the parts of every buffer ``a`` assembles; for a fused task those of every
        member (recomputed ones included: the task assembles their operands itself) but its private
        buffers."""
        if isinstance(a, Fused):
            private = a.private
            bufs = [b for m in a.members for b in gathered(m)]
            return [(p.src, p.device) for b in bufs for p in self.parts.get((b.key, b.device), ())
                    if (p.src, p.device) not in private]
        return [(p.src, p.device) for b in self._assembled_by(a) for p in self.parts.get((b.key, b.device), ())]

    def _declare(self, b: Buf) -> None:
        bid = (b.key, b.device)
        old = self.decl.get(bid)
        if old is not None and (old.ranges != b.ranges or old.dtype != b.dtype):
            raise StrategyError(f"plan: buffer {b.key} on device {b.device} declared twice differently: "
                                f"{old.ranges} {old.dtype} and {b.ranges} {b.dtype}")
        self.decl[bid] = b

    @staticmethod
    def _written(a) -> tuple:
        if isinstance(a, Fused):
            return tuple(b for m in a.shared for b in ExecPlan._written(m))
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
            return backward_buffers(a) + a.grad_outputs
        if isinstance(a, Fused):
            return tuple(b for m in a.shared for b in self._read(m))
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


def backward_buffers(a: Backward) -> tuple:
    """The operands and outputs of ``a`` whose values its backward kernel reads (the others are
    passed as stand-ins of their shape and dtype)."""
    ops, outs = backward_reads(a.attrs.op_type, len(a.operands), len(a.outputs))
    return tuple(a.operands[i] for i in ops) + tuple(a.outputs[k] for k in outs)


def _member_regions(graph, tasks) -> dict:
    """(operator, piece) -> the write regions of its forward task in the graph a fused graph
    contracted (``graph.base``), for the forward members of fused tasks; empty without any."""
    wanted = {(m.node, m.outputs[0].key.piece) for t in tasks if isinstance(t.action, Fused)
              for m in t.action.shared if isinstance(m, Forward) and m.outputs}
    base = getattr(graph, "base", None)
    if not wanted or base is None:
        return {}
    out = {}
    for node, piece, regions, action in base.info.values():
        if isinstance(action, Forward) and action.outputs and (node, action.outputs[0].key.piece) in wanted:
            out[(node, action.outputs[0].key.piece)] = regions
    return out


@dataclass(frozen=True, slots=True)
class OutputPieces:
    """The pieces that hold one output of one operator: their buffers and whether they are partial
    sums to add (else disjoint boxes to copy); ``dims`` is the whole tensor's shape."""

    pieces: tuple           # (Buf, add) per piece, in piece order
    dims: tuple

    def __iter__(self):
        return iter(self.pieces)


def output_pieces(tasks, member_regions=None) -> dict[tuple[str, int], OutputPieces]:
    """(operator, output index) -> the pieces of every replica 0 that hold it, from the forward tasks'
    actions and write regions (a replica holds the same values; a region with a partial-sum index
    is one addend of the value). The forward members of fused tasks count too, with their regions
    from ``member_regions`` ((operator, piece) -> regions); recomputed members do not (their own
    task holds their output)."""
    found: dict = defaultdict(list)
    for t in tasks:
        a = t.action
        if isinstance(a, Forward):
            members = [(a, t.regions)]
        elif isinstance(a, Fused):
            members = [(m, (member_regions or {}).get((m.node, m.outputs[0].key.piece), ()))
                       for m in a.shared if isinstance(m, Forward) and m.outputs]
        else:
            continue
        for m, regions in members:
            writes = [r.region for r in regions if r.access is Access.WRITE]
            for k, b in enumerate(m.outputs):
                region = writes[k] if k < len(writes) else None
                copy, summed = (region.copy_index, region.sum_index) if region is not None else (0, 0)
                found[(m.node, k)].append((b.key.piece, copy, summed, b))
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
    excluded = {i for i, t in enumerate(tasks) if isinstance(t.action, (Loss, Backward, Update))
                or (isinstance(t.action, Fused) and isinstance(t.action.members[0], Backward))}
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
