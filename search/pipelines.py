"""The search over pipelined strategies (``flexrt.strategy.pipeline``) that Unity's search adds to its
finalists with ``--enable-pipeline`` (Unity §5, Fig. 15a).

The space: ``p`` device blocks (every divisor of the devices from 2 up to the operators), ``m``
micro-batches (``p``, ``2p``, ``4p`` and ``8p`` where they divide the batch), the schedules GPipe,
1F1B, interleaved 1F1B (2 chunks, where ``m`` is a multiple of ``p``) and ZB-H1 (and PipeDream-2BW,
``2bw``, where the caller's ``schedules`` name it: it trains on one-step-old weights), stages cut where
the busiest stage's time, the cost model's seconds on its block or the bytes crossing its cuts, is
least (``flexrt.strategy.stage_cuts``), data parallel within each block. Every
candidate is simulated whole, in the order of an exact lower bound of its time (``lower_bound``:
each block's work on its first device, after micro-batch 0's forward reaches it, and the last
backward's way back), and left out when that bound cannot beat the best simulated so far. The
objective is the iteration time of the whole batch (a ``2bw`` pipeline's steady-state time per
iteration), so the throughput (samples/s) is the batch over it. Then the best candidate's stage boundaries are moved one operator at a time, in either
direction, while that makes it faster (``refine``), so the stages are whatever segments of the graph
the simulator says balance best, communication included. Given Unity's DP (``block_mapping``), the
best few candidates are also simulated with every stage mapped by it on its block (``mapped_blocks``:
the whole batch's graph on the block's ``n / p`` devices, each operator's configuration moved to its
stage's block), so a stage may be data-, tensor- or reduction-parallel; the fastest of all is kept.

``pipeline_mcmc`` (``--algo pipeline``) searches the same space by Metropolis-Hastings (FlexFlow's
Eq. 1 on the simulated time, in percent of the data-parallel time) jointly with the operators'
configurations within their blocks: a proposal moves one stage boundary by one operator (the
stage-boundary move), gives one operator random degrees of the search space within its block
(FlexFlow's proposal on the block: ``BlockDegrees``), or changes the micro-batches (halved or
doubled), the schedule, or the number of device blocks (stages then cut again; degrees
kept where still valid). It is bounded by ``budget`` proposals, deterministic for a seed, and
returns the best plan so far on Ctrl-C.

Entry points: ``pipeline_candidates``, ``lower_bound``, ``refine``, ``best_pipeline``, ``mapped_blocks``,
``BlockDegrees``, ``pipeline_mcmc``.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from typing import Callable, Optional

from flexrt.errors import ConfigError, ShapeError, StrategyError
from flexrt.ir.parallel_tensor import divisors
from flexrt.ir.pcg import PCG
from flexrt.machine import Machine
from flexrt.machine.views import Projection
from flexrt.simulator.simulate import Simulator
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.search.api import Progress, SearchLog, SearchResult, progress_default, register_algorithm
from flexrt.strategy import OpConfig, SearchSpace, data_parallel, is_compute, node_axes, wiring_of
from flexrt.strategy.pipeline import batch_of, copy_name, micro_batch_pcg, piece_seconds, pipeline_strategy, source_of
from flexrt.strategy.space import valid_configs

MICRO_BATCH_FACTORS = (1, 2, 4, 8)
# (schedule, chunks) of the space. The flushed ones are the default: ``2bw`` trains on one-step-old
# weights (``flexrt.strategy.pipeline``), which a search may only choose where its caller asks.
FLUSHED = ("gpipe", "1f1b", "interleaved", "zb-h1")
SCHEDULES = FLUSHED + ("2bw",)


def checked_schedules(schedules) -> tuple:
    """``schedules`` (names, or one comma-separated string) as a tuple of known schedules; a
    ConfigError names the valid ones."""
    if isinstance(schedules, str):
        schedules = [x.strip() for x in schedules.split(",") if x.strip()]
    out = tuple(dict.fromkeys(schedules or ()))
    bad = [x for x in out if x not in SCHEDULES]
    if not out or bad:
        raise ConfigError(f"pipeline schedules {', '.join(map(repr, bad)) if bad else '(none)'}: valid: "
                          f"{', '.join(SCHEDULES)} (a comma-separated list)")
    return out


def _with_chunks(schedules) -> list[tuple[str, int]]:
    return [(x, 2 if x == "interleaved" else 1) for x in schedules]


def pipeline_candidates(pcg: PCG, machine: Machine, schedules=FLUSHED) -> list[tuple[str, dict]]:
    """(label, pipeline_strategy keyword arguments) of the space in the module doc, with
    ``schedules``."""
    ops = sum(1 for n in pcg.nodes if is_compute(n))
    batch = batch_of(pcg)
    out = []
    for p in divisors(machine.num_devices):
        if not 2 <= p <= ops:
            continue
        for m in sorted({p * f for f in MICRO_BATCH_FACTORS}):
            if batch % m:
                continue
            for schedule, chunks in _with_chunks(checked_schedules(schedules)):
                if schedule == "interleaved" and (m % p or p * chunks > ops):
                    continue
                out.append((f"pipeline p={p} m={m} {schedule}" + (f" v={chunks}" if chunks > 1 else ""),
                            {"stages": p, "micro_batches": m, "schedule": schedule, "chunks": chunks}))
    return out


def _no_pipeline(pcg: PCG, machine: Machine) -> str:
    """Why ``pipeline_candidates`` is empty, for the error."""
    ops, n, batch = sum(1 for node in pcg.nodes if is_compute(node)), machine.num_devices, batch_of(pcg)
    blocks = [p for p in divisors(n) if 2 <= p <= ops]
    if not blocks:
        return (f"no pipeline fits: {ops} operator(s) on {n} device(s); a pipeline needs 2 or more device blocks "
                f"(a divisor of the devices) and at least one operator per block")
    return (f"no pipeline fits the batch of {batch}: on {n} devices a pipeline of p blocks (p in "
            f"{', '.join(map(str, blocks))}) runs p x {', '.join(map(str, MICRO_BATCH_FACTORS))} micro-batches, and "
            f"none of those divides {batch}; give a batch divisible by {min(blocks)}")


def _time(sim: Simulator, strategy) -> float:
    sim.full(strategy)
    return sim.iteration_time()


class BlockDegrees:
    """Each operator's degree assignments within a device block, for one micro-batch: those of
    ``valid_configs`` on the operator's first micro-batch copy whose axes are of the space's kinds
    and whose total degree divides the block's width (every split at the block's first devices).
    Computed once per (micro-batches, width, operator)."""

    def __init__(self, pcg: PCG, machine: Machine, space: SearchSpace) -> None:
        self.pcg, self.machine, self.space = pcg, machine, space
        self._mb: dict = {}
        self._of: dict = {}

    def of(self, name: str, micro_batches: int, width: int) -> list[dict]:
        key = (name, micro_batches, width)
        if key not in self._of:
            if micro_batches not in self._mb:
                self._mb[micro_batches] = micro_batch_pcg(self.pcg, micro_batches, built=1).pcg
            mb = self._mb[micro_batches]
            node = mb.node_by_name(copy_name(name, 0))
            self._of[key] = [d for d in valid_configs(mb, node, self.machine, max_degree=width, kinds=self.space.kinds)
                             if width % math.prod(d.values()) == 0]
        return self._of[key]

    def kept(self, degrees: dict, micro_batches: int, width: int) -> dict:
        """The assignments of ``degrees`` (operator -> degrees) still valid at these micro-batches and
        width; the others go back to the block's data parallelism."""
        return {name: d for name, d in degrees.items() if d in self.of(name, micro_batches, width)}


