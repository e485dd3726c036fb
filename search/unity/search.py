"""Unity's joint search of algebraic substitutions and parallelization (Unity §5).

Three levels, as in the paper's Fig. 12:

1. **Graph splitting** (§5.3): a graph with more than ``2k`` compute operators is cut at its
   sequence split nodes into segments of at least ``k`` operators (default 10), each cut chosen
   among the eligible split nodes to block the fewest substitution matches of the input graph
   (MetaFlow's criterion). Substitutions are searched per segment with the other segments fixed.
2. **Substitution selection** (§5.1): TASO's cost-based backtracking. A queue of candidate graphs
   ordered by cost; the best is taken out and every rule is applied at every match (inside the
   segment) to make new candidates, de-duplicated by structural hash; candidates costlier than
   ``alpha`` x the best so far (default 1.05) are pruned; the budget bounds the candidates costed.
3. **Machine mapping** (§5.2): each candidate is costed by ``mapping.MappingDP``, whose memo is
   shared by all candidates (the cache), so a substitution re-costs only the subproblems it touched.

Parallelization in flexrt's Unity: a candidate is a compute graph (algebraic substitutions change
it) and the DP picks every operator's degrees per parallel axis and its devices; the
parallelization operators (Partition, Combine, Replicate, Reduce, AllReduce) then follow on every
edge (``strategy.apply_configs``). Each per-operator choice is one instance of Unity's generated
"partition/replicate - operator - combine/reduce" substitutions, and the resharding chains are
their compositions; the DP enumerates them exhaustively per operator instead of by best-first
moves. Boundaries between segments need no restriction to replica degree 1: every candidate is
costed on the whole graph, so a boundary operator's configurations (every partitioning of the
tensor crossing the cut) are chosen jointly with both sides and the resharding a mismatch needs is
inserted by ``apply_configs``.

The best candidate's mapping, the input graph's mapping (each every way the finalists map) and data parallelism are then simulated as
full task graphs; the fastest is returned (exportable, loadable and trainable like any strategy;
a rewritten graph is saved with its whole parallel PCG).

``sequential`` is the "TASO then FlexFlow" baseline: substitutions chosen by their cost on one
device, then the parallelization of the resulting graph alone.

Entry points: ``unity``, ``sequential``, ``algebraic_rules``, ``segments``.
"""

from __future__ import annotations

import heapq
import math
import time
from typing import Optional, Sequence

from flexrt.search.api import (
    DEFAULT_BUDGET,
    Progress,
    SearchLog,
    SearchResult,
    SearchSpace,
    check_budget,
    progress_default,
    register_algorithm,
)
from flexrt.search.pipelines import FLUSHED, best_pipeline, checked_schedules
from flexrt.search.substitutions.library import activation_fusion_rules, load_library
from flexrt.search.substitutions.match import find_matches, node_patterns, planned_ops, rewrite
from flexrt.search.substitutions.rule import PARALLEL_TYPES, Rule
from flexrt.search.unity.costs import LocalCosts, check_config_ratio
from flexrt.search.unity.mapping import MappingDP, series_split_nodes
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import GraphStrategy, Strategy, data_parallel, is_compute
from flexrt.strategy.config import computed_weights
from flexrt.strategy.weights import fold_weights

from flexrt.errors import ConfigError, FlexrtError
from flexrt.ir.pcg import PCG
from flexrt.ir.registry import AxisKind
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import Machine

DEFAULT_ALPHA = 1.05
DEFAULT_SPLIT_SIZE = 10
# configurations over this ratio x (parallel width) x the cheapest's own cost are left out (``LocalCosts``)
DEFAULT_CONFIG_RATIO = 4.0


def algebraic_rules(rules: Optional[Sequence[Rule]] = None) -> list[Rule]:
    """The rules without parallelization operators (the library's and the ReLU fusion pair)."""
    pool = list(load_library()) + activation_fusion_rules() if rules is None else list(rules)
    out, names = [], set()
    for r in pool:
        if r.name in names or any(o.type in PARALLEL_TYPES for o in r.src + r.dst):
            continue
        names.add(r.name)
        out.append(r)
    return out


