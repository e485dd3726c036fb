"""Graph algorithms the PCG and the search need: topological order, dominators, post-dominators.

The work is done by the compiled ``flexrt.ir._graph`` (CSR arrays, no Python objects in the loop);
``py_topo_order`` and ``py_idom_dag`` are the pure-Python references the tests compare it with.
Graphs here are integer nodes 0..n-1 with successor lists.

Entry points: ``topo_order``, ``dominators``, ``post_dominators``.
"""

from __future__ import annotations

import heapq
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
    indptr = np.zeros(len(succ) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(s) for s in succ])
    indices = np.fromiter((w for s in succ for w in s), dtype=np.int64, count=int(indptr[-1]))
    return indptr, indices


def topo_order(succ: Sequence[Sequence[int]]) -> list[int] | None:
    """Topological order (smallest ready node first), or None when the graph has a cycle."""
    indptr, indices = to_csr(succ)
    out = _graph.topo_order(indptr, indices)
    return None if out is None else out.tolist()


def _with_virtual_root(succ: Sequence[Sequence[int]]) -> tuple[list[list[int]], int]:
    n = len(succ)
    preds_count = [0] * n
    for s in succ:
        for w in s:
            preds_count[w] += 1
    root = n
    return [list(s) for s in succ] + [[v for v in range(n) if preds_count[v] == 0]], root


def _preds(succ: Sequence[Sequence[int]]) -> list[list[int]]:
    preds: list[list[int]] = [[] for _ in succ]
    for v, s in enumerate(succ):
        for w in s:
            preds[w].append(v)
    return preds


def dominators(succ: Sequence[Sequence[int]]) -> list[int]:
    """Immediate dominator of every node of a DAG; -1 for nodes dominated only by the virtual root
    that joins all sources (so a single-source DAG has -1 only at its source)."""
    g, root = _with_virtual_root(succ)
    order = topo_order(g)
    if order is None:
        raise GraphError("dominators need an acyclic graph; this one has a cycle")
    pp, pi = to_csr(_preds(g))
    idom = _graph.idom_dag(pp, pi, np.asarray(order, dtype=np.int64)).tolist()
    return [-1 if d == root else d for d in idom[:root]]


def post_dominators(succ: Sequence[Sequence[int]]) -> list[int]:
    """Immediate post-dominator of every node (dominators of the reversed graph); -1 when only the
    virtual sink joining all sinks post-dominates it."""
    return dominators(_preds(succ))


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
