"""Simulator accuracy over MPI ranks: measured vs simulated iteration time at 1, 2 and 4 ranks.

``bench_sim_accuracy.py`` checks the simulator against one process's runs. This extends the check
to flexrt's SPMD runtime (``flexrt.runtime.spmd``): under ``mpiexec -n R`` every rank owns the
devices of one node of the simulated machine and the transfers between ranks are MPI messages.
For each ``R`` in ``--ranks`` (default 1, 2, 4) the driver

1. calibrates this host under ``mpiexec -n R`` (R=1: a plain process): ``flexrt calibrate --quick --devices D --output
   TMP/local-rR.yaml`` (MPI point-to-point latency and bandwidth become the links between nodes;
   ``D = --devices / R`` workers per rank, so every R runs the same total number of workers, each
   1/``--devices`` of the host), into a private temporary folder, never the user's cache;
2. runs ``mpiexec -n R python bench/bench_sim_accuracy_mpi.py --worker ...`` on
   ``load_machine(TMP/local-rR.yaml, nodes=R)``: the models and strategies of
   ``bench_sim_accuracy.py`` (its builders, reused), costs from ``ProfiledCostModel(backend="numpy")``
   with its cache in the temporary folder (rank 0 profiles while the others sleep, then every rank
   reads the same cache, so all ranks lower the same plan; the cache is shared across R, so a kernel
   costs the same at every R), warm-up 1 then the median of ``--repeat`` ``Session.step``\\ s
   (the step's wall time is the maximum over ranks); R=1 runs as a plain process.

Rank 0 prints per strategy: tasks, the simulated makespan ``sim_ms``, the simulated per-rank sum
``rank_ms`` (the maximum over ranks of the summed durations of the rank's tasks: compute tasks on
its devices, transfers and ring steps whose ends all lie on the rank; messages between ranks are left
out, they run beside the compute. One serial worker per rank runs exactly its tasks one after the
other, so this is its fair prediction; ``sim_ms`` lets a rank's devices run at once, which one
serial loop cannot, so it is optimistic where a rank has several busy devices), the measured time and
the relative errors ``(measured - predicted) / measured`` against both; then per R the median and max
|error| and Kendall's tau of the measured vs predicted rankings, against sim, rank and
``max(sim, rank)``; the driver ends with one line per R.

Oversubscription: on a host with fewer CPUs than ranks (e.g. R=4 on 2 CPUs) the ranks share cores,
and MPICH's ranks spin while they wait for messages; the simulator assumes every rank has its own
core, so measured times there include CPU contention it does not model (the output says so).

BLAS threads (unless set in the environment): at R=1, calibration and runs use one per kernel (as
``bench_sim_accuracy.py``); under ``mpiexec`` the package divides the host's cores among the ranks
on it (``flexrt/__init__``; the worker imports ``flexrt`` before NumPy so that this takes effect).

``--quick`` (3 models x 8 strategies per R) takes about 40 s on a busy 2-CPU host.

    python bench/bench_sim_accuracy_mpi.py [--quick] [--ranks 1,2,4] [--devices 4] [--repeat 3]
"""

from __future__ import annotations

import os
import sys

_LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")
_BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_SET_HERE = [v for v in _BLAS_VARS if v not in os.environ]  # set below, not by the user: dropped for R > 1
if __name__ == "__main__" and not any(v in os.environ for v in _LAUNCHER_VARS):
    for _v in _BLAS_VARS:  # one BLAS thread per kernel, as bench_sim_accuracy.py (before NumPy loads)
        os.environ.setdefault(_v, "1")

import argparse
import importlib.util
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import flexrt  # noqa: F401  (before NumPy: under mpiexec it sets the ranks' BLAS threads, read when NumPy loads)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_sim_accuracy as bsa  # models, strategies, timing, Kendall's tau
from flexrt.simulator.actions import Move, RingStep
from flexrt.simulator.cost_model import ProfiledCostModel
from flexrt.simulator.simulate import Simulator

