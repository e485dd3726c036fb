"""How ring AllReduces are timed: the link model, or DisCo's measured T = C x + D per device group.

``CommCost.ANALYTIC`` (the default) times a ring AllReduce from its links: one pipelined transfer
per ring member carrying 2(n-1)/n of the data, each send paying the AllReduce's whole latency
(``allreduce_latency``: NCCL's latency model, a ring's 2(n-1) steps, or across nodes a double
binary tree's 2 log2(N) network steps where NCCL's tuning model picks the tree), then the
member's sum. Across nodes with several network adapters the data is split over NCCL-like
channels (``Machine.ring_channels``), each such a ring, only channel 0 paying the latency
(``Lowering._allreduce``).

``CommCost.MEASURED`` (``--comm-cost measured``) times it from the machine's measured collectives
(``Machine.fits()``: ``flexrt calibrate`` under ``mpiexec`` fits ``MPI.Allreduce`` per device group,
DisCo §4): a ring of g devices spanning k nodes over x bytes takes exactly C x + D of the fit for
(g, k). The task graph keeps its shape (the runtime runs the ring the same way): every hop of
member i's send to member j = i + 1 takes C x + D minus j's sum (at least ``MIN_TASK_S``), so each
member holds the sum C x + D after the members are ready (uncontended). A gradient bucket (DisCo's
tensor fusion) is one ring over its summed bytes, so it pays D once.

Where the machine has no fit for (g, k), it is derived from the ring model fitted over the measured
groups, as a ring's cost grows with its size: C_g = a 2(g-1)/g (each member sends 2(g-1)/g of the
data) and D_g = b 2(g-1) (2(g-1) steps, each paying a latency), ``a`` and ``b`` by least squares
(:func:`ring_model`) over the measured groups spanning k nodes where there are some, else over all
of them (:func:`derive_fit`). A machine without fits cannot be simulated with measured comm cost:
:func:`require_fits` says how to measure them.

The choice travels with the cost model (:func:`with_comm_cost`), so every simulator a search or a
training session builds from it times rings alike; ``Lowering(..., comm_cost=...)`` and
``Simulator(..., comm_cost=...)`` set it explicitly.

Entry points: :class:`CommCost`, :func:`with_comm_cost`, :func:`comm_cost_of`, :func:`require_fits`,
:func:`derive_fit`, :class:`RingFits`.

Example:
    >>> from flexrt.machine import load_machine
    >>> from flexrt.simulator.cost_model import AnalyticCostModel
    >>> from flexrt.simulator.simulate import Simulator
    >>> cost = with_comm_cost(AnalyticCostModel(), CommCost.MEASURED)
    >>> Simulator(load_machine("fits.yaml"), cost).full(strategy)       # doctest: +SKIP
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flexrt.errors import ConfigError
from flexrt.inputs import short
from flexrt.machine import Machine
from flexrt.machine.machine import Collective, CollectiveFit
from flexrt.simulator.cost_model import MIN_TASK_S, CostModelWrapper

CALIBRATE_COMMAND = "mpiexec -n N flexrt calibrate"


class CommCost(enum.Enum):
    """How ring AllReduces are timed (see the module docstring)."""

    ANALYTIC = "analytic"
    MEASURED = "measured"

    @classmethod
    def parse(cls, value: CommCost | str) -> CommCost:
        """``value`` itself, or the CommCost named ``value``; a ConfigError listing the valid names."""
        if isinstance(value, cls):
            return value
        for c in cls:
            if value == c.value:
                return c
        raise ConfigError(f"unknown comm cost {short(value)}; valid: {', '.join(c.value for c in cls)}")


def require_fits(machine: Machine, what: str = "measured comm cost") -> tuple[CollectiveFit, ...]:
    """The machine's AllReduce fits; a ConfigError saying how to measure them when it has none."""
    fits = machine.fits(Collective.ALLREDUCE)
    if not fits:
        raise ConfigError(
            f"{what}: machine {machine.name!r} has no measured AllReduce fits (no collectives.allreduce section "
            f"in its YAML); measure them with `{CALIBRATE_COMMAND}` (N >= 2 ranks, one per device, e.g. "
            f"`mpiexec -n 4 flexrt calibrate`), which writes them into the `local` machine (--machine local), or "
            f"with `{CALIBRATE_COMMAND} --output FILE.yaml` (--machine FILE.yaml); or use --comm-cost analytic")
    return fits


