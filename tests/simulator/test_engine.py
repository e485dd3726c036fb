"""The simulation engine: compiled ``Engine`` against the pure-Python ``ReferenceEngine``, both
against the defining equations (engine.py's docstring), and the law of delta simulation: after
any edits, ``simulate_delta`` gives exactly the timeline a fresh ``simulate_full`` gives.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import GraphError
from flexrt.simulator.engine import Engine, ReferenceEngine

ENGINES = [Engine, ReferenceEngine]
MAX_TASKS = 200
# Repeated values make equal ready times, so the (ready, id) tie-break is exercised.
EXES = [0.25, 0.5, 1.0, 1.0, 2.0, 3.0]


@dataclass
class Graph:
    num_devices: int
    device: list[int]
    exe: list[float]
    src: list[int]
    dst: list[int]
    pos: list[float]  # a topological position per task: edges only go to larger positions
    priority: list[int]

    def build(self, cls):
        return cls.from_arrays(self.num_devices, np.asarray(self.device, np.int64), np.asarray(self.exe),
                               np.asarray(self.src, np.int64), np.asarray(self.dst, np.int64),
                               np.asarray(self.priority, np.int64))


exes = st.one_of(st.sampled_from(EXES), st.floats(1e-3, 10.0))


@st.composite
def graphs(draw, max_tasks: int = MAX_TASKS) -> Graph:
    """A random DAG: edges go forward in a random permutation of the tasks (so ids are not a
    topological order); repeated edges are kept (the engine ignores them)."""
    n = draw(st.integers(0, max_tasks))
    nd = draw(st.integers(1, 4))
    device = draw(st.lists(st.integers(0, nd - 1), min_size=n, max_size=n))
    exe = draw(st.lists(exes, min_size=n, max_size=n))
    # mostly the default priority 0; otherwise a few values, so ties remain common
    priority = draw(st.one_of(st.just([0] * n), st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    order = draw(st.permutations(range(n)))
    pos = [0.0] * n
    for i, t in enumerate(order):
        pos[t] = float(i)
    src, dst = [], []
    if n >= 2:
        for a, b in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n)):
            if a != b:
                lo, hi = min(a, b), max(a, b)
                src.append(order[lo])
                dst.append(order[hi])
    return Graph(nd, device, exe, src, dst, pos, priority)


def assert_same_timeline(a, b) -> None:
    """Exactly equal (==, bit for bit; NaN only where both have NaN)."""
    for x, y in zip(a.timeline(), b.timeline()):
        np.testing.assert_array_equal(x, y)
    assert a.num_devices == b.num_devices
    for d in range(a.num_devices):
        assert a.device_order(d) == b.device_order(d)
    assert a.makespan() == b.makespan()


def assert_semantics(eng) -> None:
    """The timeline satisfies the defining equations, checked from scratch."""
    ids, dev, ready, start, end = eng.timeline()
    at = {int(t): i for i, t in enumerate(ids)}
    seen = []
    for d in range(eng.num_devices):
        order = eng.device_order(d)
        seen += order
        keys = [(ready[at[t]], eng.priority(t), t) for t in order]
        assert keys == sorted(keys), f"device {d} is not in (ready, priority, id) order"
        last_end = None
        for t in order:
            i = at[t]
            assert dev[i] == d
            assert ready[i] == max((end[at[p]] for p in eng.preds(t)), default=0.0)
            assert start[i] == (ready[i] if last_end is None else max(ready[i], last_end))
            assert end[i] == start[i] + eng.exe(t)
            last_end = end[i]
    assert sorted(seen) == ids.tolist()
    assert eng.makespan() == (end.max() if end.size else 0.0)


# -- full simulation: compiled == reference == the equations -----------------------------------

@settings(max_examples=60, deadline=None)
@given(graphs())
def test_full_simulation_compiled_equals_reference(g):
    fast, ref = g.build(Engine), g.build(ReferenceEngine)
    assert fast.simulate_full() == ref.simulate_full()
    assert_same_timeline(fast, ref)
    np.testing.assert_array_equal(fast.busy_time(), ref.busy_time())
    assert fast.num_edges == ref.num_edges == len(set(zip(g.src, g.dst)))
    assert_semantics(fast)


# -- THE LAW: delta == full after any edits ----------------------------------------------------

ops = st.tuples(st.sampled_from(["remove_task", "add_task", "set_exe", "set_device", "set_priority", "add_edge",
                                 "remove_edge"]),
                st.integers(0, 10**6), st.integers(0, 10**6), exes)


def apply_edit(engines, g: Graph, op) -> None:
    """Apply one edit to every engine alike, keeping the graph acyclic: edges only go from a
    smaller to a larger position in ``g.pos`` (new tasks draw a position)."""
    kind, a, b, x = op
    eng = engines[0]
    live = eng.task_ids().tolist()
    if kind == "add_task":
        d = a % g.num_devices
        p = (b % 1009) / 1009 * (len(g.pos) + 1) - 0.5
        new = [e.add_task(d, x, (a >> 5) % 3) for e in engines]
        assert len(set(new)) == 1
        g.pos.append(p)
        lower = [t for t in live if g.pos[t] < p]
        higher = [t for t in live if g.pos[t] > p]
        for k, pick in enumerate((lower, higher)):
            for j in range((a >> (2 * k)) % 3):  # up to two predecessors and two successors
                if pick:
                    u = pick[(b >> j) % len(pick)]
                    for e in engines:
                        e.add_edge(u, new[0]) if k == 0 else e.add_edge(new[0], u)
        return
    if not live:
        return
    t = live[a % len(live)]
    if kind == "remove_task":
        for e in engines:
            e.remove_task(t)
    elif kind == "set_exe":
        for e in engines:
            e.set_exe(t, x)
    elif kind == "set_device":
        for e in engines:
            e.set_device(t, b % g.num_devices)
    elif kind == "set_priority":
        for e in engines:
            e.set_priority(t, b % 3)
    elif kind == "add_edge":
        u = live[b % len(live)]
        if g.pos[t] != g.pos[u]:
            lo, hi = (t, u) if g.pos[t] < g.pos[u] else (u, t)
            added = {e.add_edge(lo, hi) for e in engines}
            assert len(added) == 1
    elif kind == "remove_edge":
        succs = eng.succs(t)
        if succs:
            for e in engines:
                e.remove_edge(t, succs[b % len(succs)])


# How delta simulation settles: (probe pops, replay ratio, direct ratio). Bellman-Ford alone,
# replaying the suffix after K0 at once, Bellman-Ford then a replay if it runs long, and the
# default (a suffix of a quarter of the tasks or more is replayed at once, else the mix).
DELTA_MODES = {"default": (256, 0.1, 0.25, 0.5), "replay": (0, 0.0, 0.0, math.inf),
               "bellman_ford": (10**18, 10.0**9, math.inf, math.inf),
               "probe_then_replay": (256, 0.1, math.inf, math.inf), "full": (256, 0.1, 0.0, 0.0)}


def set_mode(engines, mode: str) -> None:
    for e in engines:
        e.delta_probe_pops, e.delta_replay_ratio, e.delta_direct_ratio, e.delta_full_ratio = DELTA_MODES[mode]


def check_delta_law(engines, g: Graph) -> None:
    for e in engines:
        e.simulate_delta()
        fresh = e.copy()
        fresh.simulate_full()
        assert_same_timeline(e, fresh)
        assert e.fallbacks == 0, "delta fell back to a full simulation on an acyclic graph"
    assert_same_timeline(engines[0], engines[1])


@pytest.mark.parametrize("mode", list(DELTA_MODES))
@settings(max_examples=50, deadline=None)
@given(g=graphs(max_tasks=120), batches=st.lists(st.lists(ops, min_size=1, max_size=8), min_size=1, max_size=5))
def test_delta_after_edit_batches_equals_full(mode, g, batches):
    engines = [g.build(Engine), g.build(ReferenceEngine)]
    set_mode(engines, mode)
    for e in engines:
        e.simulate_full()
    for batch in batches:
        for op in batch:
            apply_edit(engines, g, op)
        check_delta_law(engines, g)
    assert_semantics(engines[0])


@settings(max_examples=15, deadline=None)
@given(graphs(max_tasks=60), st.lists(ops, min_size=1, max_size=10))
def test_delta_equals_rebuild_with_compacted_ids(g, batch):
    """Only the order of ids matters: renumbering the live tasks 0..n-1 keeps the timeline."""
    eng = g.build(Engine)
    eng.simulate_full()
    for op in batch:
        apply_edit([eng], g, op)
    eng.simulate_delta()
    ids = eng.task_ids()
    new_id = {int(t): i for i, t in enumerate(ids)}
    src, dst = eng.edges()
    rebuilt = Engine.from_arrays(eng.num_devices, [eng.device(int(t)) for t in ids], [eng.exe(int(t)) for t in ids],
                                 [new_id[int(t)] for t in src], [new_id[int(t)] for t in dst],
                                 [eng.priority(int(t)) for t in ids])
    assert rebuilt.simulate_full() == eng.makespan()
    for x, y in zip(eng.timeline()[1:], rebuilt.timeline()[1:]):
        np.testing.assert_array_equal(x, y)
    for d in range(eng.num_devices):
        assert [new_id[t] for t in eng.device_order(d)] == rebuilt.device_order(d)


@settings(max_examples=30, deadline=None)
@given(graphs(max_tasks=80), st.randoms(use_true_random=False))
def test_distinct_priorities_make_the_timeline_independent_of_ids(g, rnd):
    """The same graph numbered in another order (as a fresh lowering would number it) gives the
    same timeline once every task has a distinct priority; ids no longer break any tie."""
    n = len(g.device)
    perm = list(range(n))
    rnd.shuffle(perm)  # task t gets id perm[t] in the second engine
    inv = np.argsort(perm)
    a = Engine.from_arrays(g.num_devices, g.device, g.exe, g.src, g.dst, priority=np.arange(n))
    b = Engine.from_arrays(g.num_devices, [g.device[t] for t in inv], [g.exe[t] for t in inv],
                           [perm[t] for t in g.src], [perm[t] for t in g.dst], priority=inv)
    assert a.simulate_full() == b.simulate_full()
    for x, y in zip(a.timeline()[1:], b.timeline()[1:]):
        np.testing.assert_array_equal(x, y[perm])
    for d in range(g.num_devices):
        assert [perm[t] for t in a.device_order(d)] == b.device_order(d)


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
@settings(max_examples=15, deadline=None)
@given(g=graphs(max_tasks=60), before=st.lists(ops, max_size=10), after=st.lists(ops, max_size=10))
def test_compact_keeps_timeline_and_pending_edits(engine_cls, g, before, after):
    eng = g.build(engine_cls)
    eng.simulate_full()
    for op in before:
        apply_edit([eng], g, op)
    eng.simulate_delta()
    for op in after:  # pending when compacting
        apply_edit([eng], g, op)
    old = eng.timeline()
    orders = [eng.device_order(d) for d in range(eng.num_devices)]
    old_ids = eng.compact()
    g.pos = [g.pos[t] for t in old_ids.tolist()]
    np.testing.assert_array_equal(old_ids, old[0])
    np.testing.assert_array_equal(eng.task_ids(), np.arange(old_ids.size))
    for x, y in zip(old[1:], eng.timeline()[1:]):
        np.testing.assert_array_equal(x, y)
    back = {int(t): i for i, t in enumerate(old_ids)}
    assert [[back[t] for t in o] for o in orders] == [eng.device_order(d) for d in range(eng.num_devices)]
    eng.simulate_delta()
    fresh = eng.copy()
    fresh.simulate_full()
    assert_same_timeline(eng, fresh)
    assert eng.add_task(0, 1.0) == old_ids.size


class OperatorGraph:
    """A FlexFlow-like task graph: a DAG of operators, each split into tasks on some GPUs; a
    tensor between tasks on different GPUs becomes a transfer task on the link device between
    them. ``reconfigure`` is an MCMC proposal: drop one operator's tasks and transfers, add new."""

    def __init__(self, engine_cls, num_ops: int, num_gpus: int, seed: int):
        self.rng = random.Random(seed)
        self.num_gpus = num_gpus
        self.eng = engine_cls(num_gpus + num_gpus * num_gpus)
        self.inputs = [[j for j in {i - 1, i - self.rng.randint(2, 4)} if j >= 0] for i in range(num_ops)]
        self.cost = [self.rng.choice([1.0, 2.0, 4.0]) for _ in range(num_ops)]
        self.tasks: list[list[tuple[int, int]]] = [[] for _ in range(num_ops)]  # (task, gpu)
        self.transfers: list[list[int]] = [[] for _ in range(num_ops)]  # transfers into op i
        for i in range(num_ops):
            self._place(i)

    def _gpus(self) -> list[int]:
        return self.rng.sample(range(self.num_gpus), self.rng.choice([1, 2, 4][: self.num_gpus.bit_length()]))

    def _connect(self, src_op: int, dst_op: int) -> None:
        for p, gp in self.tasks[src_op]:
            for c, gc in self.tasks[dst_op]:
                if gp == gc:
                    self.eng.add_edge(p, c)
                else:
                    link = self.num_gpus + gp * self.num_gpus + gc
                    x = self.eng.add_task(link, 0.5 / len(self.tasks[dst_op]))
                    self.eng.add_edge(p, x)
                    self.eng.add_edge(x, c)
                    self.transfers[dst_op].append(x)

    def _place(self, i: int) -> None:
        gpus = self._gpus()
        self.tasks[i] = [(self.eng.add_task(g, self.cost[i] / len(gpus)), g) for g in gpus]
        for j in self.inputs[i]:
            self._connect(j, i)

    def reconfigure(self, i: int) -> None:
        consumers = [k for k, ins in enumerate(self.inputs) if i in ins]
        for t, _ in self.tasks[i]:
            self.eng.remove_task(t)
        for x in self.transfers[i]:
            self.eng.remove_task(x)
        self.transfers[i] = []
        self._place(i)
        for k in consumers:  # transfers from op i into k are stale; rebuild all of k's inputs
            for x in self.transfers[k]:
                self.eng.remove_task(x)
            self.transfers[k] = []
            for j in self.inputs[k]:
                self._connect(j, k)


