"""Time-resolved memory (``flexrt.simulator.memory``): the peak of live buffers per device along the
simulated timeline (issue 18).

The replay's rules on small hand-made timelines (overlap adds, a task ending at an instant frees
before one starting then allocates, a task taking no time holds what it reads and writes together,
an unread buffer goes with its writer, a bucket's flat buffer goes with its last segment); the
simulator's detailed result carries the peak and its course (none without detail), equal to
``peak_memory`` on the same timeline; laws over zoo models and random strategies: the peak lies
between the weights with their optimizer state and everything the iteration allocates, live bytes
never fall below the weights and come back to them at the end, Adam's state adds exactly twice the
weights to every peak; fused graphs (groups and buckets) replay too; the Chrome trace gains one
live-bytes counter track per device.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.errors import StrategyError
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.simulator.actions import Buf, Key, RingGroup
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.memory import box_bytes, memory_timeline, peak_memory, replay
from flexrt.simulator.simulate import OPTIMIZER_STATE, Simulator
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.fusion import FusionGroup, FusionPlan, gradient_order

COST = AnalyticCostModel()
MACHINE = load_machine("dgx1_v100")
_PCGS: dict = {}


def model(name, *flags):
    if (name, flags) not in _PCGS:
        _PCGS[(name, flags)] = load_model(name, list(flags)).model.pcg
    return _PCGS[(name, flags)]


# ---- the replay's rules on hand-made timelines --------------------------------------------------------

def _buf(name: str, elements: int, device: int = 0) -> Buf:
    return Buf(Key.output(name, 0, 0), device, ((0, elements),), "float64")


def fake(tasks, rings=()) -> SimpleNamespace:
    """What ``replay`` reads of ``Buffers``, for ``tasks`` ((reads, writes) of buffers) and ``rings``
    ((group, member tasks))."""
    decl, readers = {}, {}
    for reads, writes in tasks:
        for b in reads + writes:
            decl[(b.key, b.device)] = b
        for b in reads:
            readers[(b.key, b.device)] = readers.get((b.key, b.device), 0) + 1
    for g, _ in rings:
        for b in g.buffers:
            decl[(b.key, b.device)] = b
    ids = lambda bs: tuple((b.key, b.device) for b in bs)  # noqa: E731
    return SimpleNamespace(reads=[ids(r) for r, _ in tasks], writes=[ids(w) for _, w in tasks], decl=decl,
                           readers=readers, persistent=set(), kept=frozenset(), weight_instances=[], updates={},
                           contributes={}, accumulated={}, contribution_of={},
                           ring_groups={g.id: g for g, _ in rings}, ring_members={g.id: list(ms) for g, ms in rings})


A, B, C = _buf("a", 10), _buf("b", 20), _buf("c", 40)


def test_overlapping_tasks_add_and_sequential_ones_do_not():
    tasks = [((), (A,)), ((A,), ()), ((), (B,)), ((B,), ())]
    buffers = fake(tasks)
    seq = replay(buffers, [0, 1, 2, 3], [1, 2, 3, 4])
    assert seq.peak_bytes == {0: 20 * 8}
    both = replay(buffers, [0, 1, 0, 1], [1, 2, 1, 2])  # A and B live together over [0, 2]
    assert both.peak_bytes == {0: 30 * 8}
    assert both.live_bytes[0][-1] == 0 and both.allocated_bytes == {0: 30 * 8}


def test_a_task_ending_at_an_instant_frees_before_one_starting_then_allocates():
    tasks = [((), (A,)), ((A,), ()), ((), (B,)), ((B,), ())]
    tl = replay(fake(tasks), [0, 1, 2, 4], [1, 2, 4, 5])  # A's reader ends at 2, B's writer starts at 2
    assert tl.peak_bytes == {0: 20 * 8}


def test_a_task_taking_no_time_holds_what_it_reads_and_writes_together():
    tasks = [((), (A,)), ((A,), (B,)), ((B,), ())]
    tl = replay(fake(tasks), [0, 1, 1], [1, 1, 2])
    assert tl.peak_bytes == {0: 30 * 8}
    tl = replay(fake(tasks), [0, 1, 2], [1, 2, 3])
    assert tl.peak_bytes == {0: 30 * 8}  # a reader's inputs live until it ends


def test_an_unread_buffer_goes_with_its_writer_and_an_unmaterialized_one_never_comes():
    tasks = [((), (A, C)), ((A,), (B,)), ((B,), ())]
    tl = replay(fake(tasks), [0, 2, 4], [1, 3, 5])
    assert tl.peak_bytes == {0: 50 * 8}              # A and C while the first task runs
    np.testing.assert_array_equal(tl.times[0], [0, 0, 1, 2, 3, 5])   # C goes at 1, A at 3 (its reader's end)
    np.testing.assert_array_equal(tl.live_bytes[0] // 8, [10, 50, 10, 30, 20, 0])
    cid = (C.key, C.device)
    assert replay(fake(tasks), [0, 2, 4], [1, 3, 5], unmaterialized={cid}).peak_bytes == {0: 30 * 8}


def test_a_bucket_flat_buffer_goes_with_its_last_segment():
    s0, s1 = _buf("s0", 10), _buf("s1", 30)
    group = RingGroup(0, (s0, s1), segments=2)    # one member holding two segments
    tasks = [((), (s0, s1)), ((s0,), ()), ((), (A,)), ((s1,), ())]
    tl = replay(fake(tasks, [(group, [0])]), [0, 1, 2, 3], [0.5, 1.5, 2.5, 3.5])
    # s0's reader ends at 1.5 but the flat buffer lives until s1's at 3.5: A comes on top of all 40
    assert tl.peak_bytes == {0: 50 * 8}
    assert tl.live_bytes[0][-1] == 0


# ---- the simulator's detailed result --------------------------------------------------------------------

def _timeline_dicts(result):
    tl = result.timeline
    ids = tl["ids"].tolist()
    return dict(zip(ids, tl["start"].tolist())), dict(zip(ids, tl["end"].tolist()))


def test_detailed_result_carries_the_peak_of_its_timeline_and_a_search_result_none():
    strategy = data_parallel(model("alexnet", "-b", "32"), MACHINE, 4)
    sim = Simulator(MACHINE, COST, "momentum")
    r = sim.full(strategy)
    start, end = _timeline_dicts(r)
    assert r.peak_bytes == peak_memory(sim.graph, start, end, OPTIMIZER_STATE[sim.optimizer])
    assert set(r.peak_bytes) == {0, 1, 2, 3}
    for d, p in r.peak_bytes.items():
        assert p == int(r.memory_timeline.live_bytes[d].max()) > 0
        assert np.all(np.diff(r.memory_timeline.times[d]) >= 0)
    assert r.to_json()["peak_bytes"] == {str(d): p for d, p in r.peak_bytes.items()}
    plain = Simulator(MACHINE, COST, "momentum", detail=False).full(strategy)
    assert plain.peak_bytes == {} and plain.memory_timeline is None and "peak_bytes" not in plain.to_json()
    assert plain.iteration_time_s == r.iteration_time_s


def test_replay_needs_a_detailed_graph():
    sim = Simulator(MACHINE, COST, detail=False)
    sim.full(data_parallel(model("mlp_unity_fig2", "-b", "16"), MACHINE, 2))
    with pytest.raises(StrategyError, match="lowered with detail"):
        memory_timeline(sim.graph, {}, {})


def _weights_and_state(sim, factor: int) -> dict:
    out: dict = {}
    for t in sim.graph.tasks.values():
        a = t.action
        if type(a).__name__ == "Update":
            out[a.weight.device] = out.get(a.weight.device, 0) + (1 + factor) * box_bytes(a.weight)
    return out


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(name=st.sampled_from(["mlp_unity_fig2", "alexnet"]), seed=st.integers(0, 10_000),
       optimizer=st.sampled_from(["sgd", "momentum", "adam"]))
def test_peak_lies_between_the_weights_and_everything_allocated(name, seed, optimizer):
    pcg = model(name, "-b", "16")
    try:
        strategy = random_strategy(pcg, MACHINE, seed)
    except StrategyError:
        strategy = data_parallel(pcg, MACHINE, 2)
    sim = Simulator(MACHINE, COST, optimizer, incremental=False)
    r = sim.full(strategy)
    held = _weights_and_state(sim, OPTIMIZER_STATE[sim.optimizer])
    assert r.peak_bytes
    for d, p in r.peak_bytes.items():
        live = r.memory_timeline.live_bytes[d]
        assert held.get(d, 0) <= p <= r.memory_timeline.allocated_bytes[d]
        assert live.min() >= 0 and live[-1] == held.get(d, 0)  # every transient freed by the end
        assert live[len(live) // 2:].min() >= held.get(d, 0)   # weights never leave
        assert r.memory_timeline.allocated_bytes[d] >= held.get(d, 0)


def test_adam_state_adds_twice_the_weights_to_every_peak():
    strategy = data_parallel(model("alexnet", "-b", "16"), MACHINE, 2)
    sgd = Simulator(MACHINE, COST, "sgd").full(strategy)
    adam = Simulator(MACHINE, COST, "adam").full(strategy)
    assert adam.iteration_time_s >= sgd.iteration_time_s
    assert set(adam.peak_bytes) == set(sgd.peak_bytes)
    for d, p in sgd.peak_bytes.items():
        # the timelines differ only in update times, after every transient but gradients is gone
        assert adam.peak_bytes[d] - p == 2 * sgd.memory_bytes[d]["weights"]


def test_fused_graph_with_groups_and_a_bucket_replays():
    pcg = model("mlp_unity_fig2", "-b", "64")
    strategy = data_parallel(pcg, MACHINE, 4)
    ops = list(strategy.wiring().ops)
    weights = tuple(w for w, _ in gradient_order(strategy.wiring()))
    plan = FusionPlan((FusionGroup(tuple(ops[:2])),), (weights,))
    sim = Simulator(MACHINE, COST, "momentum")
    fused = sim.full(strategy.with_fusion(plan))
    assert sim.fused is not None
    start, end = _timeline_dicts(fused)
    assert fused.peak_bytes == peak_memory(sim.graph, start, end, 1)
    plain = Simulator(MACHINE, COST, "momentum").full(strategy)
    held = _weights_and_state(sim, 1)
    for d, p in fused.peak_bytes.items():
        assert held[d] < p and held[d] < plain.peak_bytes[d]


def test_chrome_trace_has_a_live_bytes_counter_track_per_device():
    sim = Simulator(MACHINE, COST)
    r = sim.full(data_parallel(model("mlp_unity_fig2", "-b", "64"), MACHINE, 2))
    events = sim.chrome_trace(r)["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    tracks = {e["name"] for e in counters}
    assert tracks == {f"live bytes gpu{d} (node 0)" for d in r.peak_bytes}
    for d, p in r.peak_bytes.items():
        mine = [e for e in counters if e["name"] == f"live bytes gpu{d} (node 0)"]
        assert max(e["args"]["bytes"] for e in mine) == p
        assert len(mine) == len(r.memory_timeline.times[d]) and all(e["ts"] >= 0 and e["pid"] == 0 for e in mine)
    assert len([e for e in events if e["ph"] == "X"]) == r.num_tasks
