"""The ranks' part of ``flexrt accuracy`` (``flexrt.cli._accuracy``): every rank builds the same models
and strategies, runs them (one device per rank) and harvests the same measured times; rank 0
writes the results.

Entry point: ``worker``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from flexrt.errors import ConfigError
from flexrt.runtime import mpi

WARMUP = 3     # untimed iterations first: the first ones allocate, fault pages in and fill caches
ROUNDS = 5     # sessions per strategy, interleaved across strategies, the timed iterations shared among them


def _todo(models, machine, seeds: int, calibration: int, pipelines: bool = False):
    from flexrt.model.accuracy import MODELS, calibration_strategies, validation_strategies
    cal, val = [], []
    for name in models:
        build, batch = MODELS[name]
        base = build(batch)
        cal += [(name, label, batch, s) for label, s in calibration_strategies(base, machine, calibration, pipelines)]
        val += [(name, label, batch, s) for label, s in validation_strategies(base, machine, range(seeds), pipelines)]
    return cal, val


def _profiled(comm, out: Path, machine, strategies):
    """The kernel-profiled cost model, every piece measured by rank 0 alone (the others sleep), so
    that every rank reads the same costs and lowers the same plans."""
    from flexrt.simulator.cost_model import ProfiledCostModel
    from flexrt.simulator.simulate import Simulator
    path = out / "profile.json"
    if comm is None or comm.Get_rank() == 0:
        cost = ProfiledCostModel(backend="numpy", cache_path=path)
        for s in strategies:
            Simulator(machine, cost, "sgd").full(s)
        cost.flush()
    if comm is not None:
        mpi.comm_wait(comm)
        if comm.Get_rank() != 0:
            cost = ProfiledCostModel(backend="numpy", cache_path=path)
    return cost


def _fusion_wrapper(choice: str):
    """What puts ``--fused-cost`` on a measured cost model: ``learned[:PATH]`` (DisCo's learned model,
    loaded once, over the members' measured times), ``profiled`` (the real fused kernel's ratio to
    its members, profiled: the measured model's own) or ``analytic`` (the members' measured times x
    the analytic fused / unfused ratio)."""
    from flexrt.simulator.cost_model import ScaledFusion
    kind = choice.partition(":")[0]
    if kind == "profiled":
        return lambda measured: measured
    if kind == "analytic":
        return ScaledFusion
    from flexrt.cli._common import learned_model_path
    from flexrt.simulator.fused_model import LearnedCostModel, LearnedFusedModel
    model = LearnedFusedModel.load(learned_model_path(choice))
    return lambda measured: LearnedCostModel(measured, model)


def _fusion_plans(comm, val: list, machine, cost, budget: int) -> list:
    """Per model, DisCo's search (``flexrt.search.disco``, seed 0, ``budget`` candidates) from its
    data-parallel validation strategy, scored by ``cost``: validation items of the strategies found,
    each with what the search said (its groups, buckets, seconds and simulated times). Rank 0
    searches; every rank gets its result."""
    from flexrt.search import SearchRequest, search
    found = []
    if comm is None or comm.Get_rank() == 0:
        for name, label, batch, strategy in val:
            if label != f"data{machine.num_devices}":
                continue
            t0 = time.perf_counter()
            r = search("disco", SearchRequest(strategy.pcg, machine, cost, budget=budget, seed=0, initial=(strategy,),
                                              progress=False))
            plan = r.strategy.fusion
            info = {"groups": len(plan.groups) if plan else 0, "buckets": len(plan.buckets) if plan else 0,
                    "fused_ops": sum(len(g.ops) for g in plan.groups) if plan else 0,
                    "search_s": time.perf_counter() - t0, "candidates": r.log.proposals,
                    "simulated_unfused_s": r.log.notes.get("initial_cost_s"), "simulated_fused_s": r.cost_s}
            found.append(((name, f"{label}+disco", batch, r.strategy), info))
    return comm.bcast(found, root=0) if comm is not None else found


def _session(strategy, machine, cost):
    from flexrt.runtime.session import Session
    return Session(strategy, machine, cost_model=cost, mode="serial", optimizer="sgd", lr=0.01)


def _measure(items: list, machine, costs: list, repeat: int, rounds: int = ROUNDS):
    """Per (model, label, batch, strategy) item: (item, its last session, its timed iterations sorted
    by wall time), yielded in the last round, in item order. ``costs[i]`` is the cost model of item
    i's sessions (the simulated order its devices run their tasks in).

    The ``repeat`` timed iterations of an item are shared among ``rounds`` sessions, and the rounds
    are interleaved: round r runs one session of every item before round r+1 starts. A slow spell
    of a shared host then lands on every strategy alike instead of on whichever ran during it
    (measured over three runs of 35 strategies run one after the other: the same strategy's median
    varied up to 47 %, e.g. a CNN's data parallel at 6.8, 5.7 and 8.3 ms). Each session runs
    ``WARMUP`` untimed iterations, then its share back to back, and is dropped before the next is
    built (holding many at once slows the one that runs: measured 3.1 -> 5.3 ms for an MLP; and one
    session's iterations can run 2x slower than another's of the same strategy, measured 9.9 and
    18.9 ms for one CNN strategy: their buffers land elsewhere, their messages are noticed at other
    times)."""
    from flexrt.model.accuracy import batch_for
    shares = [s for s in (repeat // rounds + (1 if k < repeat % rounds else 0) for k in range(rounds)) if s]
    results: list[list] = [[] for _ in items]
    for r, share in enumerate(shares):
        last = r == len(shares) - 1
        for i, item in enumerate(items):
            session = _session(item[3], machine, costs[i])
            inputs, labels = batch_for(session.plan, item[2])
            for _ in range(WARMUP):
                session.step(inputs, labels)
            results[i] += [session.step(inputs, labels) for _ in range(share)]
            if last:
                yield item, session, sorted(results[i], key=lambda x: x.wall_s)


def _calibrate(measured, profiled, machine):
    """(``MeasuredTimes`` harvested from the calibration runs ``measured`` (item, session, results)
    and fitted, [(strategy, median wall seconds)])."""
    from flexrt.simulator.measured_costs import MeasuredTimes, harvest
    times = MeasuredTimes("numpy")
    walls = []
    for (name, label, _, strategy), session, results in measured:
        for r in results:
            harvest(times, session.simulator, session.plan.tasks, r.end - r.start, session.optimizer)
        times.strategies.append(f"{name}/{label}")
        walls.append((strategy, statistics.median(r.wall_s for r in results)))
    times.fit(profiled, machine)
    times.fit_overheads(profiled, machine, walls)
    return times, walls


def _drift(first: list, again: list) -> float:
    """How much slower (> 0) the calibration strategies ran in the validation rounds than in their
    own: the median ratio of their walls, less 1."""
    return statistics.median(b / a for (_, a), (_, b) in zip(first, again)) - 1.0


def _print_calibration(times, strategies: int, drift: float) -> None:
    from flexrt.simulator.measured_costs import overheads_text
    print(f"the calibration strategies ran again in the validation rounds, {drift:+.1%} (median) against their "
          f"first rounds; the predictions use those times", flush=True)
    fits = ", ".join(f"{k} {a * 1e6:.0f} us + {b:.3g} x^{c:.2f}" for k, (a, b, c) in times.fits.items() if ":" not in k)
    print(f"calibrated: {len(times)} task keys from {strategies} strategies; per kind, measured ~ a + b x^c of the "
          f"profiled x: {fits}; the runtime's own times: {overheads_text(times.overheads())}", flush=True)
    print(f"{'model':<12}{'strategy':<14}{'tasks':>6}{'measured':>10}{'predicted':>10}{'err':>7}{'profiled':>10}"
          f"{'err':>7}", flush=True)


class _Prediction:
    """The simulator's prediction of a strategy by ``cost`` (what a session predicts, without
    building one): its time, task plan and simulator."""

    def __init__(self, strategy, machine, cost):
        from flexrt.runtime.plan import ExecPlan
        from flexrt.simulator.simulate import Simulator
        self.simulator = Simulator(machine, cost, "sgd", incremental=False)
        self.predicted = self.simulator.full(strategy)
        self.predicted_time_s = self.predicted.iteration_time_s
        self.plan = ExecPlan(self.simulator.graph, self.simulator.schedule())


def _row(item, session, pred, results: list, before: float, dispatch_s: float, out) -> dict:
    """One validation strategy's measured times (``session``: the run) and predicted ones (``pred``);
    its trace written and a line printed when ``out`` (the root rank)."""
    from flexrt.model.accuracy import kind_sums, side_by_side
    name, label = item[0], item[1]
    measured = statistics.median(r.wall_s for r in results)
    mid = results[(len(results) - 1) // 2]
    if pred.plan.num_tasks != session.plan.num_tasks:
        raise ConfigError(f"{name}/{label}: the prediction lowered {pred.plan.num_tasks} tasks, the run "
                          f"{session.plan.num_tasks}")
    row = {"model": name, "strategy": label, "tasks": session.plan.num_tasks, "measured_s": measured,
           "predicted_s": pred.predicted_time_s, "profiled_s": before,
           "kinds": kind_sums(pred.plan, mid.end - mid.start, dispatch_s),
           "memory": {str(d): v for d, v in session.memory_report(mid).items()},
           # seconds the tasks spent assembling operands from their parts (in the tasks' times above)
           "assembly_s": float(np.sum(mid.assembly)) if mid.assembly is not None else 0.0}
    if out is not None:
        trace = side_by_side(session.chrome_trace(mid), pred.simulator.chrome_trace(pred.predicted))
        (out / "traces" / f"{name}-{label}.json").write_text(json.dumps(trace))
        print(f"{name:<12}{label:<14}{row['tasks']:>6}{measured * 1e3:>10.2f}{row['predicted_s'] * 1e3:>10.2f}"
              f"{(row['predicted_s'] - measured) / measured:>+7.0%}{before * 1e3:>10.2f}"
              f"{(before - measured) / measured:>+7.0%}", flush=True)
    return row


def worker(args, models) -> int:
    from flexrt.machine import load_machine
    from flexrt.simulator.measured_costs import OVERHEADS, RENDEZVOUS_BYTES, MeasuredCostModel
    from flexrt.simulator.simulate import Simulator
    comm = mpi.world()
    size, rank = (comm.Get_size(), comm.Get_rank()) if comm is not None else (1, 0)
    root = rank == 0
    core = mpi.pin_to_core(rank)
    machine = load_machine(args.machine, nodes=size)
    if machine.num_devices != size:
        raise ConfigError(f"--machine {args.machine} has {machine.devices_per_node} devices per node: one process per "
                          f"device needs one (write it with `mpiexec -n {size} flexrt calibrate --devices 1`)")
    out = Path(args.output)
    load_before = os.getloadavg()[0]
    cal, val = _todo(models, machine, args.seeds, args.calibration, args.pipelines)
    t0 = time.perf_counter()
    profiled = _profiled(comm, out, machine, [x[3] for x in cal + val])
    if root:
        print(f"{size} processes (rank 0 on core {core}); {len(cal)} calibration and {len(val)} validation strategies; "
              f"kernels profiled in {time.perf_counter() - t0:.1f} s", flush=True)
    times, walls = _calibrate(_measure(cal, machine, [profiled] * len(cal), args.repeat), profiled, machine)
    if root:
        (out / "traces").mkdir(exist_ok=True)

    wrap = _fusion_wrapper(args.fused_cost) if args.fusion else (lambda measured: measured)
    cost = wrap(MeasuredCostModel(profiled, times))
    fusion: dict = {}
    if args.fusion:
        plans = _fusion_plans(comm, val, machine, cost, args.fusion_budget)
        val = val + [item for item, _ in plans]
        fusion = {f"{item[0]}/{item[1]}": info for item, info in plans}
        if root:
            print(f"DisCo from data parallelism ({cost.name}): " + "; ".join(
                f"{k}: {v['groups']} groups ({v['fused_ops']} operators), {v['buckets']} buckets, "
                f"{v['simulated_unfused_s'] * 1e3:.2f} -> {v['simulated_fused_s'] * 1e3:.2f} ms simulated, "
                f"{v['candidates']} candidates in {v['search_s']:.1f} s" for k, v in fusion.items()), flush=True)
    # The validation rounds: every calibration strategy runs again beside the validation ones, its
    # tasks ordered as before, and the prediction uses the times measured then: a host's speed drifts
    # (calibrated apart, whole runs were predicted 14 % fast or 8 % slow on average)
    measured = _measure(cal + val, machine, [profiled] * len(cal) + [cost] * len(val), args.repeat)
    first = walls
    times, walls = _calibrate((next(measured) for _ in cal), profiled, machine)
    cost, drift = wrap(MeasuredCostModel(profiled, times)), _drift(first, walls)
    if root:
        times.save(out / "measured_times.json")
        _print_calibration(times, len(cal), drift)
    rows = [_row(x, session, _Prediction(x[3], machine, cost), results,
                 Simulator(machine, profiled, "sgd").time_full(x[3]), times.dispatch_s, out if root else None)
            for x, session, results in measured]
    for r in rows:
        if f"{r['model']}/{r['strategy']}" in fusion:
            r["fusion"] = fusion[f"{r['model']}/{r['strategy']}"]
    if root:
        meta = {"ranks": size, "models": models, "machine": str(args.machine), "repeat": args.repeat,
                "calibration": list(times.strategies), "validation": [f"{r['model']}/{r['strategy']}" for r in rows],
                "fits": times.fits, **dict(zip(OVERHEADS, times.overheads())), "rendezvous_bytes": RENDEZVOUS_BYTES,
                "hits": cost.hits, "misses": cost.misses, "load_before": load_before,
                "load_after": os.getloadavg()[0], "cpus": os.cpu_count(), "worker_s": time.perf_counter() - t0,
                "fused_cost": cost.name if args.fusion else None, "drift": drift}
        (out / "accuracy.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0