def refine(pcg: PCG, machine: Machine, sim: Simulator, kwargs: dict, budget: int) -> tuple[object, float, int]:
    """Hill-climb the stage boundaries of the pipeline ``kwargs`` describes: move the first or last
    operator of a stage to its neighbour while that is faster, at most ``budget`` simulations.
    Returns (strategy, its time, simulations)."""
    best = pipeline_strategy(pcg, machine, cost_model=sim.lowering.cost, **kwargs)
    best_t, tried = _time(sim, best), 0
    order = wiring_of(pcg).ops
    stage_of = dict(best.pipeline.stage_of)
    improved = True
    while improved and tried < budget:
        improved = False
        for k in range(1, len(order)):
            a, b = order[k - 1], order[k]
            if stage_of[a] == stage_of[b]:
                continue                      # not a boundary
            for moved, to in ((b, stage_of[a]), (a, stage_of[b])):
                trial = {**stage_of, moved: to}
                if sorted(set(trial.values())) != sorted(set(stage_of.values())) or tried >= budget:
                    continue                  # a stage would be left empty
                tried += 1
                cand = pipeline_strategy(pcg, machine, stage_of=trial, **kwargs)
                t = _time(sim, cand)
                if t < best_t * (1 - 1e-9):
                    best, best_t, stage_of, improved = cand, t, trial, True
                    break
            if improved:
                break
    return best, best_t, tried


