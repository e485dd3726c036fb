"""DisCo's joint operator / tensor fusion search (DisCo §3.2, §4.5, Algorithm 1): ``disco``.

The search keeps one strategy (the request's first initial strategy, data parallelism by default)
and searches its fusion plan (``flexrt.strategy.fusion``), starting from the plan that strategy
carries or the empty one. Algorithm 1, backtracking over a priority queue ``Q`` ordered by
simulated cost:

- pop the cheapest plan ``H``; for each optimization method ``s`` (``methods``), apply ``s`` to
  ``H`` ``n ~ U{0..beta}`` times at random (``RandomApply``), giving one candidate ``H'``;
- a valid ``H'`` (``check_fusion``) is simulated; cheaper than the best: it becomes the best and
  the unchanged counter is reset, else the counter grows by one; ``cost(H') <= alpha x best``:
  ``H'`` is enqueued (once: plans are deduplicated by value);
- stop after ``patience`` (1000 in the paper) candidates in a row without improvement, or when
  ``budget`` candidates have been made. When ``Q`` runs empty first (every enqueued plan expanded,
  which happens quickly with one method alone), the best plan is expanded again: its moves are
  random, so the search goes on until patience or budget rather than stopping early.

The three methods (DisCo §4.5; each application picks at random and is skipped where it would
break a rule; DisCo has no splitting move, and neither has this search):

- ``op`` (non-duplicate op fusion): a random operator and a random producer of it not in its group,
  in a random phase: their groups (or themselves) merge into one; other consumers of the producer
  wait for the whole group;
- ``dup`` (duplicate fusion): a random operator and a random producer of it that has consumers
  outside its forward group: the producer joins that group as a recomputed duplicate;
- ``allreduce`` (AllReduce fusion): a random bucket (single weights are buckets of one) merges with
  its neighbour in ``gradient_order`` when both are synchronized over the same devices.

Costs come from the simulator: the strategy is lowered once; each candidate plan contracts that task
graph (``FusedGraph``) and runs the engine; costs are cached by plan. ``log.notes`` holds per method
the candidates made, the invalid ones and the accepted improvements (DisCo's Fig. 10 ablation runs
``methods`` subsets), and candidates per second.

Entry points: ``disco``, ``METHODS``.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from typing import Callable, Optional, Sequence

from flexrt.errors import ConfigError, GraphError, StrategyError
from flexrt.ir.pcg import PCG
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import Machine
from flexrt.search.api import Progress, SearchLog, SearchResult, check_budget, progress_default, register_algorithm
from flexrt.search.fusion_policies import FusionContext
from flexrt.simulator.fusion import FusedGraph
from flexrt.simulator.lowering import Lowering
from flexrt.simulator.simulate import Simulator
from flexrt.strategy.pipeline_2bw import delays_updates
from flexrt.strategy import Strategy, data_parallel
from flexrt.strategy.fusion import FusionError, FusionGroup, FusionPlan, check_fusion, fusion_of

METHODS = ("op", "dup", "allreduce")
_TRIES = 8   # random picks per application before it is given up as impossible here


def _key(groups, buckets) -> tuple:
    """A plan's value, whatever the order of its groups, members and buckets."""
    return (frozenset((frozenset(g.ops), g.phase, frozenset(g.duplicate)) for g in groups),
            frozenset(frozenset(b) for b in buckets))


