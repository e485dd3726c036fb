"""Simulator accuracy: measured vs simulated iteration time of real strategies on this host.

FlexFlow (§8.3) checks its simulator against real runs: relative error per strategy and whether the
simulator *ranks* strategies as the runs do. This does the same with flexrt's runtime on the
``local`` machine (this host's CPU as NumPy workers):

- machine: the calibrated ``local`` machine (``flexrt calibrate``'s file in the cache) when there
  is one; otherwise this host is calibrated now (``flexrt.runtime.calibrate.calibrate``, its quick
  sizes with ``--quick``) and the machine file is written to a private temporary file (not the
  cache; ``--save-calibration`` writes the cache file as ``flexrt calibrate`` does);
- compute costs: ``ProfiledCostModel(backend="numpy")``, which times the real NumPy forward kernel
  of every piece shape (cached on disk); backward is derived, updates, reductions and transfers are
  analytic from the machine file;
- models: ``flexrt.model.accuracy.MODELS`` (an MLP, a CNN, a DLRM, a transformer block, an RNN);
- strategies: data parallel over 1, 2 and 4 workers, ``random_strategy`` seeds, and hand-made ones
  (operators placed round-robin one per worker, dense layers split on their output channels,
  sample x output hybrids);
- each strategy's ``Session.step`` runs warm-up 1 then ``--repeat`` timed iterations (median), in
  the executor's ``serial`` and ``threads`` modes.

Per strategy it prints the measured and simulated times and the relative error
``(measured - simulated) / measured``; per mode the median and max |error| and Kendall's tau between
the measured and simulated rankings. ``sum_ms`` is the serialised prediction, the sum of every
predicted task's duration: what the serial executor (one task at a time) should take. ``disp`` is
the executor's own dispatch cost for the plan: the same plan with every action replaced by a
no-op, run serially (see ``bench_runtime_overhead.py``), as a fraction of the measured serial
iteration; a ``*`` marks iterations where it is over half.

BLAS threads: NumPy's BLAS runs with ``--blas-threads`` threads (default 1, set through
``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` before NumPy loads; an explicit
``--blas-threads 0`` leaves the environment alone). One thread per kernel is what a worker of the
``local`` machine is; with every core's BLAS threads per kernel, the threaded executor's workers
oversubscribe the cores, and on a small or busy host OpenBLAS's spinning threads make one
64x512x512 GEMM 5-30x slower than single-threaded (measured on a loaded 2-CPU host). The profiled
costs are measured in this process, into a private profile cache (``--profile-cache`` to choose
one), so that kernel times and runs share the BLAS set-up (the shared cache's key does not record
it).

    python bench/bench_sim_accuracy.py [--quick] [--repeat N] [--models mlp,cnn] [--modes serial]
"""

from __future__ import annotations

import os
import sys


def _blas_threads_from_argv(argv) -> str | None:
    """``--blas-threads N`` from the command line (read before NumPy is imported)."""
    for i, a in enumerate(argv):
        if a == "--blas-threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--blas-threads="):
            return a.split("=", 1)[1]
    return None


_BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
if __name__ == "__main__":
    _given = _blas_threads_from_argv(sys.argv[1:])
    if _given is None:
        for _v in _BLAS_VARS:
            os.environ.setdefault(_v, "1")
    elif _given != "0":
        for _v in _BLAS_VARS:
            os.environ[_v] = _given

import argparse
import copy
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from flexrt.machine import calibrated_local_path, load_machine
from flexrt.model.accuracy import MODELS, batch_for, hand_made, kendall_tau, kind_sums
from flexrt.model.accuracy import timed_steps as _timed_steps
from flexrt.runtime.calibrate import calibrate, write_machine_yaml
from flexrt.runtime.executor import Executor, optimizer_step
from flexrt.runtime.session import Session
from flexrt.simulator.cost_model import ProfiledCostModel
from flexrt.strategy import Strategy, data_parallel, random_strategy

LOCAL_DEVICES = 4
DISPATCH_DOMINATED = 0.5


# ---- models and strategies: flexrt.model.accuracy's (what `flexrt accuracy` runs) ------------------

def strategies(base, machine, seeds) -> list[tuple[str, Strategy]]:
    n = machine.num_devices
    out = [(f"dp{d}", data_parallel(base, machine, d)) for d in (1, 2, 4) if d <= n]
    out += [(f"rand{s}", random_strategy(base, machine, s)) for s in seeds]
    out.append(("roundrobin", hand_made(base, machine, lambda k, node: ({}, k))))
    out.append(("dense-out2", hand_made(base, machine, lambda k, node: (
        {"out": 2} if node.op_type.value == "linear" else {"sample": 2, "dim0": 2}, 0))))
    if n >= 4:
        out.append(("dense-s2xout2", hand_made(base, machine, lambda k, node: (
            {"dim0": 2, "out": 2} if node.op_type.value == "linear" else {"sample": 2, "dim0": 2}, 0))))
    return out