def lower_bound(strategy, machine: Machine, cost_model) -> float:
    """Seconds a pipelined strategy's iteration takes at least, from its operators' piece times on
    each block's first device (``piece_seconds``; transfers, losses and rings left out): a block
    starts when micro-batch 0's forward has crossed every stage before its first, then runs all its
    work; under GPipe, 1F1B and interleaved 1F1B its last task is its first stage's backward of the
    last micro-batch, which then crosses every earlier stage back (ZB-H1 may end on a weight
    gradient, so there only the first part counts). A ``2bw`` pipeline's steady state never drains:
    its bound is its busiest block's work."""
    plan = strategy.pipeline
    p, m, width = plan.stages, plan.micro_batches, machine.num_devices // plan.stages
    fwd, bwd, work = [0.0] * (p * plan.chunks), [0.0] * (p * plan.chunks), [0.0] * p
    for name, copies in plan.model.copies.items():
        s = plan.stage_of[name]
        spec = machine.devices[(s % p) * width].spec
        f, b, update = piece_seconds(plan.model, name, strategy.configs[plan.model.pcg.node_by_name(copies[0]).id],
                                     cost_model, spec)
        fwd[s], bwd[s], work[s % p] = fwd[s] + f, bwd[s] + b, work[s % p] + m * (f + b) + update
    if plan.schedule.delays_updates:
        return max(work)
    back = not plan.schedule.splits_backward
    return max(sum(fwd[:k]) + work[k] + (sum(bwd[:k]) if back else 0.0) for k in range(p))


def mapped_blocks(pcg: PCG, width: int, block_mapping: Callable) -> Callable:
    """A ``place`` for ``pipeline_strategy``: every operator as ``block_mapping(pcg, width)`` (node id ->
    ``OpConfig`` on the first ``width`` devices; Unity's DP) maps the whole batch, moved to its stage's
    block. The whole batch, not one micro-batch: a block computes every micro-batch but synchronizes
    its gradients once, and so does the mapping it is given. A micro-batch of one sample may lose an
    axis the whole batch has (a broadcast add's batch of 1): the view then follows the axes by name,
    and an operator split along the lost axis keeps ``pipeline_strategy``'s default."""
    by_name = {}
    for nid, cfg in block_mapping(pcg, width).items():
        node = pcg.node(nid)
        if is_compute(node):
            by_name[node.name] = (cfg, [a.name for a in node_axes(pcg, node)[0]])

    def place(mb_pcg, node, start: int) -> Optional[OpConfig]:
        hit = by_name.get(source_of(node.name)[0])
        if hit is None:
            return None
        cfg, names = hit
        view = dataclasses.replace(cfg.view, start=cfg.view.start + start)
        have = [a.name for a in node_axes(mb_pcg, node)[0]]
        if have == names:
            return OpConfig(cfg.degrees, view)
        if any(a not in have for a, _ in cfg.degrees):
            return None
        dims = {a: (view.strides[i], view.projections[i]) for i, a in enumerate(names)}
        kept = [dims.get(a, (1, Projection.INTRA)) for a in have]
        return OpConfig(cfg.degrees, dataclasses.replace(view, strides=tuple(s for s, _ in kept),
                                                         projections=tuple(p for _, p in kept)))
    return place


def _distinct(scored: list, k: int) -> list:
    """The first ``k`` entries of ``scored`` (fastest first) with distinct blocks, micro-batches and
    schedule: a plan's two stage cuts count once, its faster."""
    seen, out = set(), []
    for entry in scored:
        kw = entry[2]
        key = (kw["stages"], kw["micro_batches"], kw["schedule"], kw.get("chunks", 1))
        if key not in seen and len(out) < k:
            seen.add(key)
            out.append(entry)
    return out