@pytest.mark.parametrize("mode", list(DELTA_MODES))
@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("seed", [0, 1])
def test_delta_over_many_mcmc_proposals_equals_full(engine_cls, seed, mode):
    og = OperatorGraph(engine_cls, num_ops=40 if engine_cls is Engine else 15, num_gpus=4, seed=seed)
    set_mode([og.eng], mode)
    og.eng.simulate_full()
    for step in range(60 if engine_cls is Engine else 20):
        og.reconfigure(og.rng.randrange(len(og.tasks)))
        makespan = og.eng.simulate_delta()
        fresh = og.eng.copy()
        assert fresh.simulate_full() == makespan, f"step {step}"
        assert_same_timeline(og.eng, fresh)
    assert og.eng.fallbacks == 0
    if mode in ("replay", "bellman_ford"):
        assert (og.eng.replays > 0) == (mode == "replay")
    if mode in ("bellman_ford", "probe_then_replay"):
        assert og.eng.direct_replays == 0 and og.eng.full_replays == 0
    assert_semantics(og.eng)


def test_delta_replays_the_suffix_when_bellman_ford_runs_long():
    """A big delay early on two busy devices: Bellman-Ford re-processes tasks many times, so the
    delta cuts at K0 and replays Algorithm 1 after it, at most one suffix's worth of extra pops."""
    rng = random.Random(5)
    n = 3000
    src, dst = zip(*[(i, j) for i in range(n) for j in {i + rng.randint(1, 20), i + rng.randint(1, 20)} if j < n])
    eng = Engine.from_arrays(2, [rng.randrange(2) for _ in range(n)], [rng.choice([0.5, 1.0, 2.0]) for _ in range(n)],
                             src, dst)
    set_mode([eng], "probe_then_replay")
    eng.simulate_full()
    for exe in (50.0, 0.25, 7.0):
        eng.set_exe(3, exe)
        makespan = eng.simulate_delta()
        fresh = eng.copy()
        assert fresh.simulate_full() == makespan
        assert_same_timeline(eng, fresh)
        assert eng.last_processed <= 2 * n
    assert eng.replays >= 1 and eng.fallbacks == 0


