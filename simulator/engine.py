"""The execution simulator's engine: a mutable task graph on FIFO devices, simulated in full
(FlexFlow's Algorithm 1) or by delta (Algorithm 2) with bit-identical timelines.

Entry point: ``Engine`` (compiled, ``flexrt.simulator._engine``); ``ReferenceEngine`` is the
pure-Python reference with the same API that the tests compare it with.

Model
-----
A *device* is any FIFO resource, compute device or link alike, numbered ``0..num_devices-1``.
A task ``t`` has a device ``d(t)``, an execution time ``exe(t) > 0`` (float64 seconds; zero,
negative, NaN and infinite are rejected), predecessors ``I(t)`` and successors ``O(t)``. Edges
are a set: adding an edge twice is a no-op (``add_edge`` returns False), removing a missing edge
is an error. Task ids count up from 0 and are never reused, so tie-breaks stay stable across
edits; ``compact()`` renumbers the live tasks in id order (the timeline stays the same).

A task also has a ``priority`` (int64, default 0), the tie-break before its id. Ids record the
history of edits: the same graph built in another order has other ids, so equal ready times can
break the other way. A caller that wants history-independent timelines (a search that compares a
delta-simulated strategy with a freshly built one) gives every task a canonical priority, e.g. its
index in a canonical order of the lowered tasks; equal priorities fall back to ids.

Semantics (the timeline both algorithms compute)::

    ready(t) = max(end(p) for p in I(t)), 0.0 when I(t) is empty
    key(t)   = (ready(t), priority(t), t)                      # lexicographic
    on each device its tasks run in increasing key order (FIFO by readiness, ties by priority, id)
    start(t) = max(ready(t), end(prev(t))), ready(t) for the first task on its device
    end(t)   = start(t) + exe(t)                               # one float64 addition
    makespan = max end(t), 0.0 for an empty graph

These equations are circular (the device order depends on ready times, which depend on ends), so
they are a definition only together with the precondition that ``end(t) > start(t)`` for every
task, i.e. ``exe(t)`` does not vanish in the float64 addition ``start(t) + exe(t)`` (it would
need ``exe < 2**-53 * start``, e.g. 1e-10 s at a start of 10^6 s). Both simulations check it and
raise ``GraphError`` when a task breaks it. Under the precondition:

*Algorithm 1 computes a solution.* Pop tasks from a heap keyed by ``key(t)``, pushing a task
when its last predecessor is popped. For an edge p -> n, ``ready(n) >= end(p) > start(p) >=
ready(p)``, so ``key(n) > key(p)``: a task pushed after ``t`` was popped has a key larger than
the key of the predecessor whose pop released it, which (by induction over pops) is at least
``key(t)``. Pops are therefore globally increasing in key, so each device receives its tasks in
key order and ``start = max(ready, end of the device's last task)`` is the equation above.

*The solution is unique.* Take two solutions A and S that differ, and the task t with the
smallest key among ``{key_A(u), key_S(u)}`` over tasks u where they differ; say it is
``key_S(t)``. Predecessors have smaller keys in S and so agree, hence ``ready_A(t) = ready_S(t)``.
On d(t), every task with a smaller S-key agrees (same key in A); every other task has a larger key
in both (keys are unique by id). So t has the same device predecessor, start and end in A:
contradiction.

*Delta simulation reaches it* (``simulate_delta``, Algorithm 2). Edits only record which tasks
they touch. The delta then runs Bellman-Ford style, keeping these invariants between heap pops:
every task's ready equals the max of its predecessors' current ends (recomputed eagerly when a
predecessor's end changes), every device list is sorted by current key (a task is moved as soon as
its ready changes, walking its device's doubly linked list), and every task whose start or end may
be stale is in a heap keyed by key(t) (new tasks, changed exe or device, a changed device
predecessor or a changed end of it, a new priority). A pop recomputes start and end and, when the end changed,
notifies the successors and the next task on the device. When the heap is empty all equations
hold, so by uniqueness the timeline is ``simulate_full``'s, bit for bit (same float operations on
the same values). New tasks start from a guess (ready from predecessors, no contention).

Bellman-Ford may process a task many times when a delay overtakes work that has not yet been
told about it, so the delta bounds its work with the *cut* K0: the smallest key, old or new
(recomputed from the predecessors' current ends), of any task the edits touch. Every task with an
old key below K0 keeps its timing and its place (induction in key order: its predecessors and
exe are unchanged, and every task the edits touch has a key >= K0 before and after), and every
other task keeps a key >= K0 throughout (its ready is unchanged, or the end of a task at or after
K0, or it was touched). So after ``delta_probe_pops`` pops (default 256) the delta counts the tasks after K0
(walking each device list back from its tail) and, once its pops exceed ``delta_replay_ratio``
(default 0.1) times that count, it cuts every device list at K0 and replays Algorithm 1 over the
tasks after it: at most about the cost of that part of a full simulation. Where the tasks after K0 (with the edited
tasks in no device list) are at least ``delta_direct_ratio`` (default 0.25) of all, the delta replays
them at once, without placing new tasks or probing: one operator's new configuration early in the
iteration moves most of the timeline anyway (counted in ``direct_replays`` and ``replays``); where
they are at least ``delta_full_ratio`` (default 0.5) of all, it runs Algorithm 1 over everything,
which costs less per task than a replay (counted in ``full_replays``). Bellman-Ford wins when
changes die out; the replay wins when they run to the end of the graph (a delay on the critical
path), the common case for one operator's new configuration. Bellman-Ford never runs past
``4 * (tasks + edges) + 1024`` pops either. Edits may pass through cyclic graphs; the next
simulation reports a cycle that remains (one closed by edits lies after K0, so the replay finds it).

Counters: ``last_processed`` (tasks processed by the last simulation, repeats included),
``replays`` (deltas that replayed after K0), ``fallbacks`` (deltas that fell back to a full
simulation, which happens only to report an error: a cycle or a vanishing exe).

The makespan is the max end over the devices' last tasks (ends increase along a device), so a
delta step costs no O(n) scan. ``busy_time()`` sums exe per device in id order.

Example:
    >>> eng = Engine(2)
    >>> a, b = eng.add_task(0, 1.0), eng.add_task(1, 2.0)
    >>> eng.add_edge(a, b)
    True
    >>> eng.simulate_full()
    3.0
    >>> eng.set_exe(a, 0.5)
    >>> eng.simulate_delta()
    2.5
"""