def _relevant(rules: Sequence[Rule], pcg: PCG) -> list[Rule]:
    kinds = {p.type for p in node_patterns(pcg).values()}
    return [r for r in rules if r.src and all(o.type in kinds for o in r.src)]


def _matches(pcg: PCG, rules: Sequence[Rule], frozen: frozenset = frozenset()):
    patterns = {n: p for n, p in node_patterns(pcg).items() if n not in frozen}
    for rule in rules:
        for m in find_matches(pcg, rule, patterns=patterns):
            if not frozen.intersection(m.nodes):
                yield rule, m


def _promise(pcg: PCG, rule: Rule, m, costs: LocalCosts) -> float:
    """What rewriting ``pcg`` with ``rule`` at ``m`` changes in the operators' time on one device: the
    added operators' forward + backward less the removed ones', unsplit (TASO's cost of a graph,
    ``LocalCosts.whole_time``); infinite when the rewrite is invalid."""
    try:
        added = sum(costs.whole_time(attrs, ins, outs) for attrs, ins, outs in planned_ops(pcg, rule, m))
    except FlexrtError:
        return float("inf")
    removed = 0.0
    for nid in m.nodes:
        node = pcg.node(nid)
        removed += costs.whole_time(node.attrs, [pcg.shape(r).tensor_shape for r in node.inputs],
                                    [t.tensor_shape for t in pcg.output_shapes(nid)])
    return added - removed


def segments(pcg: PCG, rules: Sequence[Rule], k: int) -> list[frozenset]:
    """Compute-node sets of the segments graph splitting searches separately (one when the graph
    has at most 2k compute operators or no split node fits)."""
    order = [n for n in pcg.topological_order() if is_compute(pcg.node(n))]
    if len(order) <= 2 * k:
        return [frozenset(order)]
    pos = {n: i for i, n in enumerate(order)}
    spans = [sorted(pos[n] for n in m.nodes) for _, m in _matches(pcg, rules)]
    cuts_ok = [pos[n] for n in series_split_nodes(pcg)]

    def blocked(c: int) -> int:  # matches with nodes on both sides of a cut after position c
        return sum(1 for s in spans if s[0] <= c < s[-1])

    cuts, start = [], 0
    while True:
        window = [c for c in cuts_ok if start + k - 1 <= c < start + 2 * k - 1 and c <= len(order) - 1 - k]
        if not window:
            later = [c for c in cuts_ok if c >= start + 2 * k - 1 and c <= len(order) - 1 - k]
            if not later:
                break
            window = [later[0]]
        c = min(window, key=lambda c: (blocked(c), c))
        cuts.append(c)
        start = c + 1
    bounds = [-1] + cuts + [len(order) - 1]
    return [frozenset(order[a + 1:b + 1]) for a, b in zip(bounds, bounds[1:])]


def _named(rule: Rule, match, pcg: PCG) -> str:
    """A rewrite as a line of the search log: the rule and the operators it replaced."""
    return f"{rule.name} on {', '.join(pcg.node(n).name for n in match.nodes)}"


class _Costing:
    """Costs candidate graphs with the DP and counts the work."""

    def __init__(self, dp: MappingDP) -> None:
        self.dp = dp
        self.calls = 0

    def __call__(self, pcg: PCG):
        self.calls += 1
        return self.dp.solve(pcg)


def _rewritten(g: PCG, rule: Rule, m, state: dict) -> Optional[PCG]:
    """The graph ``rule`` makes of ``g`` at ``m``, or None when the rewrite is invalid. A weight the
    rewrite computes is folded into one weight where it is a concatenation of weights (TASO's merged
    kernels: ``fold_weights``, counted as ``folded_weights`` in ``state``); a rewrite that computes
    any other (``computed_weights``: a strategy cannot hold it) is skipped and counted."""
    try:
        rw = rewrite(g, rule, m)
    except FlexrtError:
        return None
    if not computed_weights(rw.pcg, rw.added):
        return rw.pcg
    new = fold_weights(rw.pcg)
    if computed_weights(new, [nid for nid in rw.added if nid in new]):
        state["computed_weights"] = state.get("computed_weights", 0) + 1
        return None
    state["folded_weights"] = state.get("folded_weights", 0) + 1
    return new