@pytest.mark.parametrize("mode", ["bellman_ford", "probe_then_replay", "default"])
def test_delta_touches_only_what_changed(mode):
    """A change at the end of a long chain re-simulates a handful of tasks, not the chain; one
    further up re-simulates what follows it (a 256-pop probe then the replay, or by default the
    replay at once: the suffix is 40% of the tasks; from 50% on, a full simulation)."""
    eng = Engine(2)
    set_mode([eng], mode)
    chain = [eng.add_task(i % 2, 1.0) for i in range(1000)]
    for a, b in zip(chain, chain[1:]):
        eng.add_edge(a, b)
    assert eng.simulate_full() == 1000.0
    assert eng.last_processed == 1000
    eng.set_exe(chain[-1], 3.0)
    assert eng.simulate_delta() == 1002.0
    assert eng.last_processed == 1
    eng.set_exe(chain[600], 2.0)
    assert eng.simulate_delta() == 1003.0
    assert eng.last_processed == {"bellman_ford": 400, "probe_then_replay": 256 + 400, "default": 400}[mode]
    assert eng.replays == (mode != "bellman_ford")
    assert eng.direct_replays == (mode == "default")
    eng.set_exe(chain[100], 2.0)  # most of the chain after it: by default, Algorithm 1 over everything
    assert eng.simulate_delta() == 1004.0
    assert eng.full_replays == (mode == "default")
    assert eng.last_processed == (1000 if mode == "default" else
                                  {"bellman_ford": 900, "probe_then_replay": 256 + 900}[mode])