class _Evaluator:
    """Simulated iteration time of fusion plans of one strategy: one lowering, a cache by plan."""

    def __init__(self, strategy: Strategy, machine: Machine, cost_model, optimizer) -> None:
        self.strategy, self.machine = strategy, machine
        self.low = Lowering(machine, cost_model, optimizer, detail=False, incremental=False)
        self.low.build(strategy.with_fusion(None))
        # a 2bw pipeline's time is its steady state's, which the simulator measures on more iterations
        self.steady = Simulator(machine, cost_model, optimizer, detail=False, incremental=False) \
            if delays_updates(strategy) else None
        self.cache: dict = {}
        self.simulations = self.hits = 0
        self.sim_s = 0.0

    def cost(self, plan: FusionPlan, key) -> Optional[float]:
        """Seconds per iteration, or None where the plan breaks a fusion rule."""
        if key in self.cache:
            self.hits += 1
            return self.cache[key]
        t = time.perf_counter()
        try:
            if plan:
                check_fusion(self.strategy, plan, self.machine, self.low._layouts, self.low._reshards)
            if self.steady is not None:
                value: Optional[float] = self.steady.time_full(self.strategy.with_fusion(plan))
            else:
                engine = FusedGraph(self.low, plan, check=False).engine(self.low.engine_cls) if plan else self.low.engine
                engine.simulate_full()
                value = float(engine.makespan())
            self.simulations += 1
        except (FusionError, GraphError, StrategyError):
            value = None
        self.sim_s += time.perf_counter() - t
        self.cache[key] = value
        return value


class _Moves:
    """DisCo's three optimization methods on a plan held as lists (``apply`` one at random)."""

    def __init__(self, ctx: FusionContext, rng: random.Random) -> None:
        self.ctx, self.rng = ctx, rng
        self.seq = [w for w, _ in ctx.order]

    # ---- helpers --------------------------------------------------------------------------------
    def _owner(self, groups: list, op: str, phase: str) -> Optional[int]:
        for i, g in enumerate(groups):
            if g.phase == phase and op in g.owned:
                return i
        return None

    def _group(self, owned, dup, phase) -> FusionGroup:
        pos = self.ctx.position.__getitem__
        return FusionGroup(tuple(sorted(set(owned) | set(dup), key=pos)), phase, tuple(sorted(set(dup), key=pos)))

    def _fits(self, members) -> bool:
        members = list(members)
        return all(self.ctx.can_join(members[:i], m) for i, m in enumerate(members) if i)

    # ---- the methods ----------------------------------------------------------------------------
    def op(self, groups: list, buckets: list) -> bool:
        ctx, rng = self.ctx, self.rng
        phase = rng.choice(("forward", "backward"))
        c = rng.choice(ctx.ops)
        gc = self._owner(groups, c, phase)
        inside = set(groups[gc].ops) if gc is not None else {c}
        options = [p for p in ctx.producers[c] if p not in inside or (gc is not None and p in groups[gc].duplicate)]
        if not options:
            return False
        p = rng.choice(options)
        gp = self._owner(groups, p, phase)
        a = groups[gc] if gc is not None else self._group([c], (), phase)
        b = groups[gp] if gp is not None else self._group([p], (), phase)
        owned = set(a.owned) | set(b.owned)
        dup = (set(a.duplicate) | set(b.duplicate)) - owned
        for d in list(dup):   # a duplicate needs a consumer outside; else the group owns it where it can
            if all(u in owned | dup for u in ctx.consumers[d]):
                dup.discard(d)
                if self._owner(groups, d, phase) is None:
                    owned.add(d)
        new = self._group(owned, dup, phase)
        rest = [g for i, g in enumerate(groups) if i not in (gc, gp)]
        if not self._fits(new.ops) or not ctx.acyclic(rest + [new]):
            return False
        groups[:] = rest + [new]
        return True

    def dup(self, groups: list, buckets: list) -> bool:
        ctx, rng = self.ctx, self.rng
        c = rng.choice(ctx.ops)
        gc = self._owner(groups, c, "forward")
        g = groups[gc] if gc is not None else self._group([c], (), "forward")
        options = [p for p in ctx.producers[c] if p not in g.ops and any(u not in g.ops for u in ctx.consumers[p]
                                                                          if u != c)]
        if not options:
            return False
        p = rng.choice(options)
        new = self._group(g.owned, set(g.duplicate) | {p}, "forward")
        rest = [x for i, x in enumerate(groups) if i != gc]
        if not ctx.can_join(list(g.ops), p) or not ctx.acyclic(rest + [new]):
            return False
        groups[:] = rest + [new]
        return True

    def allreduce(self, groups: list, buckets: list) -> bool:
        ctx, rng = self.ctx, self.rng
        of = {w: i for i, b in enumerate(buckets) for w in b}
        units: list = []    # buckets and single weights in gradient order; None: a weight not synchronized
        for w in self.seq:
            if w in of:
                if not units or units[-1] is None or units[-1] != ("b", of[w]):
                    if ("b", of[w]) not in units:
                        units.append(("b", of[w]))
            else:
                units.append(("w", w) if ctx.weights[w].replicated else None)
        live = [i for i, u in enumerate(units) if u is not None]
        if len(live) < 2:
            return False
        i = rng.choice(live)
        j = i + rng.choice((-1, 1))
        if not 0 <= j < len(units) or units[j] is None:
            return False
        members = lambda u: list(buckets[u[1]]) if u[0] == "b" else [u[1]]  # noqa: E731
        a, b = members(units[min(i, j)]), members(units[max(i, j)])
        if ctx.weights[a[0]].key != ctx.weights[b[0]].key:
            return False
        drop = {u[1] for u in (units[i], units[j]) if u[0] == "b"}
        buckets[:] = [x for k, x in enumerate(buckets) if k not in drop] + [tuple(a + b)]
        return True

    def apply(self, method: str, n: int, groups: list, buckets: list) -> int:
        """Apply ``method`` ``n`` times (each up to ``_TRIES`` random picks); returns how many took."""
        fn = getattr(self, method)
        done = 0
        for _ in range(n):
            for _ in range(_TRIES):
                if fn(groups, buckets):
                    done += 1
                    break
        return done


