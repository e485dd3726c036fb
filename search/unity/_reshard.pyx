# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled inner loops of Unity's edge costs (private; use ``flexrt.search.unity.reshard``).

``missing_and_holders``: for every producer layout ``a`` asked for and every consumer piece ``q``,
the elements of ``q``'s box that the producer does not already hold on ``q``'s device (same
partial-sum index), and the device of the first producer piece, in piece order, that holds some of
them (another device, same partial-sum index), or -1.

``partial_sum_costs``: for (producer layout, consumer layout, sum ratio k) triples, the slowest
consumer group's cost of summing the producer's partial sums into it (see ``reshard``).

``plain_loads``: for every producer layout ``a`` asked for and every consumer piece ``q`` whose
layouts' sum ratio is 1, the lowering's moves (each distinct producer box overlapping ``q``'s, same
partial-sum index, that ``q``'s device does not hold, from its first piece) added as link loads:
per hop on a shared link, bytes x seconds per byte + the route's latency, into the (pair, forward
or backward, link) entries of ``out`` (``reshard.reshard_loads``).

``memo_get``, ``memo_put``, ``memo_claim``, ``memo_transfers``: a hash table of floats keyed by
three integers (``reshard.Memo``), so that the transfer time of each (source, destination, bytes)
and the sum ratio of each pair of shapes are asked of Python once per search, not once per pair of
configurations.

