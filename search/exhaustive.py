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
    choices = OpChoices(pcg, machine, space)
    topo = [pcg.node(i) for i in pcg.topological_order()]
    compute_ids = {n.id for n in choices.ops}
    order = [n for n in topo if n.id in compute_ids]
    index = {n.id: i for i, n in enumerate(order)}
    preds = [[index[r.node] for r in n.inputs if r.node in index] for n in order]
    D = machine.num_devices
    piece_times = _piece_times(pcg, machine, cost_model, optimizer, choices, order)

    # per operator, per configuration: (load per device, min piece time, total); cheapest first
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
    # tied units (space.tie_shared): the first operator of a unit branches; the others follow it
    leader: list[int] = list(range(len(order)))
    unit_of: dict[int, list] = {}
    for u in choices.units():
        for n in u:
            leader[index[n.id]] = index[u[0].id]
            unit_of[n.id] = u
    by_config = [{o[0]: o for o in opts} for opts in options]
    for i, n in enumerate(order):
        if leader[i] == i and len(unit_of[n.id]) > 1:
            options[i] = [o for o in options[i] if choices.unit_configs(unit_of[n.id], o[0]) is not None]
    min_path = [min(o[2] for o in opts) for opts in options]
    min_total = [min(o[3] for o in opts) for opts in options]
    rest_total = [sum(min_total[i:]) for i in range(len(order) + 1)]

    log = SearchLog("exhaustive", budget, seed)
    log.notes.update(space=str(space), operators=len(order),
                     space_size=math.prod(len(o) for i, o in enumerate(options) if leader[i] == i))
    scorer = Scorer(machine, cost_model, optimizer)
    best: Optional[Strategy] = None
    best_cost = math.inf
    for s in [data_parallel(pcg, machine), *initial]:
        if isinstance(s, ConfigStrategy) and choices.contains(s):
            c = scorer.full(s)
            if c < best_cost:
                best, best_cost = s, c
    held: Optional[dict[int, OpConfig]] = None
    log.record(0, t0, best_cost, best_cost)
    bar = Progress(progress_default() if progress is None else progress, budget, "exhaustive")
    state = {"leaves": 0, "nodes": 0, "pruned": 0, "prefix_sims": 0}
    load = [0.0] * D
    fixed_path = [0.0] * len(order)
    chosen: list[Optional[OpConfig]] = [None] * len(order)

    rest_path = [0.0] * (len(order) + 1)  # longest cheapest path through operators depth.. only
    for depth in range(len(order)):
        longest = [0.0] * len(order)
        for i in range(depth, len(order)):
            longest[i] = min_path[i] + max((longest[p] for p in preds[i] if p >= depth), default=0.0)
        rest_path[depth] = max(longest[depth:], default=0.0)
    prefixes = [_prefix_pcg(pcg, {n.id for n in order[:k]}) for k in range(len(order) + 1)]

    def prefix_time(depth: int) -> float:
        sub, ids = prefixes[depth]
        try:
            s = Strategy.from_configs(sub, {ids[n.id]: chosen[i] for i, n in enumerate(order[:depth])})
            sim = Simulator(machine, cost_model, optimizer, detail=False)
            sim.full(s)
            state["prefix_sims"] += 1
            return sim.iteration_time()
        except FlexrtError:
            return 0.0

    def bound(depth: int) -> float:
        # depth operators are fixed; path weights: fixed ones their own, the others their cheapest
        longest = [0.0] * len(order)
        for i in range(len(order)):
            w = fixed_path[i] if i < depth else min_path[i]
            longest[i] = w + max((longest[p] for p in preds[i]), default=0.0)
        path = max(longest, default=0.0)
        busy = max(load)
        spread = (sum(load) + rest_total[depth]) / D
        return max(path, busy, spread)

    class Stop(Exception):
        pass

    def leaf() -> None:
        nonlocal best, best_cost, held
        configs = {n.id: chosen[i] for i, n in enumerate(order)}
        try:
            strategy = Strategy.from_configs(pcg, configs)
        except StrategyError:
            return
        if held is None:
            cost = scorer.full(strategy)
        else:
            changed = {n.name for n in order if held[n.id] != configs[n.id]}
            cost = scorer.score(strategy, changed)
        held = configs
        state["leaves"] += 1
        if cost < best_cost:
            best, best_cost = strategy, cost
        log.record(state["leaves"], t0, cost, best_cost)
        bar.update(state["leaves"], best_cost, 0.0)
        if on_leaf is not None:
            on_leaf(state["leaves"], strategy, cost)
        if state["leaves"] >= budget:
            raise Stop

    def visit(depth: int) -> None:
        if depth == len(order):
            leaf()
            return
        if leader[depth] != depth:  # tied: the configuration matching the unit's first operator
            n = order[depth]
            follow = choices.unit_configs(unit_of[n.id], chosen[leader[depth]])[n.id]
            opts = [by_config[depth][follow]]
        else:
            opts = options[depth]
        for cfg, dload, pmin, _ in opts:
            state["nodes"] += 1
            for dev, t in dload.items():
                load[dev] += t
            fixed_path[depth] = pmin
            chosen[depth] = cfg
            try:
                limit = best_cost * (1 - EPS)
                ok = bound(depth + 1) < limit
                if ok and prefix_bound and 2 <= depth + 1 < len(order):
                    ok = prefix_time(depth + 1) + rest_path[depth + 1] < limit
                if ok:
                    visit(depth + 1)
                else:
                    state["pruned"] += 1
            finally:
                for dev, t in dload.items():
                    load[dev] -= t

    proven = False
    try:
        if budget > 0:
            visit(0)
            proven = True
            log.stop_reason = "space exhausted: optimum proven"
        else:
            log.stop_reason = "budget spent"
    except Stop:
        log.stop_reason = "budget spent before the space was exhausted (optimum not proven)"
    except KeyboardInterrupt:
        log.interrupted = True
        log.stop_reason = "interrupted"
    finally:
        bar.close()
    log.proposals = state["leaves"]
    log.notes.update(proven_optimal=proven, leaves=state["leaves"], nodes=state["nodes"], pruned=state["pruned"],
                     prefix_simulations=state["prefix_sims"], simulate_s=scorer.sim_s)
    if best is None:
        raise StrategyError("exhaustive search found no valid strategy in the space")
    return SearchResult(best, best_cost, log)


register_algorithm("exhaustive", exhaustive)