def check_methods(methods) -> tuple:
    """``methods`` (a list, or one comma-separated string) in METHODS' order; ConfigError unless a
    non-empty subset of METHODS, each once."""
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",")]
    methods = tuple(methods)
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods or len(set(methods)) != len(methods):
        raise ConfigError(f"disco: methods must be a non-empty subset of {', '.join(METHODS)} (each once), "
                          f"got {list(methods)}")
    return tuple(m for m in METHODS if m in methods)


MAX_BETA = 10_000     # DisCo uses 10 (Table 4: 1-30); each candidate applies up to beta moves per method


def _check_options(alpha, beta, patience) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha >= 1.0 or math.isinf(alpha):
        raise ConfigError(f"disco: alpha is the pruning threshold (candidates over alpha x the best are dropped), "
                          f"a finite number >= 1; got {alpha!r}")
    if isinstance(beta, bool) or not isinstance(beta, int) or not 1 <= beta <= MAX_BETA:
        raise ConfigError(f"disco: beta (each method applied up to beta times per candidate) must be an integer in "
                          f"1..{MAX_BETA}, got {beta!r}: a candidate's time grows with it, unbounded by the budget")
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise ConfigError(f"disco: patience must be an integer >= 1, got {patience!r}")


def disco(pcg: PCG, machine: Machine, cost_model, budget: int = 1000, seed: int = 0,
          initial: Sequence[Strategy] = (), optimizer: OptimizerKind = OptimizerKind.SGD,
          progress: Optional[bool] = None, alpha: float = 1.05, beta: int = 10, patience: int = 1000,
          methods=METHODS, on_candidate: Optional[Callable[[int, FusionPlan, float], None]] = None) -> SearchResult:
    """DisCo's Algorithm 1 on the fusion plan of ``initial[0]`` (data parallelism by default).

    Args:
        budget: candidates made in all (each method's application to a popped plan is one).
        alpha: candidates costing at most alpha x the best are enqueued (DisCo: 1.05).
        beta: each method is applied n ~ U{0..beta} times per candidate (DisCo: 10).
        patience: candidates in a row without improvement before the search stops (DisCo: 1000).
        methods: a subset of ``METHODS`` (a list or "op,dup"): DisCo's Fig. 10 ablation.
        on_candidate: called with (candidate number, plan, cost or None where invalid) after each
            candidate; a KeyboardInterrupt from it ends the search like Ctrl-C.

    Returns the strategy with the best plan (``name`` "disco"), its simulated time, and the log
    (one entry per step: the popped plan's cost and the best).
    """
    check_budget(budget, "disco")
    _check_options(alpha, beta, patience)
    methods = check_methods(methods)
    t0 = time.perf_counter()
    start = initial[0] if initial else data_parallel(pcg, machine)
    plan0 = fusion_of(start) or FusionPlan()
    ev = _Evaluator(start, machine, cost_model, optimizer)
    ctx = FusionContext(ev.strategy, machine, ev.low._layouts, ev.low._reshards)
    moves = _Moves(ctx, random.Random(seed))
    log = SearchLog("disco", budget, seed)
    log.notes.update(alpha=alpha, beta=beta, patience=patience, methods=list(methods),
                     candidates={m: 0 for m in methods}, invalid={m: 0 for m in methods},
                     improvements={m: 0 for m in methods})
    key0 = _key(plan0.groups, plan0.buckets)
    cost0 = ev.cost(plan0, key0)
    if cost0 is None:
        raise ConfigError("disco: the initial strategy's fusion plan is not valid for it: "
                          + _why(ev, plan0))
    log.record(0, t0, cost0, cost0)
    queue = [(cost0, 0, plan0)]
    seen = {key0}
    bar = Progress(progress_default() if progress is None else progress, budget, "disco")
    state = {"made": 0, "unchanged": 0, "pushed": 1, "best": (cost0, plan0)}   # kept here: Ctrl-C mid-step
    try:
        while state["unchanged"] < patience and state["made"] < budget:
            if not queue:  # every enqueued plan expanded: expand the best again (its moves are random)
                state["pushed"] += 1
                heapq.heappush(queue, (state["best"][0], state["pushed"], state["best"][1]))
            cost, _, plan = heapq.heappop(queue)
            _step(plan, methods, beta, moves, ev, alpha, queue, seen, state, log, on_candidate, budget)
            log.record(state["made"], t0, cost, state["best"][0])
            bar.update(state["made"], state["best"][0], log.acceptance_rate)
        log.stop_reason = ("budget spent" if state["made"] >= budget else
                           f"no improvement in {patience} candidates")
    except KeyboardInterrupt:
        log.interrupted = True
        log.stop_reason = "interrupted"
        log.record(state["made"], t0, state["best"][0], state["best"][0])
    finally:
        bar.close()
    best = state["best"]
    elapsed = time.perf_counter() - t0
    log.notes.update(initial_cost_s=cost0, simulations=ev.simulations, cache_hits=ev.hits, simulate_s=ev.sim_s,
                     candidates_per_s=state["made"] / elapsed if elapsed > 0 else 0.0,
                     groups=len(best[1].groups), buckets=len(best[1].buckets))
    final = FusionPlan(best[1].groups, best[1].buckets, name="disco") if best[1] else None
    return SearchResult(start.with_fusion(final), best[0], log)