``reshard.missing_and_holders_py``, ``reshard.partial_sum_costs_py`` and a dict (for the memo) are
the pure-Python references; tests check that both agree. The public functions validate shapes and
ranges; the loops then run without bounds checks and without the GIL.
"""

import numpy as np
from libc.math cimport NAN
from libc.stdint cimport int64_t

ctypedef int64_t i64


cdef inline i64 _overlap(const i64[:, :, ::1] a, Py_ssize_t i, const i64[:, :, ::1] b, Py_ssize_t j,
                         Py_ssize_t ndim) noexcept nogil:
    cdef i64 n = 1, lo, hi
    cdef Py_ssize_t d
    for d in range(ndim):
        lo = a[i, d, 0] if a[i, d, 0] > b[j, d, 0] else b[j, d, 0]
        hi = a[i, d, 1] if a[i, d, 1] < b[j, d, 1] else b[j, d, 1]
        if hi <= lo:
            return 0
        n *= hi - lo
    return n


cdef inline i64 _numel(const i64[:, :, ::1] a, Py_ssize_t i, Py_ssize_t ndim) noexcept nogil:
    cdef i64 n = 1
    cdef Py_ssize_t d
    for d in range(ndim):
        if a[i, d, 1] <= a[i, d, 0]:
            return 0
        n *= a[i, d, 1] - a[i, d, 0]
    return n


cdef inline void _sort(i64[::1] a, Py_ssize_t n) noexcept nogil:
    """Insertion sort of a[0:n] (a group's few devices)."""
    cdef Py_ssize_t i, j
    cdef i64 x
    for i in range(1, n):
        x = a[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


def _check_ptr(name, const i64[::1] ptr, Py_ssize_t size):
    """``ptr`` is a CSR offset array into something of ``size`` entries."""
    cdef Py_ssize_t i
    if ptr.shape[0] < 1 or ptr[0] != 0 or ptr[ptr.shape[0] - 1] != size:
        raise ValueError(f"{name} must run from 0 to {size}")
    for i in range(1, ptr.shape[0]):
        if ptr[i] < ptr[i - 1]:
            raise ValueError(f"{name} decreases at {i}")


def _check_index(name, const i64[::1] idx, i64 limit):
    cdef Py_ssize_t i
    for i in range(idx.shape[0]):
        if not 0 <= idx[i] < limit:
            raise ValueError(f"{name}[{i}] = {idx[i]} is not in 0..{limit - 1}")


def _check_producers(const i64[:, :, ::1] pbox, const i64[::1] psum, const i64[::1] pdev, const i64[::1] poff,
                     Py_ssize_t num_devices, Py_ssize_t ndim):
    cdef Py_ssize_t P = pbox.shape[0]
    if P and pbox.shape[1] != ndim:
        raise ValueError(f"producer boxes have {pbox.shape[1]} dimensions, consumer boxes {ndim}")
    if psum.shape[0] != P or pdev.shape[0] != P:
        raise ValueError(f"{P} producer boxes but {psum.shape[0]} sum indices and {pdev.shape[0]} devices")
    _check_ptr("poff", poff, P)
    _check_index("pdev", pdev, num_devices)


def missing_and_holders(const i64[:, :, ::1] pbox, const i64[::1] psum, const i64[::1] pdev,
                        const i64[::1] poff, const i64[::1] held_ptr, const i64[::1] held, const i64[::1] rows,
                        const i64[:, :, ::1] qbox, const i64[::1] qsum, const i64[::1] qdev,
                        Py_ssize_t num_devices):
    """See the module doc, for the producer layouts ``rows``. Producer pieces of layout ``a`` are
    ``poff[a] .. poff[a+1]-1``; the distinct boxes layout ``a`` holds on device ``d`` are the pieces
    ``held[held_ptr[a * num_devices + d] .. held_ptr[a * num_devices + d + 1] - 1]``. Returns (missing,
    holder), each (len(rows), Q) int64."""
    cdef Py_ssize_t R = rows.shape[0], Q = qbox.shape[0], ndim = qbox.shape[1]
    cdef Py_ssize_t A = poff.shape[0] - 1
    _check_producers(pbox, psum, pdev, poff, num_devices, ndim)
    if held_ptr.shape[0] != A * num_devices + 1:
        raise ValueError(f"held_ptr has {held_ptr.shape[0]} entries, expected layouts x devices + 1 = "
                         f"{A * num_devices + 1}")
    _check_ptr("held_ptr", held_ptr, held.shape[0])
    _check_index("held", held, pbox.shape[0])
    _check_index("rows", rows, A)
    _check_index("qdev", qdev, num_devices)
    if qsum.shape[0] != Q:
        raise ValueError(f"{Q} consumer boxes but {qsum.shape[0]} sum indices")
    missing_arr = np.zeros((R, Q), dtype=np.int64)
    holder_arr = np.full((R, Q), -1, dtype=np.int64)
    cdef i64[:, ::1] missing = missing_arr
    cdef i64[:, ::1] holder = holder_arr
    cdef Py_ssize_t r, a, q, k, p, base
    cdef i64 need, have, s, dev
    with nogil:
        for r in range(R):
            a = rows[r]
            for q in range(Q):
                need = _numel(qbox, q, ndim)
                if need == 0:
                    continue
                s, dev = qsum[q], qdev[q]
                have = 0
                base = a * num_devices + dev
                for k in range(held_ptr[base], held_ptr[base + 1]):
                    p = held[k]
                    if psum[p] == s:
                        have += _overlap(qbox, q, pbox, p, ndim)
                if have >= need:
                    continue
                missing[r, q] = need - have
                for p in range(poff[a], poff[a + 1]):
                    if psum[p] == s and pdev[p] != dev and _overlap(qbox, q, pbox, p, ndim) > 0:
                        holder[r, q] = pdev[p]
                        break
    return missing_arr, holder_arr


def partial_sum_costs(const i64[:, :, ::1] pbox, const i64[::1] psum, const i64[::1] pdev, const i64[::1] poff,
                      const i64[:, :, ::1] gbox, const i64[::1] gsum, const i64[::1] goff,
                      const i64[::1] dev_ptr, const i64[::1] devs, const i64[::1] row,
                      const double[:, ::1] rows, const double[::1] back, const double[::1] ring,
                      const i64[::1] pa, const i64[::1] pb, const i64[::1] pk, Py_ssize_t num_devices):
    """See the module doc. Consumer layout ``b``'s groups are ``goff[b] .. goff[b+1]-1``; group g's
    distinct devices (ascending) ``devs[dev_ptr[g] .. dev_ptr[g+1]-1]``; ``rows[row[g], d]`` is the time
    to send the group's bytes from device d to its first device; ``back[g]`` and ``ring[g]`` as in
    ``reshard._Groups``. Returns the cost per (pa[n], pb[n], pk[n]): the slowest group, or the busiest
    source device's sends to the groups' devices one after another, whichever is slower."""
    cdef Py_ssize_t N = pa.shape[0], G = gbox.shape[0], ndim = gbox.shape[1]
    cdef Py_ssize_t n, g, p, j, count, a, b
    cdef i64 k, lo, hi
    cdef double fwd, t
    cdef bint same
    _check_producers(pbox, psum, pdev, poff, num_devices, ndim)
    if gsum.shape[0] != G or row.shape[0] != G or back.shape[0] != G or ring.shape[0] != G \
            or dev_ptr.shape[0] != G + 1:
        raise ValueError(f"{G} groups but the per-group arrays disagree")
    _check_ptr("goff", goff, G)
    _check_ptr("dev_ptr", dev_ptr, devs.shape[0])
    _check_index("devs", devs, num_devices)
    _check_index("row", row, rows.shape[0])
    if rows.shape[1] != num_devices:
        raise ValueError(f"transfer rows have {rows.shape[1]} columns, expected {num_devices}")
    if pb.shape[0] != N or pk.shape[0] != N:
        raise ValueError("pa, pb and pk must have one entry per pair")
    _check_index("pa", pa, poff.shape[0] - 1)
    _check_index("pb", pb, goff.shape[0] - 1)
    for n in range(N):
        if pk[n] < 1:
            raise ValueError(f"pair {n}: sum ratio {pk[n]} < 1")
    out_arr = np.zeros(N, dtype=np.float64)
    flag_arr = np.zeros(num_devices, dtype=np.uint8)
    touched_arr = np.zeros(num_devices, dtype=np.int64)
    sent_arr = np.zeros(num_devices, dtype=np.float64)
    senders_arr = np.zeros(num_devices, dtype=np.int64)
    cdef double[::1] out = out_arr
    cdef unsigned char[::1] flag = flag_arr
    cdef i64[::1] touched = touched_arr
    cdef double[::1] sent = sent_arr          # per source device, its sends' summed time (this pair)
    cdef i64[::1] senders = senders_arr
    cdef Py_ssize_t nsend, d
    with nogil:
        for n in range(N):
            a, b, k = pa[n], pb[n], pk[n]
            fwd = 0.0
            nsend = 0
            for g in range(goff[b], goff[b + 1]):
                lo = gsum[g] * k
                hi = lo + k
                count = 0
                for p in range(poff[a], poff[a + 1]):
                    if lo <= psum[p] < hi and not flag[pdev[p]] and _overlap(gbox, g, pbox, p, ndim) > 0:
                        flag[pdev[p]] = 1
                        touched[count] = pdev[p]
                        count += 1
                _sort(touched, count)
                same = count == dev_ptr[g + 1] - dev_ptr[g]
                if same:
                    for j in range(count):
                        if touched[j] != devs[dev_ptr[g] + j]:
                            same = False
                            break
                if same and count > 1:
                    t = ring[g]
                else:
                    t = 0.0
                    for j in range(count):
                        d = touched[j]
                        t += rows[row[g], d]
                        if rows[row[g], d] > 0:
                            if sent[d] == 0:
                                senders[nsend] = d
                                nsend += 1
                            sent[d] += rows[row[g], d]
                    t = t + back[g]
                for j in range(count):
                    flag[touched[j]] = 0
                if t > fwd:
                    fwd = t
            for j in range(nsend):   # a device sending to many groups sends one after another
                if sent[senders[j]] > fwd:
                    fwd = sent[senders[j]]
                sent[senders[j]] = 0.0
            out[n] = fwd
    return out_arr


# ---- a memo of float values keyed by three integers (open addressing, linear probing) ------------
# The table is four arrays owned by ``reshard.Memo``: k0, k1, k2 (k0 == -1 marks an empty slot) and
# the values; the capacity is a power of two and the owner keeps it at most half full.

def plain_loads(const i64[:, :, ::1] pbox, const i64[::1] psum, const i64[::1] pdev, const i64[::1] poff,
                const i64[::1] pfirst, const i64[::1] held_ptr, const i64[::1] held, const i64[::1] rows,
                const i64[:, :, ::1] qbox, const i64[::1] qsum, const i64[::1] qdev, const i64[::1] qlay,
                const i64[:, ::1] ratio, const i64[::1] rptr, const i64[::1] rcol, const double[::1] rinv,
                const double[::1] rlat, Py_ssize_t num_devices, i64 item, bint grad, Py_ssize_t L,
                double[::1] out):
    """See the module doc. ``pfirst[p]``: the first piece of ``p``'s layout with ``p``'s box and sum
    index; ``held`` as for ``missing_and_holders``; ``qlay[q]``: consumer piece ``q``'s layout;
    ``ratio``: (producer layouts, consumer layouts) sum ratios; the route from ``s`` to ``d`` is
    ``r = s * num_devices + d``, its shared hops ``rptr[r] .. rptr[r+1]-1`` (load column ``rcol``,
    seconds per byte ``rinv``), its latency ``rlat[r]``; ``out`` is (pairs, 2, L) flattened, pair
    ``a * consumer layouts + b``."""
    cdef Py_ssize_t Q = qbox.shape[0], ndim = qbox.shape[1], A = poff.shape[0] - 1, B = ratio.shape[1]
    cdef Py_ssize_t n2 = num_devices * num_devices
    _check_producers(pbox, psum, pdev, poff, num_devices, ndim)
    if held_ptr.shape[0] != A * num_devices + 1 or pfirst.shape[0] != pbox.shape[0]:
        raise ValueError("held_ptr or pfirst does not match the producer layouts")
    _check_ptr("held_ptr", held_ptr, held.shape[0])
    _check_index("held", held, pbox.shape[0])
    _check_index("pfirst", pfirst, pbox.shape[0])
    _check_index("rows", rows, A)
    _check_index("qdev", qdev, num_devices)
    _check_index("qlay", qlay, B)
    if ratio.shape[0] != A or qsum.shape[0] != Q or qlay.shape[0] != Q:
        raise ValueError("ratio, qsum or qlay does not match the layouts")
    if rptr.shape[0] != n2 + 1 or rlat.shape[0] != n2 or rinv.shape[0] != rcol.shape[0]:
        raise ValueError("the route table does not match the devices")
    _check_ptr("rptr", rptr, rcol.shape[0])
    _check_index("rcol", rcol, L)
    if out.shape[0] != A * B * 2 * L:
        raise ValueError(f"out has {out.shape[0]} entries, expected {A * B * 2 * L}")
    cdef Py_ssize_t r, a, q, k, p, base, h, route, at
    cdef i64 s, dev, ov, src
    cdef bint local
    cdef double nbytes
    with nogil:
        for r in range(rows.shape[0]):
            a = rows[r]
            for q in range(Q):
                if ratio[a, qlay[q]] != 1:
                    continue
                s, dev = qsum[q], qdev[q]
                base = a * num_devices + dev
                at = (a * B + qlay[q]) * 2 * L
                for p in range(poff[a], poff[a + 1]):
                    if pfirst[p] != p or psum[p] != s:
                        continue
                    ov = _overlap(pbox, p, qbox, q, ndim)
                    if ov == 0:
                        continue
                    local = False
                    for k in range(held_ptr[base], held_ptr[base + 1]):
                        if pfirst[held[k]] == p:
                            local = True
                            break
                    if local:
                        continue
                    src = pdev[p]
                    nbytes = <double>(ov * item)
                    route = src * num_devices + dev
                    for h in range(rptr[route], rptr[route + 1]):
                        out[at + rcol[h]] += nbytes * rinv[h] + rlat[route]
                    if grad:
                        route = dev * num_devices + src
                        for h in range(rptr[route], rptr[route + 1]):
                            out[at + L + rcol[h]] += nbytes * rinv[h] + rlat[route]


cdef inline Py_ssize_t _slot(i64 a, i64 b, i64 c, Py_ssize_t mask) noexcept nogil:
    cdef unsigned long long h = (<unsigned long long>a) * 0x9E3779B97F4A7C15ULL
    h ^= (<unsigned long long>b) * 0xC2B2AE3D27D4EB4FULL
    h ^= (<unsigned long long>c) * 0x165667B19E3779F9ULL
    h ^= h >> 29
    return <Py_ssize_t>(h & <unsigned long long>mask)


cdef inline Py_ssize_t _find(const i64[::1] k0, const i64[::1] k1, const i64[::1] k2, i64 a, i64 b, i64 c,
                             Py_ssize_t mask) noexcept nogil:
    """The slot holding (a, b, c), or the empty slot where it would go."""
    cdef Py_ssize_t i = _slot(a, b, c, mask)
    while k0[i] != -1 and not (k0[i] == a and k1[i] == b and k2[i] == c):
        i = (i + 1) & mask
    return i


def _check_table(const i64[::1] k0, const i64[::1] k1, const i64[::1] k2, const double[::1] val):
    cdef Py_ssize_t n = k0.shape[0]
    if n == 0 or n & (n - 1) or k1.shape[0] != n or k2.shape[0] != n or val.shape[0] != n:
        raise ValueError("a memo table is four arrays of one power-of-two length")
    return n - 1


def memo_get(const i64[::1] k0, const i64[::1] k1, const i64[::1] k2, const double[::1] val,
             const i64[::1] a, const i64[::1] b, const i64[::1] c):
    """The value stored for each key (a[n], b[n], c[n]) (keys >= 0), NaN where there is none."""
    cdef Py_ssize_t mask = _check_table(k0, k1, k2, val), N = a.shape[0], n, i
    if b.shape[0] != N or c.shape[0] != N:
        raise ValueError("key arrays differ in length")
    _check_index("a", a, 1 << 62)
    out_arr = np.empty(N, dtype=np.float64)
    cdef double[::1] out = out_arr
    with nogil:
        for n in range(N):
            i = _find(k0, k1, k2, a[n], b[n], c[n], mask)
            out[n] = val[i] if k0[i] != -1 else NAN
    return out_arr


def memo_put(i64[::1] k0, i64[::1] k1, i64[::1] k2, double[::1] val, const i64[::1] a, const i64[::1] b,
             const i64[::1] c, const double[::1] v):
    """Store v[n] for key (a[n], b[n], c[n]) (keys >= 0; the caller leaves room). Returns how many keys
    were new."""
    cdef Py_ssize_t mask = _check_table(k0, k1, k2, val), N = a.shape[0], n, i, added = 0
    if b.shape[0] != N or c.shape[0] != N or v.shape[0] != N:
        raise ValueError("key and value arrays differ in length")
    _check_index("a", a, 1 << 62)
    if N > (mask + 1) // 2:
        raise ValueError(f"{N} keys do not fit a table of {mask + 1} slots kept half full")
    with nogil:
        for n in range(N):
            i = _find(k0, k1, k2, a[n], b[n], c[n], mask)
            if k0[i] == -1:
                added += 1
                k0[i], k1[i], k2[i] = a[n], b[n], c[n]
            val[i] = v[n]
    return added


def memo_transfers(const i64[::1] k0, const i64[::1] k1, const i64[::1] k2, const double[::1] val,
                   const i64[:, ::1] missing, const i64[:, ::1] holder, const i64[::1] qdev, i64 item):
    """Per (row, consumer piece) of ``missing_and_holders``'s output, the memo's time for the key
    (holder, qdev[q], missing * item): 0 where holder is -1, NaN where the memo has no value."""
    cdef Py_ssize_t mask = _check_table(k0, k1, k2, val), R = missing.shape[0], Q = missing.shape[1], r, q, i
    if holder.shape[0] != R or holder.shape[1] != Q or qdev.shape[0] != Q:
        raise ValueError("missing, holder and qdev disagree in shape")
    out_arr = np.zeros((R, Q), dtype=np.float64)
    cdef double[:, ::1] out = out_arr
    with nogil:
        for r in range(R):
            for q in range(Q):
                if holder[r, q] >= 0:
                    i = _find(k0, k1, k2, holder[r, q], qdev[q], missing[r, q] * item, mask)
                    out[r, q] = val[i] if k0[i] != -1 else NAN
    return out_arr


def memo_claim(i64[::1] k0, i64[::1] k1, i64[::1] k2, double[::1] val, const i64[::1] a, const i64[::1] b,
               const i64[::1] c):
    """Insert every key (a[n], b[n], c[n]) (keys >= 0) the table lacks, its value NaN until
    ``memo_put`` sets it, and return the positions n of those first occurrences (so each new key is
    listed once). The caller leaves room for ``len(a)`` new keys."""
    cdef Py_ssize_t mask = _check_table(k0, k1, k2, val), N = a.shape[0], n, i, found = 0
    if b.shape[0] != N or c.shape[0] != N:
        raise ValueError("key arrays differ in length")
    _check_index("a", a, 1 << 62)
    if N > (mask + 1) // 2:
        raise ValueError(f"{N} keys do not fit a table of {mask + 1} slots kept half full")
    first_arr = np.empty(N, dtype=np.int64)
    cdef i64[::1] first = first_arr
    with nogil:
        for n in range(N):
            i = _find(k0, k1, k2, a[n], b[n], c[n], mask)
            if k0[i] == -1:
                k0[i], k1[i], k2[i] = a[n], b[n], c[n]
                val[i] = NAN
                first[found] = n
                found += 1
    return first_arr[:found]