def _rewrite_notes(pcg: PCG, best_pcg: PCG, state: dict) -> dict:
    """The search log's notes on substitution selection: whether and by which rewrites the chosen
    graph differs from the input, and the weight-computing rewrites folded or skipped."""
    return dict(rewritten=best_pcg.structural_hash() != pcg.structural_hash(),
                rewrites=list(state.get("paths", {}).get(best_pcg.structural_hash(), ())),
                skipped_computed_weights=state.get("computed_weights", 0),
                folded_weights=state.get("folded_weights", 0))


def _best_first(pcg: PCG, costing: _Costing, rules: Sequence[Rule], budget: int, alpha: float,
                frozen: frozenset, log: SearchLog, t0: float, progress: Progress, state: dict):
    """TASO's backtracking search over one segment, costing lazily; returns (best graph, its
    mapping). One queue holds costed graphs (by their cost) and rewrites not yet costed (by an
    estimate: the graph's cost plus what the rewrite changes on one device over the devices,
    ``_promise``): the cheapest comes out first, a graph to expand (its rewrites join the queue) or
    a rewrite to make and cost (one unit of the budget). The budget thus goes to the most promising
    rewrites of the whole frontier (a batch norm fusing its ReLU before a merge of convolutions
    that a roofline cost cannot see pay) while none is excluded; as in TASO, a graph over ``alpha``
    times the best is not expanded. ``state["paths"]`` maps a graph's structural hash to the rewrites
    that made it from the input graph (rule name and the matched operators), so the winner's
    rewrites can be named."""
    start = costing(pcg)
    best_pcg, best = pcg, start
    paths = state.setdefault("paths", {})
    paths.setdefault(pcg.structural_hash(), ())
    seen = {pcg.structural_hash()}
    costs, n = costing.dp.costs, costing.dp.devices
    promises = state.setdefault("promises", {})
    heap = [(start.cost_s, 0, pcg, None)]     # (priority, tie-break, graph, None | (rule, match) to apply)
    counter = 1
    used = 0
    while heap and used < budget:
        cost, _, g, step = heapq.heappop(heap)
        if step is None:   # a costed graph: queue its rewrites by their estimates
            if cost > alpha * best.cost_s:
                continue
            for rule, m in _matches(g, rules, frozen):
                key = (rule.name, m)   # a rewrite's change is the same in every graph it applies to:
                delta = promises.get(key)   # node ids are never reused and rewrites keep shapes
                if delta is None:
                    delta = promises[key] = _promise(g, rule, m, costs)
                estimate = cost + delta / n
                if estimate != float("inf"):
                    heapq.heappush(heap, (estimate, counter, g, (rule, m)))
                    counter += 1
            continue
        rule, m = step
        new = _rewritten(g, rule, m, state)
        if new is None:
            continue
        h = new.structural_hash()
        if h in seen:
            continue
        seen.add(h)
        paths[h] = paths.get(g.structural_hash(), ()) + (_named(rule, m, g),)
        mapping = costing(new)
        used += 1
        state["candidates"] += 1
        if mapping.cost_s < best.cost_s:
            best_pcg, best = new, mapping
            if best.cost_s < state["best"]:  # kept for Ctrl-C
                state.update(best=best.cost_s, best_pcg=new, best_mapping=mapping)
        log.record(state["candidates"], t0, mapping.cost_s, min(best.cost_s, state["best"]))
        progress.update(state["candidates"], best.cost_s, 0.0)
        if mapping.cost_s <= alpha * best.cost_s:
            heapq.heappush(heap, (mapping.cost_s, counter, new, None))
            counter += 1
    return best_pcg, best


