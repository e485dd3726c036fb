# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The task graph's storage and its hot emission loops, compiled (private; ``TaskGraph`` wraps it).

Tasks are columns (kind, device, exe time, priority, transfer, alive, owner) in C++ vectors; ids
count up and are never reused. Every task, dependency and memory record belongs to an owner (an
int handed out by ``owner``); ``drop`` removes all of an owner's work, so that an incremental
update re-emits only what it touches. Dependencies are counted (two owners may need one edge): an
edge exists while its count is positive. Changes since the engine was last in step are tracked and
applied to it in one call (``sync``).

The bulk methods emit what lowering would emit task by task, in the same order (priorities are the
owner's rank plus the task's index within its owner, so the order is part of the result):
``pieces`` (a compute operator's forward and backward per piece), ``transfer`` (one task per hop
of a route), ``ring`` (a ring AllReduce), ``moves`` (an operand edge's one-to-one moves).
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libcpp.unordered_map cimport unordered_map
from libc.string cimport memcpy
from libcpp.algorithm cimport sort
from libcpp.vector cimport vector
from cython.operator cimport dereference as deref, preincrement as inc

import numpy as np

ctypedef int64_t i64

# task kinds (the order of ``TaskKind``) and memory kinds
cdef enum:
    FORWARD = 0
    BACKWARD = 1
    UPDATE = 2
    REDUCE = 3
    LOSS = 4
    TRANSFER = 5

MEMORY_KINDS = ("weights", "gradients", "activations")

cdef i64 MASK = 0xFFFFFFFF  # the destination half of an edge key (a C constant: no Python int per use)


cdef object _column(const void* data, i64 lo, i64 hi, dtype):
    """A NumPy copy of elements [lo, hi) of a C array whose elements are ``dtype``'s size."""
    out = np.empty(hi - lo, dtype=dtype)
    cdef uint8_t[::1] raw = out.view(np.uint8)
    cdef size_t size = out.itemsize
    if hi > lo:
        memcpy(&raw[0], <const char*>data + lo * size, (hi - lo) * size)
    return out


cdef inline i64 ekey(i64 a, i64 b) noexcept nogil:
    return (a << 32) | b


cdef class GraphCore:
    """Columns of the tasks, counted dependencies, owners, memory records and the change set."""

    cdef vector[int8_t] kind_
    cdef vector[i64] dev_
    cdef vector[double] exe_
    cdef vector[i64] prio_
    cdef vector[i64] xfer_
    cdef vector[uint8_t] alive_
    cdef vector[int32_t] owner_
    cdef vector[i64] xel_, xby_, xhops_
    cdef vector[int8_t] xcat_
    cdef unordered_map[i64, int32_t] edges_
    cdef vector[vector[i64]] otasks, oedges, omem
    cdef vector[i64] orank
    cdef readonly i64 live
    cdef readonly i64 num_devices
    cdef readonly bint incremental
    cdef vector[i64] flat                 # the edges, when not incremental (repeats allowed)
    cdef i64 synced
    cdef bint tracking
    cdef vector[i64] dead
    cdef vector[i64] touched             # edge keys changed since the last sync (repeats allowed)
    cdef object hop_fn, route_fn
    cdef unordered_map[i64, i64] route_at   # src * num_devices + dst -> route index
    cdef vector[i64] r_start, r_len, h_dev
    cdef vector[double] r_latency, h_lat, h_bw

    def __cinit__(self, i64 num_devices, hop_fn, route_fn=None, bint incremental=True):
        """``hop_fn(src, dst, num_bytes)`` -> (engine devices, times) of each hop of that transfer.
        With ``route_fn(src, dst)`` -> (engine devices, latencies, bandwidths, the route's summed
        latency) of each hop, the cost of a transfer is linear (``link.latency_s + bytes /
        link.bandwidth`` per hop, FlexFlow's A2) and hop times are computed here, with the same
        float operations as ``Lowering._hops``: ``(latency + bytes / bandwidth) - latency + route
        latency``. Without ``incremental`` (a graph built once and simulated once) edges are kept
        as a plain list and owners' work cannot be dropped: less memory and time."""
        self.num_devices = num_devices
        self.incremental = incremental
        self.hop_fn = hop_fn
        self.route_fn = route_fn
        self.live = 0
        self.synced = 0
        self.tracking = False

    # -- owners ----------------------------------------------------------------------------------
    def owner(self, i64 rank) -> int:
        """A new owner whose tasks get priorities ``rank``, ``rank + 1``, ... in emission order."""
        self.otasks.push_back(vector[i64]())
        self.oedges.push_back(vector[i64]())
        self.omem.push_back(vector[i64]())
        self.orank.push_back(rank)
        return self.orank.size() - 1

    def drop(self, int oid) -> None:
        """Remove every task, dependency and memory record of owner ``oid`` (which stays usable)."""
        if not self.incremental:
            raise ValueError("this task graph was built without incremental=True: its owners' work cannot be dropped")
        cdef i64 t, key
        cdef vector[i64]* ts = &self.otasks[oid]
        cdef vector[i64]* es = &self.oedges[oid]
        cdef unordered_map[i64, int32_t].iterator it
        for key in deref(es):
            it = self.edges_.find(key)
            if it == self.edges_.end():
                continue
            if deref(it).second == 1:
                self.edges_.erase(it)
                self.touched.push_back(key)
            else:
                self.edges_[key] = deref(it).second - 1
        es.clear()
        for t in deref(ts):
            if self.alive_[t]:
                self.alive_[t] = 0
                self.live -= 1
                if t < self.synced:
                    self.dead.push_back(t)
        ts.clear()
        self.omem[oid].clear()

    def owner_tasks(self, int oid) -> list:
        return [t for t in self.otasks[oid]]

    # -- emission ----------------------------------------------------------------------------------
    cpdef i64 task(self, int oid, int kind, i64 device, double exe) except -1:
        """Append a task of owner ``oid``; returns its id."""
        if not exe > 0:
            from flexrt.errors import StrategyError
            raise StrategyError(f"a task on device {device} got a non-positive time {exe!r} from the cost model")
        return self._task(oid, kind, device, exe, -1)

    cdef inline i64 _task(self, int oid, int kind, i64 device, double exe, i64 xid) noexcept:
        cdef i64 t = self.kind_.size()
        cdef vector[i64]* ts = &self.otasks[oid]
        self.kind_.push_back(kind)
        self.dev_.push_back(device)
        self.exe_.push_back(exe)
        self.prio_.push_back(self.orank[oid] + <i64>ts.size())
        self.xfer_.push_back(xid)
        self.alive_.push_back(1)
        self.owner_.push_back(oid)
        if self.incremental:
            ts.push_back(t)
        self.live += 1
        return t

    cpdef void edge(self, int oid, i64 a, i64 b) noexcept:
        """Count one more need (by ``oid``) of the dependency a -> b."""
        cdef i64 key = ekey(a, b)
        if not self.incremental:
            self.flat.push_back(key)
            return
        cdef unordered_map[i64, int32_t].iterator it = self.edges_.find(key)
        if it == self.edges_.end():
            self.edges_[key] = 1
            if self.tracking:
                self.touched.push_back(key)
        else:
            self.edges_[key] = deref(it).second + 1
        self.oedges[oid].push_back(key)

    def fan(self, int oid, before, after) -> None:
        """Every a in ``before`` -> every b in ``after``."""
        cdef i64 a, b
        for a in before:
            for b in after:
                self.edge(oid, a, b)

    def chains_flat(self, int oid, int kind, devices, exe, tasks, group_ptr, inst_ptr) -> list:
        """Running sums: per instance i, on ``devices[i]``, one task taking ``exe[i]`` per
        contribution after the first, after the sum so far and the contribution's tasks (the first
        contribution starts the sum). Instance i's contributions are groups ``inst_ptr[i]`` ..
        ``inst_ptr[i + 1] - 1``, group g the tasks ``tasks[group_ptr[g]:group_ptr[g + 1]]``. Returns
        per instance the task that completes its sum (a one-item list), or None where it has fewer
        than two contributions (nothing to sum)."""
        cdef i64[::1] ts = np.ascontiguousarray(tasks, dtype=np.int64)
        cdef i64[::1] gp = np.ascontiguousarray(group_ptr, dtype=np.int64)
        cdef i64[::1] ip = np.ascontiguousarray(inst_ptr, dtype=np.int64)
        cdef i64 i, g, k, t, a, acc_lo, acc_hi, acc_t
        cdef double x
        out = []
        for i in range(ip.shape[0] - 1):
            if ip[i + 1] - ip[i] < 2:
                out.append(None)
                continue
            g = ip[i]
            acc_lo, acc_hi, acc_t = gp[g], gp[g + 1], -1
            x = exe[i]
            for g in range(ip[i] + 1, ip[i + 1]):
                t = self.task(oid, kind, devices[i], x)
                if acc_t < 0:
                    for k in range(acc_lo, acc_hi):
                        self.edge(oid, ts[k], t)
                else:
                    self.edge(oid, acc_t, t)
                for k in range(gp[g], gp[g + 1]):
                    self.edge(oid, ts[k], t)
                acc_t = t
            out.append([acc_t])
        return out

    def pairs(self, srcs, dsts) -> None:
        """``srcs[i]`` -> ``dsts[i]`` for every i, each needed by its destination's owner."""
        cdef i64[::1] s = np.ascontiguousarray(srcs, dtype=np.int64), d = np.ascontiguousarray(dsts, dtype=np.int64)
        cdef i64 i
        for i in range(s.shape[0]):
            self.edge(self.owner_[d[i]], s[i], d[i])

    def memory(self, int oid, i64 device, int kind, i64 num_bytes) -> None:
        """Record ``num_bytes`` of memory kind ``kind`` (index in ``MEMORY_KINDS``) on ``device``."""
        self._mem(oid, device, kind, num_bytes)

    def memory_each(self, int oid, devices, int kind, i64 num_bytes) -> None:
        """``memory`` on each of ``devices``."""
        cdef i64 d
        for d in devices:
            self._mem(oid, d, kind, num_bytes)

    def after(self, int oid, int kind, devices, exe, deps) -> list:
        """Per i a task on ``devices[i]`` taking ``exe[i]``, after every task in ``deps[i]``; their ids."""
        cdef i64 i, t, a
        out = []
        for i in range(len(devices)):
            t = self.task(oid, kind, devices[i], exe[i])
            for a in deps[i]:
                self.edge(oid, a, t)
            out.append(t)
        return out

    cdef inline void _mem(self, int oid, i64 device, int kind, i64 num_bytes) noexcept:
        cdef vector[i64]* m = &self.omem[oid]
        m.push_back(device)
        m.push_back(kind)
        m.push_back(num_bytes)

    cpdef i64 transfer(self, int oid, i64 src, i64 dst, i64 elements, i64 itemsize, int category,
                       before) except -1:
        """One transfer src -> dst: a task per hop, all after ``before``; returns the first hop's id
        (the hops are consecutive ids, each naming the transfer in its ``transfer`` column)."""
        cdef i64 first = self._emit_transfer(oid, src, dst, elements, itemsize, category), a
        for a in before:
            self._after(oid, a, first)
        return first

    cdef inline void _after(self, int oid, i64 a, i64 first) noexcept:
        """a -> every hop of the transfer whose first hop is ``first``."""
        cdef i64 j
        for j in range(self.xhops_[self.xfer_[first]]):
            self.edge(oid, a, first + j)

    cdef i64 _emit_transfer(self, int oid, i64 src, i64 dst, i64 elements, i64 itemsize,
                            int category) except -1:
        cdef i64 nbytes = elements * itemsize
        cdef i64 xid = self.xby_.size(), first = self.kind_.size(), j, nh, ri, h
        cdef double nb = <double>nbytes
        cdef vector[double] exe
        cdef vector[i64] devs
        if self.route_fn is not None:
            ri = self._route(src, dst)
            nh, h = self.r_len[ri], self.r_start[ri]
            for j in range(nh):
                devs.push_back(self.h_dev[h + j])
                exe.push_back(((self.h_lat[h + j] + nb / self.h_bw[h + j]) - self.h_lat[h + j]) + self.r_latency[ri])
        else:
            d, x_ = self.hop_fn(src, dst, nbytes)
            for j in range(len(d)):
                devs.push_back(d[j])
                exe.push_back(x_[j])
            nh = devs.size()
        for j in range(nh):
            if not exe[j] > 0:
                from flexrt.errors import StrategyError
                raise StrategyError(f"a transfer {src} -> {dst} of {nbytes} bytes got a non-positive hop time "
                                    f"{exe[j]!r} from the cost model")
        self.xel_.push_back(elements)
        self.xby_.push_back(nbytes)
        self.xcat_.push_back(category)
        self.xhops_.push_back(nh)
        for j in range(nh):
            self._task(oid, TRANSFER, devs[j], exe[j], xid)
        return first

    cdef i64 _route(self, i64 src, i64 dst) except -1:
        cdef i64 key = src * self.num_devices + dst, ri
        cdef unordered_map[i64, i64].iterator it = self.route_at.find(key)
        if it != self.route_at.end():
            return deref(it).second
        devs, lats, bws, latency = self.route_fn(src, dst)
        ri = self.r_start.size()
        self.r_start.push_back(self.h_dev.size())
        self.r_len.push_back(len(devs))
        self.r_latency.push_back(latency)
        for d, l, b in zip(devs, lats, bws):
            self.h_dev.push_back(d)
            self.h_lat.push_back(l)
            self.h_bw.push_back(b)
        self.route_at[key] = ri
        return ri

    cdef inline void _hops_to(self, int oid, i64 first, i64 b) noexcept:
        cdef i64 j
        for j in range(self.xhops_[self.xfer_[first]]):
            self.edge(oid, first + j, b)

    def hops(self, i64 first) -> range:
        """The ids of the hops of the transfer whose first hop is ``first``."""
        return range(first, first + self.xhops_[self.xfer_[first]])

    def pieces(self, int oid, devices, fwd_exe, bwd_exe, act_bytes) -> int:
        """A compute operator: per piece p a forward (id base + 2p) and a backward (base + 2p + 1) on
        ``devices[p]``, the backward after the forward, and its activations recorded; returns base."""
        cdef i64 base = self.kind_.size(), p, f, n = len(devices), d
        cdef double fx, bx
        for p in range(n):
            fx, bx, d = fwd_exe[p], bwd_exe[p], devices[p]
            if not (fx > 0 and bx > 0):
                from flexrt.errors import StrategyError
                raise StrategyError(f"a piece on device {d} got a non-positive time ({fx!r}, {bx!r}) "
                                    f"from the cost model")
            f = self._task(oid, FORWARD, d, fx, -1)
            self._task(oid, BACKWARD, d, bx, -1)
            self.edge(oid, f, f + 1)
            self._mem(oid, d, 2, act_bytes[p])
        return base

    def ring(self, int oid, devices, ready, i64 elements, i64 itemsize, int category, reduce_exe, step_latency=None):
        """Ring AllReduce of ``elements`` over ``devices``: member i sends 2(n-1)/n of the data to
        i + 1 after ``ready[i]`` and ``ready[i + 1]``, then member i + 1 sums (``reduce_exe``).
        ``step_latency[i]`` (per hop of member i's send) is added to each hop: the latencies of the
        ring's other 2(n-1) - 1 steps, which the one pipelined transfer per member stands for.
        Returns (per member the task after which it holds the sum, per member its send's first hop)."""
        cdef i64 n = len(devices), total = 2 * (n - 1) * elements, i, j, share, first, r, a, h
        firsts = [0] * n
        done = [0] * n
        for i in range(n):
            j = (i + 1) % n
            share = total // n + (1 if i < total % n else 0)
            first = self._emit_transfer(oid, devices[i], devices[j], share, itemsize, category)
            if step_latency is not None:
                for h, extra in enumerate(step_latency[i]):
                    self.exe_[first + h] += <double>extra
            for a in ready[i]:
                self._after(oid, a, first)
            for a in ready[j]:
                self._after(oid, a, first)
            firsts[i] = first
        for i in range(n):  # the sums, in the order the sends were made
            j = (i + 1) % n
            r = self.task(oid, REDUCE, devices[j], reduce_exe[j])
            self._hops_to(oid, firsts[i], r)
            done[j] = r
        return done, firsts

    def moves(self, int oid, i64 pbase, i64 cbase, qs, ps, qdevs, pdevs, elements, i64 itemsize, bint grad):
        """One-to-one moves of an operand edge, producer piece ``qs[m]`` -> consumer piece ``ps[m]``
        (ids of pieces as ``pieces`` lays them out from ``pbase`` / ``cbase``): on one device only
        dependencies; else a transfer forward and, for a gradient, one back. Returns per move the
        first hops of the forward and backward transfers (-1 where none), as two lists."""
        cdef i64 m, n = len(qs), q, p, qd, pd, pf, pb, cf, cb, fx, bx
        fwd_first = [-1] * n
        bwd_first = [-1] * n
        for m in range(n):
            q, p, qd, pd = qs[m], ps[m], qdevs[m], pdevs[m]
            pf, pb, cf, cb = pbase + 2 * q, pbase + 2 * q + 1, cbase + 2 * p, cbase + 2 * p + 1
            if qd == pd:
                self.edge(oid, pf, cf)
                self.edge(oid, cb, pb)
                continue
            fx = self._emit_transfer(oid, qd, pd, elements[m], itemsize, 1)
            self._after(oid, pf, fx)
            self._hops_to(oid, fx, cf)
            fwd_first[m] = fx
            if not grad:
                self.edge(oid, cb, pb)
                continue
            bx = self._emit_transfer(oid, pd, qd, elements[m], itemsize, 1)
            self._after(oid, cb, bx)
            self._hops_to(oid, bx, pb)
            bwd_first[m] = bx
        return fwd_first, bwd_first

    def copies(self, int oid, srcs, dsts, elements, i64 itemsize, int category, fwd_after, back_before):
        """Copies of a weight's parts: per m a transfer srcs[m] -> dsts[m] whose hops come before
        ``fwd_after[m]``, then one back (the gradient) after ``back_before[m]``; the copy's bytes are
        recorded as weights on the destination. Returns the first hops of the forward and the
        backward transfers, as two lists."""
        cdef i64 m, n = len(srcs), fx, bx
        fwd_first = [0] * n
        bwd_first = [0] * n
        for m in range(n):
            fx = self._emit_transfer(oid, srcs[m], dsts[m], elements[m], itemsize, category)
            self._hops_to(oid, fx, fwd_after[m])
            bx = self._emit_transfer(oid, dsts[m], srcs[m], elements[m], itemsize, category)
            self._after(oid, back_before[m], bx)
            self._mem(oid, dsts[m], 0, elements[m] * itemsize)
            fwd_first[m] = fx
            bwd_first[m] = bx
        return fwd_first, bwd_first

    # -- reading ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.live

    @property
    def size(self) -> int:
        """Tasks ever added (live or not)."""
        return self.kind_.size()

    @property
    def num_transfers(self) -> int:
        return self.xby_.size()

    @property
    def num_edges(self) -> int:
        if not self.incremental:
            return len(self.edge_arrays()[0])
        return self.edges_.size()

    def columns(self) -> dict:
        """Copies of the columns as NumPy arrays (per task, and per transfer)."""
        cdef i64 n = self.kind_.size(), x = self.xby_.size()
        return {"kind": _column(self.kind_.data(), 0, n, np.int8), "device": _column(self.dev_.data(), 0, n, np.int64),
                "exe": _column(self.exe_.data(), 0, n, np.float64), "priority": _column(self.prio_.data(), 0, n, np.int64),
                "transfer": _column(self.xfer_.data(), 0, n, np.int64), "alive": _column(self.alive_.data(), 0, n, np.bool_),
                "owner": _column(self.owner_.data(), 0, n, np.int32), "xfer_elements": _column(self.xel_.data(), 0, x, np.int64),
                "xfer_bytes": _column(self.xby_.data(), 0, x, np.int64), "xfer_category": _column(self.xcat_.data(), 0, x, np.int8)}

    def engine_columns(self) -> tuple:
        """Copies of the device, exe and priority columns (what an engine is built from)."""
        cdef i64 n = self.kind_.size()
        return _column(self.dev_.data(), 0, n, np.int64), _column(self.exe_.data(), 0, n, np.float64), \
            _column(self.prio_.data(), 0, n, np.int64)

    def row(self, i64 t) -> tuple:
        """(kind, device, exe, priority, transfer, alive, owner) of task ``t``."""
        if not 0 <= t < <i64>self.kind_.size():
            raise KeyError(t)
        return (self.kind_[t], self.dev_[t], self.exe_[t], self.prio_[t], self.xfer_[t], bool(self.alive_[t]),
                self.owner_[t])

    def transfer_row(self, i64 x) -> tuple:
        """(elements, bytes, category) of transfer ``x``."""
        return self.xel_[x], self.xby_[x], self.xcat_[x]

    def is_alive(self, i64 t) -> bool:
        return 0 <= t < <i64>self.kind_.size() and self.alive_[t] == 1

    def has_edge(self, i64 a, i64 b) -> bool:
        if not self.incremental:
            src, dst = self.edge_arrays()
            return bool(np.any((src == a) & (dst == b)))
        return self.edges_.count(ekey(a, b)) > 0

    def edge_count(self, i64 a, i64 b) -> int:
        """How many owners need the edge a -> b (incremental graphs)."""
        if not self.incremental:
            raise ValueError("edge counts are kept only with incremental=True")
        cdef unordered_map[i64, int32_t].iterator it = self.edges_.find(ekey(a, b))
        return 0 if it == self.edges_.end() else deref(it).second

    def edge_arrays(self):
        """(src, dst) of the dependencies between live tasks, sorted by (src, dst), each once."""
        cdef vector[i64] keys
        cdef i64 key, a, b
        cdef unordered_map[i64, int32_t].iterator it
        if not self.incremental:
            return self._sorted_edges(self.flat)
        keys.reserve(self.edges_.size())
        it = self.edges_.begin()
        while it != self.edges_.end():
            key = deref(it).first
            a, b = key >> 32, key & MASK
            if self.alive_[a] and self.alive_[b]:
                keys.push_back(key)
            inc(it)
        return self._sorted_edges(keys)

    cdef tuple _sorted_edges(self, vector[i64]& keys):
        """Edge keys (repeats allowed) -> (src, dst) sorted and unique: a counting sort by source,
        then each source's few destinations sorted."""
        cdef i64 n = self.kind_.size(), m = keys.size(), i, j, k, a, lo, hi, last
        cdef vector[i64] start, fill, dsts
        start.assign(n + 1, 0)
        fill.resize(n + 1)
        dsts.resize(m)
        cdef i64* kp = keys.data()
        cdef i64* sp = start.data()
        cdef i64* fp = fill.data()
        cdef i64* dp = dsts.data()
        with nogil:
            for i in range(m):
                sp[(kp[i] >> 32) + 1] += 1
            for i in range(n):
                sp[i + 1] += sp[i]
                fp[i] = sp[i]
            for i in range(m):
                a = kp[i] >> 32
                dp[fp[a]] = kp[i] & MASK
                fp[a] += 1
        src = np.empty(m, dtype=np.int64)
        dst = np.empty(m, dtype=np.int64)
        cdef i64[::1] s_ = src, d_ = dst
        k = 0
        for a in range(n):
            lo, hi = start[a], start[a + 1]
            if hi - lo == 2:
                if dsts[lo] > dsts[lo + 1]:
                    dsts[lo], dsts[lo + 1] = dsts[lo + 1], dsts[lo]
            elif hi - lo > 2:
                sort(dsts.begin() + lo, dsts.begin() + hi)
            last = -1
            for j in range(lo, hi):
                if dsts[j] != last:
                    s_[k] = a
                    d_[k] = dsts[j]
                    k += 1
                    last = dsts[j]
        return src[:k], dst[:k]

    def memory_by_device(self) -> dict:
        """device -> memory kind -> bytes, over every owner's records."""
        cdef dict total = {}
        cdef i64 o, i
        cdef vector[i64]* m
        for o in range(<i64>self.omem.size()):
            m = &self.omem[o]
            for i in range(0, <i64>m.size(), 3):
                per = total.get(deref(m)[i])
                if per is None:
                    per = total[deref(m)[i]] = {}
                kind = MEMORY_KINDS[deref(m)[i + 1]]
                per[kind] = per.get(kind, 0) + deref(m)[i + 2]
        return total

    # -- the engine ------------------------------------------------------------------------------------
    def start_tracking(self) -> None:
        """An engine now holds every task: record changes from here on."""
        self.synced = self.kind_.size()
        self.dead.clear()
        self.touched.clear()
        self.tracking = True

    def changes(self):
        """The change set since the engine was last in step, and mark it applied: (removed task ids,
        first new id, new tasks' devices, exe, priorities and liveness, added edges (src, dst),
        removed edges (src, dst)). Edges are listed only between live tasks (the engine drops the
        edges of removed tasks itself); a removed edge may be one the engine never got."""
        cdef i64 first = self.synced, n = self.kind_.size(), t, key, a, b, na = 0, nr = 0
        dead = _column(self.dead.data(), 0, self.dead.size(), np.int64)
        dev, exe = _column(self.dev_.data(), first, n, np.int64), _column(self.exe_.data(), first, n, np.float64)
        prio, alive = _column(self.prio_.data(), first, n, np.int64), _column(self.alive_.data(), first, n, np.bool_)
        sort(self.touched.begin(), self.touched.end())
        add = np.empty(self.touched.size(), dtype=np.int64)
        rm = np.empty(self.touched.size(), dtype=np.int64)
        cdef i64[::1] ad_ = add, rm_ = rm
        cdef i64 i, prev = -1
        for i in range(<i64>self.touched.size()):
            key = self.touched[i]
            if key == prev:
                continue
            prev = key
            a, b = key >> 32, key & MASK
            if self.alive_[a] and self.alive_[b]:
                if self.edges_.count(key):
                    ad_[na] = key
                    na += 1
                else:
                    rm_[nr] = key
                    nr += 1
        add_k = add[:na]  # sorted: the touched keys were
        rm_k = rm[:nr]
        self.synced = n
        self.dead.clear()
        self.touched.clear()
        return (dead, first, dev, exe, prio, alive, (add_k >> 32, add_k & MASK),
                (rm_k >> 32, rm_k & MASK))
