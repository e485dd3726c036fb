"""``ExecPlan`` (flexrt/runtime/plan.py): what the plan derives from a lowered task graph and its
predicted schedule, checked as laws on every plan. ``test_plan.py`` checks the order (every task
once, topological, successors and predecessor counts), part sources, alias basics and the refusal of
a graph without detail on two zoo models; this file checks the rest, on more models and machines.

Each law is a ``check_*`` function of one lowered strategy. The fixed cases (models of the central
law, two zoo models; data-parallel and random strategies; one- and two-node machines) run every law
by name; a hypothesis test runs all of them on random strategies. The laws:

- tasks: each planned task is the graph's task (device, kind, name, action), actions match kinds,
  computations sit on compute devices and transfers on links; the predicted times are the
  simulator's timeline, ordered by start;
- weights and inputs: shapes come from the graph (and agree with the model), weight instances
  cover every weight and weigh on each device what the simulator predicts;
- parts: every assembled buffer has parts and only assembled buffers do; a part never crosses
  devices and its box lies in both buffers; an operand piece is copied exactly once per element
  inside its tensor (halo padding outside stays the fill), gradients and partial sums accumulate;
- aliases: an alias is an exact same-device copy avoided, its target is canonical and never written
  twice;
- readers and writers: each transient buffer has exactly one writer, which runs before every reader
  (an ancestor in the graph), and the reader counts are the number of tasks reading it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections import Counter, defaultdict
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import DataType
from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.model.loader import load_model
from flexrt.runtime.plan import ExecPlan
from flexrt.simulator.actions import (HOST, Backward, Buf, BufKind, Forward, Key, Loss, Move, RingGroup, RingStep,
                                      Sum, Update, gathered)
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import SimResult, Simulator
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy import data_parallel, random_strategy

from .test_central_law import MODELS

COST = AnalyticCostModel()
MACHINES = {"dgx1": lambda: load_machine("dgx1_v100"),                # 8 GPUs, one node
            "p100x2": lambda: load_machine("flexflow_p100", nodes=2)}  # 2 x 4 GPUs: multi-hop routes
ZOO = ("mlp_unity_fig2", "lenet")


class Lowered(NamedTuple):
    pcg: object
    result: SimResult
    graph: object
    plan: ExecPlan
    machine: object


@functools.cache
def machine(name: str):
    return MACHINES[name]()


@functools.cache
def model_pcg(name: str):
    if name in MODELS:
        return MODELS[name](DataType.DT_DOUBLE)[0].pcg
    return load_model(name, ["-b", "8"]).model.pcg


def strategy_for(pcg, m, kind: str, seed: int):
    if kind == "data":
        return data_parallel(pcg, m, 4)
    try:
        return random_strategy(pcg, m, seed)
    except StrategyError:  # no valid random configuration for some operator
        return data_parallel(pcg, m, 2)


def lower(model: str, kind: str, seed: int, machine_name: str) -> Lowered:
    pcg, m = model_pcg(model), machine(machine_name)
    sim = Simulator(m, COST)
    result = sim.full(strategy_for(pcg, m, kind, seed))
    graph = sim.lowering.graph
    return Lowered(pcg, result, graph, ExecPlan(graph, sim.schedule()), m)


lowered = functools.cache(lower)  # the fixed cases are shared by every law; plans are not mutated here


# ---- helpers ------------------------------------------------------------------------------------

def edges(graph):
    return [(a, b) for a, ss in graph.successors().items() for b in ss]


def ancestors(plan: ExecPlan) -> list[int]:
    """Per planned task, the bit set of the planned tasks it (transitively) depends on."""
    preds = defaultdict(list)
    for i, ss in enumerate(plan.succ):
        for s in ss:
            preds[s].append(i)
    anc = [0] * plan.num_tasks
    for i in topological(plan):
        m = 0
        for p in preds[i]:
            m |= anc[p] | (1 << p)
        anc[i] = m
    return anc


def topological(plan: ExecPlan) -> list[int]:
    remaining = plan.num_preds.tolist()
    ready = [i for i, r in enumerate(remaining) if r == 0]
    out = []
    while ready:
        i = ready.pop()
        out.append(i)
        for s in plan.succ[i]:
            remaining[s] -= 1
            if remaining[s] == 0:
                ready.append(s)
    assert len(out) == plan.num_tasks, "the plan's dependencies have a cycle"
    return out


def box_count(buf: Buf, boxes) -> np.ndarray:
    """How many of ``boxes`` (global coordinates) cover each element of ``buf``."""
    count = np.zeros([hi - lo for lo, hi in buf.ranges], dtype=np.int64)
    for box in boxes:
        count[tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, buf.ranges))] += 1
    return count


def inside(buf: Buf, dims) -> np.ndarray:
    """Mask of the elements of ``buf`` that lie inside a tensor of ``dims`` (not halo padding)."""
    mask = np.ones([hi - lo for lo, hi in buf.ranges], dtype=bool)
    for axis, ((lo, hi), n) in enumerate(zip(buf.ranges, dims)):
        idx = np.arange(lo, hi)
        shape = [1] * mask.ndim
        shape[axis] = -1
        mask &= ((idx >= 0) & (idx < n)).reshape(shape)
    return mask


def within(box, ranges) -> bool:
    return all(a <= lo <= hi <= b for (lo, hi), (a, b) in zip(box, ranges))


# ---- the laws -----------------------------------------------------------------------------------

def check_tasks_are_the_graphs_and_actions_match_kinds(L: Lowered) -> None:
    plan, graph = L.plan, L.graph
    kinds = {Forward: {TaskKind.FORWARD}, Backward: {TaskKind.BACKWARD}, Loss: {TaskKind.LOSS},
             Update: {TaskKind.UPDATE}, Sum: {TaskKind.REDUCE}, Move: {TaskKind.TRANSFER},
             RingStep: {TaskKind.TRANSFER}, type(None): {TaskKind.REDUCE, TaskKind.TRANSFER}}
    assert plan.num_compute_devices == graph.num_compute_devices == L.machine.num_devices
    assert plan.num_devices == graph.num_devices == L.machine.num_devices + len(L.machine.links)
    for t in plan.tasks:
        g = graph.task(t.id)
        assert (t.device, t.kind, t.name, t.action, t.transfer) == (g.device, g.kind, g.name, g.action, g.transfer)
        assert t.kind in kinds[type(t.action)], (t.name, t.kind, type(t.action).__name__)
        on_link = t.device >= plan.num_compute_devices
        assert 0 <= t.device < plan.num_devices
        assert on_link == (t.kind is TaskKind.TRANSFER), t.name
        if isinstance(t.action, (Move, RingStep)):
            assert t.transfer >= 0, t.name
        if isinstance(t.action, Move):
            assert t.action.src_device != t.action.dst.device and HOST not in (t.action.src_device,
                                                                                t.action.dst.device)
    # one Move (or ring step) per transfer; its other hops only hold their links
    per_transfer = defaultdict(list)
    for t in plan.tasks:
        if t.transfer >= 0:
            per_transfer[t.transfer].append(t)
    for x, hops in per_transfer.items():
        acting = [t for t in hops if t.action is not None]
        assert len(acting) == 1 and all(t.kind is TaskKind.TRANSFER for t in hops), (x, [t.name for t in hops])


def check_predicted_times_are_the_simulators_timeline(L: Lowered) -> None:
    plan, tl = L.plan, L.result.timeline
    start = dict(zip(tl["ids"].tolist(), tl["start"].tolist()))
    end = dict(zip(tl["ids"].tolist(), tl["end"].tolist()))
    assert plan.predicted_start.tolist() == [start[t] for t in plan.task_ids]
    assert plan.predicted_end.tolist() == [end[t] for t in plan.task_ids]
    assert np.all(np.diff(plan.predicted_start) >= 0), "tasks are not in order of predicted start"
    assert np.all(plan.predicted_end >= plan.predicted_start)
    assert float(plan.predicted_end.max()) == L.result.iteration_time_s
    for i, ss in enumerate(plan.succ):
        for s in ss:
            assert plan.predicted_end[i] <= plan.predicted_start[s]
    # a device runs one task at a time: its tasks in plan order do not overlap
    last_end = {}
    for t in plan.tasks:
        assert plan.predicted_start[t.index] >= last_end.get(t.device, 0.0), t.name
        last_end[t.device] = plan.predicted_end[t.index]


def check_weight_shapes_and_instances(L: Lowered) -> None:
    plan, pcg = L.plan, L.pcg
    model_weights = {n.name: n.attrs.shape for n in pcg.nodes if n.op_type is OpType.WEIGHT}
    assert plan.weight_shapes == L.graph.weight_shapes
    assert {k: v.dims for k, v in plan.weight_shapes.items()} == {k: v.dims for k, v in model_weights.items()}
    covered = {name: np.zeros(s.dims, dtype=bool) for name, s in plan.weight_shapes.items()}
    per_device = Counter()
    for b in plan.weight_instances:
        kind, name, ranges = b.key.kind, b.key.name, b.key.index
        assert kind is BufKind.WEIGHT and ranges == b.ranges and 0 <= b.device < plan.num_compute_devices
        shape = plan.weight_shapes[name]
        assert within(b.ranges, [(0, n) for n in shape.dims]), (name, b.ranges, shape.dims)
        assert b.dtype == shape.dtype.numpy_name
        covered[name][tuple(slice(lo, hi) for lo, hi in b.ranges)] = True
        per_device[b.device] += plan.buffer_bytes((b.key, b.device))
        assert (b.key, b.device) in plan.persistent
    assert all(c.all() for c in covered.values()), [n for n, c in covered.items() if not c.all()]
    for d in range(plan.num_compute_devices):
        assert per_device[d] == L.result.memory_bytes[d]["weights"], d
    # every weight instance is updated by exactly one task
    updates = Counter((t.action.weight.key, t.action.weight.device) for t in plan.tasks
                      if isinstance(t.action, Update))
    assert set(updates) == {(b.key, b.device) for b in plan.weight_instances}
    assert set(updates.values()) == {1}


def check_inputs_are_the_models_batch_on_the_host(L: Lowered) -> None:
    plan, pcg = L.plan, L.pcg
    model_inputs = {n.name: n.attrs.shape for n in pcg.nodes if n.op_type is OpType.INPUT}
    assert set(plan.inputs) == set(L.graph.inputs) == set(model_inputs)
    for name, b in plan.inputs.items():
        shape = model_inputs[name]
        assert b == Buf(Key.input(name), HOST, tuple((0, n) for n in shape.dims), shape.dtype.numpy_name)
        assert (b.key, HOST) in plan.persistent
    assert plan.loss_node == L.graph.loss_node and plan.loss_node in {n.name for n in pcg.nodes}


def _assembled(plan: ExecPlan) -> dict:
    """Every buffer some task assembles from parts -> the assembling task(s). A buffer of no elements
    (a piece that reads nothing of an operand: Concat's parts, Add's operands) has no parts."""
    out = defaultdict(list)
    for t in plan.tasks:
        bufs = gathered(t.action) if not isinstance(t.action, RingStep) else t.action.group.buffers
        for b in bufs:
            if all(hi > lo for lo, hi in b.ranges):
                out[(b.key, b.device)].append(t.index)
    return out


def check_parts_assemble_buffers_within_devices(L: Lowered) -> None:
    plan, pcg = L.plan, L.pcg
    recorded = Counter((key, dev) for entries in L.graph.parts.values() for key, dev, _ in entries)
    assert {bid: len(ps) for bid, ps in plan.parts.items()} == dict(recorded)
    assembled = _assembled(plan)
    assert set(plan.parts) == set(assembled), "buffers assembled without parts, or parts nobody assembles"
    for bid, ps in plan.parts.items():
        dst = plan.decl[bid]
        assert (dst.key, dst.device) == bid
        for p in ps:
            src = plan.decl[(p.src, p.device)]
            assert p.device in (dst.device, HOST), f"part of {bid} crosses from device {p.device}"
            assert within(p.box, dst.ranges) and within(p.box, src.ranges), (bid, p)
        kind = bid[0].kind
        if kind in (BufKind.GRAD_OUTPUT, BufKind.SUM, BufKind.RING, BufKind.WEIGHT_GRAD):  # accumulate
            assert all(p.add for p in ps), bid
        if kind is BufKind.OPERAND:                 # operand pieces are copies
            assert not any(p.add for p in ps), bid
            op, i = bid[0].name, bid[0].index
            dims = pcg.shape(pcg.node_by_name(op).inputs[i]).tensor_shape.dims
            count, mask = box_count(dst, [p.box for p in ps]), inside(dst, dims)
            assert (count[mask] == 1).all(), f"{bid}: elements inside the tensor not copied exactly once"
            assert (count[~mask] == 0).all(), f"{bid}: halo padding overwritten"


def check_aliases_are_exact_same_device_pieces(L: Lowered) -> None:
    plan = L.plan
    written = {w for t in plan.tasks for w in t.writes}
    for bid, target in plan.alias.items():
        b, src = plan.decl[bid], plan.decl[target]
        (p,) = plan.parts[bid]
        assert (p.src, p.device) == target
        assert b.device == src.device != HOST
        assert (b.ranges, b.dtype) == (src.ranges, src.dtype) and p.box == b.ranges
        assert not p.add or b.fill == 0.0, f"{bid}: fill {b.fill} plus the part is not the part"
        assert bid not in written, f"aliased {bid} is allocated by a task"
        assert plan.canonical(bid) not in plan.alias
        assert plan.canonical(plan.canonical(bid)) == plan.canonical(bid)
    assert all(plan.canonical(bid) == bid for bid in plan.decl if bid not in plan.alias)
    assert all(plan.canonical(r) == r for t in plan.tasks for r in t.reads)


def check_each_transient_buffer_written_once_before_its_readers(L: Lowered) -> None:
    plan = L.plan
    assert plan.persistent == {bid for bid in plan.decl if bid[0].kind is BufKind.WEIGHT or bid[1] == HOST}
    writers = defaultdict(list)
    for t in plan.tasks:
        for w in t.writes:
            writers[w].append(t.index)
    assert all(len(ws) == 1 for ws in writers.values()), {w: ws for w, ws in writers.items() if len(ws) != 1}
    b = plan.buffers
    for bid, contributions in b.accumulated.items():   # a summed gradient: written by its contributions
        assert bid not in writers
        writers[bid] = [writers[src][0] for src, _ in contributions]
    readers = Counter(r for t in plan.tasks for r in t.reads)
    assert dict(plan.readers) == dict(readers)
    anc = ancestors(plan)
    ring = defaultdict(int)  # a collective runs once all its members are ready: their ancestors join
    for t in plan.tasks:
        if isinstance(t.action, RingStep):
            ring[t.action.group.id] |= anc[t.index]
    for t in plan.tasks:
        before = anc[t.index] | (ring[t.action.group.id] if isinstance(t.action, RingStep) else 0)
        for r in t.reads:
            if r in plan.persistent:
                continue
            assert r in writers, f"task '{t.name}' reads {r}, which no task writes"
            for w in writers[r]:
                assert w == t.index or before >> w & 1, f"task '{t.name}' may read {r} before '{plan.tasks[w].name}'"


def check_summed_gradients_take_their_contributions_in_predicted_order(L: Lowered) -> None:
    """A gradient summed as its contributions come: all its parts add; its contributions (at least
    two) are operand gradients computed on its device by tasks on its device other than its
    assembler, or transfers from other devices, in the order of their producers' predicted
    ends, and read by no task; its other parts are the assembler's."""
    plan = L.plan
    b = plan.buffers
    written = {w: t.index for t in plan.tasks for w in t.writes}
    read = {r for t in plan.tasks for r in t.reads}
    for bid, contributions in b.accumulated.items():
        parts = b.parts[bid]
        assert all(p.add for p in parts) and len(contributions) >= 2
        assert sorted(map(repr, [p for _, p in contributions] + list(b.late_parts[bid]))) == sorted(map(repr, parts))
        producers = [written[src] for src, _ in contributions]
        assert producers == sorted(producers, key=lambda w: (plan.predicted_end[w], plan.tasks[w].id))
        for (src, p), w in zip(contributions, producers):
            assert src == (p.src, p.device) and src[1] == bid[1] and src not in read and src in b.kept
            a = plan.tasks[w].action
            if isinstance(a, Move):
                assert src[0].kind is BufKind.TRANSFER
            else:
                assert src[0].kind is BufKind.GRAD_OPERAND and plan.tasks[w].device == bid[1]
            assert b.contribution_of[src] == bid and src in b.contributes[w]


