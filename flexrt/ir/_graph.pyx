# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled graph algorithms on CSR adjacency (private; use ``flexrt.ir.graph_algos``).

``topo_order``: Kahn's algorithm, smallest ready node first (deterministic).
``idom_dag``: immediate dominators of a DAG with one root, in one pass over a topological order
(Cooper, Harvey & Kennedy's intersection; exact for DAGs because every predecessor is final
before its successor is visited).
"""

import numpy as np
from libc.stdint cimport int64_t

ctypedef int64_t i64


cdef inline void _sift_down(i64[::1] heap, Py_ssize_t size, Py_ssize_t pos) noexcept nogil:
    cdef i64 item = heap[pos]
    cdef Py_ssize_t child
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= item:
            break
        heap[pos] = heap[child]
        pos = child
    heap[pos] = item


cdef inline void _sift_up(i64[::1] heap, Py_ssize_t pos) noexcept nogil:
    cdef i64 item = heap[pos]
    cdef Py_ssize_t parent
    while pos > 0:
        parent = (pos - 1) // 2
        if heap[parent] <= item:
            break
        heap[pos] = heap[parent]
        pos = parent
    heap[pos] = item


cdef Py_ssize_t _kahn(const i64[::1] indptr, const i64[::1] indices, i64[::1] indeg, i64[::1] heap,
                      i64[::1] out) noexcept nogil:
    cdef Py_ssize_t n = indptr.shape[0] - 1
    cdef Py_ssize_t size = 0, count = 0, v, e, w
    for v in range(n):
        if indeg[v] == 0:
            heap[size] = v
            size += 1
            _sift_up(heap, size - 1)
    while size > 0:
        v = heap[0]
        size -= 1
        heap[0] = heap[size]
        if size > 0:
            _sift_down(heap, size, 0)
        out[count] = v
        count += 1
        for e in range(indptr[v], indptr[v + 1]):
            w = indices[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                heap[size] = w
                size += 1
                _sift_up(heap, size - 1)
    return count


def topo_order(const i64[::1] indptr, const i64[::1] indices):
    """Topological order of the graph, or None when it has a cycle."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, e
    indeg = np.zeros(n, dtype=np.int64)
    cdef i64[::1] indeg_v = indeg
    for e in range(indices.shape[0]):
        indeg_v[indices[e]] += 1
    heap = np.empty(max(n, 1), dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    cdef i64[::1] heap_v = heap
    cdef i64[::1] out_v = out
    cdef Py_ssize_t count
    with nogil:
        count = _kahn(indptr, indices, indeg_v, heap_v, out_v)
    return out if count == n else None


def idom_dag(const i64[::1] pred_ptr, const i64[::1] pred_idx, const i64[::1] order):
    """Immediate dominator of every node; ``order`` is a topological order starting at the root.

    Returns an array with idom[root] = root and -1 for nodes the root does not reach.
    """
    cdef Py_ssize_t n = order.shape[0], i, e
    pos = np.empty(n, dtype=np.int64)
    idom = np.full(n, -1, dtype=np.int64)
    cdef i64[::1] pos_v = pos
    cdef i64[::1] idom_v = idom
    cdef i64 v, p, new, a, b
    with nogil:
        for i in range(n):
            pos_v[order[i]] = i
        idom_v[order[0]] = order[0]
        for i in range(1, n):
            v = order[i]
            new = -1
            for e in range(pred_ptr[v], pred_ptr[v + 1]):
                p = pred_idx[e]
                if idom_v[p] == -1:
                    continue
                if new == -1:
                    new = p
                    continue
                a = p
                b = new
                while a != b:
                    while pos_v[a] > pos_v[b]:
                        a = idom_v[a]
                    while pos_v[b] > pos_v[a]:
                        b = idom_v[b]
                new = a
            idom_v[v] = new
    return idom
