"""Simulator benchmarks (never part of the test run): the path strategy -> task graph -> simulated
time, end to end, measured in one run with ratios beside the absolute figures.

1. Inception-v3, data parallel on 64 devices (``flexflow_p100``, 16 nodes): the end-to-end full
   simulation (strategy, lowering, engine) against the engine alone on the same task graph, tasks
   per second, and the peak resident memory of the whole ``flexrt simulate`` command.
2. MCMC on NMT at 16 devices (``flexflow_p100``, 4 nodes): proposals per second of a whole search.
3. Delta vs full simulation end to end over FlexFlow's Table 5 grid (AlexNet, ResNet-101,
   Inception-v3, RNNTC, RNNLM, NMT on 4 to 64 devices): from data parallelism, random
   single-operator changes as MCMC proposes them, each accepted, after a few untimed ones. Delta:
   the one-operator strategy change (``with_config``) + re-lowering what it touches + Algorithm 2.
   Full: the strategy built from its configurations + lowering everything + Algorithm 1. Both give
   the iteration time only, as a search's scorer asks. FlexFlow reports 2.2-6.9x.
4. FlexFlow's Fig. 11 comparison at 64 devices: one MCMC search per model, run with delta and with
   full simulation of every proposal (the same steps, checked), whole-search wall times.
5. Peak memory along the simulated timeline (``flexrt.simulator.memory``: buffers derived from the
   detailed task graph, then replayed) for ResNet-50 and BERT-large data parallel on 4 devices,
   against the detailed simulation itself (it runs only with detail, never in a search's scorer).

Each timing is the median of ``--repeat`` runs; the host load is printed.

    python bench/bench_simulator.py [--quick] [--proposals N] [--warmup W] [--models a,b] [--devices 4,8] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time


from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search import SearchRequest, search
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import ConfigStrategy, data_parallel, is_compute, random_config

MODELS = {"alexnet": [], "resnet101": [], "inception_v3": [], "rnntc": [], "rnnlm": [], "nmt": []}
PER_DEVICE_BATCH = 64


def _load() -> str:
    return "load average %.2f %.2f %.2f on %d cores" % (*os.getloadavg(), os.cpu_count())


def bench_grid(models, device_counts, proposals, warmup: int = 5, seed=0):
    """Delta vs full, end to end, per model and device count (mean over ``proposals`` proposals,
    after ``warmup`` untimed ones: routes, layouts and piece times cached, as in a running search).
    Both sides pay what a search pays for a score (``Simulator.time_delta`` / ``time_full``: the
    iteration time, no statistics); each proposal's two times must be equal."""
    cost = AnalyticCostModel()
    print(f"{'model':<14}{'devices':>8}{'tasks':>9}{'full_ms':>10}{'delta_ms':>10}{'speedup':>9}")
    rows = []
    for name in models:
        for n in device_counts:
            machine = load_machine("flexflow_p100", nodes=max(1, n // 4))
            base = load_model(name, ["-b", str(PER_DEVICE_BATCH * n)] + MODELS[name]).model.pcg
            rng = random.Random(seed)
            ops = [node for node in base.nodes if is_compute(node)]
            strategy = data_parallel(base, machine)
            sim = Simulator(machine, cost, detail=False)
            sim.time_full(strategy)
            full_s = delta_s = 0.0
            for it in range(warmup + proposals):
                node = rng.choice(ops)
                config = random_config(base, node, machine, rng)
                t0 = time.perf_counter()
                candidate = strategy.with_config(node.id, config)
                t_delta = sim.time_delta(candidate, {node.name})
                t1 = time.perf_counter()
                t_full = Simulator(machine, cost, detail=False).time_full(ConfigStrategy(base, candidate.configs))
                t2 = time.perf_counter()
                if t_full != t_delta:
                    raise AssertionError(f"{name}@{n}: delta {t_delta} != full {t_full}")
                if it >= warmup:
                    delta_s += t1 - t0
                    full_s += t2 - t1
                strategy = candidate  # accept every proposal, as a chain at high temperature would
            tasks = len(sim.lowering.graph)
            rows.append((name, n, tasks, full_s / proposals, delta_s / proposals))
            print(f"{name:<14}{n:>8}{tasks:>9}{full_s / proposals * 1e3:>10.1f}{delta_s / proposals * 1e3:>10.2f}"
                  f"{full_s / delta_s:>8.1f}x", flush=True)
    return rows


def bench_inception_64(repeat: int):
    """End to end vs the engine alone on the same graph, and the command's peak memory."""
    machine = load_machine("flexflow_p100", nodes=16)
    base = load_model("inception_v3", ["-b", str(PER_DEVICE_BATCH * 64)]).model.pcg
    e2e, lower, engine_only = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        strategy = data_parallel(base, machine)
        sim = Simulator(machine, AnalyticCostModel(), detail=False, incremental=False)  # as `flexrt simulate`
        sim.lowering.build(strategy)
        t1 = time.perf_counter()
        sim.lowering.engine.simulate_full()
        t2 = time.perf_counter()
        e2e.append(t2 - t0)
        lower.append(t1 - t0)
        g = sim.lowering.graph
        col = g.columns()
        src, dst = g._edge_arrays()
        t3 = time.perf_counter()
        eng = type(sim.lowering.engine).from_arrays(g.num_devices, col["device"], col["exe"], src, dst,
                                                     col["priority"])
        eng.simulate_full()
        engine_only.append(time.perf_counter() - t3)
        assert eng.makespan() == sim.iteration_time()
    n = len(sim.lowering.graph)
    me, ml, mg = statistics.median(e2e), statistics.median(lower), statistics.median(engine_only)
    print(f"\nInception-v3 data parallel on 64 devices (one-shot build, as `flexrt simulate`): {n} tasks, "
          f"{sim.lowering.graph.core.num_edges} edges; "
          f"simulated iteration {sim.iteration_time() * 1e3:.3f} ms")
    print(f"  end to end {me:.3f} s (strategy + lowering {ml:.3f} s, engine {me - ml:.4f} s): {n / me / 1e6:.2f} M tasks/s")
    print(f"  engine alone on the same graph: built from arrays + Algorithm 1 {mg:.4f} s (end to end / that = "
          f"{me / mg:.1f}x); Algorithm 1 alone {me - ml:.4f} s (end to end / that = {me / (me - ml):.1f}x)")
    # VmHWM: the peak resident set of this process since its exec (ru_maxrss would carry this
    # benchmark's own peak over the fork)
    cmd = [sys.executable, "-c", "from flexrt.cli import main; "
           "rc = main(['simulate', 'inception_v3', '-b', '4096', '--machine', 'flexflow_p100', '--nodes', '16', "
           "'--data-parallel']); print('maxrss_kb', open('/proc/self/status').read().split('VmHWM:')[1].split()[0])"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rss = int(out.split("maxrss_kb")[-1].split()[0]) / 1024
    print(f"  `flexrt simulate inception_v3 -b 4096 --machine flexflow_p100 --nodes 16 --data-parallel`: "
          f"peak resident {rss:.0f} MB")


def bench_mcmc_nmt(budget: int):
    machine = load_machine("flexflow_p100", nodes=4)
    base = load_model("nmt", ["-b", str(PER_DEVICE_BATCH * 16)]).model.pcg
    t0 = time.perf_counter()
    result = search("mcmc", SearchRequest(base, machine, AnalyticCostModel(), budget=budget, seed=0))
    wall = time.perf_counter() - t0
    log = result.log
    print(f"\nMCMC on NMT, 16 devices, budget {budget}: {log.proposals} proposals in {wall:.1f} s = "
          f"{log.proposals / wall:.1f} proposals/s (whole search: initial candidates, chains, restarts); "
          f"best {result.cost_s * 1e3:.3f} ms")


def bench_search_delta_vs_full(models, n: int, budget: int):
    """FlexFlow's Fig. 11 comparison: one MCMC search run twice, scoring every proposal by delta
    simulation and by full simulation (the same trajectory, checked); the ratio is of the whole
    search's wall time. The run kind ``delta_vs_full`` of ``flexrt.experiments`` does it (the
    experiments ``flexflow_table5`` and ``flexflow_fig11`` report it beside the paper's numbers)."""
    from flexrt.experiments import kind
    run = kind("delta_vs_full")
    defaults = {p.name: p.default for p in run.params if not p.required}
    print(f"\nMCMC with delta vs full simulation, {n} devices, budget {budget} (whole search, same trajectory):")
    print(f"{'model':<14}{'full_s':>9}{'delta_s':>9}{'speedup':>9}")
    for name in models:
        m = run.fn({**defaults, "model": name, "devices": n, "budget": budget,
                    "per_device_batch": PER_DEVICE_BATCH}).metrics
        if not m["same_trajectory"]:
            raise AssertionError(f"{name}@{n}: the delta and full searches diverged")
        print(f"{name:<14}{m['full_s']:>9.2f}{m['delta_s']:>9.2f}{m['speedup']:>8.1f}x", flush=True)


def bench_peak_memory(repeat: int):
    """The cost of the per-device peak of live buffers against the detailed simulation it replays."""
    machine = load_machine("dgx1_v100")
    print("\npeak memory replay vs detailed simulation, data parallel on 4 devices (dgx1_v100), batch 64:")
    for name in ("resnet50", "bert_large"):
        strategy = data_parallel(load_model(name, ["-b", "64"]).model.pcg, machine, 4)
        sims, peaks = [], []
        for _ in range(repeat):
            sim = Simulator(machine, AnalyticCostModel(), incremental=False)
            t0 = time.perf_counter()
            sim.time_full(strategy)
            t1 = time.perf_counter()
            ids, _, _, start, end = sim.engine.timeline()
            peak = sim.memory_timeline(ids, start, end).peak_bytes
            peaks.append(time.perf_counter() - t1)
            sims.append(t1 - t0)
        s, p = statistics.median(sims), statistics.median(peaks)
        print(f"  {name:<11}{len(sim.graph):>7} tasks: simulation {s * 1e3:.0f} ms, peak {p * 1e3:.0f} ms "
              f"({p / s:.1f}x); peak {max(peak.values()) / 2**30:.2f} GiB per device")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="AlexNet and RNNTC on 4 and 16 devices, 3 proposals")
    p.add_argument("--proposals", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5, help="untimed proposals before the timed ones")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--devices", default="4,8,16,32,64")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--mcmc-budget", type=int, default=1000)
    p.add_argument("--search-budget", type=int, default=200,
                   help="budget of each search in the MCMC delta-vs-full comparison at 64 devices")
    args = p.parse_args(argv)
    print(_load())
    if args.quick:
        bench_grid(["alexnet", "rnntc"], [4, 16], 3, warmup=2)
        bench_peak_memory(1)
        return 0
    bench_inception_64(args.repeat)
    bench_mcmc_nmt(args.mcmc_budget)
    print()
    bench_grid(args.models.split(","), [int(x) for x in args.devices.split(",")], args.proposals, args.warmup)
    bench_search_delta_vs_full(args.models.split(","), 64, args.search_budget)
    bench_peak_memory(args.repeat)
    print(_load())
    return 0


def test_bench_delta_alexnet_16(benchmark):
    """pytest-benchmark entry: one delta proposal on AlexNet, 16 devices."""
    machine = load_machine("flexflow_p100", nodes=4)
    base = load_model("alexnet", ["-b", "1024"]).model.pcg
    sim = Simulator(machine, AnalyticCostModel(), detail=False)
    strategy = data_parallel(base, machine)
    sim.full(strategy)
    rng = random.Random(0)
    ops = [n for n in base.nodes if is_compute(n)]

    def step():
        node = rng.choice(ops)
        sim.delta(strategy.with_config(node.id, random_config(base, node, machine, rng)), {node.name})
    benchmark(step)


if __name__ == "__main__":
    sys.exit(main())