def best_pipeline(pcg: PCG, machine: Machine, cost_model, optimizer, budget: int = 40,
                  log_notes: Optional[dict] = None, block_mapping: Optional[Callable] = None,
                  mapped: int = 3, schedules=FLUSHED) -> list[tuple[str, object]]:
    """The best candidate of ``pipeline_candidates`` after ``refine`` (a one-element list of (label,
    strategy), or empty when the model or machine allows no pipeline). Candidates are simulated in
    the order of their ``lower_bound``; one whose bound is not below the best simulated so far
    cannot win and is not simulated (exact). The ``mapped`` best are simulated again with their
    stages cut by work alone (``cut="work"``: the cuts' objective ignores 1F1B's round trip, which
    can favour them) and compete too. With ``block_mapping`` (``mapped_blocks``), the
    ``mapped`` best of them, and the ``mapped`` best distinct plans (blocks, micro-batches and
    schedule: ``_distinct``), are simulated again with each block mapped by it (a stage data-, tensor-
    or reduction-parallel as Unity's DP chooses on the block) and compete too, where its splits fit
    their micro-batches.
    ``log_notes`` gets each simulated candidate's time, the candidates left out by their bound, and
    the refinement's simulations. ``schedules``: those among which to choose (default the flushed
    ones, ``FLUSHED``)."""
    sim = Simulator(machine, cost_model, optimizer, detail=False, incremental=False)
    bounded = []
    for label, kwargs in pipeline_candidates(pcg, machine, schedules):
        try:
            strategy = pipeline_strategy(pcg, machine, cost_model=cost_model, **kwargs)
        except StrategyError:
            continue                            # an operator that cannot run on micro-batches
        # keep the bound, not the strategy: a micro-batched model per candidate would hold them all
        # in memory; the few simulated are built again
        bounded.append((lower_bound(strategy, machine, cost_model), label, kwargs))
    if not bounded:
        return []
    bounded.sort(key=lambda x: x[0])
    scored, skipped = [], []
    for bound, label, kwargs in bounded:
        if scored and bound >= scored[0][0]:
            skipped.append(label)
            continue
        scored.append((_time(sim, pipeline_strategy(pcg, machine, cost_model=cost_model, **kwargs)), label, kwargs))
        scored.sort(key=lambda x: x[0])
    for _, label, kwargs in scored[:mapped]:     # the best few with their stages cut by work alone too
        kw = {**kwargs, "cut": "work"}
        scored.append((_time(sim, pipeline_strategy(pcg, machine, cost_model=cost_model, **kw)),
                       label + ", stages by work", kw))
    scored.sort(key=lambda x: x[0])
    if block_mapping is not None:
        places: dict = {}           # block width -> its mapping (one DP per width)
        best = scored[:mapped]      # the best few, and the best few distinct plans among them
        for _, label, kwargs in best + [e for e in _distinct(scored, mapped) if e not in best]:
            width = machine.num_devices // kwargs["stages"]
            if width not in places:
                places[width] = mapped_blocks(pcg, width, block_mapping)
            kw = {**kwargs, "place": places[width]}
            try:
                cand = pipeline_strategy(pcg, machine, cost_model=cost_model, **kw)
            except (StrategyError, ShapeError):
                continue                     # the whole batch's splits do not fit these micro-batches
            scored.append((_time(sim, cand), label + ", blocks mapped", kw))
        scored.sort(key=lambda x: x[0])
    _, label, kwargs = scored[0]
    strategy, t, tried = refine(pcg, machine, sim, kwargs, budget)
    if log_notes is not None:
        log_notes["pipeline_candidates_s"] = {lab: c for c, lab, _ in scored}
        log_notes["pipeline_candidates_bounded_out"] = skipped
        log_notes["pipeline_refine_simulations"] = tried
    return [(label + (" (stages refined)" if tried and t < scored[0][0] else ""), strategy)]