def timed_steps(session: Session, inputs, labels, repeat: int):
    """(median wall seconds, the median iteration's result)."""
    wall, results = _timed_steps(session, inputs, labels, repeat)
    return wall, results[(len(results) - 1) // 2]


def noop_dispatch_s(session: Session, inputs, labels, repeat: int = 3) -> float:
    """The serial executor's own time for this plan with every action a no-op."""
    empty = copy.copy(session.plan)
    empty.tasks = [dataclasses.replace(t, action=None, reads=(), writes=()) for t in session.plan.tasks]
    ex = Executor(empty, session.backend, optimizer_step("sgd", lr=0.01), "sparse_categorical_crossentropy",
                  (), "serial")
    ex.run(inputs, labels)
    return statistics.median(ex.run(inputs, labels).wall_s for _ in range(repeat))


def tau(x, y) -> tuple[float, str]:
    try:
        from scipy.stats import kendalltau
    except ImportError:
        return kendall_tau(x, y), "own"
    return float(kendalltau(x, y).statistic), "scipy"


def local_machine_for_bench(quick: bool, save: bool, scratch: Path):
    """(machine, how it was obtained); a fresh calibration goes to ``scratch`` unless ``save``."""
    path = calibrated_local_path()
    if path.is_file():
        m = load_machine("local")
        return m, f"calibrated local machine from {path} ({m.num_devices} workers)"
    t0 = time.perf_counter()
    result = calibrate(devices=LOCAL_DEVICES, quick=quick)
    if save:
        target = path
    else:
        target = scratch / "local.yaml"
    write_machine_yaml(result, target, LOCAL_DEVICES)
    m = load_machine(target)
    return m, (f"no calibrated local machine in the cache: calibrated this host now "
               f"({'quick, rough' if quick else 'full'}, {time.perf_counter() - t0:.1f} s), "
               f"{LOCAL_DEVICES} workers, written to {target}{'' if save else ' (removed at exit)'}")


def summarize(rows, mode: str, key: str) -> str:
    meas = [r[mode] for r in rows]
    pred = [r[key] for r in rows]
    errs = [abs(m - p) / m for m, p in zip(meas, pred)]
    t, how = tau(meas, pred)
    what = "simulated makespan" if key == "sim" else "serialised prediction"
    return (f"{mode:>8} vs {what:<22}: median |err| {statistics.median(errs):6.1%}, "
            f"max |err| {max(errs):7.1%}, Kendall tau {t:+.2f} ({how}), n={len(rows)}")


def blas_note() -> str:
    vals = {v: os.environ.get(v) for v in _BLAS_VARS if os.environ.get(v)}
    return ", ".join(f"{k}={v}" for k, v in vals.items()) or "BLAS threads as configured (all cores)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 models, 2 random seeds each, repeat 3")
    p.add_argument("--repeat", type=int, default=None, help="timed iterations per strategy and mode (median)")
    p.add_argument("--models", default=None, help=f"comma-separated, of {','.join(MODELS)}")
    p.add_argument("--seeds", type=int, default=None, help="random strategies per model")
    p.add_argument("--modes", default="serial,threads")
    p.add_argument("--blas-threads", default=None,
                   help="BLAS threads per kernel (default 1; 0: leave the environment as it is)")
    p.add_argument("--profile-cache", default=None,
                   help="profiled-cost cache file (default: a fresh private one, measured in this run)")
    p.add_argument("--save-calibration", action="store_true",
                   help="when calibrating, write the cache's local.yaml (as `flexrt calibrate` does)")
    args = p.parse_args(argv)
    names = (args.models or ("mlp,cnn,dlrm" if args.quick else ",".join(MODELS))).split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; valid: {', '.join(MODELS)}")
    bad_modes = [m for m in args.modes.split(",") if m not in ("serial", "threads")]
    if bad_modes:
        p.error(f"unknown mode(s) {', '.join(bad_modes)}; valid: serial, threads")

    with tempfile.TemporaryDirectory(prefix="flexrt-bench-") as scratch:
        return run(args, Path(scratch))