from flexrt.machine import load_machine
from flexrt.runtime import mpi
from flexrt.runtime.session import Session

QUICK_MODELS = "mlp,cnn,dlrm"


# ---- predictions -------------------------------------------------------------------------------

def rank_sums(session: Session, ranks: int) -> list[float]:
    """Per rank, the summed simulated durations of the tasks that rank's serial loop runs itself:
    compute tasks on its devices, and every hop of a transfer or ring whose ends all lie on it.
    Transfers and rings between ranks are MPI messages (they overlap the compute) and count for none."""
    graph = session.simulator.graph
    d = graph.num_compute_devices
    owner = session.layout.owner if session.layout is not None else (0,) * d
    ends: dict[int, set] = {}  # transfer id -> the ranks it touches
    for t in graph.tasks.values():
        a = t.action
        if isinstance(a, Move):
            ends[t.transfer] = {owner[a.src_device], owner[a.dst.device]}
        elif isinstance(a, RingStep):
            ends[t.transfer] = {owner[b.device] for b in a.group.buffers}
    sums = [0.0] * ranks
    for t in graph.tasks.values():
        if 0 <= t.device < d:
            sums[owner[t.device]] += t.exe_s
        else:
            e = ends.get(t.transfer)
            if e is not None and len(e) == 1:
                sums[next(iter(e))] += t.exe_s
    return sums


def error_summary(rows, key: str) -> tuple[float, float, float]:
    """(median |err|, max |err|, Kendall tau) of measured vs ``key``."""
    meas = [r["measured"] for r in rows]
    pred = [r[key] for r in rows]
    errs = [abs(m - p) / m for m, p in zip(meas, pred)]
    return statistics.median(errs), max(errs), bsa.tau(meas, pred)[0]


# ---- the worker (every rank) -------------------------------------------------------------------

def _sleep_barrier(comm) -> None:
    """A barrier that sleeps while it waits (MPICH's Barrier spins, stealing the CPU from the rank
    still working on a small host)."""
    if comm is None:
        return
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.005)


