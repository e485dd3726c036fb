"""Runtime executor: per-task dispatch overhead with empty tasks, and its share of a real iteration.

Legion's runtime costs about 10 us per task; this measures what flexrt's executor costs. A real
plan is built (a data-parallel MLP lowered on ``local`` workers: its forward/backward/update tasks,
ring AllReduce members and transfers), then every task's action is replaced by a no-op and its
buffer reads and writes are dropped (``dataclasses.replace(task, action=None, reads=(), writes=())``;
an action of None does nothing in ``Executor._execute``), so what remains is the dispatch: picking a
ready task, timing it, releasing its successors. Reported per task, median of several iterations,
for the ``serial`` and ``threads`` dispatchers:

- ``loop_us``: the dispatch loop alone (the executor's own ``wall_s``);
- ``run_us``: the whole ``Executor.run`` call (adds per-iteration set-up: input checks, copies of the
  predecessor counts and reader counts, ring member lists).

Then the same plans run for real (``Session.step``, NumPy backend) and the dispatch share of the
iteration is ``no-op run time / real iteration time``. With ``--profile`` (default when serial
dispatch is above ``--limit-us``) the serial no-op loop runs under cProfile and the top functions
by own time are printed.

    python bench/bench_runtime_overhead.py [--quick] [--repeat N] [--profile] [--big-layers N]
"""

from __future__ import annotations

import os
import sys

# BLAS threads per kernel (before NumPy loads): 1 unless --blas-threads N (0: leave the environment
# alone). Several executor threads each running a many-threaded BLAS kernel oversubscribe the cores
# (see bench_sim_accuracy.py), which would inflate the real iterations' times, not the dispatch.
_BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
if __name__ == "__main__":
    _given = next((a.split("=", 1)[1] if "=" in a else (sys.argv[i + 2] if i + 2 < len(sys.argv) else None)
                   for i, a in enumerate(sys.argv[1:]) if a.startswith("--blas-threads")), None)
    for _v in _BLAS_VARS:
        if _given is None:
            os.environ.setdefault(_v, "1")
        elif _given != "0":
            os.environ[_v] = _given

import argparse
import copy
import cProfile
import dataclasses
import io
import pstats
import statistics
import threading
import time

import numpy as np

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.machine import local_machine
from flexrt.runtime.executor import MODES, Executor, optimizer_step
from flexrt.runtime.session import Session
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import data_parallel

DEVICES = 8
LEGION_US = 10.0


def mlp(batch: int, width: int, hidden_layers: int, classes: int = 10):
    """An MLP: ``hidden_layers`` dense ReLU layers of ``width``, then a softmax classifier."""
    m = FFModel(FFConfig([]))
    t = m.create_tensor([batch, width], DataType.DT_FLOAT)
    for i in range(hidden_layers):
        t = m.dense(t, width, ActiMode.AC_MODE_RELU, name=f"fc{i}")
    m.softmax(m.dense(t, classes, name="head"), name="sm")
    return m.pcg


def noop_plan(plan):
    """A shallow copy of ``plan`` whose tasks do nothing (same order, same dependencies)."""
    empty = copy.copy(plan)
    empty.tasks = [dataclasses.replace(t, action=None, reads=(), writes=()) for t in plan.tasks]
    return empty


def batch_for(session: Session, batch: int, classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, b in session.plan.inputs.items():
        shape = tuple(hi for _, hi in b.ranges)
        inputs[name] = rng.standard_normal(shape).astype(b.dtype)
    labels = rng.integers(0, classes, size=(batch, 1)).astype(np.int32)
    return inputs, labels


def time_runs(fn, repeat: int):
    """(median loop seconds, median call seconds) of ``fn`` (which returns an IterationResult),
    after one warm-up call."""
    fn()
    loops, calls = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = fn()
        calls.append(time.perf_counter() - t0)
        loops.append(r.wall_s)
    return statistics.median(loops), statistics.median(calls)


def profile_serial(ex: Executor, inputs, labels, top: int) -> str:
    ex.run(inputs, labels)
    prof = cProfile.Profile()
    prof.enable()
    ex.run(inputs, labels)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    lines = out.getvalue().splitlines()
    # keep the header line with the totals and the table
    keep = [ln for ln in lines if "function calls" in ln]
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("ncalls")), None)
    if start is not None:
        keep += lines[start:start + top + 1]
    return "\n".join(keep)


