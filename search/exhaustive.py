"""Exhaustive search with A*-style pruning, for small cases (FlexFlow §8.3: LeNet and a 2-step
RNNLM on 4 devices), to check what MCMC finds against the optimum.

Operators are fixed one at a time in topological order (depth first, each operator's
configurations cheapest first). A partial assignment is pruned when a lower bound of every
completion's iteration time is no better than the best strategy simulated so far. The bound
ignores communication and weight updates, so it never exceeds a simulated time:

- device load: every device runs its tasks one at a time, so the iteration takes at least the
  forward + backward time of the fixed operators' pieces on the busiest device, and at least the
  whole compute of fixed operators plus the cheapest compute of the others spread evenly;
- critical path: along any path of the graph, forward runs operator after operator and backward
  back again; each operator adds at least its fastest piece (fixed) or the fastest piece of its
  cheapest configuration (not fixed yet).

Per-piece compute times come from the simulator's own lowering (one probe lowering per degree
choice), so the bound uses exactly the times the simulator charges. Complete assignments are
scored by delta simulation from the previous leaf (depth-first neighbours differ in a few
operators).

Communication is what separates most strategies, so a third, tighter bound prunes most of the
tree: the simulated iteration time of the *prefix* model (the fixed operators alone, their last
one taking the loss) plus the critical path of the cheapest configurations of the rest. The prefix's
tasks are a subset of the full model's with fewer dependencies, so its time is below the full one
whenever the simulator's list scheduling has no anomaly (adding tasks never speeds others up);
this is the "A*-style" heuristic part: exact for every case we checked, not a proof.
``prefix_bound=False`` keeps the two admissible bounds only. The budget counts simulated leaves; when it runs out the result is the best found and
``log.notes["proven_optimal"]`` is False.

With ``SearchSpace(tie_shared=True)`` the operators sharing a weight form one unit (FlexFlow's
RNN steps share their layer's parameters): the unit's first operator branches and the others take
the matching configuration, so the 2-step RNNLM's 11 operators give 7^7 strategies (sample axis,
aligned placements) instead of 7^11; exhaustive search proves that optimum in a few minutes.

Entry point: ``exhaustive``.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional, Sequence

from flexrt.errors import FlexrtError, StrategyError
from flexrt.ir.op_type import SOURCE_OPS
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import Machine
from flexrt.machine.views import view_devices
from flexrt.search.api import (Progress, Scorer, SearchLog, SearchResult, check_budget, progress_default,
                               register_algorithm)
from flexrt.simulator.lowering import Lowering
from flexrt.simulator.simulate import Simulator
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy import ConfigStrategy, OpChoices, OpConfig, SearchSpace, Strategy, data_parallel

EPS = 1e-12


def _piece_times(pcg: PCG, machine: Machine, cost_model, optimizer: OptimizerKind, choices: OpChoices,
                 order) -> dict[tuple[int, tuple], list[float]]:
    """Forward + backward seconds of every piece, per (operator, degree choice), read from probe
    lowerings in which every operator takes its k-th degree choice."""
    out: dict[tuple[int, tuple], list[float]] = {}
    rounds = max(len(choices.degrees(n)) for n in order)
    for k in range(rounds):
        configs = {}
        for n in choices.ops:
            ds = choices.degrees(n)
            d = ds[k % len(ds)]
            configs[n.id] = OpConfig(tuple(d.items()), choices.views(n, d)[0])
        strategy = Strategy.from_configs(pcg, configs)
        low = Lowering(machine, cost_model, optimizer)
        low.build(strategy)
        per: dict[str, dict[int, float]] = {}
        for t in low.graph.tasks.values():
            if t.kind in (TaskKind.FORWARD, TaskKind.BACKWARD) and t.piece >= 0:
                per.setdefault(t.node, {}).setdefault(t.piece, 0.0)
                per[t.node][t.piece] += t.exe_s
        for n in choices.ops:
            key = (n.id, configs[n.id].degrees)
            if key not in out:
                pieces = per.get(n.name, {})
                out[key] = [pieces[p] for p in sorted(pieces)]
    return out


def _prefix_pcg(pcg: PCG, keep: set[int]) -> tuple[PCG, dict[int, int]]:
    """The sub-model of the compute operators ``keep`` (closed under predecessors) and their sources."""
    sub, ids = PCG(), {}
    for nid in pcg.topological_order():
        node = pcg.node(nid)
        if node.op_type in SOURCE_OPS:
            if not any(c in keep for c in pcg.consumers(nid)):
                continue
        elif nid not in keep:
            continue
        ids[nid] = sub.add_node(node.attrs, [TensorRef(ids[r.node], r.index) for r in node.inputs], node.name)
    return sub, ids


class _Stop(Exception):
    """The budget of leaves is spent."""


def _options(pcg, machine, cost_model, optimizer, choices, order) -> list[list[tuple]]:
    """Per operator, per configuration: (config, load per device, min piece time, total); cheapest first."""
    piece_times = _piece_times(pcg, machine, cost_model, optimizer, choices, order)
    options: list[list[tuple[OpConfig, dict[int, float], float, float]]] = []
    for n in order:
        opts = []
        for d in choices.degrees(n):
            times = piece_times[(n.id, OpConfig(tuple(d.items()), choices.views(n, d)[0]).degrees)]
            degs = tuple(d.get(a.name, 1) for a in choices.axes(n))
            for v in choices.views(n, d):
                load: dict[int, float] = {}
                for dev, t in zip(view_devices(machine, v, degs), times):
                    load[dev] = load.get(dev, 0.0) + t
                opts.append((OpConfig(tuple(d.items()), v), load, min(times), sum(times)))
        opts.sort(key=lambda o: (max(o[1].values()), o[3]))
        options.append(opts)
    return options


class _BranchAndBound:
    """The depth-first search of ``exhaustive``: operators fixed in topological order, partial
    assignments pruned by the module doc's bounds, leaves scored by delta simulation."""

    def __init__(self, pcg: PCG, machine: Machine, cost_model, optimizer: OptimizerKind, space: SearchSpace,
                 budget: int, prefix_bound: bool, on_leaf, log: SearchLog, t0: float) -> None:
        self.pcg, self.machine, self.cost_model, self.optimizer = pcg, machine, cost_model, optimizer
        self.budget, self.prefix_bound, self.on_leaf, self.log, self.t0 = budget, prefix_bound, on_leaf, log, t0
        self.bar: Optional[Progress] = None     # set by ``exhaustive`` once the incumbent is seeded
        self.choices = choices = OpChoices(pcg, machine, space)
        compute_ids = {n.id for n in choices.ops}
        self.order = order = [pcg.node(i) for i in pcg.topological_order() if i in compute_ids]
        index = {n.id: i for i, n in enumerate(order)}
        self.preds = [[index[r.node] for r in n.inputs if r.node in index] for n in order]
        self.options = _options(pcg, machine, cost_model, optimizer, choices, order)
        self._tie_units(index)
        min_total = [min(o[3] for o in opts) for opts in self.options]
        self.min_path = [min(o[2] for o in opts) for opts in self.options]
        self.rest_total = [sum(min_total[i:]) for i in range(len(order) + 1)]
        self.rest_path = self._rest_paths()
        self.prefixes = [_prefix_pcg(pcg, {n.id for n in order[:k]}) for k in range(len(order) + 1)]
        self.scorer = Scorer(machine, cost_model, optimizer)
        self.best: Optional[Strategy] = None
        self.best_cost = math.inf
        self.held: Optional[dict[int, OpConfig]] = None
        self.state = {"leaves": 0, "nodes": 0, "pruned": 0, "prefix_sims": 0}
        self.load = [0.0] * machine.num_devices
        self.fixed_path = [0.0] * len(order)
        self.chosen: list[Optional[OpConfig]] = [None] * len(order)

    def _tie_units(self, index: dict) -> None:
        """Tied units (space.tie_shared): the first operator of a unit branches; the others follow it."""
        self.leader: list[int] = list(range(len(self.order)))
        self.unit_of: dict[int, list] = {}
        for u in self.choices.units():
            for n in u:
                self.leader[index[n.id]] = index[u[0].id]
                self.unit_of[n.id] = u
        self.by_config = [{o[0]: o for o in opts} for opts in self.options]
        for i, n in enumerate(self.order):
            if self.leader[i] == i and len(self.unit_of[n.id]) > 1:
                self.options[i] = [o for o in self.options[i]
                                   if self.choices.unit_configs(self.unit_of[n.id], o[0]) is not None]

    def _rest_paths(self) -> list[float]:
        """Per depth, the longest path of cheapest piece times through the operators depth.. only."""
        n = len(self.order)
        rest_path = [0.0] * (n + 1)
        for depth in range(n):
            longest = [0.0] * n
            for i in range(depth, n):
                longest[i] = self.min_path[i] + max((longest[p] for p in self.preds[i] if p >= depth), default=0.0)
            rest_path[depth] = max(longest[depth:], default=0.0)
        return rest_path

    def seed(self, strategies) -> None:
        """The incumbent: the cheapest of ``strategies`` inside the space."""
        for s in strategies:
            if isinstance(s, ConfigStrategy) and self.choices.contains(s):
                c = self.scorer.full(s)
                if c < self.best_cost:
                    self.best, self.best_cost = s, c

    def space_size(self) -> int:
        return math.prod(len(o) for i, o in enumerate(self.options) if self.leader[i] == i)

    def prefix_time(self, depth: int) -> float:
        sub, ids = self.prefixes[depth]
        try:
            s = Strategy.from_configs(sub, {ids[n.id]: self.chosen[i] for i, n in enumerate(self.order[:depth])})
            sim = Simulator(self.machine, self.cost_model, self.optimizer, detail=False)
            sim.full(s)
            self.state["prefix_sims"] += 1
            return sim.iteration_time()
        except FlexrtError:
            return 0.0

    def bound(self, depth: int) -> float:
        """Depth operators are fixed; path weights: fixed ones their own, the others their cheapest."""
        longest = [0.0] * len(self.order)
        for i in range(len(self.order)):
            w = self.fixed_path[i] if i < depth else self.min_path[i]
            longest[i] = w + max((longest[p] for p in self.preds[i]), default=0.0)
        path = max(longest, default=0.0)
        spread = (sum(self.load) + self.rest_total[depth]) / len(self.load)
        return max(path, max(self.load), spread)

    def leaf(self) -> None:
        configs = {n.id: self.chosen[i] for i, n in enumerate(self.order)}
        try:
            strategy = Strategy.from_configs(self.pcg, configs)
        except StrategyError:
            return
        if self.held is None:
            cost = self.scorer.full(strategy)
        else:
            changed = {n.name for n in self.order if self.held[n.id] != configs[n.id]}
            cost = self.scorer.score(strategy, changed)
        self.held = configs
        self.state["leaves"] += 1
        leaves = self.state["leaves"]
        if cost < self.best_cost:
            self.best, self.best_cost = strategy, cost
        self.log.record(leaves, self.t0, cost, self.best_cost)
        self.bar.update(leaves, self.best_cost, 0.0)
        if self.on_leaf is not None:
            self.on_leaf(leaves, strategy, cost)
        if leaves >= self.budget:
            raise _Stop

    def visit(self, depth: int) -> None:
        if depth == len(self.order):
            self.leaf()
            return
        if self.leader[depth] != depth:  # tied: the configuration matching the unit's first operator
            n = self.order[depth]
            follow = self.choices.unit_configs(self.unit_of[n.id], self.chosen[self.leader[depth]])[n.id]
            opts = [self.by_config[depth][follow]]
        else:
            opts = self.options[depth]
        for cfg, dload, pmin, _ in opts:
            self.state["nodes"] += 1
            for dev, t in dload.items():
                self.load[dev] += t
            self.fixed_path[depth] = pmin
            self.chosen[depth] = cfg
            try:
                if self._promising(depth + 1):
                    self.visit(depth + 1)
                else:
                    self.state["pruned"] += 1
            finally:
                for dev, t in dload.items():
                    self.load[dev] -= t

    def _promising(self, depth: int) -> bool:
        """Whether a completion of the first ``depth`` fixed operators may beat the incumbent."""
        limit = self.best_cost * (1 - EPS)
        if not self.bound(depth) < limit:
            return False
        if self.prefix_bound and 2 <= depth < len(self.order):
            return self.prefix_time(depth) + self.rest_path[depth] < limit
        return True