from __future__ import annotations

import heapq
import math
from typing import Iterable

import numpy as np

from flexrt.errors import GraphError

try:
    from flexrt.simulator._engine import Engine
except ImportError as e:  # never fall back silently to the slow path
    raise ImportError(
        "flexrt's compiled extension flexrt.simulator._engine is missing; build it with "
        "`pip install -e .` (or `python setup.py build_ext --inplace`) from the repository root") from e

__all__ = ["Engine", "ReferenceEngine"]

# Why a task is in the dirty list (bit flags, the same in the compiled engine).
_FRESH = 1   # added since the last simulation: no timing yet
_LINK = 2    # not in its device's list (new, or its device changed)
_READY = 4   # its predecessor set changed: recompute ready
_START = 8   # its exe or its device predecessor changed: recompute start and end


def _exe_error(exe: float, what: str) -> GraphError | None:
    if isinstance(exe, (int, float, np.integer, np.floating)) and math.isfinite(exe) and exe > 0:
        return None
    return GraphError(f"exe of {what} must be a finite number of seconds > 0; got {exe!r}")


class ReferenceEngine:
    """Pure-Python reference of ``Engine``: same API, same algorithms, same results."""

    def __init__(self, num_devices: int):
        if not isinstance(num_devices, (int, np.integer)) or num_devices < 1:
            raise GraphError(f"num_devices must be an int >= 1; got {num_devices!r}")
        self.num_devices = int(num_devices)
        self._device: list[int] = []
        self._exe: list[float] = []
        self._prio: list[int] = []
        self._alive: list[bool] = []
        self._preds: list[set[int]] = []
        self._succs: list[set[int]] = []
        self._ready: list[float] = []
        self._start: list[float] = []
        self._end: list[float] = []
        self._prev: list[int] = []
        self._next: list[int] = []
        self._linked: list[bool] = []
        self._queued: list[bool] = []
        self._qkey: list[float] = []
        self._head = [-1] * self.num_devices
        self._tail = [-1] * self.num_devices
        self._dirty: dict[int, int] = {}  # insertion-ordered, like the compiled dirty list
        self._simulated = False
        self._live = 0
        self._edges = 0
        self.last_processed = 0
        self.replays = 0
        self.fallbacks = 0
        self.delta_probe_pops = 256
        self.delta_replay_ratio = 0.1
        self.delta_direct_ratio = 0.25
        self.delta_full_ratio = 0.5
        self.direct_replays = 0
        self.full_replays = 0

    # -- construction and edits ---------------------------------------------------------------

    @classmethod
    def from_arrays(cls, num_devices, device, exe, edge_src, edge_dst, priority=None) -> "ReferenceEngine":
        """Tasks 0..n-1 with these devices, exe times and priorities (default 0), and these edges
        (duplicates ignored)."""
        eng = cls(num_devices)
        dev, x, src, dst, prio = checked_arrays(eng.num_devices, device, exe, edge_src, edge_dst, priority)
        for d, t_exe, p in zip(dev.tolist(), x.tolist(), prio.tolist()):
            eng.add_task(d, t_exe, p)
        for a, b in zip(src.tolist(), dst.tolist()):
            eng.add_edge(a, b)
        return eng

    def _check_device(self, device) -> int:
        if not isinstance(device, (int, np.integer)) or not 0 <= device < self.num_devices:
            raise GraphError(f"device must be an int in 0..{self.num_devices - 1}; got {device!r}")
        return int(device)

    def _check_task(self, tid) -> int:
        if not isinstance(tid, (int, np.integer)) or not 0 <= tid < len(self._alive) or not self._alive[tid]:
            raise GraphError(f"no task {tid!r} (ids are 0..{len(self._alive) - 1}, removed ids stay unused)")
        return int(tid)

    def _mark(self, t: int, flag: int) -> None:
        self._dirty[t] = self._dirty.get(t, 0) | flag

    def add_task(self, device: int, exe: float, priority: int = 0) -> int:
        device = self._check_device(device)
        if (err := _exe_error(exe, f"the new task on device {device}")) is not None:
            raise err
        priority = _check_priority(priority, "the new task")
        t = len(self._alive)
        for lst, v in ((self._device, device), (self._exe, float(exe)), (self._prio, priority), (self._alive, True),
                       (self._ready, math.nan), (self._start, math.nan), (self._end, math.nan),
                       (self._prev, -1), (self._next, -1), (self._linked, False), (self._queued, False),
                       (self._qkey, math.nan)):
            lst.append(v)
        self._preds.append(set())
        self._succs.append(set())
        self._live += 1
        self._mark(t, _FRESH | _LINK)
        return t

    def remove_task(self, tid: int) -> None:
        t = self._check_task(tid)
        for c in self._succs[t]:
            self._preds[c].discard(t)
            self._mark(c, _READY)
        for p in self._preds[t]:
            self._succs[p].discard(t)
        self._edges -= len(self._succs[t]) + len(self._preds[t])
        self._succs[t], self._preds[t] = set(), set()
        if self._linked[t]:
            nxt = self._unlink(t)
            if nxt >= 0:
                self._mark(nxt, _START)
        self._alive[t] = False
        self._live -= 1

    def add_edge(self, a: int, b: int) -> bool:
        """Add the dependency a -> b; False (and no change) when it exists already."""
        a, b = self._check_task(a), self._check_task(b)
        if a == b:
            raise GraphError(f"cycle: edge from task {a} to itself")
        if b in self._succs[a]:
            return False
        self._succs[a].add(b)
        self._preds[b].add(a)
        self._edges += 1
        self._mark(b, _READY)
        return True

    def remove_edge(self, a: int, b: int) -> None:
        a, b = self._check_task(a), self._check_task(b)
        if b not in self._succs[a]:
            raise GraphError(f"no edge {a} -> {b} to remove")
        self._succs[a].discard(b)
        self._preds[b].discard(a)
        self._edges -= 1
        self._mark(b, _READY)

    def apply_changes(self, changes) -> None:
        """Apply a task graph's change set (``GraphCore.changes``), as ``Engine.apply_changes``."""
        dead, first, dev, exe, prio, alive, (add_src, add_dst), (rm_src, rm_dst) = changes
        if first != len(self._alive):
            raise GraphError(f"change set starts at task {first}; this engine holds {len(self._alive)} tasks")
        for t in dead.tolist():
            self.remove_task(t)
        for d, x, p in zip(dev.tolist(), exe.tolist(), prio.tolist()):
            self.add_task(d, x, p)
        for i, ok in enumerate(alive.tolist()):
            if not ok:
                self.remove_task(first + i)
        for a, b in zip(np.asarray(add_src).tolist(), np.asarray(add_dst).tolist()):
            self.add_edge(a, b)
        for a, b in zip(np.asarray(rm_src).tolist(), np.asarray(rm_dst).tolist()):
            if self.has_edge(a, b):
                self.remove_edge(a, b)

    def set_exe(self, tid: int, exe: float) -> None:
        t = self._check_task(tid)
        if (err := _exe_error(exe, f"task {t}")) is not None:
            raise err
        if float(exe) != self._exe[t]:
            self._exe[t] = float(exe)
            self._mark(t, _START)

    def set_device(self, tid: int, device: int) -> None:
        t, device = self._check_task(tid), self._check_device(device)
        if device == self._device[t]:
            return
        if self._linked[t]:
            nxt = self._unlink(t)
            if nxt >= 0:
                self._mark(nxt, _START)
        self._device[t] = device
        self._mark(t, _LINK)

    def set_priority(self, tid: int, priority: int) -> None:
        t = self._check_task(tid)
        priority = _check_priority(priority, f"task {t}")
        if priority == self._prio[t]:
            return
        if self._linked[t]:  # its key changes: it leaves its device list and is placed anew
            nxt = self._unlink(t)
            if nxt >= 0:
                self._mark(nxt, _START)
        self._prio[t] = priority
        self._mark(t, _LINK)

    def copy(self) -> "ReferenceEngine":
        """An independent engine with the same tasks (same ids), edges and timeline."""
        other = ReferenceEngine(self.num_devices)
        for name, value in vars(self).items():
            if name == "_preds" or name == "_succs":
                value = [set(s) for s in value]
            elif isinstance(value, (list, dict)):
                value = value.copy()
            setattr(other, name, value)
        return other

    def compact(self) -> np.ndarray:
        """Renumber the live tasks 0..num_tasks-1 in id order and return their old ids."""
        old_ids = self.task_ids()
        new = {t: i for i, t in enumerate(old_ids.tolist())}
        remap = lambda x: new[x] if x >= 0 else -1  # noqa: E731
        for name in ("_device", "_exe", "_prio", "_ready", "_start", "_end", "_qkey", "_linked"):
            setattr(self, name, [getattr(self, name)[t] for t in new])
        self._prev = [remap(self._prev[t]) for t in new]
        self._next = [remap(self._next[t]) for t in new]
        self._preds = [{new[p] for p in self._preds[t]} for t in new]
        self._succs = [{new[c] for c in self._succs[t]} for t in new]
        self._alive = [True] * len(new)
        self._queued = [False] * len(new)
        self._head = [remap(t) for t in self._head]
        self._tail = [remap(t) for t in self._tail]
        self._dirty = {new[t]: f for t, f in self._dirty.items() if t in new}
        return old_ids

    # -- queries ------------------------------------------------------------------------------

    @property
    def num_tasks(self) -> int:
        return self._live

    @property
    def num_edges(self) -> int:
        return self._edges

    def task_ids(self) -> np.ndarray:
        return np.flatnonzero(np.asarray(self._alive, dtype=bool)).astype(np.int64)

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(edge_src, edge_dst) int64 arrays, sorted by source then destination."""
        pairs = sorted((a, b) for a in self.task_ids().tolist() for b in self._succs[a])
        return (np.asarray([a for a, _ in pairs], dtype=np.int64), np.asarray([b for _, b in pairs], dtype=np.int64))

    def has_edge(self, a: int, b: int) -> bool:
        return self._check_task(b) in self._succs[self._check_task(a)]

    def device(self, tid: int) -> int:
        return self._device[self._check_task(tid)]

    def exe(self, tid: int) -> float:
        return self._exe[self._check_task(tid)]

    def priority(self, tid: int) -> int:
        return self._prio[self._check_task(tid)]

    def preds(self, tid: int) -> list[int]:
        return sorted(self._preds[self._check_task(tid)])

    def succs(self, tid: int) -> list[int]:
        return sorted(self._succs[self._check_task(tid)])

    def ready(self, tid: int) -> float:
        return self._ready[self._check_task(tid)]

    def start(self, tid: int) -> float:
        return self._start[self._check_task(tid)]

    def end(self, tid: int) -> float:
        return self._end[self._check_task(tid)]

    def timeline(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        ids = self.task_ids()
        pick = ids.tolist()
        return (ids, np.asarray([self._device[t] for t in pick], dtype=np.int64),
                *(np.asarray([v[t] for t in pick], dtype=np.float64) for v in (self._ready, self._start, self._end)))

    def device_order(self, device: int) -> list[int]:
        out, t = [], self._head[self._check_device(device)]
        while t >= 0:
            out.append(t)
            t = self._next[t]
        return out

    def busy_time(self) -> np.ndarray:
        busy = np.zeros(self.num_devices)
        for t in self.task_ids().tolist():
            busy[self._device[t]] += self._exe[t]
        return busy

    def makespan(self) -> float:
        return max((self._end[t] for t in self._tail if t >= 0), default=0.0)

    # -- device lists -------------------------------------------------------------------------

    def _key(self, t: int) -> tuple[float, int, int]:
        return self._ready[t], self._prio[t], t

    def _before(self, a: int, b: int) -> bool:
        return self._key(a) < self._key(b)

    def _unlink(self, t: int) -> int:
        p, n, d = self._prev[t], self._next[t], self._device[t]
        if p >= 0:
            self._next[p] = n
        else:
            self._head[d] = n
        if n >= 0:
            self._prev[n] = p
        else:
            self._tail[d] = p
        self._prev[t] = self._next[t] = -1
        self._linked[t] = False
        return n

    def _insert_after(self, t: int, q: int) -> int:
        """Link t after q (q = -1: at the head); return its new device successor."""
        d = self._device[t]
        n = self._next[q] if q >= 0 else self._head[d]
        self._prev[t], self._next[t] = q, n
        if q >= 0:
            self._next[q] = t
        else:
            self._head[d] = t
        if n >= 0:
            self._prev[n] = t
        else:
            self._tail[d] = t
        self._linked[t] = True
        return n

    def _link(self, t: int) -> None:
        q = self._tail[self._device[t]]
        while q >= 0 and self._before(t, q):
            q = self._prev[q]
        n = self._insert_after(t, q)
        if n >= 0:
            self._queue(n)

    def _reposition(self, t: int) -> None:
        p, n = self._prev[t], self._next[t]
        if p >= 0 and self._before(t, p):
            q = self._prev[p]
            while q >= 0 and self._before(t, q):
                q = self._prev[q]
        elif n >= 0 and self._before(n, t):
            q = n
            while self._next[q] >= 0 and self._before(self._next[q], t):
                q = self._next[q]
        else:
            return
        old_next = self._unlink(t)
        if old_next >= 0:
            self._queue(old_next)
        new_next = self._insert_after(t, q)
        if new_next >= 0:
            self._queue(new_next)

    # -- Algorithm 1 over a set of tasks: the full simulation, and the delta's suffix replay ----

    def _replay(self, tasks: list[int], in_set) -> tuple[int, int, float]:
        """Algorithm 1 over ``tasks``, after every task outside the set: they keep their timing
        and device lists end where the set begins. Returns (tasks done, vanishing task or -1, its
        start)."""
        waiting = {}
        for t in tasks:
            self._prev[t] = self._next[t] = -1
            self._linked[t] = self._queued[t] = False
            outside = [self._end[p] for p in self._preds[t] if not in_set(p)]
            self._ready[t] = max(outside, default=0.0)
            waiting[t] = len(self._preds[t]) - len(outside)
        heap = [self._key(t) for t in tasks if waiting[t] == 0]
        heapq.heapify(heap)
        done = 0
        while heap:
            r, _, t = heapq.heappop(heap)
            last = self._tail[self._device[t]]
            s = r if last < 0 else max(r, self._end[last])
            e = s + self._exe[t]
            if not e > s:
                return done, t, s
            self._start[t], self._end[t] = s, e
            self._insert_after(t, last)
            done += 1
            for c in self._succs[t]:
                if e > self._ready[c]:
                    self._ready[c] = e
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(heap, self._key(c))
        self._stuck = [t for t in tasks if waiting[t] > 0]
        return done, -1, 0.0

    def simulate_full(self) -> float:
        """Algorithm 1: every timing and device order rebuilt; returns the makespan."""
        self._simulated = False
        self._dirty.clear()
        live = self.task_ids().tolist()
        self._head = [-1] * self.num_devices
        self._tail = [-1] * self.num_devices
        done, bad, start = self._replay(live, lambda t: True)
        if bad >= 0:
            raise _vanishing_exe(bad, self._exe[bad], start)
        if done < len(live):
            raise _cycle_error(self._stuck, self._preds)
        self.last_processed = done
        self._simulated = True
        return self.makespan()

    # -- delta simulation (Algorithm 2) -------------------------------------------------------

    def simulate_delta(self) -> float:
        """Algorithm 2: re-simulate what the edits since the last simulation touch; the timeline
        equals ``simulate_full``'s exactly. Without a previous simulation this is a full one."""
        if not self._simulated:
            return self.simulate_full()
        ok = self._delta()
        self._dirty.clear()
        if ok is None:  # the suffix is most of the graph
            self.full_replays += 1
            return self.simulate_full()
        if not ok:
            self.fallbacks += 1
            return self.simulate_full()
        return self.makespan()

    def _queue(self, t: int) -> None:
        if self._queued[t] and self._qkey[t] == self._ready[t]:
            return
        self._queued[t], self._qkey[t] = True, self._ready[t]
        heapq.heappush(self._heap, self._key(t))

    def _set_ready(self, t: int, r: float) -> None:
        if r != self._ready[t]:
            self._ready[t] = r
            self._reposition(t)
            self._queue(t)

    def _max_pred_end(self, t: int) -> float:
        return max((self._end[p] for p in self._preds[t]), default=0.0)

    def _guess_fresh(self, fresh: list[int]) -> bool:
        """Give new tasks a first timing (ready from predecessors, no device contention) in a
        topological order of the new tasks; False when they close a cycle."""
        is_fresh = set(fresh)
        waiting = {t: sum(p in is_fresh for p in self._preds[t]) for t in fresh}
        stack = [t for t in fresh if waiting[t] == 0]
        while stack:
            t = stack.pop()
            r = self._max_pred_end(t)
            self._ready[t], self._start[t], self._end[t] = r, r, r + self._exe[t]
            for c in self._succs[t]:
                if c in waiting:
                    waiting[c] -= 1
                    if waiting[c] == 0:
                        stack.append(c)
        return all(w == 0 for w in waiting.values())

    def _cut(self, dirty: list[tuple[int, int]]) -> tuple[float, int, int]:
        """K0: the smallest key, old or new, of a task the edits touch; every task with an old key
        below it keeps its timing (see the module docstring)."""
        cut = (math.inf, 0, -1)
        for t, f in dirty:
            if not f & _FRESH:
                cut = min(cut, self._key(t))
            if f & (_FRESH | _LINK | _READY):
                cut = min(cut, (self._ready[t] if f & _FRESH else self._max_pred_end(t), self._prio[t], t))
        return cut

    def _suffix_size(self, cut: tuple[float, int, int]) -> int:
        n = 0
        for d in range(self.num_devices):
            t = self._tail[d]
            while t >= 0 and self._key(t) >= cut:
                n += 1
                t = self._prev[t]
        return n

    def _replay_suffix(self, cut: tuple[float, int, int], unlinked=()) -> bool:
        """Cut every device list at K0 and run Algorithm 1 over the tasks after the cut (and the
        edited tasks in no list, ``unlinked``)."""
        suffix = list(unlinked)
        for d in range(self.num_devices):
            t = self._tail[d]
            while t >= 0 and self._key(t) >= cut:
                suffix.append(t)
                t = self._prev[t]
            self._tail[d] = t
            if t >= 0:
                self._next[t] = -1
            else:
                self._head[d] = -1
        in_suffix = set(suffix)
        done, bad, _ = self._replay(suffix, in_suffix.__contains__)
        self.last_processed += done
        self.replays += 1
        return bad < 0 and done == len(suffix)  # else the full simulation raises the error

    def _delta(self) -> bool:
        self._heap: list[tuple[float, int, int]] = []
        dirty = [(t, f) for t, f in self._dirty.items() if self._alive[t]]
        if not self._guess_fresh([t for t, f in dirty if f & _FRESH]):
            return False
        cut = self._cut(dirty)
        if self.delta_direct_ratio <= 1.0:  # a long suffix: replay it at once (see the docstring)
            unlinked = [t for t, _ in dirty if not self._linked[t]]
            size = self._suffix_size(cut) + len(unlinked)
            if size >= self.delta_full_ratio * self._live:
                return None
            if size >= self.delta_direct_ratio * self._live:
                self.direct_replays += 1
                self.last_processed = 0
                return self._replay_suffix(cut, unlinked)
        for t, f in dirty:
            if f & _LINK:
                if not f & _FRESH:
                    self._ready[t] = self._max_pred_end(t)
                self._link(t)
                self._queue(t)
            elif f & _READY:
                self._set_ready(t, self._max_pred_end(t))
            if f & _START:
                self._queue(t)
        # pops allowed before replaying the suffix: a probe, then a share of the suffix; never
        # more than a few full simulations' worth (an edit that closed a cycle never settles)
        hard = 4 * (self._live + self._edges) + 1024
        budget, counted = min(self.delta_probe_pops, hard), False
        processed = 0
        while self._heap:
            r, _, t = heapq.heappop(self._heap)
            if not self._alive[t] or not self._queued[t] or self._qkey[t] != r:
                continue  # removed, already processed, or superseded by a later push
            processed += 1
            if processed > budget:
                if not counted:
                    budget = min(hard, max(budget, int(self.delta_replay_ratio * self._suffix_size(cut))))
                    counted = True
                if processed > budget:
                    self.last_processed = processed - 1
                    return self._replay_suffix(cut)
            self._queued[t] = False
            p = self._prev[t]
            s = r if p < 0 else max(r, self._end[p])
            e = s + self._exe[t]
            if not e > s:  # maybe transient; the replay decides
                self.last_processed = processed - 1
                return self._replay_suffix(cut)
            self._start[t], old, self._end[t] = s, self._end[t], e
            if e != old:
                for c in self._succs[t]:
                    rc = self._ready[c]
                    if e > rc:
                        self._set_ready(c, e)
                    elif e < old == rc:  # c may have lost its latest predecessor
                        self._set_ready(c, self._max_pred_end(c))
                if self._next[t] >= 0:
                    self._queue(self._next[t])
        self.last_processed = processed
        return True


