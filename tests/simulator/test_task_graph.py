"""The task graph as a struct of arrays: the engine built from it, kept in step by change sets."""

import numpy as np

from flexrt.simulator.engine import Engine, ReferenceEngine
from flexrt.simulator.task_graph import Category, TaskGraph, TaskKind


def _graph():
    g = TaskGraph(2, 1, detail=True)
    a = g.add_task(TaskKind.FORWARD, 0, 1.0, 0, ("op", "a"), "a")
    x = g.add_transfer(10, 80, Category.ACTIVATION)
    h = g.add_task(TaskKind.TRANSFER, 2, 0.5, 1, ("edge", "b", 0), "hop", transfer=x)
    b = g.add_task(TaskKind.FORWARD, 1, 2.0, 2, ("op", "b"), "b")
    g.add_edge(a, h)
    g.add_edge(h, b)
    return g, (a, h, b)


def test_engine_from_graph_and_csr():
    g, (a, h, b) = _graph()
    eng = g.engine(Engine)
    assert eng.simulate_full() == 3.5
    csr = g.csr()
    assert csr["ids"].tolist() == [a, h, b]
    assert csr["indptr"].tolist() == [0, 1, 2, 2] and csr["indices"].tolist() == [1, 2]
    t = g.task(h)
    assert (t.kind, t.category, t.elements, t.num_bytes, t.transfer) == (TaskKind.TRANSFER, Category.ACTIVATION,
                                                                       10, 80, 0)


def test_sync_applies_removed_and_added_tasks_and_counted_edges():
    """Edges needed by two owners stay until both let go; the synced engine equals a fresh one."""
    for cls in (Engine, ReferenceEngine):
        g, (a, h, b) = _graph()
        eng = g.engine(cls)
        eng.simulate_full()
        k = g.add_edge(a, b)
        g.add_edge(a, b)        # a second owner needs it too
        g.remove_edge(k)        # one lets go: it stays
        g.remove([h])
        c = g.add_task(TaskKind.BACKWARD, 1, 1.0, 3, ("op", "b"), "c")
        g.add_edge(b, c)
        g.sync(eng)
        assert eng.simulate_delta() == 4.0
        assert sorted(eng.task_ids().tolist()) == g.ids()
        src, dst = g._edge_arrays()
        fresh = cls.from_arrays(3, np.frombuffer(g.device, dtype=np.int64), np.frombuffer(g.exe, dtype=np.float64),
                                src, dst, np.frombuffer(g.priority, dtype=np.int64))
        fresh.remove_task(h)
        assert fresh.simulate_full() == 4.0
