"""An execution plan: a lowered task graph made ready to run, once per strategy.

From the ``Lowering`` (tasks, dependencies, actions, parts) and its simulated timeline the plan
derives what the executor needs on every iteration:

- the tasks in the simulated order (each device runs its tasks in the order the simulator predicted;
  the executor still waits for every dependency), with successor lists and predecessor counts;
- its buffers (``flexrt.simulator.memory.Buffers``, which the simulator's memory replay shares):
  every buffer's declaration (device, ranges, dtype, fill) and its parts; aliases (a buffer
  assembled from one part that is exactly another buffer on the same device is that buffer: a
  consumer reading its local producer's piece makes no copy); per task the buffers it reads and
  allocates; per buffer how many tasks read it, so that the executor frees it after its last use;
  weight instances and the host batch persist;
- the forward phase: the tasks that need no label, loss or gradient (every task but the loss,
  backward and update tasks and what follows them), closed under predecessors, so that a forward
  pass can run alone and the rest of the iteration after it (``forward_phase``);
- per operator output, the pieces that hold it (replica 0 of each region; partial sums flagged),
  so that its full value can be gathered after a forward pass (``output_pieces``).

A fused forward task whose members form one element-wise chain, with intermediates no other task
reads, may run as one expression (``chains``). How fused tasks, bucket rings and backward tasks
read and write buffers: see ``flexrt.simulator.memory``.

Entry point: ``ExecPlan``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

import numpy as np

from flexrt.errors import StrategyError
from flexrt.kernels.fused import CHAIN_OPS, ChainStep, ElementwiseChain
from flexrt.simulator.actions import Backward, Forward, Fused, Loss, RingStep, Update
from flexrt.simulator.memory import Buffers
from flexrt.simulator.simulate import Schedule
from flexrt.simulator.task_graph import Access, TaskGraph, TaskKind


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


class ExecPlan:
    """What the executors run: built from a lowered ``TaskGraph`` (with detail: actions and parts)
    and the simulator's ``Schedule`` (the predicted order), nothing else. Its buffers (declarations,
    parts, aliases, reads and writes, readers, persistent ones) are ``buffers``
    (``flexrt.simulator.memory.Buffers``), which the simulator's memory replay reads too."""

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

        self.buffers = b = Buffers(graph, tasks, self.predicted_end)
        self.parts, self.decl, self.alias, self.inputs = b.parts, b.decl, b.alias, b.inputs
        self.ring_groups, self.readers, self.persistent = b.ring_groups, b.readers, b.persistent
        self.weight_instances = b.weight_instances
        self.canonical = b.canonical          # (key, device) -> the buffer it is (an alias's source)
        self.buffer_bytes = b.buffer_bytes
        self.tasks = [PlannedTask(i, t.id, t.kind, t.device, t.name, t.action, b.reads[i], b.writes[i], t.transfer)
                      for i, t in enumerate(tasks)]
        planned = self.tasks
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

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)


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