def _propose(rng: random.Random, kwargs: dict, stage_of: dict, order: list, batch: int, n: int, ops: int,
             blocks: BlockDegrees, schedules: list):
    """A neighbour of (kwargs, stage_of): a stage-boundary move (35%), one operator's degrees within its
    block (30%: FlexFlow's proposal, on the block), or another count of micro-batches, schedule or
    device blocks (operators' degrees kept where still valid). None when the move does not apply."""
    kw, stages = dict(kwargs), dict(stage_of)
    move = rng.random()
    if move < 0.35:                                    # the stage-boundary move
        bounds = [k for k in range(1, len(order)) if stages[order[k - 1]] != stages[order[k]]]
        if not bounds:
            return None
        k = rng.choice(bounds)
        a, b = order[k - 1], order[k]
        moved, to = (b, stages[a]) if rng.random() < 0.5 else (a, stages[b])
        stages[moved] = to
        if sorted(set(stages.values())) != sorted(set(stage_of.values())):
            return None                                # a stage would be empty
        return kw, stages
    if move < 0.65:                                    # the configuration move
        name = rng.choice(order)
        choices = blocks.of(name, kw["micro_batches"], n // kw["stages"])
        degrees = dict(kw.get("degrees") or {})
        if not choices or choices == [degrees.get(name)]:
            return None
        pick = rng.choice([d for d in choices if d != degrees.get(name)])
        kw["degrees"] = {**degrees, name: pick}
        return kw, stages
    if move < 0.8:
        m = kw["micro_batches"] * 2 if rng.random() < 0.5 else kw["micro_batches"] // 2
        if m < 1 or batch % m or (kw["schedule"] == "interleaved" and m % kw["stages"]):
            return None
        kw["micro_batches"] = m
        kw["degrees"] = blocks.kept(kw.get("degrees") or {}, m, n // kw["stages"])
        return kw, stages
    if move < 0.9:
        kw["schedule"], kw["chunks"] = rng.choice(schedules)
        if kw["schedule"] == "interleaved" and (kw["micro_batches"] % kw["stages"] or 2 * kw["stages"] > ops):
            return None
        return kw, None if kw["chunks"] != kwargs["chunks"] else stages
    p = rng.choice([d for d in divisors(n) if 2 <= d <= ops])
    if batch % kw["micro_batches"] or (kw["schedule"] == "interleaved" and
                                       (kw["micro_batches"] % p or 2 * p > ops)):
        return None
    kw["stages"] = p
    kw["degrees"] = blocks.kept(kw.get("degrees") or {}, kw["micro_batches"], n // p)
    return kw, None                                    # stages cut again (flexrt.strategy.stage_cuts)


def pipeline_mcmc(pcg: PCG, machine: Machine, cost_model, budget: int = 200, seed: int = 0, alpha: float = 1.05,
                  optimizer: OptimizerKind = OptimizerKind.SGD, space: Optional[SearchSpace] = None,
                  progress: Optional[bool] = None, pipeline_schedules=FLUSHED) -> SearchResult:
    """Metropolis-Hastings over pipelined strategies (module doc), from the best of
    ``pipeline_candidates``' balanced starting points with 1F1B; ``alpha`` per percent of the
    data-parallel time, as ``mcmc``. ``space`` (default: the sample axis, FlexFlow's flags) is what
    the configuration move may split within a block; ``pipeline_schedules`` those the schedule move
    draws from (default the flushed ones)."""
    from flexrt.search.mcmc import accept
    schedules = _with_chunks(checked_schedules(pipeline_schedules))
    t0 = time.perf_counter()
    rng = random.Random(seed)
    sim = Simulator(machine, cost_model, optimizer, detail=False, incremental=False)
    log = SearchLog("pipeline", budget, seed)
    blocks = BlockDegrees(pcg, machine, space or SearchSpace())
    first = "1f1b" if ("1f1b", 1) in schedules else schedules[0][0]
    starts = [kw for _, kw in pipeline_candidates(pcg, machine, (first,))]
    if not starts:
        raise StrategyError(_no_pipeline(pcg, machine))
    scale = _time(sim, data_parallel(pcg, machine)) / 100.0           # one percent of data parallelism
    scored = sorted(((_time(sim, pipeline_strategy(pcg, machine, cost_model=cost_model, **kw)), i)
                     for i, kw in enumerate(starts)))
    kwargs = starts[scored[0][1]]
    current = pipeline_strategy(pcg, machine, cost_model=cost_model, **kwargs)
    cur_t = best_t = scored[0][0]
    best, best_kwargs = current, kwargs
    order = wiring_of(pcg).ops
    ops, batch = len(order), batch_of(pcg)
    bar = Progress(progress_default() if progress is None else progress, budget, "pipeline MCMC")
    log.record(0, t0, cur_t, best_t)
    try:
        for it in range(1, budget + 1):
            log.proposals += 1
            try:        # a proposal the model cannot take (micro-batches, splits) is no move
                prop = _propose(rng, kwargs, dict(current.pipeline.stage_of), order, batch, machine.num_devices, ops,
                                blocks, schedules)
                cand = None if prop is None else pipeline_strategy(pcg, machine, stage_of=prop[1],
                                                                   cost_model=cost_model, **prop[0])
            except (StrategyError, ShapeError):
                prop = cand = None
            if cand is not None:
                t = _time(sim, cand)
                if accept((t - cur_t) / scale, alpha, rng):
                    kwargs, current, cur_t = prop[0], cand, t
                    log.accepted += 1
                    if t < best_t:
                        best, best_t, best_kwargs = cand, t, kwargs
            log.record(it, t0, cur_t, best_t)
            bar.update(it, best_t, log.acceptance_rate)
    except KeyboardInterrupt:
        log.interrupted = True
    finally:
        bar.close()
    log.stop_reason = "interrupted" if log.interrupted else "budget spent"
    log.notes["chosen"] = best.pipeline.describe()
    log.notes["operator_degrees"] = {name: {a: d for a, d in degrees.items() if d > 1}
                                     for name, degrees in (best_kwargs.get("degrees") or {}).items()}
    return SearchResult(best, best_t, log)


register_algorithm("pipeline", pipeline_mcmc)
