"""Simulate a strategy: lower it, run full or delta simulation, and report (FlexFlow §5).

``simulate`` returns a ``SimResult``: iteration time, per-task start and end, busy time per device
and link, compute vs communication time, data moved between devices (each transfer once, however
many hops it crosses; split into activations and weight synchronization), bytes per link type,
and memory per device (weights, gradients, optimizer state, activations kept for backward) with
devices over capacity flagged. With detail (a task graph with actions) it also replays the buffers'
lifetimes along the simulated timeline (``flexrt.simulator.memory``): the peak bytes live at once
per device (``peak_bytes``) and their course (``memory_timeline``). ``chrome_trace`` writes the
timeline for Perfetto, live bytes as one counter track per device.

Entry points: ``Simulator``, ``simulate``, ``SimResult``, ``chrome_trace``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from flexrt.ir.precision import is_half
from flexrt.kernels.optimizers import STATE_FACTOR, OptimizerKind, state_bytes_of
from flexrt.machine import Machine
from flexrt.simulator.collectives import CommCost
from flexrt.simulator.fusion import FusedGraph
from flexrt.simulator.lowering import Lowering
from flexrt.simulator.memory import MemoryTimeline, memory_timeline
from flexrt.strategy.fusion import fusion_of
from flexrt.strategy.pipeline_2bw import delays_updates, unrolled
from flexrt.strategy import Strategy
from flexrt.simulator.task_graph import CATEGORIES, TRANSFER_CODE, Category, TaskKind

# optimizer state per weight element, as a multiple of the weight's bytes (the kernels' own factors)
OPTIMIZER_STATE = STATE_FACTOR


@dataclass(frozen=True)
class Schedule:
    """The simulator's predicted order of a task graph: task ids by predicted start (ties broken by
    priority, then id), with their predicted start and end times (seconds)."""

    task_ids: tuple
    start: np.ndarray
    end: np.ndarray


@dataclass
class SimResult:
    iteration_time_s: float
    num_tasks: int
    compute_time_s: float
    communication_time_s: float
    busy_s: dict[str, float]
    moved_elements: dict[str, int]
    moved_bytes: dict[str, int]
    link_bytes: dict[str, int]
    memory_bytes: dict[int, dict[str, int]]
    memory_capacity: dict[int, int]
    over_capacity: list[int] = field(default_factory=list)
    timeline: dict = field(default_factory=dict, repr=False)
    # with detail: per device the peak bytes of buffers live at once over the iteration (weights and
    # optimizer state included), and their course. ``memory_bytes``' total is no bound of it: it
    # leaves out operand copies, activation gradients and each consumer's weight-gradient contribution
    peak_bytes: dict[int, int] = field(default_factory=dict)
    memory_timeline: Optional[MemoryTimeline] = field(default=None, repr=False)

    @property
    def total_moved_elements(self) -> int:
        return sum(self.moved_elements.values())

    def to_json(self) -> dict:
        return {"iteration_time_s": self.iteration_time_s, "num_tasks": self.num_tasks,
                "compute_time_s": self.compute_time_s, "communication_time_s": self.communication_time_s,
                "moved_elements": self.moved_elements, "moved_bytes": self.moved_bytes,
                "total_moved_elements": self.total_moved_elements, "link_bytes": self.link_bytes,
                "busy_s": self.busy_s,
                "memory_bytes": {str(d): m for d, m in sorted(self.memory_bytes.items())},
                "memory_capacity_bytes": {str(d): c for d, c in sorted(self.memory_capacity.items())},
                "over_capacity": self.over_capacity,
                **({"peak_bytes": {str(d): p for d, p in sorted(self.peak_bytes.items())}} if self.peak_bytes else {})}


def _device_name(machine: Machine, device: int) -> str:
    d = machine.num_devices
    if device < d:
        dev = machine.devices[device]
        return f"{dev.spec.kind}{device} (node {dev.node})"
    link = machine.links[device - d]
    return f"link{link.id} {link.type.name} {link.src}->{link.dst}"


class Simulator:
    """Holds a lowered strategy so that single-operator changes can be delta-simulated."""

    def __init__(self, machine: Machine, cost_model, optimizer: OptimizerKind | str = OptimizerKind.SGD,
                 loss_output: Optional[str] = None, detail: bool = True, incremental: bool = True,
                 comm_cost: CommCost | str | None = None, fold=None, grad_sync: Optional[str] = None) -> None:
        """``optimizer`` is an ``OptimizerKind`` or its name ("sgd", "momentum", "adam", "rmsprop",
        "adagrad"). ``detail``
        keeps each task's name, regions and action (traces, the runtime); a search needs only times
        and dependencies. ``incremental`` keeps what delta simulation needs (each owner's tasks and
        dependencies, counted); without it ``delta`` simulates in full, with less memory.
        ``comm_cost`` ("analytic" or "measured"; default: what ``cost_model`` carries, see
        ``flexrt.simulator.collectives.with_comm_cost``) says how ring AllReduces are timed. ``fold``
        (``flexrt.simulator.folding.Fold``, ``machine`` its ``sub``) simulates one of identical
        data-parallel replicas for the whole machine (timing only: no ``detail``). ``grad_sync``:
        "overlap" or "after_backward" (default: what ``cost_model`` carries; ``flexrt.simulator.sync_lowering``)."""
        optimizer = OptimizerKind.parse(optimizer)
        self.machine = machine
        self.optimizer = optimizer
        self.lowering = Lowering(machine, cost_model, optimizer, loss_output=loss_output, detail=detail,
                                 incremental=incremental, comm_cost=comm_cost, fold=fold,
                                 grad_sync=grad_sync)
        self.fused: Optional[FusedGraph] = None  # the last strategy's task graph with its fusion plan applied
        self.fold = fold
        self._period: Optional[float] = None    # a 2bw pipeline's steady-state time per iteration
        self._unroll: Optional["Simulator"] = None
        self._check_plans = True                 # check fusion plans (an unrolled 2bw plan is its checked one's)

    @property
    def graph(self):
        """The task graph last simulated: the lowering's, or with the strategy's fusion plan applied."""
        return self.fused if self.fused is not None else self.lowering.graph

    @property
    def engine(self):
        return self._fused_engine if self.fused is not None else self.lowering.engine

    def full(self, strategy: Strategy) -> SimResult:
        """Lower the whole strategy and run Algorithm 1."""
        self.time_full(strategy)
        return self.result()

    def delta(self, strategy: Strategy, changed: set[str]) -> SimResult:
        """Re-lower what changing the named operators touches and run Algorithm 2."""
        self.time_delta(strategy, changed)
        return self.result()

    def time_full(self, strategy: Strategy) -> float:
        """``full`` without the result's statistics: the simulated iteration time only (what a
        search asks for). A ``2bw`` pipeline's is its steady state's: two iterations simulated as one
        graph (``flexrt.strategy.pipeline_2bw.unrolled``) less one iteration, and at least the work of
        its busiest device or link (two iterations may not yet be in steady state); the graph,
        timeline and statistics are the one iteration's."""
        self._period = None
        twice = self._two_iterations(strategy)
        self.lowering.build(strategy)
        plan = fusion_of(strategy)
        self.fused = FusedGraph(self.lowering, plan, check=self._check_plans) if plan else None
        if self.fused is not None:
            self._fused_engine = self.fused.engine(self.lowering.engine_cls)
        self.engine.simulate_full()
        if twice is not None:
            self._period = max(twice - float(self.engine.makespan()), self._busiest())
        return self.iteration_time()

    def _busiest(self) -> float:
        """The most seconds of work any device or link of the last graph has: no steady state runs an
        iteration in less."""
        col = self.graph.columns()
        live = col["alive"]
        return float(np.bincount(col["device"][live], weights=col["exe"][live]).max(initial=0.0))

    def _two_iterations(self, strategy: Strategy) -> Optional[float]:
        """The simulated time of two iterations of a ``2bw`` pipeline run as one graph; None for any
        other strategy."""
        if not delays_updates(strategy):
            return None
        if self._unroll is None:
            low = self.lowering
            self._unroll = Simulator(self.machine, low.cost, self.optimizer, low.loss_output, detail=False,
                                     incremental=False, comm_cost=low.comm_cost, fold=self.fold,
                                     grad_sync=low.grad_sync)
            self._unroll._check_plans = False   # its buckets interleave the two iterations' gradients
        return self._unroll.time_full(unrolled(strategy))

    def time_delta(self, strategy: Strategy, changed: set[str]) -> float:
        """``delta`` without the result's statistics: the simulated iteration time only."""
        if self.lowering.strategy is None or not self.lowering.incremental or self.fused is not None \
                or fusion_of(strategy) or self._period is not None or self._two_iterations(strategy) is not None:
            return self.time_full(strategy)
        self.lowering.update(strategy, changed)
        self.lowering.engine.simulate_delta()
        return self.iteration_time()

    def schedule(self) -> Schedule:
        """The predicted order of the last simulated task graph (what the runtime follows)."""
        ids, _, _, start, end = self.engine.timeline()
        prio = self.graph.columns()["priority"][ids]
        order = np.lexsort((ids, prio, start))
        return Schedule(tuple(int(t) for t in ids[order]), start[order], end[order])

    def iteration_time(self) -> float:
        return self._period if self._period is not None else float(self.engine.makespan())

    def result(self) -> SimResult:
        machine = self.machine
        ids, device, ready, start, end = self.engine.timeline()
        g = self.graph
        col = g.columns()
        live, exe, devs = col["alive"], col["exe"], col["device"]
        xfer = live & (col["kind"] == TRANSFER_CODE)
        comp = live & ~xfer
        compute = float(np.sum(exe[comp])) if comp.any() else 0.0
        comm = float(np.sum(exe[xfer])) if xfer.any() else 0.0
        per_device = np.bincount(devs[live], weights=exe[live], minlength=g.num_devices)
        busy: dict[str, float] = {}
        for d in np.flatnonzero(np.bincount(devs[live], minlength=g.num_devices)).tolist():   # devices with tasks
            busy[_device_name(machine, d)] = float(per_device[d])
        moved_e: dict[str, int] = defaultdict(int)
        moved_b: dict[str, int] = defaultdict(int)
        link_bytes: dict[str, int] = defaultdict(int)
        hop_ids = np.flatnonzero(xfer)
        trans = col["transfer"][hop_ids]
        xbytes = col["xfer_bytes"]
        on_link = devs[hop_ids] >= g.num_compute_devices   # not a destination's own copy (copied_by_receiver)
        per_link = np.bincount(devs[hop_ids][on_link] - g.num_compute_devices, weights=xbytes[trans][on_link],
                               minlength=g.num_links).astype(np.int64)
        for l in np.flatnonzero(per_link).tolist():
            link_bytes[g.link_types[l]] += int(per_link[l])
        # each transfer once, however many hops (its hops are consecutive tasks: ids come sorted)
        moved = trans[np.r_[True, trans[1:] != trans[:-1]]] if len(trans) and (trans[1:] >= trans[:-1]).all() \
            else np.unique(trans)
        cats = col["xfer_category"][moved]
        xelem = col["xfer_elements"][moved]
        for c in np.unique(cats).tolist():
            sel = cats == c
            moved_e[CATEGORIES[c].value] += int(xelem[sel].sum())
            moved_b[CATEGORIES[c].value] += int(xbytes[moved][sel].sum())
        for cat in (Category.ACTIVATION, Category.WEIGHT_SYNC):
            moved_e.setdefault(cat.value, 0)
            moved_b.setdefault(cat.value, 0)
        memory = g.memory_by_device()
        factor = self.state_factor()
        half = any(is_half(s.dtype) for s in (g.weight_shapes or {}).values())
        capacity, over = {}, []
        for d in range(machine.num_devices):
            m = memory.setdefault(d, {})
            for kind in ("weights", "gradients", "activations"):
                m.setdefault(kind, 0)
            # 16-bit weights (mixed precision): a float32 master copy and float32 optimizer state
            m["optimizer_state"] = state_bytes_of(factor, m["weights"] // 2, 2) if half else factor * m["weights"]
            m["total"] = sum(v for k, v in m.items() if k != "total")
            capacity[d] = machine.devices[d].spec.memory_bytes
            if m["total"] > capacity[d]:
                over.append(d)
        timeline = {"ids": ids, "device": device, "ready": ready, "start": start, "end": end}
        live = self.memory_timeline(ids, start, end) if g.detail else None
        period = self._period if self._period is not None else float(end.max()) if len(end) else 0.0
        return SimResult(period, len(ids), compute, comm, dict(busy), dict(moved_e),
                         dict(moved_b), dict(link_bytes), memory, capacity, over, timeline,
                         dict(live.peak_bytes) if live else {}, live)

    def memory_timeline(self, ids, start, end) -> MemoryTimeline:
        """Live bytes per device along the timeline ``start``, ``end`` (per task of ``ids``) of the last
        simulated task graph, every iteration's optimizer state held (``flexrt.simulator.memory``)."""
        ids = np.asarray(ids).tolist()
        return memory_timeline(self.graph, dict(zip(ids, np.asarray(start).tolist())),
                               dict(zip(ids, np.asarray(end).tolist())), self.state_factor())

    def state_factor(self) -> int:
        """Weight-sized arrays of optimizer state per weight: the optimizer's, and under ``2bw`` the
        newest weights beside the ones the forwards read (the second weight version)."""
        return OPTIMIZER_STATE[self.optimizer] + (1 if delays_updates(self.lowering.strategy) else 0)

    def chrome_trace(self, result: SimResult) -> dict:
        """The timeline as Chrome trace events: one track per device and per link (Perfetto opens it)."""
        tl = result.timeline
        return chrome_trace(self.machine, self.graph.tasks, tl["ids"], tl["device"], tl["start"], tl["end"],
                            {"iteration_time_s": result.iteration_time_s, "source": "simulator"},
                            result.memory_timeline)


def chrome_trace(machine: Machine, tasks: dict, ids, devices, starts, ends, other: dict,
                 memory: Optional[MemoryTimeline] = None) -> dict:
    """Chrome trace events of a timeline (seconds), one track per device and per link; the simulator
    and the runtime both write this layout, so the two open side by side in Perfetto. ``memory``
    adds one counter track per device: the bytes live on it over time."""
    d = machine.num_devices
    events = []
    for dev in sorted(set(int(x) for x in devices)):
        events.append({"ph": "M", "name": "thread_name", "pid": 0 if dev < d else 1, "tid": dev,
                       "args": {"name": _device_name(machine, dev)}})
    events.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "devices"}})
    events.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "links"}})
    for tid, dev, s, e in zip(ids, devices, starts, ends):
        t = tasks[int(tid)]
        args = {"kind": t.kind.value, "task": int(tid)}
        if t.kind is TaskKind.TRANSFER:
            args.update(bytes=t.num_bytes, category=t.category.value)
        events.append({"ph": "X", "name": t.name, "cat": t.kind.value, "pid": 0 if dev < d else 1,
                       "tid": int(dev), "ts": float(s) * 1e6, "dur": float(e - s) * 1e6, "args": args})
    if memory is not None:
        events += _memory_counters(machine, memory)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {**other, "machine": machine.name}}