def ring_model(fits: Sequence[CollectiveFit]) -> tuple[float, float]:
    """(a s/byte, b s) of the ring model C_g = a 2(g-1)/g, D_g = b 2(g-1), by least squares over
    ``fits`` (each of C and D on its own).

    Example:
        >>> from flexrt.machine.machine import Collective, CollectiveFit
        >>> ring_model([CollectiveFit(Collective.ALLREDUCE, 2, 1, 1e-9, 10e-6),
        ...             CollectiveFit(Collective.ALLREDUCE, 4, 1, 1.5e-9, 30e-6)])
        (1e-09, 5e-06)
    """
    if not fits:
        raise ConfigError("the ring model needs at least one measured fit")
    share = [2 * (f.devices - 1) / f.devices for f in fits]
    steps = [2 * (f.devices - 1) for f in fits]
    a = sum(f.c_s_per_byte * s for f, s in zip(fits, share)) / sum(s * s for s in share)
    b = sum(f.d_s * s for f, s in zip(fits, steps)) / sum(s * s for s in steps)
    return a, b


def derive_fit(fits: Sequence[CollectiveFit], devices: int, nodes: int) -> tuple[CollectiveFit, bool]:
    """(the fit for a ring of ``devices`` devices spanning ``nodes`` nodes, whether it was measured):
    the measured one where ``fits`` has it, else the ring model's (:func:`ring_model`) fitted over the
    measured groups spanning ``nodes`` nodes where there are some (within a node and across nodes
    differ most), else over all of them. A derived fit has no error figures."""
    for f in fits:
        if (f.devices, f.nodes) == (devices, nodes):
            return f, True
    same = [f for f in fits if f.nodes == nodes]
    a, b = ring_model(same or list(fits))
    return CollectiveFit(Collective.ALLREDUCE, devices, nodes, a * 2 * (devices - 1) / devices,
                         b * 2 * (devices - 1)), False


class RingFits:
    """One lowering's measured ring timing: the machine's fits, the (g, k) fits it used (cached;
    ``used`` maps (devices, nodes) -> whether it was measured, for reports)."""

    def __init__(self, machine: Machine) -> None:
        self.fits = require_fits(machine)
        self.node_of = [d.node for d in machine.devices]
        self._by_group: dict[tuple[int, int], CollectiveFit] = {}
        self.used: dict[tuple[int, int], bool] = {}

    def fit(self, devices: Sequence[int]) -> CollectiveFit:
        """The fit of a ring over ``devices`` (its size and the nodes it spans)."""
        return self.fit_of(len(devices), len({self.node_of[d] for d in devices}))

    def fit_of(self, devices: int, nodes: int) -> CollectiveFit:
        """The fit of a ring of ``devices`` devices spanning ``nodes`` nodes (:func:`derive_fit`)."""
        key = (devices, nodes)
        hit = self._by_group.get(key)
        if hit is None:
            hit, measured = derive_fit(self.fits, *key)
            self._by_group[key] = hit
            self.used[key] = measured
        return hit

    def extras(self, devices: Sequence[int], elements: int, itemsize: int, reduce_exe: Sequence[float],
               hop_times: Callable[[int, int, int], tuple[Any, Sequence[float]]],
               num_compute: int = 0) -> list[tuple[float, ...]]:
        """Per ring member i, the time to add to each hop of its send to member i + 1 (each hop's own
        time from ``hop_times(src, dst, bytes)``, as the lowering emits it) so that every hop takes
        C x + D - (i + 1)'s sum, at least ``MIN_TASK_S``: the member then holds the sum C x + D after
        the ring's start. x is the bytes reduced (``elements * itemsize``). Hops on devices below
        ``num_compute`` (a destination's own copy) get nothing."""
        n = len(devices)
        total_s = self.fit(devices).time_s(elements * itemsize)
        total = 2 * (n - 1) * elements
        out = []
        for i in range(n):
            j = (i + 1) % n
            share = total // n + (1 if i < total % n else 0)   # as GraphCore.ring splits the data
            devs, times = hop_times(devices[i], devices[j], share * itemsize)
            send = max(total_s - reduce_exe[j], MIN_TASK_S)
            # a destination's own copy (Machine.copied_by_receiver) stays the copy: the links hold the rest
            out.append(tuple(send - t if d >= num_compute else 0.0 for d, t in zip(devs, times)))
        return out


def comm_cost_of(cost_model) -> CommCost:
    """The comm cost a cost model carries (``with_comm_cost``); analytic for any other."""
    return getattr(cost_model, "comm_cost", CommCost.ANALYTIC)


def with_comm_cost(cost_model, comm_cost: CommCost | str):
    """``cost_model`` carrying ``comm_cost``: itself for analytic (a model that carries measured is
    unwrapped), else a cost model that answers every question as ``cost_model`` does and says
    ``comm_cost = CommCost.MEASURED`` to the lowerings built from it."""
    comm_cost = CommCost.parse(comm_cost)
    base = cost_model.base if isinstance(cost_model, MeasuredComm) else cost_model
    return base if comm_cost is CommCost.ANALYTIC else MeasuredComm(base)