def threads_components(plan, repeat: int) -> list[str]:
    """What the ``threads`` dispatcher pays per iteration besides the serial loop's work, measured
    on this host: starting and joining one thread per device and link, one ``threading.Event`` per
    task, and a wake-up per dependency between two threads."""
    workers = len({t.device for t in plan.tasks})
    dev = [t.device for t in plan.tasks]
    cross = sum(1 for i, ss in enumerate(plan.succ) for j in ss if dev[j] != dev[i])

    def spawn():
        ths = [threading.Thread(target=lambda: None) for _ in range(workers)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()

    def events():
        return [threading.Event() for _ in range(plan.num_tasks)]

    def handoff(n=500):
        a, b = [threading.Event() for _ in range(n)], [threading.Event() for _ in range(n)]

        def other():
            for k in range(n):
                a[k].wait()
                b[k].set()
        th = threading.Thread(target=other)
        th.start()
        t0 = time.perf_counter()
        for k in range(n):
            a[k].set()
            b[k].wait()
        dt = time.perf_counter() - t0
        th.join()
        return dt / (2 * n)

    def med(fn):
        out = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            r = fn()
            out.append(r if isinstance(r, float) else time.perf_counter() - t0)
        return statistics.median(out)

    spawn_s, events_s, hand_s = med(spawn), med(events), med(handoff)
    n = plan.num_tasks
    return [(f"  start + join {workers} threads (one per device and link): {spawn_s * 1e3:8.2f} ms/iteration"
             f" = {spawn_s / n * 1e6:6.2f} us/task"),
            (f"  {n} threading.Event() (one per task, made every iteration): {events_s * 1e3:8.2f} ms/iteration"
             f" = {events_s / n * 1e6:6.2f} us/task"),
            (f"  one Event wake-up between two threads: {hand_s * 1e6:.1f} us; {cross} of "
             f"{sum(map(len, plan.succ))} dependencies cross threads: {cross * hand_s * 1e3:8.2f} ms/iteration"
             f" = {cross * hand_s / n * 1e6:6.2f} us/task (an upper bound: wake-ups overlap)")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats and a smaller large plan")
    p.add_argument("--repeat", type=int, default=None, help="timed iterations per measurement (median)")
    p.add_argument("--big-layers", type=int, default=None,
                   help="hidden layers of the large MLP (8 devices: ~70 tasks per layer)")
    p.add_argument("--profile", action="store_true", help="always cProfile the serial no-op loop")
    p.add_argument("--limit-us", type=float, default=LEGION_US,
                   help="profile automatically when serial dispatch exceeds this (us/task)")
    p.add_argument("--top", type=int, default=14, help="rows of the profile to print")
    p.add_argument("--blas-threads", default=None,
                   help="BLAS threads per kernel (default 1; 0: leave the environment as it is)")
    args = p.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 7)
    big_layers = args.big_layers or (64 if args.quick else 160)

    machine = local_machine(devices=DEVICES)
    cost = AnalyticCostModel()
    batch, width = 64, 64
    cases = [("mlp 2x64, dp8", mlp(batch, width, 2)),
             (f"mlp {big_layers}x64, dp8", mlp(batch, width, big_layers))]
    print(f"executor dispatch overhead: no-op tasks, {DEVICES} local workers, median of {repeat} "
          f"iterations (host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, "
          f"Python {sys.version.split()[0]}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')})")
    print(f"{'plan':<20}{'tasks':>7}{'mode':>9}{'loop_us':>10}{'run_us':>9}{'x Legion':>10}"
          f"{'real_ms':>10}{'noop_ms':>9}{'dispatch':>10}")
    serial_us = {}
    for label, pcg in cases:
        t0 = time.perf_counter()
        sessions = {mode: Session(data_parallel(pcg, machine, DEVICES), machine, cost_model=cost, mode=mode,
                                  optimizer="sgd", lr=0.01) for mode in MODES}
        build_s = time.perf_counter() - t0
        plan = sessions["serial"].plan
        n = plan.num_tasks
        inputs, labels = batch_for(sessions["serial"], batch, 10)
        empty = noop_plan(plan)
        for mode in MODES:
            ex = Executor(empty, sessions[mode].backend, optimizer_step("sgd", lr=0.01),
                          "sparse_categorical_crossentropy", (), mode)
            loop_s, call_s = time_runs(lambda ex=ex: ex.run(inputs, labels), repeat)  # noqa: B023
            _, real_s = time_runs(lambda s=sessions[mode]: s.step(inputs, labels), max(1, repeat // 2 + 1))  # noqa: B023
            loop_us, run_us = loop_s / n * 1e6, call_s / n * 1e6
            if mode == "serial":
                serial_us[label] = (ex, loop_us)
            print(f"{label:<20}{n:>7}{mode:>9}{loop_us:>10.2f}{run_us:>9.2f}{run_us / LEGION_US:>9.1f}x"
                  f"{real_s * 1e3:>10.1f}{call_s * 1e3:>9.1f}{min(call_s / real_s, 1.0):>9.0%}", flush=True)
        print(f"{'':<20}(plan built in {build_s:.2f} s; {sum(t.action is None for t in plan.tasks)} of "
              f"{n} tasks are already no-ops in the real plan)")
    big = cases[-1][0]
    ex, us = serial_us[big]
    print(f"\nthreads dispatcher, its own costs on this host ({big} plan):")
    print("\n".join(threads_components(ex.plan, repeat)))
    print(f"\nserial dispatch: {us:.2f} us/task on the {big} plan (Legion ~{LEGION_US:.0f} us/task)")
    if args.profile or us > args.limit_us:
        print(f"\ncProfile of one serial no-op iteration ({big}; profiling inflates every call):")
        print(profile_serial(ex, *batch_for(sessions["serial"], batch, 10), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