def check_ring_groups_have_one_step_per_member(L: Lowered) -> None:
    plan = L.plan
    members = defaultdict(list)
    for t in plan.tasks:
        if isinstance(t.action, RingStep):
            members[t.action.group.id].append(t.action.member)
            assert plan.ring_groups[t.action.group.id] == t.action.group
    assert set(members) == set(plan.ring_groups)
    for gid, group in plan.ring_groups.items():
        n = group.num_members
        assert sorted(members[gid]) == list(range(n)) and len(group.buffers) == n * group.segments
        assert n >= 2
        assert len({group.device(i) for i in range(n)}) == n, "two members on one device"
        assert all(b.device == group.device(i) for i in range(n) for b in group.member_buffers(i))
        sizes = {tuple(math.prod(hi - lo for lo, hi in b.ranges) for b in group.member_buffers(i)) for i in range(n)}
        assert len(sizes) == 1, "members hold different segment sizes"
        assert len({b.dtype for b in group.buffers}) == 1


CHECKS = [check_summed_gradients_take_their_contributions_in_predicted_order,
          check_tasks_are_the_graphs_and_actions_match_kinds, check_predicted_times_are_the_simulators_timeline,
          check_weight_shapes_and_instances, check_inputs_are_the_models_batch_on_the_host,
          check_parts_assemble_buffers_within_devices, check_aliases_are_exact_same_device_pieces,
          check_each_transient_buffer_written_once_before_its_readers, check_ring_groups_have_one_step_per_member]

