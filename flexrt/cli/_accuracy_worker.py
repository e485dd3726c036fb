"""The ranks' part of ``flexrt accuracy`` (``flexrt.cli._accuracy``): every rank builds the same models
and strategies, runs them (one device per rank) and harvests the same measured times; rank 0
writes the results.

Entry point: ``worker``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from flexrt.errors import ConfigError
from flexrt.runtime import mpi

WARMUP = 3     # untimed iterations first: the first ones allocate, fault pages in and fill caches


def _todo(models, machine, seeds: int, calibration: int):
    from flexrt.model.accuracy import MODELS, calibration_strategies, validation_strategies
    cal, val = [], []
    for name in models:
        build, batch = MODELS[name]
        base = build(batch)
        cal += [(name, label, batch, s) for label, s in calibration_strategies(base, machine, calibration)]
        val += [(name, label, batch, s) for label, s in validation_strategies(base, machine, range(seeds))]
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


def _session(strategy, machine, cost):
    from flexrt.runtime.session import Session
    return Session(strategy, machine, cost_model=cost, mode="serial", optimizer="sgd", lr=0.01)


def worker(args, models) -> int:
    from flexrt.machine import load_machine
    from flexrt.model.accuracy import batch_for, kind_sums, side_by_side, timed_steps
    from flexrt.simulator.measured_costs import MeasuredCostModel, MeasuredTimes, harvest
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
    cal, val = _todo(models, machine, args.seeds, args.calibration)
    t0 = time.perf_counter()
    profiled = _profiled(comm, out, machine, [x[3] for x in cal + val])
    if root:
        print(f"{size} processes (rank 0 on core {core}); {len(cal)} calibration and {len(val)} validation strategies; "
              f"kernels profiled in {time.perf_counter() - t0:.1f} s", flush=True)
    times = MeasuredTimes("numpy")
    walls = []
    for name, label, batch, strategy in cal:
        session = _session(strategy, machine, profiled)
        inputs, labels = batch_for(session.plan, batch)
        wall, results = timed_steps(session, inputs, labels, args.repeat, WARMUP)
        for r in results:
            harvest(times, session.simulator, session.plan.tasks, r.end - r.start, session.optimizer)
        times.strategies.append(f"{name}/{label}")
        walls.append((strategy, wall))
    times.fit(profiled, machine)
    times.fit_dispatch(profiled, machine, walls)
    if root:
        times.save(out / "measured_times.json")
        print(f"calibrated: {len(times)} task keys from {len(cal)} strategies; per kind, measured ~ a x^b of "
              f"profiled x: " + ", ".join(f"{k} {a:.3g} x^{b:.2f}" for k, (a, b) in times.fits.items()
                                         if ":" not in k) + f"; runtime per compute task {times.dispatch_s * 1e6:.1f} us",
              flush=True)
        (out / "traces").mkdir(exist_ok=True)
        print(f"{'model':<12}{'strategy':<14}{'tasks':>6}{'measured':>10}{'predicted':>10}{'err':>7}{'profiled':>10}"
              f"{'err':>7}", flush=True)
    rows = []
    for name, label, batch, strategy in val:
        before = Simulator(machine, profiled, "sgd").time_full(strategy)
        cost = MeasuredCostModel(profiled, times)
        session = _session(strategy, machine, cost)
        inputs, labels = batch_for(session.plan, batch)
        measured, results = timed_steps(session, inputs, labels, args.repeat, WARMUP)
        mid = results[(len(results) - 1) // 2]
        row = {"model": name, "strategy": label, "tasks": session.plan.num_tasks, "measured_s": measured,
               "predicted_s": session.predicted_time_s, "profiled_s": before, "hits": cost.hits,
               "misses": cost.misses, "kinds": kind_sums(session.plan, mid.end - mid.start),
               "memory": {str(d): v for d, v in session.memory_report(mid).items()}}
        rows.append(row)
        if root:
            trace = side_by_side(session.chrome_trace(mid), session.simulator.chrome_trace(session.predicted))
            (out / "traces" / f"{name}-{label}.json").write_text(json.dumps(trace))
            print(f"{name:<12}{label:<14}{row['tasks']:>6}{measured * 1e3:>10.2f}{row['predicted_s'] * 1e3:>10.2f}"
                  f"{(row['predicted_s'] - measured) / measured:>+7.0%}{before * 1e3:>10.2f}"
                  f"{(before - measured) / measured:>+7.0%}", flush=True)
    if root:
        meta = {"ranks": size, "models": models, "machine": str(args.machine), "repeat": args.repeat,
                "calibration": list(times.strategies), "validation": [f"{r['model']}/{r['strategy']}" for r in rows],
                "fits": times.fits, "dispatch_s": times.dispatch_s, "load_before": load_before, "load_after": os.getloadavg()[0],
                "cpus": os.cpu_count(), "worker_s": time.perf_counter() - t0}
        (out / "accuracy.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0
