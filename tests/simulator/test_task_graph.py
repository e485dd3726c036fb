"""The task graph as a struct of arrays: the engine built from it, kept in step by change sets."""


from flexrt.simulator.engine import Engine, ReferenceEngine
from flexrt.simulator.task_graph import CATEGORY_CODE, Category, TaskGraph, TaskKind


def _graph():
    g = TaskGraph(2, 1, detail=True, hops=lambda src, dst, num_bytes: ((2,), (0.5,)))
    oa, oe, ob = g.owner(("op", "a"), 0), g.owner(("edge", "b", 0), 1), g.owner(("op", "b"), 2)
    a = g.add_task(oa, TaskKind.FORWARD, 0, 1.0, "a")
    h = g.core.transfer(oe, 0, 1, 10, 8, CATEGORY_CODE[Category.ACTIVATION], [a])
    b = g.add_task(ob, TaskKind.FORWARD, 1, 2.0, "b")
    g.add_edge(oe, h, b)
    return g, (a, h, b), (oa, oe, ob)


def test_engine_from_graph_and_csr():
    g, (a, h, b), _ = _graph()
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
        g, (a, h, b), (oa, oe, ob) = _graph()
        eng = g.engine(cls)
        eng.simulate_full()
        x = g.owner(("weight", "w"), 3)
        g.add_edge(x, a, b)
        g.add_edge(oa, a, b)    # a second owner needs it too
        g.drop(x)               # one lets go: it stays
        assert g.core.edge_count(a, b) == 1
        g.drop(oe)              # the transfer goes, and its edges with it
        assert not g.core.has_edge(a, h) and not g.core.has_edge(h, b)
        c = g.add_task(ob, TaskKind.BACKWARD, 1, 1.0, "c")
        g.add_edge(ob, b, c)
        g.sync(eng)
        assert eng.simulate_delta() == 4.0
        assert sorted(eng.task_ids().tolist()) == g.ids()
        col = g.columns()
        src, dst = g._edge_arrays()
        fresh = cls.from_arrays(3, col["device"], col["exe"], src, dst, col["priority"])
        fresh.remove_task(h)
        assert fresh.simulate_full() == 4.0


def test_drop_and_re_emit_restarts_the_owners_priorities():
    """An owner re-lowered after ``drop`` gives its tasks the priorities a fresh lowering gives."""
    g = TaskGraph(1, 0)
    o = g.owner(("op", "a"), 100)
    t0 = g.add_task(o, TaskKind.FORWARD, 0, 1.0, "a")
    g.add_task(o, TaskKind.BACKWARD, 0, 1.0, "a'")
    g.drop(o)
    t2 = g.add_task(o, TaskKind.FORWARD, 0, 1.0, "a")
    col = g.columns()
    assert col["priority"][t0] == col["priority"][t2] == 100
    assert g.ids() == [t2] and len(g) == 1
    assert g.task(t2).name == "a" and g.task(t2).owner == ("op", "a")


def test_memory_records_are_summed_per_device_and_dropped_with_their_owner():
    g = TaskGraph(2, 0)
    o1, o2 = g.owner(("op", "a"), 0), g.owner(("weight", "w"), 1)
    g.core.memory(o1, 0, 2, 100)
    g.core.memory(o1, 0, 2, 50)
    g.core.memory(o2, 1, 0, 8)
    assert g.memory_by_device() == {0: {"activations": 150}, 1: {"weights": 8}}
    g.drop(o1)
    assert g.memory_by_device() == {1: {"weights": 8}}
