# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled simulation engine (private; use ``flexrt.simulator.engine``, which documents the
semantics and holds the pure-Python reference ``ReferenceEngine``).

Storage: per-task C arrays indexed by id (capacity doubling); edges are pooled records on two
doubly linked lists (successors of the source, predecessors of the destination) with a free list,
so adding or removing an edge costs O(1) once it is found (finding scans the shorter list); each
device keeps its tasks in a doubly linked list in key order (ready, priority, id). Public ``def`` methods check
their arguments; ``cdef ... noexcept nogil`` methods do the work and return 0, or -1 when memory
runs out, or a positive code the caller turns into an exception.

One extension module in three files, so that the hot helpers inline: this one (storage, edits,
Algorithm 1, accessors), ``_lists.pxi`` (heap, device lists) and ``_delta.pxi`` (Algorithm 2),
included at the end.
"""

import numpy as np

from flexrt.errors import GraphError

cimport cython

from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc, realloc
from libc.math cimport INFINITY, NAN, isfinite

ctypedef int64_t i64

cdef struct Item:  # a heap entry: the key (ready, priority, id) of task ``id``
    double key
    i64 prio
    i64 id

# Why a task is in the dirty list (the same bits as engine.py's).
cdef enum:
    FRESH = 1
    LINK = 2
    READY = 4
    START = 8

# Result codes of the nogil work functions.
cdef enum:
    OK = 0
    NOMEM = -1
    CYCLE = 1
    VANISH = 2
    FALLBACK = 3
    FULL = 4       # the delta's suffix is most of the graph: a full simulation is cheaper


@cython.final
cdef class Engine:
    """A mutable task graph on FIFO devices with full and delta simulation (see engine.py)."""

    # tasks, by id (capacity ``cap``; ids 0..n-1 given out, ``live`` of them alive)
    cdef readonly i64 num_devices
    cdef i64 n, cap, live, nedges
    cdef i64* dev_
    cdef double* exe_
    cdef i64* prio         # tie-break before the id
    cdef double* rdy_
    cdef double* start_
    cdef double* end_
    cdef double* qkey      # the key a queued task was pushed with (delta)
    cdef i64* dprev        # device lists, in key order (ready, priority, id)
    cdef i64* dnext
    cdef i64* out_head     # first edge record of the successor / predecessor list
    cdef i64* in_head
    cdef i64* indeg
    cdef i64* aux          # scratch: readiness counters, renumbering
    cdef uint8_t* alive
    cdef uint8_t* linked   # in its device's list
    cdef uint8_t* queued   # in the delta's heap
    cdef uint8_t* flags    # why it is in the dirty list (FRESH | LINK | READY | START)
    cdef uint8_t* inset    # in the set a replay simulates
    # edge records (capacity ecap, etop used, free list from efree through e_onext)
    cdef i64 ecap, etop, efree
    cdef i64* e_src
    cdef i64* e_dst
    cdef i64* e_onext
    cdef i64* e_oprev
    cdef i64* e_inext
    cdef i64* e_iprev
    # devices
    cdef i64* head
    cdef i64* tail
    cdef i64* bound        # the last task before the cut K0 (delta's replay)
    # edits since the last simulation, the heap, a task buffer (the replayed set)
    cdef i64* dirty
    cdef i64 ndirty, dcap
    cdef Item* heap
    cdef i64 hsize, hcap
    cdef i64* buf
    cdef i64 bcap, nsuffix
    cdef bint simulated
    cdef i64 err_task
    cdef double err_start
    # counters and the delta's switch to replay (engine.py's module docstring)
    cdef readonly i64 last_processed
    cdef readonly i64 replays
    cdef readonly i64 direct_replays
    cdef readonly i64 full_replays
    cdef readonly i64 fallbacks
    cdef public i64 delta_probe_pops
    cdef public double delta_replay_ratio
    cdef public double delta_direct_ratio
    cdef public double delta_full_ratio

    def __cinit__(self, num_devices):
        if isinstance(num_devices, bool) or not isinstance(num_devices, (int, np.integer)) or num_devices < 1:
            raise GraphError(f"num_devices must be an int >= 1; got {num_devices!r}")
        self.num_devices = num_devices
        self.head = <i64*>malloc(self.num_devices * sizeof(i64))
        self.tail = <i64*>malloc(self.num_devices * sizeof(i64))
        self.bound = <i64*>malloc(self.num_devices * sizeof(i64))
        if self.head == NULL or self.tail == NULL or self.bound == NULL:
            raise MemoryError()
        self._reset_devices()
        self.efree = -1
        self.delta_probe_pops = 256
        self.delta_replay_ratio = 0.1
        self.delta_direct_ratio = 0.25
        self.delta_full_ratio = 0.5

    def __dealloc__(self):
        free(self.dev_)
        free(self.exe_)
        free(self.prio)
        free(self.rdy_)
        free(self.start_)
        free(self.end_)
        free(self.qkey)
        free(self.dprev)
        free(self.dnext)
        free(self.out_head)
        free(self.in_head)
        free(self.indeg)
        free(self.aux)
        free(self.alive)
        free(self.linked)
        free(self.queued)
        free(self.flags)
        free(self.e_src)
        free(self.e_dst)
        free(self.e_onext)
        free(self.e_oprev)
        free(self.e_inext)
        free(self.e_iprev)
        free(self.head)
        free(self.tail)
        free(self.bound)
        free(self.dirty)
        free(self.heap)
        free(self.inset)
        free(self.buf)

    # -- memory -------------------------------------------------------------------------------

    cdef int _reserve_tasks(self, i64 need) noexcept nogil:
        if need <= self.cap:
            return OK
        cdef i64 c = self.cap * 2 if self.cap * 2 > need else need
        if c < 16:
            c = 16
        cdef size_t f = c * sizeof(double), i = c * sizeof(i64), b = c * sizeof(uint8_t)
        if (grow(<void**>&self.dev_, i) or grow(<void**>&self.exe_, f) or grow(<void**>&self.prio, i) or grow(<void**>&self.rdy_, f)
                or grow(<void**>&self.start_, f) or grow(<void**>&self.end_, f)
                or grow(<void**>&self.qkey, f) or grow(<void**>&self.dprev, i)
                or grow(<void**>&self.dnext, i) or grow(<void**>&self.out_head, i)
                or grow(<void**>&self.in_head, i) or grow(<void**>&self.indeg, i)
                or grow(<void**>&self.aux, i) or grow(<void**>&self.alive, b)
                or grow(<void**>&self.linked, b) or grow(<void**>&self.queued, b)
                or grow(<void**>&self.flags, b) or grow(<void**>&self.inset, b)):
            return NOMEM
        self.cap = c
        return OK

    cdef int _reserve_edges(self, i64 need) noexcept nogil:
        if need <= self.ecap:
            return OK
        cdef i64 c = self.ecap * 2 if self.ecap * 2 > need else need
        if c < 16:
            c = 16
        cdef size_t i = c * sizeof(i64)
        if (grow(<void**>&self.e_src, i) or grow(<void**>&self.e_dst, i) or grow(<void**>&self.e_onext, i)
                or grow(<void**>&self.e_oprev, i) or grow(<void**>&self.e_inext, i)
                or grow(<void**>&self.e_iprev, i)):
            return NOMEM
        self.ecap = c
        return OK

    cdef int _mark(self, i64 t, uint8_t flag) noexcept nogil:
        cdef i64 c
        if self.flags[t] == 0:
            if self.ndirty == self.dcap:
                c = self.dcap * 2 if self.dcap > 0 else 64
                if grow(<void**>&self.dirty, c * sizeof(i64)):
                    return NOMEM
                self.dcap = c
            self.dirty[self.ndirty] = t
            self.ndirty += 1
        self.flags[t] |= flag
        return OK

    cdef void _clear_dirty(self) noexcept nogil:
        cdef i64 i
        for i in range(self.ndirty):
            self.flags[self.dirty[i]] = 0
        self.ndirty = 0

    # -- edges --------------------------------------------------------------------------------

    cdef i64 _find_edge(self, i64 a, i64 b) noexcept nogil:
        """The record of edge a -> b, or -1; scans the shorter of a's successors, b's predecessors."""
        cdef i64 e, na = 0, nb = self.indeg[b]
        e = self.out_head[a]
        while e >= 0 and na <= nb:
            na += 1
            e = self.e_onext[e]
        if na <= nb:
            e = self.out_head[a]
            while e >= 0 and self.e_dst[e] != b:
                e = self.e_onext[e]
        else:
            e = self.in_head[b]
            while e >= 0 and self.e_src[e] != a:
                e = self.e_inext[e]
        return e

    cdef int _new_edge(self, i64 a, i64 b) noexcept nogil:
        cdef i64 e
        if self.efree >= 0:
            e = self.efree
            self.efree = self.e_onext[e]
        else:
            if self._reserve_edges(self.etop + 1):
                return NOMEM
            e = self.etop
            self.etop += 1
        self.e_src[e] = a
        self.e_dst[e] = b
        self.e_oprev[e] = -1
        self.e_onext[e] = self.out_head[a]
        if self.out_head[a] >= 0:
            self.e_oprev[self.out_head[a]] = e
        self.out_head[a] = e
        self.e_iprev[e] = -1
        self.e_inext[e] = self.in_head[b]
        if self.in_head[b] >= 0:
            self.e_iprev[self.in_head[b]] = e
        self.in_head[b] = e
        self.indeg[b] += 1
        self.nedges += 1
        return OK

    cdef void _drop_edge(self, i64 e) noexcept nogil:
        cdef i64 a = self.e_src[e], b = self.e_dst[e]
        if self.e_oprev[e] >= 0:
            self.e_onext[self.e_oprev[e]] = self.e_onext[e]
        else:
            self.out_head[a] = self.e_onext[e]
        if self.e_onext[e] >= 0:
            self.e_oprev[self.e_onext[e]] = self.e_oprev[e]
        if self.e_iprev[e] >= 0:
            self.e_inext[self.e_iprev[e]] = self.e_inext[e]
        else:
            self.in_head[b] = self.e_inext[e]
        if self.e_inext[e] >= 0:
            self.e_iprev[self.e_inext[e]] = self.e_iprev[e]
        self.indeg[b] -= 1
        self.nedges -= 1
        self.e_onext[e] = self.efree
        self.efree = e

    # -- device lists -------------------------------------------------------------------------

    cdef void _reset_devices(self) noexcept nogil:
        cdef i64 d
        for d in range(self.num_devices):
            self.head[d] = -1
            self.tail[d] = -1

    cdef int _reserve_buf(self, i64 need) noexcept nogil:
        cdef i64 c
        if need > self.bcap:
            c = self.bcap * 2 if self.bcap * 2 > need else need
            if grow(<void**>&self.buf, c * sizeof(i64)):
                return NOMEM
            self.bcap = c
        return OK

    cdef int _full(self) noexcept nogil:
        """Algorithm 1 over every task; CYCLE when some cannot be ordered, VANISH (err_task)
        when a task breaks end > start."""
        cdef i64 t, count = 0
        if self._reserve_buf(self.live):
            return NOMEM
        for t in range(self.n):
            if self.alive[t]:
                self.buf[count] = t
                count += 1
        self._reset_devices()
        self.last_processed = 0
        return _replay(self, count, True)

    cdef double _makespan(self) noexcept nogil:
        cdef double m = 0.0
        cdef i64 d
        for d in range(self.num_devices):
            if self.tail[d] >= 0 and self.end_[self.tail[d]] > m:
                m = self.end_[self.tail[d]]
        return m

    # -- checks -------------------------------------------------------------------------------

    cdef i64 _check_task(self, tid) except -1:
        if isinstance(tid, bool) or not isinstance(tid, (int, np.integer)) or not 0 <= tid < self.n \
                or not self.alive[<i64>tid]:
            raise GraphError(f"no task {tid!r} (ids are 0..{self.n - 1}, removed ids stay unused)")
        return tid

    cdef i64 _check_device(self, device) except -1:
        if isinstance(device, bool) or not isinstance(device, (int, np.integer)) \
                or not 0 <= device < self.num_devices:
            raise GraphError(f"device must be an int in 0..{self.num_devices - 1}; got {device!r}")
        return device

    cdef i64 _check_priority(self, priority, what) except? -1:
        if isinstance(priority, bool) or not isinstance(priority, (int, np.integer)) \
                or not -2**63 <= priority < 2**63:
            raise GraphError(f"priority of {what} must be an int64; got {priority!r}")
        return priority

    cdef double _check_exe(self, exe, what) except -1.0:
        if isinstance(exe, bool) or not isinstance(exe, (int, float, np.integer, np.floating)) \
                or not isfinite(exe) or not exe > 0:
            raise GraphError(f"exe of {what} must be a finite number of seconds > 0; got {exe!r}")
        return exe

    cdef _raise(self, int rv):
        if rv == NOMEM:
            raise MemoryError("the simulation engine ran out of memory")
        if rv == VANISH:
            from flexrt.simulator.engine import _vanishing_exe
            raise _vanishing_exe(self.err_task, self.exe_[self.err_task], self.err_start)
        if rv == CYCLE:
            from flexrt.simulator.engine import _cycle_error
            stuck = [t for t in range(self.n) if self.alive[t] and self.aux[t] > 0]
            raise _cycle_error(stuck, _PredView(self))

    # -- public API ---------------------------------------------------------------------------

    @classmethod
    def from_arrays(cls, num_devices, device, exe, edge_src, edge_dst, priority=None):
        """Tasks 0..n-1 with these devices, exe times and priorities (default 0), and the edges
        edge_src[i] -> edge_dst[i] (duplicates ignored), e.g. from the lowering's COO arrays.

        Example:
            >>> Engine.from_arrays(1, [0, 0], [1.0, 2.0], [0], [1]).simulate_full()
            3.0
        """
        from flexrt.simulator.engine import checked_arrays
        cdef Engine eng = cls(num_devices)
        dev, x, src, dst, pr = checked_arrays(eng.num_devices, device, exe, edge_src, edge_dst, priority)
        n = dev.size
        if eng._reserve_tasks(n) or eng._reserve_edges(src.size) or eng._fill(dev, x, pr, src, dst):
            raise MemoryError("the simulation engine ran out of memory")
        return eng

    @classmethod
    def from_graph_arrays(cls, num_devices, device, exe, edge_src, edge_dst, priority):
        """``from_arrays`` for a lowering's graph (``TaskGraph.engine``): int64 devices and
        priorities, float64 times, each checked positive where the task was made, and the edges
        sorted and unique (``GraphCore.edge_arrays``), so NumPy's passes over them are skipped."""
        cdef Engine eng = cls(num_devices)
        dev = np.ascontiguousarray(device, dtype=np.int64)
        x = np.ascontiguousarray(exe, dtype=np.float64)
        pr = np.ascontiguousarray(priority, dtype=np.int64)
        src = np.ascontiguousarray(edge_src, dtype=np.int64)
        dst = np.ascontiguousarray(edge_dst, dtype=np.int64)
        if dev.size and (dev.min() < 0 or dev.max() >= eng.num_devices):     # what C would index out of bounds
            from flexrt.errors import GraphError
            raise GraphError(f"a task's device is outside 0..{eng.num_devices - 1}")
        if eng._reserve_tasks(dev.size) or eng._reserve_edges(src.size) or eng._fill(dev, x, pr, src, dst):
            raise MemoryError("the simulation engine ran out of memory")
        return eng

    cdef int _fill(self, const i64[::1] dev, const double[::1] x, const i64[::1] pr, const i64[::1] src,
                   const i64[::1] dst) noexcept nogil:
        cdef i64 t, e, m = src.shape[0], n = dev.shape[0]
        for t in range(n):
            self._init_task(t, dev[t], x[t], pr[t])
        self.n = n
        self.live = n
        for e in range(m - 1, -1, -1):  # head insertion, so each source's list comes out in order
            if self._new_edge(src[e], dst[e]):
                return NOMEM
        return OK

    cdef void _init_task(self, i64 t, i64 d, double x, i64 p) noexcept nogil:
        self.dev_[t] = d
        self.exe_[t] = x
        self.prio[t] = p
        self.rdy_[t] = NAN
        self.start_[t] = NAN
        self.end_[t] = NAN
        self.qkey[t] = NAN
        self.dprev[t] = -1
        self.dnext[t] = -1
        self.out_head[t] = -1
        self.in_head[t] = -1
        self.indeg[t] = 0
        self.alive[t] = 1
        self.linked[t] = 0
        self.queued[t] = 0
        self.flags[t] = 0
        self.inset[t] = 0

    def add_task(self, device, exe, priority=0) -> int:
        """Add a task; returns its id (one more than the last id ever given)."""
        cdef i64 d = self._check_device(device)
        cdef double x = self._check_exe(exe, f"the new task on device {d}")
        cdef i64 p = self._check_priority(priority, "the new task")
        cdef i64 t = self.n
        if self._reserve_tasks(t + 1):
            raise MemoryError("the simulation engine ran out of memory")
        self._init_task(t, d, x, p)
        self.n += 1
        self.live += 1
        if self._mark(t, FRESH | LINK):
            raise MemoryError("the simulation engine ran out of memory")
        return t

    def remove_task(self, tid) -> None:
        """Remove a task and its edges."""
        cdef i64 t = self._check_task(tid)
        if self._remove(t):
            raise MemoryError("the simulation engine ran out of memory")

    cdef int _remove(self, i64 t) noexcept nogil:
        cdef i64 e, n
        while self.out_head[t] >= 0:
            e = self.out_head[t]
            if self._mark(self.e_dst[e], READY):
                return NOMEM
            self._drop_edge(e)
        while self.in_head[t] >= 0:
            self._drop_edge(self.in_head[t])
        if self.linked[t]:
            n = unlink(self, t)
            if n >= 0 and self._mark(n, START):
                return NOMEM
        self.alive[t] = 0
        self.live -= 1
        return OK

    def add_edge(self, a, b) -> bool:
        """Add the dependency a -> b; False (and no change) when it exists already."""
        cdef i64 x = self._check_task(a), y = self._check_task(b)
        if x == y:
            raise GraphError(f"cycle: edge from task {x} to itself")
        if self._find_edge(x, y) >= 0:
            return False
        if self._new_edge(x, y) or self._mark(y, READY):
            raise MemoryError("the simulation engine ran out of memory")
        return True

    def remove_edge(self, a, b) -> None:
        cdef i64 x = self._check_task(a), y = self._check_task(b)
        cdef i64 e = self._find_edge(x, y)
        if e < 0:
            raise GraphError(f"no edge {x} -> {y} to remove")
        self._drop_edge(e)
        if self._mark(y, READY):
            raise MemoryError("the simulation engine ran out of memory")

    def apply_changes(self, changes) -> None:
        """Apply a task graph's change set (``GraphCore.changes``): remove tasks, add the new ones
        (ids must continue this engine's), add and remove edges between live tasks (a removed edge
        this engine never had is ignored)."""
        dead, first, dev, exe, prio, alive, (add_src, add_dst), (rm_src, rm_dst) = changes
        cdef i64 t, i, e, x, y
        if first != self.n:
            raise GraphError(f"change set starts at task {first}; this engine holds {self.n} tasks")
        for t in dead:
            self._check_task(t)
            if self._remove(t):
                raise MemoryError("the simulation engine ran out of memory")
        cdef const i64[::1] n_d = np.ascontiguousarray(dev, dtype=np.int64)
        cdef const double[::1] n_x = np.ascontiguousarray(exe, dtype=np.float64)
        cdef const i64[::1] n_p = np.ascontiguousarray(prio, dtype=np.int64)
        if n_d.shape[0] and (np.min(dev) < 0 or np.max(dev) >= self.num_devices
                             or not np.all(np.isfinite(exe) & (np.asarray(exe) > 0))):
            raise GraphError("change set: a new task has a device out of range or a non-positive exe")
        if self._reserve_tasks(self.n + n_d.shape[0]):
            raise MemoryError("the simulation engine ran out of memory")
        for i in range(n_d.shape[0]):
            t = self.n
            self._init_task(t, n_d[i], n_x[i], n_p[i])
            self.n += 1
            self.live += 1
            if self._mark(t, FRESH | LINK):
                raise MemoryError("the simulation engine ran out of memory")
        for i in range(len(dev)):
            if not alive[i]:
                self.remove_task(first + i)
        cdef const i64[::1] a_s = np.ascontiguousarray(add_src, dtype=np.int64)
        cdef const i64[::1] a_d = np.ascontiguousarray(add_dst, dtype=np.int64)
        cdef const i64[::1] r_s = np.ascontiguousarray(rm_src, dtype=np.int64)
        cdef const i64[::1] r_d = np.ascontiguousarray(rm_dst, dtype=np.int64)
        for i in range(a_s.shape[0]):
            x, y = a_s[i], a_d[i]
            if not (0 <= x < self.n and 0 <= y < self.n and self.alive[x] and self.alive[y]) or x == y:
                raise GraphError(f"change set: cannot add edge {x} -> {y}")
            if self._find_edge(x, y) < 0 and (self._new_edge(x, y) or self._mark(y, READY)):
                raise MemoryError("the simulation engine ran out of memory")
        for i in range(r_s.shape[0]):
            x, y = r_s[i], r_d[i]
            if not (0 <= x < self.n and 0 <= y < self.n and self.alive[x] and self.alive[y]):
                raise GraphError(f"change set: cannot remove edge {x} -> {y}")
            e = self._find_edge(x, y)
            if e >= 0:
                self._drop_edge(e)
                if self._mark(y, READY):
                    raise MemoryError("the simulation engine ran out of memory")

    def has_edge(self, a, b) -> bool:
        return self._find_edge(self._check_task(a), self._check_task(b)) >= 0

    def set_exe(self, tid, exe) -> None:
        cdef i64 t = self._check_task(tid)
        cdef double x = self._check_exe(exe, f"task {t}")
        if x != self.exe_[t]:
            self.exe_[t] = x
            if self._mark(t, START):
                raise MemoryError("the simulation engine ran out of memory")

    def set_device(self, tid, device) -> None:
        cdef i64 t = self._check_task(tid), d = self._check_device(device), n
        if d == self.dev_[t]:
            return
        if self.linked[t]:
            n = unlink(self, t)
            if n >= 0 and self._mark(n, START):
                raise MemoryError("the simulation engine ran out of memory")
        self.dev_[t] = d
        if self._mark(t, LINK):
            raise MemoryError("the simulation engine ran out of memory")

    def set_priority(self, tid, priority) -> None:
        cdef i64 t = self._check_task(tid), p = self._check_priority(priority, f"task {tid}"), n
        if p == self.prio[t]:
            return
        if self.linked[t]:  # its key changes: it leaves its device list and is placed anew
            n = unlink(self, t)
            if n >= 0 and self._mark(n, START):
                raise MemoryError("the simulation engine ran out of memory")
        self.prio[t] = p
        if self._mark(t, LINK):
            raise MemoryError("the simulation engine ran out of memory")

    def simulate_full(self) -> float:
        """Algorithm 1: every timing and device order rebuilt; returns the makespan."""
        cdef int rv
        self.simulated = False
        self._clear_dirty()
        with nogil:
            rv = self._full()
        self._raise(rv)
        self.simulated = True
        return self._makespan()

    def simulate_delta(self) -> float:
        """Algorithm 2: re-simulate what the edits since the last simulation touch; the timeline
        equals ``simulate_full``'s exactly. Without a previous simulation this is a full one."""
        cdef int rv
        if not self.simulated:
            return self.simulate_full()
        with nogil:
            rv = _delta(self)
            self._clear_dirty()
        if rv == FALLBACK:
            self.fallbacks += 1
            return self.simulate_full()
        if rv == FULL:
            self.full_replays += 1
            return self.simulate_full()
        if rv:
            self.simulated = False
            self._raise(rv)
        return self._makespan()

    def copy(self) -> Engine:
        """An independent engine with the same tasks (same ids), edges and timeline."""
        ids = self.task_ids()
        src, dst = self.edges()
        cdef Engine other = Engine.from_arrays(self.num_devices, np.zeros(self.n, np.int64),
                                               np.ones(self.n), src, dst)
        cdef i64 t
        for t in range(self.n):
            other.dev_[t] = self.dev_[t]
            other.exe_[t] = self.exe_[t]
            other.prio[t] = self.prio[t]
            other.rdy_[t] = self.rdy_[t]
            other.start_[t] = self.start_[t]
            other.end_[t] = self.end_[t]
            other.dprev[t] = self.dprev[t]
            other.dnext[t] = self.dnext[t]
            other.linked[t] = self.linked[t]
            other.alive[t] = self.alive[t]
        for t in range(self.num_devices):
            other.head[t] = self.head[t]
            other.tail[t] = self.tail[t]
        other.live = self.live
        for t in range(self.ndirty):
            if other._mark(self.dirty[t], self.flags[self.dirty[t]]):
                raise MemoryError()
        other.simulated = self.simulated
        other.delta_probe_pops = self.delta_probe_pops
        other.delta_replay_ratio = self.delta_replay_ratio
        other.delta_direct_ratio = self.delta_direct_ratio
        other.delta_full_ratio = self.delta_full_ratio
        return other

    def compact(self):
        """Renumber the live tasks 0..num_tasks-1 in id order, in place, and return their old ids
        (int64; new id i was old_ids[i]). Only the order of ids breaks ties, so the timeline,
        the device orders and any pending edits carry over unchanged; memory and the O(ids)
        passes (full simulation, ``task_ids``) shrink back to the live tasks. For long searches
        that add and remove tasks."""
        old_ids = self.task_ids()
        _compact(self)
        return old_ids

    @property
    def num_tasks(self) -> int:
        return self.live

    @property
    def num_edges(self) -> int:
        return self.nedges

    def task_ids(self):
        """Ids of the live tasks, ascending (int64)."""
        ids = np.empty(self.live, np.int64)
        cdef i64[::1] v = ids
        cdef i64 t, k = 0
        for t in range(self.n):
            if self.alive[t]:
                v[k] = t
                k += 1
        return ids

    def edges(self):
        """(edge_src, edge_dst) int64 arrays, sorted by source then destination."""
        src = np.empty(self.nedges, np.int64)
        dst = np.empty(self.nedges, np.int64)
        cdef i64[::1] s = src, d = dst
        cdef i64 t, e, k = 0
        for t in range(self.n):
            if self.alive[t]:
                e = self.out_head[t]
                while e >= 0:
                    s[k] = t
                    d[k] = self.e_dst[e]
                    k += 1
                    e = self.e_onext[e]
        order = np.lexsort((dst, src))
        return src[order], dst[order]

    def device(self, tid) -> int:
        return self.dev_[self._check_task(tid)]

    def exe(self, tid) -> float:
        return self.exe_[self._check_task(tid)]

    def priority(self, tid) -> int:
        return self.prio[self._check_task(tid)]

    def preds(self, tid) -> list:
        cdef i64 t = self._check_task(tid), e = self.in_head[t]
        out = []
        while e >= 0:
            out.append(self.e_src[e])
            e = self.e_inext[e]
        return sorted(out)

    def succs(self, tid) -> list:
        cdef i64 t = self._check_task(tid), e = self.out_head[t]
        out = []
        while e >= 0:
            out.append(self.e_dst[e])
            e = self.e_onext[e]
        return sorted(out)

    def ready(self, tid) -> float:
        return self.rdy_[self._check_task(tid)]

    def start(self, tid) -> float:
        return self.start_[self._check_task(tid)]

    def end(self, tid) -> float:
        return self.end_[self._check_task(tid)]

    def timeline(self):
        """(ids, device, ready, start, end) arrays of the live tasks, by id, as of the last
        simulation (NaN times for tasks added since)."""
        ids = self.task_ids()
        k = ids.size
        dev = np.empty(k, np.int64)
        r = np.empty(k, np.float64)
        s = np.empty(k, np.float64)
        en = np.empty(k, np.float64)
        cdef const i64[::1] iv = ids
        cdef i64[::1] dv = dev
        cdef double[::1] rv = r, sv = s, ev = en
        cdef i64 i, t
        for i in range(k):
            t = iv[i]
            dv[i] = self.dev_[t]
            rv[i] = self.rdy_[t]
            sv[i] = self.start_[t]
            ev[i] = self.end_[t]
        return ids, dev, r, s, en

    def device_order(self, device) -> list:
        """Task ids on a device in FIFO order, as of the last simulation."""
        cdef i64 t = self.head[self._check_device(device)]
        out = []
        while t >= 0:
            out.append(t)
            t = self.dnext[t]
        return out

    def busy_time(self):
        """Sum of exe per device (float64 array), summed in id order."""
        busy = np.zeros(self.num_devices, np.float64)
        cdef double[::1] b = busy
        cdef i64 t
        for t in range(self.n):
            if self.alive[t]:
                b[self.dev_[t]] += self.exe_[t]
        return busy

    def makespan(self) -> float:
        """Max end over all tasks, as of the last simulation."""
        return self._makespan()


cdef class _PredView:
    """preds[t] for the cycle report, without copying the whole graph."""
    cdef Engine eng

    def __cinit__(self, Engine eng):
        self.eng = eng

    def __getitem__(self, i64 t):
        return self.eng.preds(t)


include "_lists.pxi"
include "_replay.pxi"
include "_delta.pxi"