def exhaustive(pcg: PCG, machine: Machine, cost_model, budget: int = 100_000, seed: int = 0,
               space: Optional[SearchSpace] = None, initial: Sequence[Strategy] = (),
               optimizer: OptimizerKind = OptimizerKind.SGD, progress: Optional[bool] = None, prefix_bound: bool = True,
               on_leaf: Optional[Callable[[int, Strategy, float], None]] = None) -> SearchResult:
    """The fastest strategy of the space by branch and bound (see the module docstring).

    Args:
        budget: simulated complete strategies at most (default 100,000).
        initial: strategies whose costs seed the incumbent (data parallelism always does).
        on_leaf: called after each simulated complete strategy with (count, strategy, cost).
    """
    check_budget(budget, "exhaustive")
    space = space or SearchSpace()
    t0 = time.perf_counter()
    log = SearchLog("exhaustive", budget, seed)
    bb = _BranchAndBound(pcg, machine, cost_model, optimizer, space, budget, prefix_bound, on_leaf, log, t0)
    log.notes.update(space=str(space), operators=len(bb.order), space_size=bb.space_size())
    bb.seed([data_parallel(pcg, machine), *initial])
    log.record(0, t0, bb.best_cost, bb.best_cost)
    bb.bar = Progress(progress_default() if progress is None else progress, budget, "exhaustive")
    proven = False
    try:
        if budget > 0:
            bb.visit(0)
            proven = True
            log.stop_reason = "space exhausted: optimum proven"
        else:
            log.stop_reason = "budget spent"
    except _Stop:
        log.stop_reason = "budget spent before the space was exhausted (optimum not proven)"
    except KeyboardInterrupt:
        log.interrupted = True
        log.stop_reason = "interrupted"
    finally:
        bb.bar.close()
    st = bb.state
    log.proposals = st["leaves"]
    log.notes.update(proven_optimal=proven, leaves=st["leaves"], nodes=st["nodes"], pruned=st["pruned"],
                     prefix_simulations=st["prefix_sims"], simulate_s=bb.scorer.sim_s)
    if bb.best is None:
        raise StrategyError("exhaustive search found no valid strategy in the space")
    return SearchResult(bb.best, bb.best_cost, log)


register_algorithm("exhaustive", exhaustive)