def _optimize_graph(pcg: PCG, costing: _Costing, rules: Sequence[Rule], budget: int, alpha: float,
                    split_size: Optional[int], log: SearchLog, t0: float, progress: Progress, state: dict):
    """Substitution selection over the segments; ``state`` holds the best graph so far (Ctrl-C)."""
    rules = _relevant(rules, pcg)
    segs = segments(pcg, rules, split_size) if split_size else [frozenset(n.id for n in pcg.nodes if is_compute(n))]
    log.notes["segments"] = [len(s) for s in segs]
    current = pcg
    mapping = costing(pcg)
    state.update(candidates=0, best=mapping.cost_s, best_pcg=pcg, best_mapping=mapping, input_mapping=mapping)
    log.record(0, t0, mapping.cost_s, mapping.cost_s)
    per_segment = max(1, budget // len(segs)) if budget else 0
    for seg in segs:
        if not rules or not per_segment:
            break
        # the other segments' operators (and what earlier segments' rewrites made) stay fixed
        frozen = frozenset(n.id for n in current.nodes if is_compute(n) and n.id not in seg)
        current, mapping = _best_first(current, costing, rules, per_segment, alpha, frozen, log, t0, progress,
                                       state)
        state["best"] = min(state["best"], mapping.cost_s)
    return current, mapping, state["candidates"]


def _space(space: Optional[SearchSpace]) -> SearchSpace:
    return space if space is not None else SearchSpace.full()


def _strategy(pcg: PCG, original: PCG, configs) -> Strategy:
    s = Strategy.from_configs(pcg, configs)
    if pcg.structural_hash() != original.structural_hash():
        return GraphStrategy(s.pcg, s.views)  # a rewritten graph travels as its whole parallel PCG
    return s


def _finish(machine: Machine, cost_model, optimizer: OptimizerKind, candidates: list, log: SearchLog,
            t0: float) -> SearchResult:
    """Simulate the finalists as full task graphs; the fastest wins."""
    sim = Simulator(machine, cost_model, optimizer, detail=False)   # times only: no names, actions or memory replay
    scored = []
    seen = set()
    for label, strategy in candidates:
        key = strategy.pcg.structural_hash(), tuple(sorted((strategy.pcg.node(n).name, str(v))
                                                           for n, v in strategy.views.items()))
        if key in seen:
            continue
        seen.add(key)
        sim.full(strategy)
        scored.append((sim.iteration_time(), label, strategy))
    scored.sort(key=lambda t: t[0])
    cost, label, best = scored[0]
    log.notes["finalists_s"] = {lab: c for c, lab, _ in scored}
    log.notes["chosen"] = label
    if log.notes.get("rewritten") and not isinstance(best, GraphStrategy):     # a finalist of the input graph won
        log.notes.update(rewritten=False, rewrites=[], search_rewrites=log.notes.get("rewrites", []))
    log.record(log.entries[-1].iteration + 1 if log.entries else 0, t0, cost, cost)
    return SearchResult(best, cost, log)


def unity(pcg: PCG, machine: Machine, cost_model, budget: int = DEFAULT_BUDGET, seed: int = 0,
          alpha: float = DEFAULT_ALPHA, split_size: Optional[int] = DEFAULT_SPLIT_SIZE, cache: bool = True,
          space: Optional[SearchSpace] = None, min_degree: int = 1, devices: Optional[int] = None,
          optimizer: OptimizerKind = OptimizerKind.SGD, rules: Optional[Sequence[Rule]] = None,
          progress: Optional[bool] = None, enable_pipeline: bool = False,
          config_ratio: float = DEFAULT_CONFIG_RATIO, pipeline_schedules=FLUSHED,
          initial: Sequence[Strategy] = (), **_ignored) -> SearchResult:
    """Unity's joint search (module doc). ``budget`` bounds the candidate graphs costed; ``split_size``
    None or 0 turns graph splitting off; ``cache=False`` clears the DP's memo for every candidate;
    ``devices`` limits the search to the first devices of the machine; ``min_degree`` makes every
    operator use at least that many devices. ``enable_pipeline`` adds the best pipelined strategy
    (``flexrt.search.pipelines``) to the finalists, with a schedule among ``pipeline_schedules``
    (default the flushed ones; Unity §5 uses ``2bw``). ``config_ratio``: the configurations' pruning
    bound (``LocalCosts``; 0 keeps every configuration: the DP is then exact over the space).
    ``initial``: strategies (the expert's, an imported one) simulated with the finalists, so the
    search never returns one slower than them (FlexFlow's initial candidates)."""
    _check(budget, alpha, split_size, devices, machine, config_ratio)
    _check_rules(rules)
    schedules = checked_schedules(pipeline_schedules)
    if enable_pipeline and devices is not None and devices < machine.num_devices:
        raise ConfigError("--enable-pipeline places pipelines on every device of the machine; leave out --devices")
    sp = _space(space)
    t0 = time.perf_counter()
    n = devices or machine.num_devices
    costs = LocalCosts(machine, cost_model, sp.kinds, optimizer, min_degree, config_ratio=config_ratio)
    dp = MappingDP(machine, costs, cache=cache, devices=n)
    costing = _Costing(dp)
    log = SearchLog("unity", budget, seed)
    bar = Progress(progress_default() if progress is None else progress, budget, "unity candidates")
    state: dict = {"candidates": 0}
    try:
        best_pcg, mapping, count = _optimize_graph(pcg, costing, algebraic_rules(rules), budget, alpha, split_size,
                                                   log, t0, bar, state)
    except KeyboardInterrupt:
        log.interrupted = True
        if "best_pcg" not in state:
            raise
        best_pcg, mapping, count = state["best_pcg"], state["best_mapping"], state["candidates"]
    finally:
        bar.close()
    log.proposals = count
    log.notes.update(dp_calls=costing.calls, dp_cache_hits=dp.hits, dp_cache_misses=dp.misses,
                     edge_evaluations=costs.edge_evaluations, estimated_s=mapping.cost_s, config_ratio=config_ratio,
                     **_rewrite_notes(pcg, best_pcg, state))
    log.stop_reason = "interrupted" if log.interrupted else "queue empty or budget spent"
    if log.interrupted:      # Ctrl-C: the best so far, data parallelism and the given ones, without more mapping
        return _finish(machine, cost_model, optimizer, _interrupted_finalists(best_pcg, pcg, mapping, machine, n)
                       + _given(initial), log, t0)
    overlap = _overlap_dp(costs, sp, min_degree, n, cache, config_ratio)
    unpacked = MappingDP(machine, costs, cache=cache, devices=n, packing=False)   # both graphs share its memo
    finalists = _finalists("unity", best_pcg, pcg, mapping, costs, sp, min_degree, n, cache, overlap, config_ratio,
                           unpacked)
    if best_pcg is not pcg:        # the joint choice: the rewritten graph or the input one, each mapped every way
        finalists += [(f"input graph, {lab}", s) for lab, s in
                      _finalists("mapped", pcg, pcg, state["input_mapping"], costs, sp, min_degree, n, cache,
                                 overlap, config_ratio, unpacked) if lab != "data-parallel"]
    if enable_pipeline:      # pipelined finalists: stages, micro-batches and schedule searched (search.pipelines)
        block_costs = LocalCosts(machine, cost_model, sp.kinds, optimizer, min_degree, config_ratio=config_ratio,
                                 like=costs)

        def block_mapping(graph: PCG, width: int) -> dict:       # the whole batch on a stage's block
            return MappingDP(machine, block_costs, cache=cache, devices=width).solve(graph).configs
        finalists += best_pipeline(pcg, machine, cost_model, optimizer, log_notes=log.notes,
                                   block_mapping=block_mapping, schedules=schedules)
    return _finish(machine, cost_model, optimizer, finalists + _given(initial), log, t0)


def sequential(pcg: PCG, machine: Machine, cost_model, budget: int = DEFAULT_BUDGET, seed: int = 0,
               alpha: float = DEFAULT_ALPHA, split_size: Optional[int] = DEFAULT_SPLIT_SIZE,
               space: Optional[SearchSpace] = None, min_degree: int = 1, devices: Optional[int] = None,
               optimizer: OptimizerKind = OptimizerKind.SGD, rules: Optional[Sequence[Rule]] = None,
               progress: Optional[bool] = None, config_ratio: float = DEFAULT_CONFIG_RATIO,
               initial: Sequence[Strategy] = (), **_ignored) -> SearchResult:
    """"TASO then FlexFlow": algebraic substitutions chosen by their cost on one device, then the
    parallelization of that graph alone (the same DP, space and ``config_ratio`` as ``unity``); data parallelism and
    the data+model mapping are finalists too, as in ``unity`` (``_finalists``), and ``initial``."""
    _check(budget, alpha, split_size, devices, machine, config_ratio)
    _check_rules(rules)
    sp = _space(space)
    t0 = time.perf_counter()
    n = devices or machine.num_devices
    one = _Costing(MappingDP(machine, LocalCosts(machine, cost_model, sp.kinds, optimizer), devices=1))
    log = SearchLog("sequential", budget, seed)
    bar = Progress(progress_default() if progress is None else progress, budget, "TASO then parallelize")
    state: dict = {"candidates": 0}
    try:
        best_pcg, _, count = _optimize_graph(pcg, one, algebraic_rules(rules), budget, alpha, split_size, log, t0, bar,
                                             state)
    except KeyboardInterrupt:
        log.interrupted = True
        best_pcg, count = state.get("best_pcg", pcg), state["candidates"]
    finally:
        bar.close()
    costs = LocalCosts(machine, cost_model, sp.kinds, optimizer, min_degree, config_ratio=config_ratio,
                       like=one.dp.costs)
    mapping = MappingDP(machine, costs, devices=n).solve(best_pcg)
    log.proposals = count
    log.notes.update(estimated_s=mapping.cost_s, config_ratio=config_ratio, **_rewrite_notes(pcg, best_pcg, state))
    log.stop_reason = "interrupted" if log.interrupted else "queue empty or budget spent"
    finalists = (_interrupted_finalists(best_pcg, pcg, mapping, machine, n) if log.interrupted else
                 _finalists("sequential", best_pcg, pcg, mapping, costs, sp, min_degree, n, config_ratio=config_ratio))
    return _finish(machine, cost_model, optimizer, finalists + _given(initial), log, t0)


def _interrupted_finalists(best_pcg: PCG, pcg: PCG, mapping, machine: Machine, n: int) -> list:
    """After Ctrl-C, the finalists simulated at once: the best graph's mapping so far and data
    parallelism (``_finalists``' other mappings each solve the DP again: tens of seconds on a large
    model, while the user waits to stop)."""
    return _mapped("best so far", best_pcg, pcg, mapping) + [
        ("data-parallel", data_parallel(pcg, machine, n if n < machine.num_devices else None))]


def _finalists(label: str, best_pcg: PCG, pcg: PCG, mapping, costs: LocalCosts, sp: SearchSpace,
               min_degree: int, n: int, cache: bool = True, overlap: Optional[MappingDP] = None,
               config_ratio: float = DEFAULT_CONFIG_RATIO, unpacked: Optional[MappingDP] = None) -> list:
    """The strategies ``unity`` and ``sequential`` both simulate in full at the end: the search's graph
    and mapping, data parallelism, the search's graph mapped with the overlap model (``LocalCosts(
    overlap=True)``: gradient rings as the simulator's, hidden behind the backward as a flow shop; it
    ranks mappings better where rings are latency-bound, worse where they block the links others
    need), mapped without packing (``MappingDP(packing=False)``: its bound can keep a packed mapping
    that simulates slower) and in the data+model space by both DPs (the DP's estimates can misjudge a larger space,
    and a larger space must never return worse), each DP's mapping also with its other peel orders'
    (``Mapping.others``), so that the two differ only in how the graph was chosen (Unity Fig. 15b).
    ``costs``: the search's (their DPs share its caches, ``LocalCosts(like=...)``);
    ``overlap``, ``unpacked``: the overlap DP and the DP without packing to use (made when None)."""
    machine = costs.machine
    overlap = overlap or _overlap_dp(costs, sp, min_degree, n, cache, config_ratio)
    out = _mapped(label, best_pcg, pcg, mapping)
    out += [("data-parallel", data_parallel(pcg, machine, n if n < machine.num_devices else None))]
    out += _mapped("overlap mapping", best_pcg, pcg, overlap.solve(best_pcg))
    # without packing (independent branches one after the other or on disjoint devices): where the
    # packing bound misjudges, the DP keeps a packed mapping that simulates slower (XDL at 48 summit GPUs:
    # 2.435 ms packed, 2.062 apart)
    unpacked = unpacked or MappingDP(machine, costs, cache=cache, devices=n, packing=False)
    out += _mapped("mapping without packing", best_pcg, pcg, unpacked.solve(best_pcg))
    if sp.kinds != frozenset({AxisKind.SAMPLE}):
        only = SearchSpace(frozenset({AxisKind.SAMPLE}))
        sample = MappingDP(machine, LocalCosts(machine, costs.cost, only.kinds, costs.optimizer,
                                               min_degree, config_ratio=config_ratio, like=costs),
                           cache=cache, devices=n)
        sample_overlap = _overlap_dp(costs, only, min_degree, n, cache, config_ratio)
        out += _mapped("data+model mapping", best_pcg, pcg, sample.solve(best_pcg))
        out += _mapped("data+model overlap mapping", best_pcg, pcg, sample_overlap.solve(best_pcg))
    return out


def _given(initial: Sequence[Strategy]) -> list:
    """The caller's initial strategies as finalists."""
    return [(f"initial strategy {k + 1}", st) for k, st in enumerate(initial)]


_PEELED = {"graph": "in graph order", "cheapest": "cheapest first", "costliest": "costliest first"}


def _mapped(label: str, best_pcg: PCG, pcg: PCG, mapping) -> list:
    """A DP's mapping of ``best_pcg`` as finalists, with its other peel orders' (``Mapping.others``:
    the DP estimated them costlier, but the simulation decides). A mapping of infinite cost holds
    an edge no resharding chain makes (the DP found no valid mapping that way): left out."""
    labelled = [(label, mapping)] + [(f"{label}, branches {_PEELED[o]}", m) for o, m in mapping.others.items()]
    return [(lab, _strategy(best_pcg, pcg, m.configs)) for lab, m in labelled if math.isfinite(m.cost_s)]


def _overlap_dp(like: LocalCosts, sp: SearchSpace, min_degree: int, n: int, cache: bool = True,
                config_ratio: float = DEFAULT_CONFIG_RATIO) -> MappingDP:
    """The mapping DP with the overlap model (``LocalCosts(overlap=True)``), sharing ``like``'s caches;
    one per search, so the graphs it maps share its costs and subproblems."""
    costs = LocalCosts(like.machine, like.cost, sp.kinds, like.optimizer, min_degree, overlap=True,
                       config_ratio=config_ratio, like=like)
    return MappingDP(like.machine, costs, cache=cache, devices=n)


def _check(budget, alpha, split_size, devices, machine: Machine, config_ratio) -> None:
    check_budget(budget, "unity")
    check_config_ratio(config_ratio)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 1.0 <= alpha < math.inf:
        raise ConfigError(f"unity: alpha (the pruning threshold) must be a finite number >= 1.0, got {alpha!r}")
    if split_size is not None and (isinstance(split_size, bool) or not isinstance(split_size, int) or split_size < 0):
        raise ConfigError(f"unity: the split size k must be an integer >= 1 (0 turns graph splitting off), "
                          f"got {split_size!r}")
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int)
                                or not 1 <= devices <= machine.num_devices):
        raise ConfigError(f"unity: devices must be an integer in 1..{machine.num_devices} for machine "
                          f"{machine.name!r}, got {devices!r}")


def _check_rules(rules) -> None:
    """``rules``: None (the shipped library) or a list of rules (``load_library(path)`` reads a file)."""
    if rules is not None and (isinstance(rules, (str, bytes)) or not isinstance(rules, Sequence)
                              or not all(isinstance(r, Rule) for r in rules)):
        raise ConfigError(f"unity: rules must be a list of substitution rules (flexrt.search.substitutions."
                          f"load_library(path) reads a rule file), got {rules!r:.80}")


register_algorithm("unity", unity, keeps_initial=True)           # _given(initial) among the finalists
register_algorithm("sequential", sequential, keeps_initial=True)
