"""SPMD execution over MPI ranks: each rank runs the tasks of the devices it owns.

Every rank holds the same plan (the lowering is deterministic). A rank keeps:

- compute tasks on its devices;
- transfers: both ends local -> a local copy; only the source local -> a nonblocking send
  (``Isend``); only the destination local -> a receive posted at the start of the iteration
  (``Irecv`` into the buffer the transfer creates), which completes the task when the message
  lands. Tags are unique per transfer (``2 * transfer id``), so both sides match deterministically;
  MPI's non-overtaking rule keeps iterations apart;
- ring AllReduce groups: a group whose members are all local runs the local ring; a group spanning
  ranks sums its local members, exchanges that partial sum with every other participating rank
  (tag ``2 * group id + 1``) and adds the partials in rank order, so every rank holds bitwise the
  same sum. (An exchange of partials, O(ranks) messages per rank: right for a few ranks per group;
  a hierarchical ring would scale further.) A gradient bucket's ring sums each member's flat
  buffer (``Executor._member_flat``: its segments are views of it) the same way;
- fused tasks run where their device is, like any compute task (a fused task lives on one device).

A dependency from a task on another rank is carried by the message that task's data travels in;
a dependency on a remote ring member becomes one on the local members of that ring. Any other
cross-rank dependency is a lowering bug and is reported when the plan is split. The dispatch loop
runs ready local tasks, communication first (a send, a ring member's arrival: cheap, and another
rank may be waiting for it), then compute in predicted order; between two tasks it lets MPI move
messages, and when none is ready it waits for any pending message.
At the end of an iteration the loss, metrics, and peak memory are combined over ranks. A forward
pass and the rest of its iteration run as two phases (``Executor.forward`` / ``finish``): each rank
posts the receives and ring exchanges of a phase's tasks only. Reading a whole tensor
(``read_output``, ``weight``) gathers every rank's pieces on every rank (an ``allgather``), so
every rank must make the same reads.

Entry point: ``SpmdExecutor``.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import math
import time

import numpy as np

from flexrt.errors import FlexrtError, StrategyError
from flexrt.simulator.precision_lowering import is_overflow_check
from flexrt.runtime.executor import Executor, IterationResult, TaskFailed, _State
from flexrt.runtime.mpi import RankLayout
from flexrt.simulator.actions import Move, RingStep

RUN, SEND, RECV, NOOP, RING = "run", "send", "recv", "noop", "ring"


def _box_shape(box) -> tuple:
    return tuple(hi - lo for lo, hi in box)


def _poll(MPI, pending: list, callbacks: list) -> None:
    """Between two tasks: let MPI move messages (MPICH progresses a transfer only inside MPI calls,
    so without this a large message waits until the rank runs out of ready tasks) and complete the
    ones that arrived, in posting order."""
    done = MPI.Request.Testsome(pending)
    if not done:
        return
    done = sorted(done)
    fire = [callbacks[k] for k in done]
    for k in reversed(done):
        del pending[k]
        del callbacks[k]
    for cb in fire:
        cb()


class SpmdExecutor(Executor):
    def __init__(self, plan, backend, update, loss, metrics, comm, layout: RankLayout) -> None:
        super().__init__(plan, backend, update, loss, metrics, mode="serial")
        self.comm = comm
        self.layout = layout
        from mpi4py import MPI  # only reached under an MPI launcher (flexrt.runtime.mpi.world)
        self.MPI = MPI
        self.tag_ub = comm.Get_attr(MPI.TAG_UB)
        self._split()

    # ---- the local part of the plan ------------------------------------------------------------
    def _split(self) -> None:
        plan, own = self.plan, self.layout.owns
        d = plan.num_compute_devices
        hop0 = {t.transfer: t.index for t in plan.tasks if t.transfer >= 0 and t.action is not None}
        role: dict[int, str] = {}
        for t in plan.tasks:
            a = t.action
            if t.device < d and not (t.transfer >= 0 and a is None):
                if own(t.device):
                    role[t.index] = RUN
            elif isinstance(a, Move):
                s, r = own(a.src_device), own(a.dst.device)
                if s or r:
                    role[t.index] = RUN if s and r else (SEND if s else RECV)
            elif isinstance(a, RingStep):
                if own(a.group.device(a.member)):
                    role[t.index] = RING
        for t in plan.tasks:  # the other hops of a transfer (a receiver's copy too): no-ops wherever its first hop runs
            if t.transfer >= 0 and t.action is None and role.get(hop0.get(t.transfer, -1)):
                role[t.index] = NOOP
        ring_of = {}  # task -> ring group id, for every hop of a ring transfer
        for t in plan.tasks:
            h = hop0.get(t.transfer)
            if h is not None and isinstance(plan.tasks[h].action, RingStep):
                ring_of[t.index] = plan.tasks[h].action.group.id
        members: dict[int, list[int]] = {}
        for i, r in role.items():
            if r == RING:
                members.setdefault(plan.tasks[i].action.group.id, []).append(i)
        preds: dict[int, set] = {i: set() for i in role}
        for p, succs in enumerate(plan.succ):
            for i in succs:
                if i not in role:
                    continue
                if p in role:
                    preds[i].add(p)
                elif p in ring_of:
                    g = ring_of[p]
                    if ring_of.get(i) != g:
                        preds[i].update(m for m in members.get(g, ()) if m != i)
                elif role[i] in (RECV, RING) or (role[i] == NOOP and role.get(hop0.get(plan.tasks[i].transfer, -1))
                                                   in (RECV, RING)):
                    continue  # carried by the message (or the ring exchange)
                elif is_overflow_check(plan.tasks[p]):
                    continue  # carried by the ranks' agreement on overflow before the updates (_agree)
                else:
                    raise StrategyError(f"rank {self.layout.rank}: task '{plan.tasks[i].name}' depends on "
                                        f"'{plan.tasks[p].name}' on another rank without a message between them")
        self.role = role
        self._localize_reads(members)
        self.local_succ: dict[int, list[int]] = {i: [] for i in role}
        for i, ps in preds.items():
            for p in ps:
                self.local_succ[p].append(i)
        self.local_preds = {i: len(ps) for i, ps in preds.items()}
        self.late = {i: 0 if r in (SEND, NOOP, RING) else plan.num_tasks for i, r in role.items()}
        # what every iteration starts from, in index order: the receives to post, the tasks ready at once
        self.recvs = sorted(i for i, r in role.items() if r == RECV)
        self.ready0 = sorted(i for i, n in self.local_preds.items() if n == 0 and role[i] != RECV)
        self.members = members
        self.group_ranks = {}
        for g, ms in members.items():
            group = plan.tasks[ms[0]].action.group
            ranks = sorted({self.layout.owner[b.device] for b in group.buffers})
            if len(ranks) > 1:
                self.group_ranks[g] = ranks
        self.groups = sorted(self.group_ranks)
        self.group_size = {}     # group -> (elements of a member's flat buffer, dtype)
        for g in self.groups:
            group = plan.tasks[members[g][0]].action.group
            self.group_size[g] = (sum(math.prod(_box_shape(b.ranges)) for b in group.member_buffers(0)),
                                  group.buffers[0].dtype)
        for key in [t.action.dst.key.index for i, t in enumerate(plan.tasks) if role.get(i) in (SEND, RECV)] + \
                list(self.group_ranks):
            if 2 * key + 1 > self.tag_ub:
                raise StrategyError(f"message tag {2 * key + 1} exceeds this MPI's tag bound {self.tag_ub}")

    def _localize_reads(self, members) -> None:
        """This rank's copy of the plan, whose reader counts cover only the tasks it runs, so that
        its buffers are freed after their last local reader."""
        plan = copy.copy(self.plan)
        tasks = list(plan.tasks)
        for i, t in enumerate(tasks):
            r = self.role.get(i)
            if r is None or r == NOOP:
                tasks[i] = dataclasses.replace(t, reads=(), writes=())
            elif r == RECV:
                tasks[i] = dataclasses.replace(t, reads=())
            elif r == SEND:
                tasks[i] = dataclasses.replace(t, writes=())
            elif r == RING:
                tasks[i] = dataclasses.replace(t, reads=(), writes=())
        for g, ms in members.items():
            first = min(ms)
            reads = set()
            for b in tasks[first].action.group.buffers:
                if self.layout.owns(b.device):
                    reads.add(plan.canonical((b.key, b.device)))
                    reads.update(plan.canonical((p.src, p.device)) for p in plan.buffers.assembly_parts((b.key, b.device)))
            tasks[first] = dataclasses.replace(tasks[first], reads=tuple(sorted(reads, key=repr)))
        readers: dict = {}
        for t in tasks:
            for b in t.reads:
                readers[b] = readers.get(b, 0) + 1
        plan.tasks = tasks
        plan.readers = readers
        self.plan = plan

    # ---- one iteration -----------------------------------------------------------------------
    def _run_serial(self, st: _State, phase=None) -> None:
        _Iteration(self, st, phase).run()

    def _begin(self, inputs: dict, hold: bool, training: bool = True) -> _State:
        self.comm.Barrier()  # a common start, so the ranks' timelines line up
        return super()._begin(inputs, hold, training)

    def _result(self, st: _State) -> IterationResult:
        r = super()._result(st)
        comm = self.comm
        loss = comm.allreduce(r.loss)
        names = self.metrics.names
        local = np.array([self.metrics.sums[n] for n in names] + [self.metrics.samples], dtype=np.float64)
        total = np.empty_like(local)
        comm.Allreduce(local, total)
        metrics = {n.short_name: (total[k] / total[-1] if total[-1] else 0.0) for k, n in enumerate(names)}
        peak: dict = {}
        for part in comm.allgather({d: v for d, v in r.peak_bytes.items() if self.layout.owns(d)}):
            peak.update(part)
        start, end = np.array(r.start), np.array(r.end)
        mine = np.array([i in self.role for i in range(self.plan.num_tasks)])
        start[~mine] = 0.0
        end[~mine] = 0.0
        # a message between ranks runs from its send (the sender's start) to its arrival (the
        # receiver's end): each side gives its half, the latest of each side's values is kept
        start[[i for i, role in self.role.items() if role == RECV]] = 0.0
        end[[i for i, role in self.role.items() if role == SEND]] = 0.0
        assembly = np.array(r.assembly)
        assembly[~mine] = 0.0
        start_all, end_all, assembly_all = np.empty_like(start), np.empty_like(end), np.empty_like(assembly)
        comm.Allreduce(start, start_all, op=self.MPI.MAX)
        comm.Allreduce(end, end_all, op=self.MPI.MAX)
        comm.Allreduce(assembly, assembly_all, op=self.MPI.MAX)
        wall = comm.allreduce(r.wall_s, op=self.MPI.MAX)
        return IterationResult(loss, metrics, wall, start_all, end_all, peak, r.skipped, assembly_all)

    def _agree(self, found: bool) -> bool:
        """Overflow anywhere skips the step everywhere (an allreduce of the ranks' verdicts)."""
        return bool(self.comm.allreduce(int(found), op=self.MPI.MAX))

    def _local_weight_instances(self) -> list:
        return [b for b in self.plan.weight_instances if self.layout.owns(b.device)]

    def _collect(self, bufs) -> list:
        """Every buffer's host copy on every rank: each rank sends the ones on its devices."""
        local = {i: np.asarray(self.backend.to_host(self.get((b.key, b.device))))
                 for i, b in enumerate(bufs) if self.layout.owns(b.device)}
        out: dict = {}
        for part in self.comm.allgather(local):
            out.update(part)
        return [out[i] for i in range(len(bufs))]

    def _local_instances(self) -> list:
        return [(b.key.name, b.ranges, b.device, self.backend.to_host(self.get((b.key, b.device))))
                for b in self.plan.weight_instances if self.layout.owns(b.device)]

    def weights(self) -> dict:
        out: dict = {}
        for part in self.comm.allgather(self._local_instances()):
            for name, ranges, _, arr in part:
                if name not in out:
                    out[name] = np.empty(self.plan.weight_shapes[name].dims, dtype=arr.dtype)
                out[name][tuple(slice(a, b) for a, b in ranges)] = arr
        return out

    def weight_replicas(self) -> dict:
        return {(name, ranges, dev): arr for part in self.comm.allgather(self._local_instances())
                for name, ranges, dev, arr in part}

    def load_weights(self, full: dict) -> None:
        keep = self.plan.weight_instances
        self.plan.weight_instances = [b for b in keep if self.layout.owns(b.device)]
        try:
            super().load_weights(full)
        finally:
            self.plan.weight_instances = keep


class _Iteration:
    """One rank's run of the tasks of a phase (``SpmdExecutor._run_serial``): the receives and ring
    exchanges posted at the start, then the dispatch loop (module docstring)."""

    def __init__(self, ex: SpmdExecutor, st: _State, phase) -> None:
        self.ex, self.st, self.plan, self.MPI, self.comm = ex, st, ex.plan, ex.MPI, ex.comm
        self.mine = (lambda i: True) if phase is None else phase.__getitem__
        self.phase = phase
        if st.local_remaining is None:
            st.local_remaining = dict(ex.local_preds)
        self.remaining = st.local_remaining
        self.pending: list = []          # MPI requests
        self.callbacks: list = []        # per pending request, what to do when it completes
        self.sends: list = []            # (request, buffer): waited for at the end
        self.arrived: dict[int, int] = {}
        self.partials: dict[int, dict[int, np.ndarray]] = {g: {} for g in ex.group_ranks}
        self.flats: dict[int, list] = {}  # group -> this rank's (device, flat buffer) per local member
        self.in_place: set = set()       # groups whose sum goes into this rank's member buffer
        self.heap: list[int] = []        # task index, + n_tasks for compute: communication goes first

    def now(self) -> float:
        return time.perf_counter() - self.st.t0

    def complete(self, i: int, start: float) -> None:
        ex, st, remaining = self.ex, self.st, self.remaining
        st.start[i] = start
        st.end[i] = self.now()
        st.done[i] = True
        ex._release(self.plan.tasks[i], st)
        for s in ex.local_succ[i]:
            remaining[s] -= 1
            if remaining[s] == 0 and ex.role[s] != RECV and self.mine(s):
                if ex.role[s] == NOOP:    # another hop of a transfer: done with it, nothing to dispatch
                    self.complete(s, st.end[i])
                else:
                    heapq.heappush(self.heap, s + ex.late[s])

    def post_recv(self, i: int) -> None:
        ex, a = self.ex, self.plan.tasks[i].action
        buf = np.empty(_box_shape(a.dst.ranges), dtype=a.dst.dtype)
        self.pending.append(self.comm.Irecv(buf, source=ex.layout.owner[a.src_device], tag=2 * a.dst.key.index))

        def done(t0=self.now()):
            ex._alloc((a.dst.key, a.dst.device), ex.backend.upload(buf, a.dst.device))
            if i in self.plan.buffers.contributes:   # a gradient's contribution: added to its sum
                ex._accumulate(i, self.st)
            self.complete(i, t0)
        self.callbacks.append(done)

    def post_group(self, g: int) -> None:
        ex = self.ex
        size, dtype = ex.group_size[g]
        for r in ex.group_ranks[g]:
            if r == ex.layout.rank:
                continue
            buf = np.empty((size,), dtype=dtype)
            self.pending.append(self.comm.Irecv(buf, source=r, tag=2 * g + 1))

            def done(r=r, buf=buf):
                self.partials[g][r] = buf
                self.finish_group(g)
            self.callbacks.append(done)

    def finish_group(self, g: int) -> None:
        ex, partials = self.ex, self.partials[g]
        ms, ranks = ex.members[g], ex.group_ranks[g]
        if self.arrived.get(g, 0) < len(ms) or len(partials) < len(ranks):
            return
        if g in self.in_place:    # this rank's partial is its member's flat buffer (a copy was sent): sum into it
            (_, flat), = self.flats.pop(g)
            np.add(partials[ranks[0]], partials[ranks[1]], out=flat)   # the sum in rank order
            for r in ranks[2:]:
                flat += partials[r]
        else:
            total = partials[ranks[0]].copy()
            for r in ranks[1:]:
                total += partials[r]
            for dev, flat in self.flats.pop(g):
                ex.backend.put(flat, ex.backend.upload(total, dev), False)
        for m in ms:     # a member's time runs from its arrival to the sum
            self.complete(m, self.st.start[m])

    def ring_arrive(self, i: int) -> None:
        ex = self.ex
        group = self.plan.tasks[i].action.group
        g = group.id
        self.arrived[g] = self.arrived.get(g, 0) + 1
        if self.arrived[g] < len(ex.members[g]):
            return
        if g not in ex.group_ranks:  # every member here: the local ring
            ex._ring(group)
            for m in ex.members[g]:
                self.complete(m, self.st.start[m])
            return
        local = [(group.device(m), ex._member_flat(group, m)) for m in range(group.num_members)
                 if ex.layout.owns(group.device(m))]
        self.flats[g] = local
        own = ex.backend.to_host(local[0][1]) if len(local) == 1 else None
        # one local member in host memory, among the first two ranks of the sum: a copy of its flat
        # buffer is sent (the buffer can take the sum as soon as the others' partials arrive,
        # whenever MPI is done with the send) and the sum is made into it; else a partial sum
        if own is local[0][1] and ex.layout.rank in ex.group_ranks[g][:2]:
            self.in_place.add(g)
            self.partials[g][ex.layout.rank] = own
            partial = own.copy()
        else:
            partial = np.array(ex.backend.to_host(local[0][1]), copy=True)
            for _, flat in local[1:]:
                partial += ex.backend.to_host(flat)
            self.partials[g][ex.layout.rank] = partial
        for r in ex.group_ranks[g]:
            if r != ex.layout.rank:
                self.sends.append((self.comm.Isend(partial, dest=r, tag=2 * g + 1), partial))
        self.finish_group(g)

    def dispatch(self, i: int) -> None:
        """Run task ``i`` as this rank's role for it says."""
        ex, task, role, t0 = self.ex, self.plan.tasks[i], self.ex.role[i], self.now()
        if role == RUN:
            ex._execute(task, self.st)
            self.complete(i, t0)
        elif role == SEND:
            a = task.action
            data = np.ascontiguousarray(ex.backend.to_host(ex.view((a.src, a.src_device), a.dst.ranges)))
            self.sends.append((self.comm.Isend(data, dest=ex.layout.owner[a.dst.device], tag=2 * a.dst.key.index),
                               data))
            self.complete(i, t0)
        elif role == NOOP:
            self.complete(i, t0)
        elif role == RING:
            self.st.start[i] = t0
            self.ring_arrive(i)

    def run(self) -> None:
        ex, MPI, heap, pending, callbacks = self.ex, self.MPI, self.heap, self.pending, self.callbacks
        n_tasks = self.plan.num_tasks
        for i in ex.recvs:
            if self.mine(i):
                self.post_recv(i)
        for g in ex.groups:
            if self.mine(ex.members[g][0]):
                self.post_group(g)
        ready = ex.ready0 if self.phase is None else \
            (i for i, n in self.remaining.items() if n == 0 and ex.role[i] != RECV)
        for i in ready:
            if not self.st.done[i] and self.mine(i):
                heap.append(i + ex.late[i])
        heapq.heapify(heap)
        while heap or pending:
            if not heap:
                k = MPI.Request.Waitany(pending)
                pending.pop(k)
                callbacks.pop(k)()
                continue
            i = heapq.heappop(heap)
            if i >= n_tasks:     # compute: first let MPI move messages (and complete what arrived)
                i -= n_tasks
                if pending:
                    _poll(MPI, pending, callbacks)
            task = self.plan.tasks[i]
            try:
                self.dispatch(i)
            except FlexrtError as e:
                raise TaskFailed(f"rank {ex.layout.rank}: task '{task.name}' (device {task.device}) failed: "
                                 f"{e}") from e
            except Exception as e:  # noqa: BLE001  (a kernel's own error: name the task)
                raise TaskFailed(f"rank {ex.layout.rank}: task '{task.name}' (device {task.device}) failed: "
                                 f"{type(e).__name__}: {e}") from e
        MPI.Request.Waitall([r for r, _ in self.sends])
        unfinished = [self.plan.tasks[i].name for i, n in self.remaining.items() if n > 0 and self.mine(i)]
        if unfinished:
            raise StrategyError(f"rank {ex.layout.rank}: {len(unfinished)} tasks never became ready, e.g. "
                                f"'{unfinished[0]}'")