CASES = [("mlp", "data", 0, "dgx1"), ("cnn", "random", 1, "dgx1"), ("transformer", "random", 2, "p100x2"),
         ("dlrm", "random", 3, "dgx1"), ("mlp_unity_fig2", "random", 0, "p100x2"), ("lenet", "data", 0, "p100x2")]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__[len("check_"):] for c in CHECKS])
def test_plan_law(check, case):
    check(lowered(*case))


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(sorted(MODELS) + list(ZOO)), seed=st.integers(0, 10_000),
       machine_name=st.sampled_from(sorted(MACHINES)))
def test_every_plan_law_holds_for_random_strategies(model, seed, machine_name):
    L = lower(model, "random", seed, machine_name)
    for check in CHECKS:
        check(L)


# ---- concrete plans -------------------------------------------------------------------------------

def test_consecutive_data_parallel_pieces_read_their_producer_without_a_copy():
    """Data parallel over 4 devices: piece p of every operator is on device p, so fc2's operand
    piece is fc1's output piece on the same device, aliased (no buffer, no copy), and no transfer
    moves activations forward."""
    L = lowered("mlp", "data", 0, "dgx1")
    plan = L.plan
    for p in range(4):
        assert plan.canonical((Key.operand("fc2", 0, p), p)) == (Key.output("fc1", 0, p), p)
        assert plan.canonical((Key.operand("fc3", 0, p), p)) == (Key.output("fc2", 0, p), p)
    moves = [t for t in plan.tasks if isinstance(t.action, Move)]
    assert not [t.name for t in moves if t.action.src.kind is BufKind.OUTPUT]
    # what data parallelism needs: a ring AllReduce per weight (kernels and biases of 3 layers)
    assert sorted(len(g.buffers) for g in plan.ring_groups.values()) == [4] * 6
    assert {b.device for b in plan.weight_instances} == {0, 1, 2, 3}