def checked_arrays(num_devices: int, device, exe, edge_src, edge_dst, priority=None):
    """Contiguous (device int64, exe float64, edge_src int64, edge_dst int64, priority int64)
    arrays for ``from_arrays``, checked, with repeated edges dropped and edges sorted by source."""
    dev = np.ascontiguousarray(device, dtype=np.int64).reshape(-1)
    x = np.ascontiguousarray(exe, dtype=np.float64).reshape(-1)
    src = np.ascontiguousarray(edge_src, dtype=np.int64).reshape(-1)
    dst = np.ascontiguousarray(edge_dst, dtype=np.int64).reshape(-1)
    n = dev.size
    prio = np.zeros(n, np.int64) if priority is None else np.ascontiguousarray(priority, dtype=np.int64).reshape(-1)
    if x.size != n or prio.size != n or src.size != dst.size:
        raise GraphError(f"device, exe and priority need one entry per task, edge_src and edge_dst one per edge; "
                         f"got {n} devices, {x.size} exe, {prio.size} priorities, {src.size} sources, "
                         f"{dst.size} destinations")
    if (bad := np.flatnonzero((dev < 0) | (dev >= num_devices))).size:
        raise GraphError(f"device of task {bad[0]} must be in 0..{num_devices - 1}; got {dev[bad[0]]}")
    if (bad := np.flatnonzero(~(np.isfinite(x) & (x > 0)))).size:
        raise GraphError(f"exe of task {bad[0]} must be a finite number of seconds > 0; got {x[bad[0]]!r}")
    if (bad := np.flatnonzero((src < 0) | (src >= n) | (dst < 0) | (dst >= n))).size:
        raise GraphError(f"edge {src[bad[0]]} -> {dst[bad[0]]} names a task outside 0..{n - 1}")
    if (bad := np.flatnonzero(src == dst)).size:
        raise GraphError(f"cycle: edge from task {src[bad[0]]} to itself")
    if src.size:
        keys = src * n + dst  # sorted by source: successor lists stay contiguous
        if keys.size > 1 and not (keys[1:] > keys[:-1]).all():     # (the lowering's come sorted and unique)
            keys = np.unique(keys)
            src, dst = keys // n, keys % n
    return dev, x, src, dst, prio