def worker(args) -> int:
    comm = mpi.world()
    size = comm.Get_size() if comm is not None else 1
    rank = comm.Get_rank() if comm is not None else 0
    if size != args.ranks:
        raise SystemExit(f"worker: expected {args.ranks} MPI ranks, found {size}")
    root = rank == 0
    machine = load_machine(args.machine, nodes=size)
    names = args.models.split(",")
    seeds = range(args.seeds)
    todo = []  # (model, label, batch, strategy): identical on every rank (deterministic builders)
    for name in names:
        build, batch = bsa.MODELS[name]
        base = build(batch)
        for label, strategy in bsa.strategies(base, machine, seeds):
            todo.append((name, label, batch, strategy))
    t0 = time.perf_counter()
    if root:  # profile every piece once, alone, so that every rank reads the same costs
        cost = ProfiledCostModel(backend="numpy", cache_path=args.profile_cache)
        for *_, strategy in todo:
            Simulator(machine, cost, "sgd").full(strategy)
        cost.flush()
        measured_now = cost.measurements
    _sleep_barrier(comm)
    if not root:
        cost = ProfiledCostModel(backend="numpy", cache_path=args.profile_cache)
    cpus = os.cpu_count() or 1
    blas = ", ".join(f"{v}={os.environ[v]}" for v in _BLAS_VARS if os.environ.get(v)) or "BLAS threads unset (all cores)"
    if root:
        how = f"mpiexec -n {size}" if comm is not None else "one process (no MPI)"
        print(f"== R={size}: {how}; machine {args.machine} with nodes={size}: {machine.num_nodes} node(s) x "
              f"{machine.devices_per_node} workers = {machine.num_devices} workers; {cpus} CPUs; {blas}")
        print(f"   profiled {measured_now} new kernel shapes in {time.perf_counter() - t0:.1f} s "
              f"(cache {args.profile_cache})")
        if size > cpus:
            print(f"   OVERSUBSCRIBED: {size} ranks on {cpus} CPUs; ranks share cores and spin while waiting for "
                  f"messages, which the simulator (one core per rank) does not model")
        print(f"   {'model':<6}{'strategy':<15}{'tasks':>6}{'dev':>4}{'sim_ms':>9}{'rank_ms':>9}{'meas_ms':>10}"
              f"{'err_sim':>9}{'err_rank':>9}", flush=True)
    rows = []
    for name, label, batch, strategy in todo:
        session = Session(strategy, machine, cost_model=cost, mode="serial", optimizer="sgd", lr=0.01)
        plan = session.plan
        inputs, labels = bsa.batch_for(plan, batch)
        measured, _ = bsa.timed_steps(session, inputs, labels, args.repeat)
        sums = rank_sums(session, size)
        row = {"ranks": size, "model": name, "strategy": label, "tasks": plan.num_tasks,
               "devices": len({t.device for t in plan.tasks if 0 <= t.device < plan.num_compute_devices}),
               "sim": session.predicted_time_s, "rank": max(sums), "rank_sums": sums, "measured": measured}
        row["bound"] = max(row["sim"], row["rank"])
        rows.append(row)
        if root:
            print(f"   {name:<6}{label:<15}{row['tasks']:>6}{row['devices']:>4}{row['sim'] * 1e3:>9.2f}"
                  f"{row['rank'] * 1e3:>9.2f}{measured * 1e3:>10.2f}{(measured - row['sim']) / measured:>+9.0%}"
                  f"{(measured - row['rank']) / measured:>+9.0%}", flush=True)
    if not root:
        return 0
    print(f"   summary R={size}, {len(rows)} strategies; err = (measured - predicted) / measured")
    for key, what in (("sim", "simulated makespan"), ("rank", "per-rank sum"), ("bound", "max(makespan, sum)")):
        med, mx, t = error_summary(rows, key)
        slower = sum(r["measured"] > r[key] for r in rows)
        print(f"     vs {what:<19}: median |err| {med:6.1%}, max |err| {mx:7.1%}, Kendall tau {t:+.2f}; "
              f"measured slower for {slower}/{len(rows)}")
    by_model: dict = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    print("     Kendall tau within each model (sim / rank): " + ", ".join(
        f"{m} {bsa.tau([r['measured'] for r in rs], [r['sim'] for r in rs])[0]:+.2f} / "
        f"{bsa.tau([r['measured'] for r in rs], [r['rank'] for r in rs])[0]:+.2f}" for m, rs in by_model.items()))
    print(f"     load average {os.getloadavg()[0]:.2f}; {time.perf_counter() - t0:.1f} s", flush=True)
    if args.rows:
        Path(args.rows).write_text(json.dumps(rows), encoding="utf-8")
    return 0


# ---- the driver --------------------------------------------------------------------------------

def _launch(ranks: int, cmd: list[str], env: dict, timeout: float, echo: bool) -> str:
    return mpi.launch(ranks, cmd, env, timeout, echo)


