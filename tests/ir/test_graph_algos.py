"""The compiled graph algorithms against their pure-Python references and against brute force.

Dominance by definition: with a virtual root joined to every source, d dominates v iff v is
unreachable from the root once d is removed; the immediate dominator is the strict dominator that
every other strict dominator dominates. Post-dominance is dominance on the reversed graph.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import GraphError
from flexrt.ir.graph_algos import dominators, post_dominators, py_idom_dag, py_topo_order, topo_order

MAX_NODES = 40


@st.composite
def dags(draw, min_nodes: int = 0, max_nodes: int = MAX_NODES) -> list[list[int]]:
    """A random DAG as successor lists: edges go forward in a random permutation of the nodes (so
    node numbers are not already a topological order); repeated edges are kept, as in a PCG where
    one tensor feeds an operator twice."""
    n = draw(st.integers(min_nodes, max_nodes))
    rank = draw(st.permutations(range(n)))
    succ: list[list[int]] = [[] for _ in range(n)]
    if n < 2:
        return succ
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    for a, b in pairs:
        if a != b:
            lo, hi = min(a, b), max(a, b)
            succ[rank[lo]].append(rank[hi])
    return succ


@st.composite
def cyclic_graphs(draw) -> list[list[int]]:
    """A DAG with one extra edge that closes a cycle (a self loop, or back along a path)."""
    succ = draw(dags(min_nodes=1))
    n = len(succ)
    order = py_topo_order(succ)
    i = draw(st.integers(0, n - 1))
    j = draw(st.integers(i, n - 1))
    u, v = order[i], order[j]
    if u != v:
        succ[u].append(v)  # make sure a path u -> v exists
    succ[v].append(u)
    return succ


def reverse(succ: list[list[int]]) -> list[list[int]]:
    preds: list[list[int]] = [[] for _ in succ]
    for v, s in enumerate(succ):
        for w in s:
            preds[w].append(v)
    return preds


def with_virtual_root(succ: list[list[int]]) -> list[list[int]]:
    has_pred = {w for s in succ for w in s}
    return [list(s) for s in succ] + [[v for v in range(len(succ)) if v not in has_pred]]


def reachable(succ: list[list[int]], start: int, removed: int) -> set[int]:
    seen, stack = {start}, [start]
    while stack:
        for w in succ[stack.pop()]:
            if w != removed and w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def brute_force_idom(succ: list[list[int]]) -> list[int]:
    """Immediate dominators straight from the definition; -1 where only the virtual root dominates."""
    n = len(succ)
    g = with_virtual_root(succ)
    strict = [set() for _ in range(n)]
    for d in range(n):
        cut_off = set(range(n)) - reachable(g, n, removed=d)
        for v in cut_off - {d}:
            strict[v].add(d)
    # strict dominators form a chain; the immediate one is dominated by all the others
    return [max(strict[v], key=lambda d: len(strict[d])) if strict[v] else -1 for v in range(n)]


def is_topological(succ: list[list[int]], order: list[int]) -> bool:
    pos = {v: i for i, v in enumerate(order)}
    return sorted(order) == list(range(len(succ))) and all(pos[u] < pos[w] for u, s in enumerate(succ) for w in s)


@settings(max_examples=300, deadline=None)
@given(dags())
def test_topo_order_matches_reference_on_random_dags(succ):
    order = topo_order(succ)
    assert order == py_topo_order(succ)
    assert is_topological(succ, order)
    assert all(type(v) is int for v in order)


@settings(max_examples=300, deadline=None)
@given(dags())
def test_dominators_match_brute_force_on_random_dags(succ):
    assert dominators(succ) == brute_force_idom(succ)


@settings(max_examples=300, deadline=None)
@given(dags())
def test_post_dominators_match_brute_force_on_reversed_dags(succ):
    assert post_dominators(succ) == brute_force_idom(reverse(succ))


@settings(max_examples=200, deadline=None)
@given(dags())
def test_dominators_match_py_idom_dag_reference(succ):
    n = len(succ)
    g = with_virtual_root(succ)
    ref = py_idom_dag(reverse(g), py_topo_order(g))
    assert ref[n] == n
    assert dominators(succ) == [-1 if d == n else d for d in ref[:n]]


@settings(max_examples=200, deadline=None)
@given(cyclic_graphs())
def test_cycles_give_none_and_graph_error(succ):
    assert topo_order(succ) is None
    assert py_topo_order(succ) is None
    with pytest.raises(GraphError, match="cycle"):
        dominators(succ)
    with pytest.raises(GraphError, match="cycle"):
        post_dominators(succ)


@pytest.mark.parametrize("name, succ, order, idom, ipdom", [
    ("empty", [], [], [], []),
    ("single", [[]], [0], [-1], [-1]),
    ("chain", [[1], [2], []], [0, 1, 2], [-1, 0, 1], [1, 2, -1]),
    ("diamond", [[1, 2], [3], [3], []], [0, 1, 2, 3], [-1, 0, 0, 0], [3, 3, 3, -1]),
    ("two_sources", [[2], [2], [3], []], [0, 1, 2, 3], [-1, -1, -1, 2], [2, 2, 3, -1]),
    ("two_sinks", [[1], [2, 3], [], []], [0, 1, 2, 3], [-1, 0, 1, 1], [1, -1, -1, -1]),
    ("numbered_backwards", [[], [0], [1]], [2, 1, 0], [1, 2, -1], [-1, 0, 1]),
    ("smallest_ready_first", [[3], [3], [], []], [0, 1, 2, 3], [-1, -1, -1, -1], [3, 3, -1, -1]),
    ("double_edge", [[1, 1], [2], []], [0, 1, 2], [-1, 0, 1], [1, 2, -1]),
    ("skip_edge", [[1, 2], [2], []], [0, 1, 2], [-1, 0, 0], [2, 2, -1]),
])
def test_graph_algos_known_cases(name, succ, order, idom, ipdom):
    assert topo_order(succ) == order
    assert dominators(succ) == idom
    assert post_dominators(succ) == ipdom
    assert brute_force_idom(succ) == idom  # the brute force itself is right on the known cases


@pytest.mark.parametrize("succ", [[[0]], [[1], [0]], [[1], [2], [0]], [[1], [2], [1]]])
def test_graph_algos_known_cycles(succ):
    assert topo_order(succ) is None
    with pytest.raises(GraphError, match="cycle"):
        dominators(succ)


@pytest.mark.parametrize("succ", [[[5]], [[1], [-1]], [[], [2]]])
def test_edges_to_missing_nodes_are_rejected_before_the_compiled_loops(succ):
    with pytest.raises(GraphError, match="but the graph has nodes 0.."):
        topo_order(succ)
    with pytest.raises(GraphError, match="but the graph has nodes 0.."):
        dominators(succ)