def _check_priority(priority, what: str) -> int:
    if isinstance(priority, bool) or not isinstance(priority, (int, np.integer)) or not -2**63 <= priority < 2**63:
        raise GraphError(f"priority of {what} must be an int64; got {priority!r}")
    return int(priority)


def _vanishing_exe(t: int, exe: float, start: float) -> GraphError:
    return GraphError(
        f"exe {exe!r} s of task {t} vanishes when added to its start time {start!r} s in float64 "
        f"(start + exe == start); the FIFO order by readiness needs end > start, so exe must be "
        f"at least {math.ulp(start):.3g} s here")


def cycle_path(stuck: Iterable[int], preds) -> list[int]:
    """A cycle among tasks a simulation could not order, as [a, b, ..., a] along the edges.

    Every stuck task has a stuck predecessor, so walking to the smallest one repeats a task."""
    stuck = set(stuck)
    t, seen, path = min(stuck), {}, []
    while t not in seen:
        seen[t] = len(path)
        path.append(t)
        t = min(p for p in preds[t] if p in stuck)
    cycle = path[seen[t]:] + [t]
    return cycle[::-1]


def _cycle_error(stuck: list[int], preds) -> GraphError:
    cycle = cycle_path(stuck, preds)
    shown = " -> ".join(map(str, cycle[:12])) + (" -> ..." if len(cycle) > 12 else "")
    return GraphError(f"cycle among tasks {shown} ({len(stuck)} tasks cannot be ordered); "
                      f"a task graph must be acyclic")