def _step(plan, methods, beta, moves, ev, alpha, queue, seen, state, log, on_candidate, budget) -> None:
    """One step of Algorithm 1 on the popped ``plan``: one candidate per method (the best so far in
    ``state["best"]``)."""
    for method in methods:
        if state["made"] >= budget:
            break
        groups, buckets = list(plan.groups), list(plan.buckets)
        n = moves.rng.randint(0, beta)
        moves.apply(method, n, groups, buckets)
        cand = FusionPlan(tuple(groups), tuple(buckets))
        key = _key(groups, buckets)
        cost = ev.cost(cand, key)
        state["made"] += 1
        log.proposals += 1
        log.notes["candidates"][method] += 1
        if cost is None:
            log.notes["invalid"][method] += 1
        else:
            if cost < state["best"][0]:
                state["best"] = (cost, cand)
                state["unchanged"] = 0
                log.accepted += 1
                log.notes["improvements"][method] += 1
            else:
                state["unchanged"] += 1
            if cost <= alpha * state["best"][0] and key not in seen:
                seen.add(key)
                state["pushed"] += 1
                heapq.heappush(queue, (cost, state["pushed"], cand))
        if on_candidate is not None:
            on_candidate(state["made"], cand, cost)


def _why(ev: _Evaluator, plan: FusionPlan) -> str:
    try:
        check_fusion(ev.strategy, plan, ev.machine)
    except FusionError as e:
        return str(e)
    return "its task graph has a cycle"


register_algorithm("disco", disco)