# -- hand-checked cases ------------------------------------------------------------------------

@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_figure4_two_gpus_one_link_chain(engine_cls):
    """FlexFlow Fig. 4 in small: an embedding on GPU 0, its output sent over the link (device 2) to
    a recurrent step on GPU 1, and a second embedding task on GPU 0 ready at the same time."""
    eng = engine_cls(3)
    emb0 = eng.add_task(0, 1.0)
    emb1 = eng.add_task(0, 1.5)  # ready at 0 like emb0: runs second (larger id)
    xfer = eng.add_task(2, 0.5)
    rnn = eng.add_task(1, 2.0)
    for a, b in [(emb0, xfer), (xfer, rnn)]:
        eng.add_edge(a, b)
    assert eng.simulate_full() == 3.5
    ids, dev, ready, start, end = eng.timeline()
    assert ready.tolist() == [0.0, 0.0, 1.0, 1.5]
    assert start.tolist() == [0.0, 1.0, 1.0, 1.5]
    assert end.tolist() == [1.0, 2.5, 1.5, 3.5]
    assert eng.device_order(0) == [emb0, emb1]
    assert eng.busy_time().tolist() == [2.5, 2.0, 0.5]
    # the link gets slower: the chain and the makespan stretch, GPU 0 does not move
    eng.set_exe(xfer, 1.0)
    assert eng.simulate_delta() == 4.0
    assert eng.timeline()[3].tolist() == [0.0, 1.0, 1.0, 2.0]


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_fifo_by_ready_then_id(engine_cls):
    """Device 0 runs c (ready at 2) before b (ready at 3) though b has the smaller id; a and c
    are both ready at 2 and run by id."""
    eng = engine_cls(2)
    a, b, c = eng.add_task(0, 1.0), eng.add_task(0, 1.0), eng.add_task(0, 1.0)
    pa, pb = eng.add_task(1, 2.0), eng.add_task(1, 1.0)
    eng.add_edge(pa, a)
    eng.add_edge(pb, b)
    eng.add_edge(pa, c)
    assert eng.simulate_full() == 5.0
    # device 1: pa [0, 2] then pb [2, 3] (both ready at 0: by id); so a and c are ready at 2, b at 3
    assert eng.device_order(1) == [pa, pb]
    assert eng.device_order(0) == [a, c, b]
    assert [eng.start(t) for t in (a, c, b)] == [2.0, 3.0, 4.0]
    # pb moves to device 0: it runs first there, and b (now ready at 1) overtakes a and c
    eng.set_device(pb, 0)
    assert eng.simulate_delta() == 4.0
    assert eng.device_order(0) == [pb, b, a, c]
    assert eng.device_order(1) == [pa]
    assert [eng.start(t) for t in (pb, b, a, c)] == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_delta_task_moving_back_with_unchanged_end_updates_its_new_successor(engine_cls):
    """t moves behind w and gets shorter, so its end (7) does not change; n, now behind t
    instead of w, must still start earlier (the move itself has to notify n)."""
    eng = engine_cls(4)
    z, t, w, n = (eng.add_task(0, x) for x in (5.0, 2.0, 1.0, 1.0))
    pt, pw, pn = eng.add_task(1, 1.0), eng.add_task(2, 1.5), eng.add_task(3, 2.5)
    for a, b in [(pt, t), (pw, w), (pn, n)]:
        eng.add_edge(a, b)
    assert eng.simulate_full() == 9.0
    assert eng.device_order(0) == [z, t, w, n]
    assert [eng.end(x) for x in (z, t, w, n)] == [5.0, 7.0, 8.0, 9.0]
    eng.set_exe(pt, 2.0)  # t is now ready at 2, after w (1.5)
    eng.set_exe(t, 1.0)
    assert eng.simulate_delta() == 8.0
    assert eng.device_order(0) == [z, w, t, n]
    assert [eng.end(x) for x in (z, w, t, n)] == [5.0, 6.0, 7.0, 8.0]


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_priority_breaks_ties_before_the_id(engine_cls):
    eng = engine_cls(1)
    a, b, c = eng.add_task(0, 1.0, priority=5), eng.add_task(0, 1.0, priority=1), eng.add_task(0, 1.0, priority=1)
    assert eng.simulate_full() == 3.0
    assert eng.device_order(0) == [b, c, a]  # all ready at 0: priority 1, 1, 5, then id
    eng.set_priority(a, 0)
    eng.simulate_delta()
    assert eng.device_order(0) == [a, b, c]
    assert [eng.start(t) for t in (a, b, c)] == [0.0, 1.0, 2.0]
    with pytest.raises(GraphError, match="priority of task 0 must be an int64; got 0.5"):
        eng.set_priority(a, 0.5)
    with pytest.raises(GraphError, match="priority of the new task"):
        eng.add_task(0, 1.0, priority=2**63)


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_remove_task_frees_its_device_slot(engine_cls):
    eng = engine_cls(1)
    t0, t1, t2 = (eng.add_task(0, x) for x in (1.0, 2.0, 4.0))
    assert eng.simulate_full() == 7.0
    eng.remove_task(t1)
    assert eng.simulate_delta() == 5.0
    assert eng.task_ids().tolist() == [t0, t2]
    assert eng.device_order(0) == [t0, t2]
    assert eng.add_task(0, 1.0) == 3  # ids are never reused
    assert eng.simulate_delta() == 6.0


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_empty_graph_and_delta_without_previous_simulation(engine_cls):
    eng = engine_cls(3)
    assert eng.simulate_full() == 0.0
    assert eng.timeline()[0].size == 0
    eng2 = engine_cls(1)
    a = eng2.add_task(0, 1.0)
    eng2.add_edge(a, eng2.add_task(0, 2.0))
    assert eng2.simulate_delta() == 3.0  # no previous simulation: a full one
    assert eng2.last_processed == 2


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_duplicate_edges_are_ignored(engine_cls):
    eng = engine_cls(1)
    a, b = eng.add_task(0, 1.0), eng.add_task(0, 1.0)
    assert eng.add_edge(a, b) is True
    assert eng.add_edge(a, b) is False
    assert eng.num_edges == 1
    eng.remove_edge(a, b)
    assert eng.num_edges == 0
    with pytest.raises(GraphError, match="no edge 0 -> 1"):
        eng.remove_edge(a, b)
    same = engine_cls.from_arrays(1, [0, 0], [1.0, 1.0], [0, 0, 0], [1, 1, 1])
    assert same.num_edges == 1


