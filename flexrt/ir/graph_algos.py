"""Graph algorithms the PCG and the search need: topological order, dominators, post-dominators.

The work is done by the compiled ``flexrt.ir._graph`` (CSR arrays, no Python objects in the loop);
``py_topo_order`` and ``py_idom_dag`` are the pure-Python references the tests compare it with.
Graphs here are integer nodes 0..n-1 with successor lists.

Entry points: ``topo_order``, ``dominators``, ``post_dominators``.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Sequence

import numpy as np

from flexrt.errors import GraphError

try:
    from flexrt.ir import _graph
except ImportError as e:  # never fall back silently to the slow path
    raise ImportError(
        "flexrt's compiled extension flexrt.ir._graph is missing; build it with `pip install -e .` "
        "(or `make install`) from the repository root") from e


def to_csr(succ: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays of a successor-list graph; every id must be a node 0..n-1 (the compiled loops do
    not check bounds, so this does)."""
    n = len(succ)
    lengths = np.fromiter((len(s) for s in succ), dtype=np.int64, count=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.fromiter(itertools.chain.from_iterable(succ), dtype=np.int64, count=int(indptr[-1]))
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = int(indices[(indices < 0) | (indices >= n)][0])
        raise GraphError(f"edge to node {bad}, but the graph has nodes 0..{n - 1}")
    return indptr, indices


def _reverse(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the reversed graph (predecessor lists, sorted by source)."""
    n = indptr.size - 1
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    order = np.argsort(indices, kind="stable")
    rptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(indices, minlength=n), out=rptr[1:])
    return rptr, src[order]


def _add_root(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Append a virtual root n with an edge to every node without predecessors."""
    n = indptr.size - 1
    sources = np.flatnonzero(np.bincount(indices, minlength=n) == 0).astype(np.int64)
    return np.append(indptr, indptr[-1] + sources.size), np.concatenate([indices, sources])


def topo_order(succ: Sequence[Sequence[int]]) -> list[int] | None:
    """Topological order (smallest ready node first), or None when the graph has a cycle."""
    out = _graph.topo_order(*to_csr(succ))
    return None if out is None else out.tolist()


def _idom(indptr: np.ndarray, indices: np.ndarray) -> list[int]:
    n = indptr.size - 1
    gptr, gidx = _add_root(indptr, indices)
    order = _graph.topo_order(gptr, gidx)
    if order is None:
        raise GraphError("dominators need an acyclic graph; this one has a cycle")
    idom = _graph.idom_dag(*_reverse(gptr, gidx), order)
    idom[idom == n] = -1
    return idom[:n].tolist()


def dominators(succ: Sequence[Sequence[int]]) -> list[int]:
    """Immediate dominator of every node of a DAG; -1 for nodes dominated only by the virtual root
    that joins all sources (so a single-source DAG has -1 only at its source)."""
    return _idom(*to_csr(succ))


def post_dominators(succ: Sequence[Sequence[int]]) -> list[int]:
    """Immediate post-dominator of every node (dominators of the reversed graph); -1 when only the
    virtual sink joining all sinks post-dominates it."""
    return _idom(*_reverse(*to_csr(succ)))


def py_topo_order(succ: Sequence[Sequence[int]]) -> list[int] | None:
    """Pure-Python reference of ``topo_order``."""
    out = py_topo_order_partial(succ)
    return out if len(out) == len(succ) else None


def py_topo_order_partial(succ: Sequence[Sequence[int]]) -> list[int]:
    """The nodes Kahn's algorithm (smallest ready node first) orders before a cycle stops it."""
    indeg = [0] * len(succ)
    for s in succ:
        for w in s:
            indeg[w] += 1
    heap = [v for v, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        v = heapq.heappop(heap)
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    return out


def py_idom_dag(preds: Sequence[Sequence[int]], order: Sequence[int]) -> list[int]:
    """Pure-Python reference of the compiled dominator pass."""
    pos = {v: i for i, v in enumerate(order)}
    idom = [-1] * len(order)
    idom[order[0]] = order[0]
    for v in order[1:]:
        new = -1
        for p in preds[v]:
            if idom[p] == -1:
                continue
            if new == -1:
                new = p
                continue
            a, b = p, new
            while a != b:
                while pos[a] > pos[b]:
                    a = idom[a]
                while pos[b] > pos[a]:
                    b = idom[b]
            new = a
        idom[v] = new
    return idom