class MeasuredComm(CostModelWrapper):
    """``base`` with ring AllReduces timed from the machine's measured fits (``--comm-cost measured``).
    Everything else (``fused_time`` where ``base`` has one, ``flush``, ...) is ``base``'s."""

    comm_cost = CommCost.MEASURED

    def __init__(self, base) -> None:
        self.base = base
        self.name = f"{getattr(base, 'name', type(base).__name__)}+measured-comm"

    def __repr__(self) -> str:
        return f"MeasuredComm({self.base!r})"

    def __reduce__(self):
        return MeasuredComm, (self.base,)


def describe_used(used: dict[tuple[int, int], bool]) -> str:
    """``"2 devices on 1 node (measured), 4 on 1 (derived)"``: the groups a lowering timed by fits."""
    parts = [f"{g} devices on {k} node{'s' if k > 1 else ''} ({'measured' if m else 'derived'})"
             for (g, k), m in sorted(used.items())]
    return ", ".join(parts) if parts else "none (no ring AllReduce)"


# NCCL's tuning model (src/graph/tuning.cc): a tree AllReduce reaches 0.9 of the bus bandwidth a ring
# does, and moves all the data up, then down, where a ring's members each send 2(n-1)/n of it
TREE_BANDWIDTH = 0.9


@dataclass(frozen=True)
class AllReduceLatency:
    """What every send of one AllReduce pays beyond its bytes (``allreduce_latency``): the
    ``algorithm`` NCCL's tuning model picks ("ring" or "tree") and ``seconds``, its steps' latencies
    (for a tree, plus the time its lower bandwidth adds to the ring's bytes)."""

    algorithm: str
    seconds: float


def allreduce_latency(machine: Machine, cost, order: Sequence[int], nbytes: int) -> AllReduceLatency:
    """The latency an AllReduce of ``nbytes`` over ``order`` (ring order) pays, by NCCL's model:

    - ring: 2(n-1) steps, 2(N-1) of them between nodes (N: the nodes it spans), each paying the
      latency of the slowest route of its kind (between two members of a node, between nodes);
    - tree (NCCL's double binary tree between nodes, a chain within each): 2((g-1) intra +
      floor(log2 N) inter) for g members per node, and its bus bandwidth is ``TREE_BANDWIDTH`` of the
      ring's, which adds ``T (n / (TREE_BANDWIDTH (n-1)) - 1)`` to the ring's bandwidth time T;

    whichever is faster (within one node the ring: a chain's latency is the ring's). T is the
    slowest ring send's bytes over its slowest link (``cost``'s transfer time less the link's
    latency). The tree is a choice of timing only: the task graph keeps the ring's sends."""
    n = len(order)
    if n < 2:
        return AllReduceLatency("ring", 0.0)
    node = [machine.devices[d].node for d in order]
    links, per_send = machine.links, 2 * (n - 1) * nbytes // n
    intra = inter = bandwidth_s = 0.0
    for i in range(n):
        j = (i + 1) % n
        route = machine.route(order[i], order[j])
        lat = sum(links[l].latency_s for l in route)
        if node[i] == node[j]:
            intra = max(intra, lat)
        else:
            inter = max(inter, lat)
        for l in route:
            bandwidth_s = max(bandwidth_s, cost.transfer_time(links[l], per_send) - links[l].latency_s)
    nodes = len(set(node))
    ring = 2 * (n - nodes) * intra + 2 * (nodes - 1) * inter
    if nodes < 2:
        return AllReduceLatency("ring", ring)
    per_node = max(Counter(node).values())
    tree = 2 * ((per_node - 1) * intra + (nodes.bit_length() - 1) * inter) \
        + bandwidth_s * (n / (TREE_BANDWIDTH * (n - 1)) - 1)
    return AllReduceLatency("tree", tree) if tree < ring else AllReduceLatency("ring", ring)


def ring_extras(low, devices, elements: int, itemsize: int, reduce_exe) -> list[tuple]:
    """Per ring member i of a lowering's ring AllReduce, the time added to each hop of its send to
    member i + 1: what makes the send pay the AllReduce's whole latency (analytic:
    ``allreduce_latency``, each hop already paying its route's once), or what makes the ring take
    the machine's measured C x + D for its group (measured: ``RingFits.extras``). ``low._routes``
    keeps only what both share (link times); measured extras are not cached."""
    n = len(devices)
    if low.ring_fits is None:
        total = allreduce_latency(low.machine, low.cost, devices, elements * itemsize).seconds
        return [send_latency(low, devices[i], devices[(i + 1) % n], total) for i in range(n)]
    return low.ring_fits.extras(devices, elements, itemsize, reduce_exe, low._hops, low.num_compute)


def send_latency(low, src: int, dst: int, total: float) -> tuple:
    """Per hop of a collective's send src -> dst, the time that makes it pay ``total`` seconds of
    latency where the hop pays its route's once (a destination's own copy, on a compute device,
    gets nothing)."""
    devs, zero = low._hops(src, dst, 0)   # each hop's time for no data: the route's latency
    return tuple(max(0.0, total - t) if d >= low.num_compute else 0.0 for d, t in zip(devs, zero))
