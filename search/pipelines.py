"""The search over pipelined strategies (``flexrt.strategy.pipeline``) that Unity's search adds to its
finalists with ``--enable-pipeline`` (Unity §5, Fig. 15a).

The space: ``p`` device blocks (every divisor of the devices from 2 up to the operators), ``m``
micro-batches (``p``, ``2p``, ``4p`` and ``8p`` where they divide the batch), the schedules GPipe, 1F1B
and interleaved 1F1B (2 chunks, where ``m`` is a multiple of ``p``), stages of balanced FLOPs, data
parallel within each block. Every candidate is simulated whole. The objective is the iteration time
of the whole batch, so the throughput (samples/s) is the batch over it. Then the best candidate's
stage boundaries are moved one operator at a time, in either direction, while that makes it faster
(``refine``), so the stages are whatever segments of the graph the simulator says balance best,
communication included.

Entry points: ``pipeline_candidates``, ``refine``, ``best_pipeline``.
"""

from __future__ import annotations

from typing import Optional

from flexrt.errors import StrategyError
from flexrt.ir.parallel_tensor import divisors
from flexrt.ir.pcg import PCG
from flexrt.machine import Machine
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import is_compute
from flexrt.strategy.pipeline import pipeline_strategy

MICRO_BATCH_FACTORS = (1, 2, 4, 8)


def _batch(pcg: PCG) -> int:
    inputs = [n for n in pcg.nodes if n.op_type.value == "input"]
    if not inputs:
        raise StrategyError("pipelines need a model with an input")
    return inputs[0].attrs.shape.dims[0]


def pipeline_candidates(pcg: PCG, machine: Machine) -> list[tuple[str, dict]]:
    """(label, pipeline_strategy keyword arguments) of the space in the module doc."""
    ops = sum(1 for n in pcg.nodes if is_compute(n))
    batch = _batch(pcg)
    out = []
    for p in divisors(machine.num_devices):
        if not 2 <= p <= ops:
            continue
        for m in sorted({p * f for f in MICRO_BATCH_FACTORS}):
            if batch % m:
                continue
            for schedule, chunks in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
                if schedule == "interleaved" and (m % p or p * chunks > ops):
                    continue
                out.append((f"pipeline p={p} m={m} {schedule}" + (f" v={chunks}" if chunks > 1 else ""),
                            {"stages": p, "micro_batches": m, "schedule": schedule, "chunks": chunks}))
    return out


def _time(sim: Simulator, strategy) -> float:
    sim.full(strategy)
    return sim.iteration_time()


def refine(pcg: PCG, machine: Machine, sim: Simulator, kwargs: dict, budget: int) -> tuple[object, float, int]:
    """Hill-climb the stage boundaries of the pipeline ``kwargs`` describes: move the first or last
    operator of a stage to its neighbour while that is faster, at most ``budget`` simulations.
    Returns (strategy, its time, simulations)."""
    best = pipeline_strategy(pcg, machine, **kwargs)
    best_t, tried = _time(sim, best), 0
    order = [n.name for n in (pcg.node(i) for i in pcg.topological_order()) if is_compute(n)]
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


def best_pipeline(pcg: PCG, machine: Machine, cost_model, optimizer, budget: int = 40,
                  log_notes: Optional[dict] = None) -> list[tuple[str, object]]:
    """The best candidate of ``pipeline_candidates`` after ``refine`` (a one-element list of (label,
    strategy), or empty when the model or machine allows no pipeline). ``log_notes`` gets each
    candidate's simulated time and the refinement's simulations."""
    sim = Simulator(machine, cost_model, optimizer, detail=False, incremental=False)
    scored = []
    for label, kwargs in pipeline_candidates(pcg, machine):
        try:
            scored.append((_time(sim, pipeline_strategy(pcg, machine, **kwargs)), label, kwargs))
        except StrategyError:
            continue                            # an operator that cannot run on micro-batches
    if not scored:
        return []
    scored.sort(key=lambda x: x[0])
    _, label, kwargs = scored[0]
    strategy, t, tried = refine(pcg, machine, sim, kwargs, budget)
    if log_notes is not None:
        log_notes["pipeline_candidates_s"] = {lab: c for c, lab, _ in scored}
        log_notes["pipeline_refine_simulations"] = tried
    return [(label + (" (stages refined)" if tried and t < scored[0][0] else ""), strategy)]