def _memory_counters(machine: Machine, memory: MemoryTimeline) -> list:
    """Counter events ("ph": "C"): per device a track of its live bytes, one sample per change (the
    last of several at one instant holds; what is live before the first task is drawn at time 0)."""
    events = []
    for dev in sorted(memory.times):
        name = f"live bytes {_device_name(machine, dev)}" if 0 <= dev < machine.num_devices else f"live bytes {dev}"
        for t, v in zip(memory.times[dev].tolist(), memory.live_bytes[dev].tolist()):
            events.append({"ph": "C", "name": name, "pid": 0, "ts": max(t, 0.0) * 1e6, "args": {"bytes": v}})
    return events


def simulate(strategy: Strategy, machine: Machine, cost_model,
             optimizer: OptimizerKind | str = OptimizerKind.SGD, comm_cost: CommCost | str | None = None) -> SimResult:
    """Full simulation of one training iteration of ``strategy`` on ``machine``."""
    return Simulator(machine, cost_model, optimizer, incremental=False, comm_cost=comm_cost).full(strategy)


def timelines_equal(a: SimResult, b: SimResult) -> bool:
    """Exact equality of two timelines as multisets of (device, ready, start, end), whatever the
    task ids (an incrementally updated task graph numbers its tasks differently)."""
    def rows(r):
        t = r.timeline
        return sorted(zip(t["device"].tolist(), t["ready"].tolist(), t["start"].tolist(), t["end"].tolist()))
    return a.iteration_time_s == b.iteration_time_s and rows(a) == rows(b)
