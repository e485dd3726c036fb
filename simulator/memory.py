"""The buffers of a lowered iteration, when each is live, and the device memory they take over time.

The runtime (``flexrt.runtime``) executes a task graph lowered with detail on device buffers. This
module derives, once for the runtime and the simulator alike, which buffers that takes and when
each one lives:

- ``Buffers``: from the tasks' actions (``flexrt.simulator.actions``) and the parts that assemble
  them, every buffer's declaration (device, ranges, dtype, fill) and parts; aliases (a buffer
  assembled from one part that is exactly another buffer on the same device is that buffer: a
  consumer reading its local producer's piece makes no copy); per task the canonical buffers it
  reads and the ones it allocates; per buffer how many tasks read it; the persistent buffers (weight
  instances and the host batch); the ring collectives and their member tasks. The runtime's plan
  (``flexrt.runtime.plan.ExecPlan``) is built on it.
- The life of a buffer, which the executor follows as it runs and ``replay`` along a timeline: a
  task allocates what it writes when it runs (a ring collective's buffers once its last member is
  ready; a gradient bucket's segments as one flat buffer per member, freed with its last segment);
  a buffer is freed when the last task reading it completes, or when its writer does if no task
  reads it (``released``); weight instances (and the optimizer's state) persist.
- Sums taken as their contributions come (``Buffers.accumulated``, ``Accumulation``): a gradient
  with several contributions (a weight read by the steps of an unrolled RNN, a tensor read by
  several operators, gradients arriving from other devices) is allocated by its first contribution,
  and each is added and freed when its producer ends, in the order of the producers' predicted
  ends (one produced early waits), as FlexFlow's kernels accumulate into one gradient buffer;
  the contributions are not all held until the sum is read.
- ``ReadyQueue``: the serial executor's dispatch (of the ready tasks, the first in the predicted
  order runs next); ``serial_times`` is the run it makes, step by step, as a timeline.
- ``replay``: live bytes per device over a timeline (per task its start and end), their peak and
  their course (``MemoryTimeline``). ``memory_timeline(graph, start, end)`` and
  ``peak_memory(graph, start, end)`` replay a simulated timeline; the simulator reports the latter
  as ``SimResult.peak_bytes``.

A fused task (``Fused``: a fusion group's members on one piece) reads what its members' parts read
except the task's private buffers (a recomputed member's operands and outputs, which live inside
the task only), and writes what its non-recomputed members write; a buffer it assembles from a
private source is never an alias (its value exists only inside the task). A gradient bucket's ring
(``RingGroup.segments`` > 1) has several buffers per member, assembled into one flat buffer by the
executor, so they are never aliases either. A backward reads only the operands and outputs its
kernel reads (``flexrt.kernels.fused.backward_reads``), so that an intermediate no backward reads
can stay inside a fused forward task.

Example (Unity's Fig. 2 MLP, data parallel on two GPUs):
    >>> sim = Simulator(load_machine("dgx1_v100"), AnalyticCostModel())           # doctest: +SKIP
    >>> r = sim.full(data_parallel(pcg, sim.machine, 2))                         # doctest: +SKIP
    >>> ids = r.timeline["ids"].tolist()                                          # doctest: +SKIP
    >>> peak_memory(sim.graph, dict(zip(ids, r.timeline["start"])), dict(zip(ids, r.timeline["end"])))  # doctest: +SKIP
    {0: 3483648, 1: 3483648}

Entry points: ``Buffers``, ``released``, ``Accumulation``, ``ReadyQueue``, ``serial_times``, ``replay``,
``MemoryTimeline``, ``memory_timeline``, ``peak_memory``, ``combined_peak``.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from flexrt.errors import StrategyError
from flexrt.kernels.fused import backward_reads
from flexrt.ir.precision import is_bfloat16
from flexrt.kernels.optimizers import state_bytes_of
from flexrt.simulator.actions import (HOST, Backward, Buf, BufKind, Forward, Fused, Key, Loss, Move, RingStep,
                                      Update, gathered)

BufId = tuple  # (key, device)
_NO_LOCK = contextlib.nullcontext()


def box_bytes(buf: Buf) -> int:
    """Bytes of a buffer: its box's elements times its dtype's size."""
    return math.prod(hi - lo for lo, hi in buf.ranges) * np.dtype(buf.dtype).itemsize


def backward_buffers(a: Backward) -> tuple:
    """The operands and outputs of ``a`` whose values its backward kernel reads (the others are
    passed as stand-ins of their shape and dtype)."""
    ops, outs = backward_reads(a.attrs.op_type, len(a.operands), len(a.outputs))
    return tuple(a.operands[i] for i in ops) + tuple(a.outputs[k] for k in outs)


class Buffers:
    """Every buffer of a task graph lowered with detail (a ``TaskGraph`` or ``FusedGraph``), for
    ``tasks`` (its ``Task`` values, in the order whose indices ``reads``, ``writes`` and
    ``ring_members`` use). See the module doc."""

    def __init__(self, graph, tasks: list, end=None) -> None:
        if not graph.detail:
            raise StrategyError("buffers need a task graph lowered with detail (actions and parts)")
        self.parts: dict[BufId, list] = defaultdict(list)   # buffer -> the parts assembling it
        for entries in graph.parts.values():
            for key, dev, part in entries:
                self.parts[(key, dev)].append(part)
        self.decl: dict[BufId, Buf] = {}
        assembled: dict[BufId, int] = {}     # buffer -> assembling task
        self.ring_groups: dict[int, object] = {}
        self.ring_members: dict[int, list[int]] = defaultdict(list)  # ring group -> its member tasks
        self.tasks_member: dict[int, int] = {}                       # member task -> its index in the group
        self.moves: dict[int, tuple] = {}      # transfer task -> (source device, destination device)
        self.devices = [t.device for t in tasks]                    # per task its (engine) device
        self.num_compute_devices = graph.num_compute_devices
        for i, t in enumerate(tasks):
            a = t.action
            for b in gathered(a):
                self._declare(b)
                assembled[(b.key, b.device)] = i
            if isinstance(a, RingStep):
                self.ring_groups[a.group.id] = a.group
                self.ring_members[a.group.id].append(i)
                self.tasks_member[i] = a.member
                for b in a.group.buffers:
                    self._declare(b)
                    assembled.setdefault((b.key, b.device), i)
            for b in _written(a):
                self._declare(b)
            if isinstance(a, Move):
                self.moves[i] = (a.src_device, a.dst.device)
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
        never = self._never_aliased(tasks)
        part_uses: dict[BufId, int] = defaultdict(int)    # source buffer -> the parts reading it
        for ps in self.parts.values():
            for p in ps:
                part_uses[(p.src, p.device)] += 1
        readers = defaultdict(int, part_uses)               # ... and the tasks reading it directly
        for t in tasks:
            for b in self._read(t.action):
                readers[(b.key, b.device)] += 1
        self.alias = self._aliases(assembled, never, readers)
        self.persistent = {bid for bid in self.decl if bid[0].kind is BufKind.WEIGHT or bid[1] == HOST}
        self._accumulations(tasks, assembled, never, part_uses, end)
        self._reads_and_writes(tasks)
        self.weight_instances = sorted({(a.weight.key, a.weight.device): a.weight for t in tasks
                                        if isinstance((a := t.action), Update)}.values(), key=lambda b: repr(b.key))
        self.updates = {(a.weight.key, a.weight.device): i for i, t in enumerate(tasks)
                        if isinstance((a := t.action), Update)}  # weight instance -> its update task
        # bfloat16 weights, held as float32 (``flexrt.kernels.bfloat16``), train through float32 masters
        shapes = graph.weight_shapes or {}
        self.bfloat16_weights = frozenset(b.key.name for b in self.weight_instances
                                          if (s := shapes.get(b.key.name)) is not None and is_bfloat16(s.dtype))

    def _never_aliased(self, tasks) -> set:
        """The buffers that are never another's alias nor summed as their contributions come: a
        bucket's segments (they live in one flat buffer) and a buffer a fused task assembles from its
        private buffers."""
        never = set()
        for t in tasks:
            a = t.action
            if isinstance(a, RingStep) and a.group.segments > 1:
                never.update((b.key, b.device) for b in a.group.buffers)
            elif isinstance(a, Fused) and any(r for r in a.recomputed):
                private = a.private
                never.update((b.key, b.device) for b in gathered(a)
                             if any((p.src, p.device) in private for p in self.parts.get((b.key, b.device), ())))
        return never

    def _aliases(self, assembled: dict, never: set, uses: dict) -> dict:
        """One exact part on the same device makes a buffer its source; never for buffers summed in
        place (ring members) unless their source has no other reader (``uses``: parts and tasks
        reading each source: a transfer sending a partial sum elsewhere, a backward reading its
        output, must not see the ring's sum), nor for ``never``."""
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

    def _accumulations(self, tasks, assembled: dict, never: set, part_uses: dict, end) -> None:
        """Gradients summed as their contributions come (``accumulated``), as FlexFlow's backward
        kernels accumulate into one gradient buffer: a buffer (not an alias, nor in ``never``) whose
        parts all add, and at least two of them contributions holding more bytes than the buffer
        (they overlap: a sum, not pieces side by side), is allocated by its first
        contribution, and each contribution is added and freed when its producer ends. A
        contribution is a part nothing else reads: an operand's gradient computed on the buffer's
        device by a task other than its assembler, or a transfer from another device (a gradient
        or a partial sum). They are added in a fixed order, that of their producers' predicted ends
        (``end``: per task; None: the tasks' order), then task ids, so that every dispatch of a
        plan (and every plan of one timeline) makes the same sum; one produced earlier than
        predicted waits for those before it. The other parts are added by the assembling task,
        after them."""
        writer: dict[BufId, int] = {}
        uses = defaultdict(int, part_uses)           # parts and direct reads per buffer
        for i, t in enumerate(tasks):
            for b in _written(t.action):
                writer[(b.key, b.device)] = i
            for b in self._read(t.action):
                uses[(b.key, b.device)] += 1
        aliased = set(self.alias.values())

        def contribution(src, w, i) -> bool:
            if w is None or w == i or uses[src] != 1 or src in aliased:
                return False
            a = tasks[w].action
            if isinstance(a, Move):
                return a.dst.device == src[1]
            return src[0].kind is BufKind.GRAD_OPERAND and tasks[w].device == src[1]

        self.accumulated: dict[BufId, tuple] = {}     # buffer -> its contributions ((source, part), in order)
        self.late_parts: dict[BufId, tuple] = {}      # buffer -> the parts its assembling task adds
        contributes: dict[int, tuple] = defaultdict(tuple)
        for bid, i in assembled.items():
            ps = self.parts.get(bid, ())
            if len(ps) < 2 or bid in self.alias or bid in never or not all(p.add for p in ps):
                continue
            eager = [(float(end[w]) if end is not None else w, tasks[w].id, k, src, p) for k, p in enumerate(ps)
                     if contribution(src := (p.src, p.device), w := writer.get(src), i)]
            if len(eager) < 2 or sum(box_bytes(self.decl[e[3]]) for e in eager) <= box_bytes(self.decl[bid]):
                continue   # (pieces of the buffer side by side: summing them early would hold it whole sooner)
            eager.sort(key=lambda e: e[:3])
            self.accumulated[bid] = tuple((src, p) for *_, src, p in eager)
            taken = {k for _, _, k, _, _ in eager}
            self.late_parts[bid] = tuple(p for k, p in enumerate(ps) if k not in taken)
            for *_, src, _ in eager:
                contributes[writer[src]] += (src,)
        self.contributes = dict(contributes)     # task -> the contributions it writes
        self.contribution_of = {src: bid for bid, cs in self.accumulated.items() for src, _ in cs}
        self.kept = frozenset(self.persistent | set(self.contribution_of))  # never freed by ``released``

    def assembly_parts(self, bid: BufId) -> tuple:
        """The parts the task assembling ``bid`` adds (all of them, but a summed gradient's
        contributions: see ``_accumulations``)."""
        late = self.late_parts.get(bid)
        return late if late is not None else self.parts.get(bid, ())

    def _reads_and_writes(self, tasks) -> None:
        """Per task the canonical buffers it reads and allocates, and every buffer's reader count."""
        self.reads: list[tuple] = []
        self.writes: list[tuple] = []
        self.readers: dict[BufId, int] = defaultdict(int)
        for t in tasks:
            a = t.action
            reads = {self.canonical(src) for src in self._part_sources(a)}
            reads.update(self.canonical((b.key, b.device)) for b in self._read(a))
            writes = {(b.key, b.device) for b in _assembled_by(a)
                      if (b.key, b.device) not in self.alias and (b.key, b.device) not in self.accumulated}
            writes.update((b.key, b.device) for b in _written(a))
            reads = tuple(sorted(reads, key=repr))
            for r in reads:
                self.readers[r] += 1
            self.reads.append(reads)
            self.writes.append(tuple(sorted(writes, key=repr)))

    def _part_sources(self, a) -> list:
        """The sources of the parts of every buffer ``a`` assembles; for a fused task those of every
        member (recomputed ones included: the task assembles their operands itself) but its private
        buffers."""
        if isinstance(a, Fused):
            private = a.private
            bufs = [b for m in a.members for b in gathered(m)]
            return [(p.src, p.device) for b in bufs for p in self.assembly_parts((b.key, b.device))
                    if (p.src, p.device) not in private]
        return [(p.src, p.device) for b in _assembled_by(a) for p in self.assembly_parts((b.key, b.device))]

    def _declare(self, b: Buf) -> None:
        bid = (b.key, b.device)
        old = self.decl.get(bid)
        if old is not None and (old.ranges != b.ranges or old.dtype != b.dtype):
            raise StrategyError(f"plan: buffer {b.key} on device {b.device} declared twice differently: "
                                f"{old.ranges} {old.dtype} and {b.ranges} {b.dtype}")
        self.decl[bid] = b

    def _read(self, a) -> tuple:
        if isinstance(a, Forward):
            return a.operands
        if isinstance(a, Backward):
            return backward_buffers(a) + a.grad_outputs
        if isinstance(a, Fused):
            return tuple(b for m in a.shared for b in self._read(m))
        if isinstance(a, Move):
            return (self.decl[(a.src, a.src_device)],)
        if isinstance(a, Update):
            return (a.grad,)
        if isinstance(a, Loss):
            return (a.output,)
        if isinstance(a, RingStep) and a.member == 0:
            return a.group.buffers
        return ()   # Sum: its parts only

    def canonical(self, bid: BufId) -> BufId:
        """The buffer ``bid`` is (itself, or the source it aliases)."""
        while bid in self.alias:
            bid = self.alias[bid]
        return bid

    def buffer_bytes(self, bid: BufId) -> int:
        return box_bytes(self.decl[bid])


def _written(a) -> tuple:
    """The buffers a task computes (as opposed to assembles from parts)."""
    if isinstance(a, Fused):
        return tuple(b for m in a.shared for b in _written(m))
    if isinstance(a, Forward):
        return a.outputs
    if isinstance(a, Backward):
        return tuple(b for b in a.grad_operands if b is not None)
    if isinstance(a, Move):
        return (a.dst,)
    if isinstance(a, Loss):
        return (a.grad,)
    return ()


def _assembled_by(a) -> tuple:
    """The buffers a task assembles from parts (a ring's member 0 stands for its collective)."""
    if isinstance(a, RingStep):
        return a.group.buffers if a.member == 0 else ()
    return gathered(a)


def released(reads: tuple, writes: tuple, readers: dict, persistent, held=frozenset(), lock=_NO_LOCK) -> list:
    """The buffers a task frees when it completes (the runtime's rule): those it allocates that no
    task reads, and those whose last reader it is (``readers``, counted down here under ``lock``);
    never a persistent or a held one."""
    out = [w for w in writes if readers.get(w, 0) == 0 and w not in persistent and w not in held]
    for r in reads:
        with lock:
            readers[r] -= 1
            last = readers[r] == 0
        if last and r not in persistent and r not in held:
            out.append(r)
    return out


class ReadyQueue:
    """The serial executor's dispatch: of the ready tasks, the one first in the predicted order
    (lowest index) runs next; ``finish`` counts a completed task off its successors' predecessors
    (``remaining``, shared with the caller) and queues those that became ready and are ``eligible``
    (None: all)."""

    __slots__ = ("_heap", "_succ", "_remaining", "_eligible")

    def __init__(self, succ, remaining: list, ready, eligible=None) -> None:
        self._heap = list(ready)
        heapq.heapify(self._heap)
        self._succ, self._remaining, self._eligible = succ, remaining, eligible

    def __bool__(self) -> bool:
        return bool(self._heap)

    def pop(self) -> int:
        return heapq.heappop(self._heap)

    def finish(self, i: int) -> None:
        remaining, eligible = self._remaining, self._eligible
        for s in self._succ[i]:
            remaining[s] -= 1
            if remaining[s] == 0 and (eligible is None or eligible(s)):
                heapq.heappush(self._heap, s)


class Accumulation:
    """One iteration's progress of the gradients summed as their contributions come
    (``Buffers.accumulated``), for the executor and ``replay`` alike: ``produced(src)`` records that
    contribution ``src`` exists and returns what to add now to its sum, or None: the sum's buffer,
    whether it is new (allocate it, filled, first) and the contributions (source, part) to add and
    free, in order. Calls for one sum must not overlap (the executor locks per sum)."""

    __slots__ = ("_buffers", "_next", "_ready")

    def __init__(self, buffers: Buffers) -> None:
        self._buffers = buffers
        self._next: dict[BufId, int] = {}
        self._ready: set = set()

    def produced(self, src: BufId):
        b = self._buffers
        self._ready.add(src)
        bid = b.contribution_of[src]
        order, first = b.accumulated[bid], self._next.get(bid, 0)
        k = first
        while k < len(order) and order[k][0] in self._ready:
            k += 1
        if k == first:
            return None
        self._next[bid] = k
        return bid, first == 0, order[first:k]


def serial_times(succ, num_preds, ring_members: dict) -> tuple[np.ndarray, np.ndarray]:
    """The serial executor's run as a timeline (per task index, in steps): the k-th task dispatched
    starts at step k and ends half a step later; a ring collective runs when its last member is
    dispatched, and all its members start and end then."""
    n = len(succ)
    remaining = [int(x) for x in num_preds]
    queue = ReadyQueue(succ, remaining, [i for i in range(n) if remaining[i] == 0])
    group_of = {m: g for g, ms in ring_members.items() for m in ms}
    arrived: dict[int, int] = defaultdict(int)
    start, end = np.zeros(n), np.zeros(n)
    step = 0
    while queue:
        i = queue.pop()
        members = [i]
        g = group_of.get(i)
        if g is not None:
            arrived[g] += 1
            if arrived[g] < len(ring_members[g]):
                step += 1
                continue
            members = ring_members[g]
        for m in members:
            start[m], end[m] = step, step + 0.5
            queue.finish(m)
        step += 1
    return start, end


@dataclass(frozen=True)
class MemoryTimeline:
    """Live bytes per device over one iteration: ``peak_bytes`` (device -> the most live at once),
    per device the course, ``times[d]`` (seconds, or steps) and ``live_bytes[d]`` after each change
    (the first entries: what is live before the first task), and ``allocated_bytes`` (device -> all
    it ever holds: what is live before the first task and every allocation after, a bound of the
    peak)."""

    peak_bytes: dict
    times: dict
    live_bytes: dict
    allocated_bytes: dict


def combined_peak(timeline: MemoryTimeline, devices) -> int:
    """The most bytes live at once on ``devices`` together along ``timeline`` (at an instant where a
    device changes several times, its most live then counts: a bound no lower than the truth)."""
    events: dict = defaultdict(dict)   # time -> device -> (most live at that instant, live after it)
    live = {}
    for d in devices:
        times, values = timeline.times.get(d, ()), timeline.live_bytes.get(d, ())
        for t, v in zip(times, values):
            most, _ = events[t].get(d, (0, 0))
            events[t][d] = (max(most, v), v)
        live[d] = 0
    best = 0
    for t in sorted(events):
        changes = events[t]
        best = max(best, sum(changes[d][0] if d in changes else live[d] for d in live))
        for d, (_, after) in changes.items():
            live[d] = after
    return int(best)


def ready_times(succ, end) -> np.ndarray:
    """Per task (by index) the time its last predecessor ends (0 for a task without one): when it
    is ready, given each task's ``end`` and its successors ``succ``."""
    ready = np.zeros(len(succ))
    for p, ss in enumerate(succ):
        if len(ss):
            ready[ss] = np.maximum(ready[ss], end[p])
    return ready


def _collective_times(buffers: Buffers, start, end, rank_of=None, succ=None) -> tuple[np.ndarray, np.ndarray]:
    """Per task start and end, a ring collective's members ending with the last. In one process
    (``rank_of`` None) they start when the last is ready: the runtime runs the collective once, when
    all members have arrived. Over processes (``rank_of``: device -> rank; ``succ``: each task's
    successors), the members a rank holds start when its last one is ready (``ready_times``, not
    when the simulated links get to them): the rank assembles their buffers then and sends its
    partial, and holds them until the others' partials have arrived and the sum is made."""
    start, end = np.array(start, dtype=np.float64), np.array(end, dtype=np.float64)
    ready = ready_times(succ, end) if rank_of is not None else None
    for g, ms in buffers.ring_members.items():
        end[ms] = end[ms].max()
        if rank_of is None:
            start[ms] = start[ms].max()
            continue
        group, by_rank = buffers.ring_groups[g], defaultdict(list)
        for i in ms:
            by_rank[rank_of[group.device(buffers.tasks_member[i])]].append(i)
        for local in by_rank.values():
            start[local] = ready[local].max()
    return start, end


_END, _SEND, _RECEIVE, _START, _INSTANT = range(5)


def _arrivals(buffers: Buffers, start, end, rank_of) -> dict:
    """The messages between MPI ranks (transfers whose devices' ranks differ) -> when the receiving
    rank takes them: their simulated arrival (``end``), or, where a compute task of the rank runs
    then, that task's end (a rank runs its tasks one at a time and completes receives between
    them). The sender's buffer is free from the send (``start``)."""
    owner = rank_of.get if hasattr(rank_of, "get") else rank_of.__getitem__
    moves = {i: d for i, (s, d) in buffers.moves.items() if owner(s) != owner(d)}
    if not moves:
        return {}
    busy: dict = defaultdict(list)   # compute device -> (start, end) of its tasks, in order
    for i, dev in enumerate(buffers.devices):
        if 0 <= dev < buffers.num_compute_devices and end[i] > start[i]:
            busy[dev].append((float(start[i]), float(end[i])))
    devices_of: dict = defaultdict(list)
    for dev, spans in busy.items():
        spans.sort()
        devices_of[owner(dev)].append(spans)
    out = {}
    for i, d in moves.items():
        t = float(end[i])
        inside = []
        for spans in devices_of[owner(d)]:
            k = bisect.bisect_left(spans, (t, math.inf)) - 1   # the last task starting before t
            if k >= 0 and spans[k][0] < t < spans[k][1]:
                inside.append(spans[k][1])
        out[i] = min(inside) if inside else t
    return out


def _flat_units(buffers: Buffers) -> dict:
    """A gradient bucket's segment buffer -> its member's flat buffer ((group, member))."""
    unit = {}
    for g in buffers.ring_groups.values():
        if g.segments > 1:
            for i in range(g.num_members):
                for b in g.member_buffers(i):
                    unit[(b.key, b.device)] = (g.id, i)
    return unit


class _Live:
    """Live bytes per device as buffers come and go (a bucket's flat buffer counts once, until its
    last segment goes), with their peak and course."""

    def __init__(self, units: dict) -> None:
        self.units = units
        self.live: dict[int, int] = defaultdict(int)
        self.peak: dict[int, int] = defaultdict(int)
        self.held: dict = {}      # buffer -> (device, bytes, its flat buffer or None)
        self.flat: dict = {}      # flat buffer -> [segments held, bytes]
        self.course: dict[int, list] = defaultdict(list)
        self.allocated: dict[int, int] = defaultdict(int)

    def add(self, device: int, num_bytes: int, t: float) -> None:
        if num_bytes > 0:
            self.allocated[device] += num_bytes
        self.live[device] += num_bytes
        self.peak[device] = max(self.peak[device], self.live[device])
        self.course[device].append((t, self.live[device]))

    def alloc(self, bid, num_bytes: int, t: float) -> None:
        self.drop(bid, t)
        unit = self.units.get(bid)
        self.held[bid] = (bid[1], num_bytes, unit)
        if unit is not None:
            record = self.flat.setdefault(unit, [0, 0])
            record[0] += 1
            record[1] += num_bytes
        self.add(bid[1], num_bytes, t)

    def drop(self, bid, t: float) -> None:
        entry = self.held.pop(bid, None)
        if entry is None:
            return
        device, num_bytes, unit = entry
        if unit is not None:
            record = self.flat[unit]
            record[0] -= 1
            if record[0]:
                return
            num_bytes = record[1]
            del self.flat[unit]
        self.add(device, -num_bytes, t)


def replay(buffers: Buffers, start, end, optimizer_state: int = 0, state_held: bool = True,
           unmaterialized=frozenset(), rank_of=None, succ=None) -> MemoryTimeline:
    """Live bytes per device along a timeline: per task (by index) its ``start`` and ``end``. Each
    task allocates what it writes at its start and frees (``released``) at its end; at one instant
    tasks that ran until then free first, then tasks starting then allocate, then tasks taking no
    time free. Weight instances are live throughout, and their optimizer state (``optimizer_state``
    times their bytes: 0 for SGD, 1 with momentum, 2 for Adam; a float16 weight's in float32, with
    its float32 master copy: ``state_bytes_of``) too when ``state_held`` (every
    iteration but the first), else from their update on. Buffers in ``unmaterialized`` are never
    allocated (the intermediates of a fused chain the executor evaluates as one expression). With
    ``rank_of`` (device -> MPI rank: the SPMD runtime) and ``succ`` (per task its successors), a ring
    collective's buffers live on each rank from its own members' arrival (``_collective_times``)."""
    start, end = _collective_times(buffers, start, end, rank_of, succ)
    n = len(buffers.reads)
    mem = _Live(_flat_units(buffers))
    t0 = float(min(0.0, start.min())) if n else 0.0
    state_at: dict[int, tuple] = {}
    for b in buffers.weight_instances:
        nbytes = box_bytes(b)
        mem.add(b.device, nbytes, t0)
        size = np.dtype(b.dtype).itemsize
        # a bfloat16 weight's state is a 16-bit weight's: float32 master and state
        state = state_bytes_of(optimizer_state, nbytes // size, 2 if b.key.name in buffers.bfloat16_weights else size)
        if state and state_held:
            mem.add(b.device, state, t0)
        elif state:
            state_at[buffers.updates[(b.key, b.device)]] = (b.device, state)
    received = _arrivals(buffers, start, end, rank_of) if rank_of is not None else {}
    events = []   # (time, what, task): at one instant ends, sends, receives, starts, then ends taking no time
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        if i in received:
            events += [(s, _SEND, i), (received[i], _RECEIVE, i)]
        else:
            events += [(s, _START, i), (e, _END if e > s else _INSTANT, i)]
    events.sort()
    readers = dict(buffers.readers)
    decl, kept, summed = buffers.decl, buffers.kept, Accumulation(buffers)

    def add_contributions(i: int, t: float) -> None:
        for src in buffers.contributes.get(i, ()):
            now = summed.produced(src)
            if now is not None:
                bid, new, adds = now
                if new:
                    mem.alloc(bid, box_bytes(decl[bid]), t)
                for c, _ in adds:
                    mem.drop(c, t)

    for t, what, i in events:
        if what == _START or what == _RECEIVE:
            for w in buffers.writes[i]:
                if w not in unmaterialized:
                    mem.alloc(w, box_bytes(decl[w]), t)
            if i in state_at:
                mem.add(*state_at[i], t)
        if what == _SEND:
            for bid in released(buffers.reads[i], (), readers, kept):
                mem.drop(bid, t)
        elif what == _RECEIVE:
            add_contributions(i, t)
            for bid in released((), buffers.writes[i], readers, kept):
                mem.drop(bid, t)
        elif what != _START:
            add_contributions(i, t)
            for bid in released(buffers.reads[i], buffers.writes[i], readers, kept):
                mem.drop(bid, t)
    devices = sorted(mem.course)
    return MemoryTimeline({d: int(mem.peak[d]) for d in devices},
                          {d: np.array([t for t, _ in mem.course[d]]) for d in devices},
                          {d: np.array([v for _, v in mem.course[d]], dtype=np.int64) for d in devices},
                          {d: int(mem.allocated[d]) for d in devices})


def memory_timeline(graph, start, end, optimizer_state: int = 0, state_held: bool = True) -> MemoryTimeline:
    """``replay`` of a simulated timeline of ``graph`` (lowered with detail): ``start`` and ``end``
    map each task id to seconds (a dict, or an array indexed by task id)."""
    ids = graph.ids()
    buffers = Buffers(graph, [graph.task(t) for t in ids], [end[t] for t in ids] if graph.detail else None)
    return replay(buffers, [start[t] for t in ids], [end[t] for t in ids], optimizer_state, state_held)


def peak_memory(graph, start, end, optimizer_state: int = 0, state_held: bool = True) -> dict[int, int]:
    """Per device, the peak bytes of live buffers over a simulated timeline (see ``memory_timeline``)."""
    return memory_timeline(graph, start, end, optimizer_state, state_held).peak_bytes