def test_plan_is_deterministic():
    a, b = lower("cnn", "random", 5, "dgx1"), lower("cnn", "random", 5, "dgx1")
    assert a.plan.tasks == b.plan.tasks
    assert a.plan.decl == b.plan.decl and a.plan.alias == b.plan.alias
    assert dict(a.plan.parts) == dict(b.plan.parts) and dict(a.plan.readers) == dict(b.plan.readers)
    assert a.plan.weight_instances == b.plan.weight_instances


def test_plan_follows_the_order_it_is_given():
    """The plan keeps the schedule's order verbatim, even one that is not topological (the predicted
    order reversed): successor lists and predecessor counts are renumbered with it."""
    m = machine("dgx1")
    sim = Simulator(m, COST)
    sim.full(data_parallel(model_pcg("mlp"), m, 2))
    sched = sim.schedule()
    order = list(reversed(sched.task_ids))
    plan = ExecPlan(sim.lowering.graph, type(sched)(tuple(order), sched.start[::-1], sched.end[::-1]))
    assert plan.task_ids == order
    index = {t: i for i, t in enumerate(order)}
    assert plan.succ[0] == [] and plan.num_preds[plan.num_tasks - 1] == 0
    assert all(s < i for i, ss in enumerate(plan.succ) for s in ss)  # every edge now points backwards
    assert sum(len(ss) for ss in plan.succ) == len(edges(sim.lowering.graph)) == int(plan.num_preds.sum())
    assert index[sched.task_ids[0]] == plan.num_tasks - 1


