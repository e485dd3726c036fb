"""Which compute operators of a PCG reach which: ancestor and descendant bit sets, and each
operator's parallel width: the size of an antichain through it (operators no two of which reach
each other, so all may run at once), taken greedily in topological order: it is maximal (every
other operator reaches or is reached by one of it), so on a fork of k branches it counts the k
branches, however long they are.

The mapping DP's graph (``mapping._Graph``) splits on these sets; ``LocalCosts`` uses the widths to
prune configurations (``LocalCosts(config_ratio=...)``: an operator beside ``w - 1`` others may be
packed onto ``1/w`` of a block, at ``w`` times its cheapest configuration's cost).

Entry points: ``closure``, ``antichain``, ``parallel_widths``.
"""

from __future__ import annotations

from flexrt.strategy import is_compute

from flexrt.ir.pcg import PCG


def closure(pred: list[int], succ: list[int]) -> tuple[list[int], list[int]]:
    """(ancestors, descendants) of nodes ``0 .. n-1`` numbered in topological order, as bit sets,
    from each node's direct predecessors ``pred`` and successors ``succ`` (bit sets)."""
    n = len(pred)
    anc, desc = [0] * n, [0] * n
    for v in range(n):
        anc[v] = _spread(pred[v], anc)
    for v in reversed(range(n)):
        desc[v] = _spread(succ[v], desc)
    return anc, desc


def _spread(direct: int, sets: list[int]) -> int:
    m, s = 0, direct
    while s:
        low = s & -s
        m |= sets[low.bit_length() - 1] | low
        s ^= low
    return m


def parallel_widths(pcg: PCG) -> dict[int, int]:
    """Per compute node id, its parallel width (module doc)."""
    order = [nid for nid in pcg.topological_order() if is_compute(pcg.node(nid))]
    pos = {nid: i for i, nid in enumerate(order)}
    pred, succ = [0] * len(order), [0] * len(order)
    for v, nid in enumerate(order):
        for ref in pcg.node(nid).inputs:
            u = pos.get(ref.node)
            if u is not None:
                pred[v] |= 1 << u
                succ[u] |= 1 << v
    anc, desc = closure(pred, succ)
    return {nid: antichain(anc, desc, v).bit_count() for v, nid in enumerate(order)}


def antichain(anc: list[int], desc: list[int], v: int) -> int:
    """A maximal antichain through node ``v`` (bit set): ``v``, then repeatedly the first node in
    topological order that no member reaches or is reached by."""
    related = (1 << len(anc)) - 1
    chosen, free = 1 << v, related & ~(anc[v] | desc[v] | 1 << v)
    while free:
        low = free & -free
        u = low.bit_length() - 1
        chosen |= low
        free &= ~(anc[u] | desc[u] | low)
    return chosen