# -- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_errors_name_the_rule_and_the_value(engine_cls):
    eng = engine_cls(2)
    with pytest.raises(GraphError, match=r"device must be an int in 0\.\.1; got 2"):
        eng.add_task(2, 1.0)
    t = eng.add_task(0, 1.0)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=f"exe of task {t} must be a finite number"):
            eng.set_exe(t, bad)
    with pytest.raises(GraphError, match="exe of the new task on device 1"):
        eng.add_task(1, 0)
    with pytest.raises(GraphError, match="no task 7"):
        eng.remove_task(7)
    eng.remove_task(t)
    with pytest.raises(GraphError, match="no task 0"):
        eng.set_exe(t, 1.0)
    u = eng.add_task(1, 1.0)
    with pytest.raises(GraphError, match="cycle: edge from task 1 to itself"):
        eng.add_edge(u, u)
    with pytest.raises(GraphError, match="device must be"):
        eng.set_device(u, -1)
    with pytest.raises(GraphError, match="device must be"):
        eng.device_order(5)
    with pytest.raises(GraphError, match="num_devices"):
        engine_cls(0)


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_from_arrays_rejects_bad_input(engine_cls):
    with pytest.raises(GraphError, match="device"):
        engine_cls.from_arrays(2, [0, 3], [1.0, 1.0], [], [])
    with pytest.raises(ValueError, match="exe of task 1"):
        engine_cls.from_arrays(2, [0, 1], [1.0, -2.0], [], [])
    with pytest.raises(GraphError):
        engine_cls.from_arrays(2, [0, 1], [1.0, 1.0], [0], [2])
    with pytest.raises(GraphError, match="cycle"):
        engine_cls.from_arrays(2, [0, 1], [1.0, 1.0], [1], [1])