# ---- refusals -----------------------------------------------------------------------------------

class _Tampered:
    """A task graph with some tasks' actions or parts replaced (everything else delegated)."""

    def __init__(self, graph, actions=None, parts=None) -> None:
        self._graph, self._actions = graph, actions or {}
        self.parts = parts if parts is not None else graph.parts

    def task(self, tid):
        t = self._graph.task(tid)
        return dataclasses.replace(t, action=self._actions[tid]) if tid in self._actions else t

    def __getattr__(self, name):
        return getattr(self._graph, name)


def _simulated(model="mlp", degree=4):
    m = machine("dgx1")
    sim = Simulator(m, COST)
    sim.full(data_parallel(model_pcg(model), m, degree))
    return sim.lowering.graph, sim.schedule()


def test_part_reading_a_buffer_no_task_writes_is_refused():
    graph, sched = _simulated()
    owner, entries = next(iter(graph.parts.items()))
    key, dev, part = entries[0]
    ghost = dataclasses.replace(part, src=Key.output("nowhere", 0, 0), device=dev)
    parts = {**graph.parts, owner: [(key, dev, ghost)] + list(entries[1:])}
    with pytest.raises(StrategyError, match=re.escape(f"plan: parts of {key!r} read buffers no task writes")):
        ExecPlan(_Tampered(graph, parts=parts), sched)


def test_ring_buffer_declared_differently_by_two_members_is_refused():
    graph, sched = _simulated()
    tid = next(t for t in graph.ids() if isinstance(graph.task(t).action, RingStep))
    step = graph.task(tid).action
    first = step.group.buffers[0]
    shrunk = dataclasses.replace(first, ranges=tuple((lo, lo + 1) for lo, _ in first.ranges))
    bad = RingStep(RingGroup(step.group.id, (shrunk,) + step.group.buffers[1:]), step.member)
    with pytest.raises(StrategyError, match=rf"buffer .* on device {first.device} declared twice differently"):
        ExecPlan(_Tampered(graph, actions={tid: bad}), sched)