def run(args, scratch: Path) -> int:
    repeat = args.repeat or (3 if args.quick else 5)
    names = (args.models or ("mlp,cnn,dlrm" if args.quick else ",".join(MODELS))).split(",")
    seeds = range(args.seeds if args.seeds is not None else (2 if args.quick else 4))
    modes = args.modes.split(",")
    t_start = time.perf_counter()
    machine, how = local_machine_for_bench(args.quick, args.save_calibration, scratch)
    cpus = os.cpu_count() or 1
    print(f"machine: {how}")
    print(f"host: {cpus} CPUs, load average {os.getloadavg()[0]:.2f}; {blas_note()}")
    print(f"  the simulator runs each of the {machine.num_devices} workers at once at its profiled kernel speed "
          f"(one BLAS thread): a strategy on more workers than CPUs ({cpus}) cannot overlap as simulated")
    cache_path = args.profile_cache or scratch / "profile.json"
    cost = ProfiledCostModel(backend="numpy", cache_path=cache_path)
    print(f"cost model: {cost!r}")
    print("  serial: one task at a time, so its prediction is sum_ms (every predicted task's duration added);"
          "\n  threads: one thread per worker and link, so its prediction is the simulated makespan sim_ms\n")
    print(f"{'model':<6}{'strategy':<15}{'tasks':>6}{'dev':>4}{'sim_ms':>9}{'sum_ms':>9}"
          + "".join(f"{m + '_ms':>11}{'err':>7}" for m in modes) + f"{'disp':>7}")
    rows = []
    for name in names:
        build, batch = MODELS[name]
        base = build(batch)
        for label, strategy in strategies(base, machine, seeds):
            session = Session(strategy, machine, cost_model=cost, mode="serial", optimizer="sgd", lr=0.01)
            plan = session.plan
            inputs, labels = batch_for(plan, batch)
            row = {"model": name, "strategy": label, "tasks": plan.num_tasks,
                   "devices": len({t.device for t in plan.tasks if 0 <= t.device < plan.num_compute_devices}),
                   "sim": session.predicted_time_s,
                   "sum": float(np.sum(plan.predicted_end - plan.predicted_start))}
            for mode in modes:
                session.executor.mode = mode
                row[mode], mid = timed_steps(session, inputs, labels, repeat)
                if mode == "serial":
                    row["kinds"] = kind_sums(plan, mid.end - mid.start)
                    row["serial_mid"] = mid.wall_s
            row["disp"] = noop_dispatch_s(session, inputs, labels)
            rows.append(row)
            line = (f"{name:<6}{label:<15}{row['tasks']:>6}{row['devices']:>4}{row['sim'] * 1e3:>9.2f}"
                    f"{row['sum'] * 1e3:>9.2f}")
            for mode in modes:
                pred = row["sum"] if mode == "serial" else row["sim"]
                line += f"{row[mode] * 1e3:>11.2f}{(row[mode] - pred) / row[mode]:>+7.0%}"
            frac = row["disp"] / row.get("serial", row[modes[0]])
            line += f"{frac:>6.0%}{'*' if frac > DISPATCH_DOMINATED else ' '}"
            print(line, flush=True)
    cost.flush()

    print(f"\nsummary over {len(rows)} strategies ({len(names)} models); err = (measured - predicted) / measured")
    for mode in modes:
        if mode == "serial":
            print("  " + summarize(rows, mode, "sum"))
        print("  " + summarize(rows, mode, "sim"))
    fit = [r for r in rows if r["devices"] <= cpus]
    if "threads" in modes and 1 < len(fit) < len(rows):
        print(f"  on at most {cpus} workers (as many as CPUs):")
        print("  " + summarize(fit, "threads", "sim"))
    for mode in modes:
        key = "sum" if mode == "serial" else "sim"
        slower = sum(r[mode] > r[key] for r in rows)
        print(f"  {mode}: measured slower than predicted for {slower} of {len(rows)} strategies")
    by_model: dict = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    for model, rs in by_model.items():
        ts = ", ".join(f"{mode} {tau([r[mode] for r in rs], [r['sum' if mode == 'serial' else 'sim'] for r in rs])[0]:+.2f}"
                       for mode in modes)
        print(f"  {model}: Kendall tau within the model ({len(rs)} strategies): {ts}")
    if "serial" in modes:
        print("  serial, per task kind, measured / predicted time (summed over the tasks of each model's strategies):")
        kinds = sorted({k for r in rows for k in r["kinds"]})
        print(f"    {'model':<8}" + "".join(f"{k:>11}" for k in kinds) + f"{'gaps':>11}")
        for model, rs in by_model.items():
            cells = ""
            for k in kinds:
                m = sum(r["kinds"].get(k, (0, 0))[0] for r in rs)
                pr = sum(r["kinds"].get(k, (0, 0))[1] for r in rs)
                cells += f"{m / pr:>10.2f}x" if pr > 0 else f"{'-':>11}"
            in_tasks = sum(v[0] for r in rs for v in r["kinds"].values())
            walls = sum(r["serial_mid"] for r in rs)
            print(f"    {model:<8}{cells}{(walls - in_tasks) / walls:>10.0%} ")
        print("    (gaps: the share of the serial iteration spent outside every task's own timing: dispatch, "
              "releases, waiting)")
    ref = "serial" if "serial" in modes else modes[0]
    shares = [r["disp"] / r[ref] for r in rows]
    dominated = [r for r, f in zip(rows, shares) if f > DISPATCH_DOMINATED]
    per_task = statistics.median(r["disp"] / r["tasks"] * 1e6 for r in rows)
    print(f"  executor dispatch (the plan with no-op actions, serial): median {per_task:.1f} us/task, "
          f"a median {statistics.median(shares):.0%} of the {ref} iteration (max {max(shares):.0%}); "
          f"{len(dominated)} of {len(rows)} strategies dispatch-dominated (> {DISPATCH_DOMINATED:.0%})"
          + (": " + ", ".join(f"{r['model']}/{r['strategy']}" for r in dominated) if dominated else ""))
    print(f"  load average now {os.getloadavg()[0]:.2f}; total {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
