"""Simulator benchmarks (never part of the test run).

1. Delta vs full simulation over FlexFlow's Table 5 grid: AlexNet, ResNet-101, Inception-v3, RNNTC,
   RNNLM, NMT on 4, 8, 16, 32 and 64 devices (``flexflow_p100`` scaled: 4 GPUs per node). From
   data parallelism, random single-operator changes as MCMC proposes them; each is simulated by
   delta simulation (re-lower the touched owners + Algorithm 2) and by full simulation (lower
   everything + Algorithm 1). FlexFlow reports 2.2-6.9x.
2. Time to lower and fully simulate Inception-v3 data-parallel on 64 devices.

    python bench/bench_simulator.py [--quick] [--proposals N] [--models a,b] [--devices 4,8]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.simulator.strategy import data_parallel, is_compute, random_config

MODELS = {"alexnet": [], "resnet101": [], "inception_v3": [], "rnntc": [], "rnnlm": [], "nmt": []}
PER_DEVICE_BATCH = 64


def bench_grid(models, device_counts, proposals, seed=0):
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
            sim = Simulator(machine, cost)
            sim.full(strategy)
            full_s = delta_s = 0.0
            for _ in range(proposals):
                node = rng.choice(ops)
                candidate = strategy.with_config(node.id, random_config(base, node, machine, rng))
                t0 = time.perf_counter()
                sim.delta(candidate, {node.name})
                delta_s += time.perf_counter() - t0
                t0 = time.perf_counter()
                Simulator(machine, cost).full(candidate)
                full_s += time.perf_counter() - t0
                strategy = candidate  # accept every proposal, as a chain at high temperature would
            tasks = len(sim.lowering.graph)
            rows.append((name, n, tasks, full_s / proposals, delta_s / proposals))
            print(f"{name:<14}{n:>8}{tasks:>9}{full_s / proposals * 1e3:>10.1f}{delta_s / proposals * 1e3:>10.1f}"
                  f"{full_s / delta_s:>8.1f}x", flush=True)
    return rows


def bench_inception_64():
    machine = load_machine("flexflow_p100", nodes=16)
    base = load_model("inception_v3", ["-b", str(PER_DEVICE_BATCH * 64)]).model.pcg
    t0 = time.perf_counter()
    strategy = data_parallel(base, machine)
    t1 = time.perf_counter()
    sim = Simulator(machine, AnalyticCostModel())
    sim.lowering.build(strategy)
    t2 = time.perf_counter()
    sim.lowering.engine.simulate_full()
    t3 = time.perf_counter()
    r = sim.result()
    print(f"\nInception-v3 data parallel on 64 devices: {r.num_tasks} tasks; strategy {t1 - t0:.2f} s, "
          f"lowering {t2 - t1:.2f} s, full simulation {t3 - t2:.3f} s "
          f"({r.num_tasks / (t3 - t2) / 1e6:.2f} M tasks/s); simulated iteration {r.iteration_time_s * 1e3:.1f} ms")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="AlexNet and RNNTC on 4 and 16 devices, 3 proposals")
    p.add_argument("--proposals", type=int, default=10)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--devices", default="4,8,16,32,64")
    args = p.parse_args(argv)
    if args.quick:
        bench_grid(["alexnet", "rnntc"], [4, 16], 3)
        return 0
    bench_grid(args.models.split(","), [int(x) for x in args.devices.split(",")], args.proposals)
    bench_inception_64()
    return 0


def test_bench_delta_alexnet_16(benchmark):
    """pytest-benchmark entry: one delta proposal on AlexNet, 16 devices."""
    machine = load_machine("flexflow_p100", nodes=4)
    base = load_model("alexnet", ["-b", "1024"]).model.pcg
    sim = Simulator(machine, AnalyticCostModel())
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