@pytest.mark.parametrize("mode", list(DELTA_MODES))
@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_cycle_is_reported_by_full_and_by_delta(engine_cls, mode):
    eng = engine_cls.from_arrays(2, [0, 1, 0, 1], [1.0] * 4, [0, 1, 2], [1, 2, 3])
    set_mode([eng], mode)
    eng.simulate_full()
    eng.add_edge(3, 1)  # closes 1 -> 2 -> 3 -> 1
    with pytest.raises(ValueError, match=r"^cycle among tasks 1 -> 2 -> 3 -> 1 \(3 tasks"):
        eng.simulate_delta()
    with pytest.raises(GraphError, match="^cycle"):
        eng.simulate_full()
    eng.remove_edge(3, 1)  # the engine recovers once the cycle is gone
    assert eng.simulate_delta() == 4.0


@pytest.mark.parametrize("engine_cls", ENGINES, ids=lambda c: c.__name__)
def test_exe_that_vanishes_in_float64_is_an_error(engine_cls):
    eng = engine_cls(1)
    eng.add_edge(eng.add_task(0, 1.0), eng.add_task(0, 1e-30))
    with pytest.raises(GraphError, match="vanishes when added to its start time 1.0"):
        eng.simulate_full()
    eng.set_exe(1, 1e-9)
    assert eng.simulate_delta() == 1.0 + 1e-9