def driver(args) -> int:
    ranks = [int(r) for r in args.ranks.split(",")]
    if any(r > 1 for r in ranks) and (mpi.find_mpiexec() is None or importlib.util.find_spec("mpi4py") is None):
        print("skipping R > 1: no mpiexec or mpi4py here (pip install -e \".[mpi]\")")
        ranks = [r for r in ranks if r == 1]
    models = args.models or (QUICK_MODELS if args.quick else ",".join(bsa.MODELS))
    unknown = [m for m in models.split(",") if m not in bsa.MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; valid: {', '.join(bsa.MODELS)}")
    repeat = args.repeat or 3
    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 4)
    cpus = os.cpu_count() or 1
    t_start = time.perf_counter()
    print(f"simulator accuracy over MPI ranks: R = {', '.join(map(str, ranks))}; {args.devices} workers in all "
          f"(devices/R per rank); models {models}; {seeds} random strategies each; warm-up 1 + median of {repeat}; "
          f"host {cpus} CPUs")
    over = [r for r in ranks if r > cpus]
    if over:
        print(f"note: R={', '.join(map(str, over))} oversubscribes this host's {cpus} CPUs (several ranks per core): "
              f"those measurements include CPU contention the simulator does not model")
    results = {}
    with tempfile.TemporaryDirectory(prefix="flexrt-bench-mpi-") as tmp:
        scratch = Path(tmp)
        env = dict(os.environ)
        env["FLEXRT_CACHE_DIR"] = str(scratch / "cache")  # nothing of the user's cache is read or written
        for v in _LAUNCHER_VARS:
            env.pop(v, None)
        for r in ranks:
            if args.devices % r:
                print(f"skipping R={r}: {args.devices} workers do not split among {r} ranks")
                continue
            per_rank = args.devices // r
            yaml = scratch / f"local-r{r}.yaml"
            env_r = dict(env)
            if r > 1:  # the package shares the cores among the ranks; one process: one BLAS thread (as the worker)
                for v in _SET_HERE:
                    env_r.pop(v, None)
            t0 = time.perf_counter()
            _launch(r, mpi.flexrt_command() + ["calibrate", "--quick", "--devices", str(per_rank), "--output", str(yaml)],
                    env_r, args.timeout, echo=False)
            head = " ".join(ln.lstrip("# ").strip() for ln in yaml.read_text().splitlines() if ln.startswith("#"))
            between = head[head.find("nic and network"):head.find(" Host:")]
            text = yaml.read_text()
            f32 = re.search(r"float32: ([0-9.eE+-]+)", text)
            bw = re.search(r"memory_bandwidth: ([0-9.eE+-]+)", text)
            print(f"\ncalibrated R={r} ({time.perf_counter() - t0:.1f} s): {per_rank} workers per rank, each "
                  f"{float(f32.group(1)) * 1e3:.3g} GFLOP/s float32, {float(bw.group(1)):.3g} GB/s memory; {between}")
            out = scratch / f"rows-r{r}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--machine", str(yaml),
                   "--ranks", str(r), "--models", models, "--seeds", str(seeds), "--repeat", str(repeat),
                   "--profile-cache", str(scratch / "profile.json"), "--rows", str(out)]
            _launch(r, cmd, env_r, args.timeout, echo=True)
            results[r] = json.loads(out.read_text())
    print("\nsummary (err = (measured - predicted) / measured; sim: simulated makespan; rank: max over ranks of the "
          "rank's summed task times)")
    print(f"  {'R':>2}{'n':>4}{'sim med':>9}{'sim max':>9}{'sim tau':>9}{'rank med':>10}{'rank max':>10}"
          f"{'rank tau':>10}{'bound tau':>11}")
    for r, rows in results.items():
        s, k, b = error_summary(rows, "sim"), error_summary(rows, "rank"), error_summary(rows, "bound")
        print(f"  {r:>2}{len(rows):>4}{s[0]:>9.0%}{s[1]:>9.0%}{s[2]:>+9.2f}{k[0]:>10.0%}{k[1]:>10.0%}{k[2]:>+10.2f}"
              f"{b[2]:>+11.2f}{'  (oversubscribed)' if r > cpus else ''}")
    print(f"  total {time.perf_counter() - t_start:.1f} s")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"models {QUICK_MODELS}, 2 random strategies each")
    p.add_argument("--ranks", default="1,2,4", help="comma-separated world sizes (default 1,2,4)")
    p.add_argument("--devices", type=int, default=bsa.LOCAL_DEVICES,
                   help=f"workers in all, split evenly among the ranks (default {bsa.LOCAL_DEVICES})")
    p.add_argument("--models", default=None, help=f"comma-separated, of {','.join(bsa.MODELS)}")
    p.add_argument("--seeds", type=int, default=None, help="random strategies per model (default 2 quick, else 4)")
    p.add_argument("--repeat", type=int, default=None, help="timed iterations per strategy (median; default 3)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launched command")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--machine", help=argparse.SUPPRESS)
    p.add_argument("--profile-cache", help=argparse.SUPPRESS)
    p.add_argument("--rows", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        args.ranks = int(args.ranks)
        return worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
