"""TASO's merged convolutions, chosen by measured kernel costs and checked by running them.

    python bench/bench_merged_convs.py [--block mixed_5b|equal] [--batch 8] [--budget 300] [--steps 20]
                                       [--repeat 2]

An Inception-v3 block on the `local` machine (4 NumPy devices on this host): ``mixed_5b`` (the
default) is Inception-v3's Mixed_5b on a [b, 192, 35, 35] input: 1 x 1 convolutions of 64, 48 and 64
channels reading the input (the first a branch of its own, the second feeding a 5 x 5 convolution
of 64, the third two 3 x 3 convolutions of 96), an average pool feeding a 1 x 1 convolution of 32,
all concatenated (256 channels), then a global pool and a classifier; ``equal`` is four 1 x 1
convolutions of 64 channels of one input, concatenated.
Unity's search (budget --budget, every SOAP axis, the shipped library) runs with the profiled cost
model (each kernel timed on this host, cached in a temporary directory) and with the analytic one;
the strategies found with and without substitutions are trained --steps steps on the serial
executor (every device's tasks in one loop, so measured time is the sum of the task times). Printed
per strategy: merged convolutions in the graph, simulated iteration and summed task time, and the
median measured iteration over --repeat alternating runs, beside the ratios (unmerged / merged).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

import numpy as np

from flexrt.core import ActiMode, DataType, FFConfig, FFModel, PoolType
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.runtime.session import Session
from flexrt.search.unity import unity
from flexrt.simulator.cost_model import AnalyticCostModel, ProfiledCostModel
from flexrt.strategy.weights import folded


def block(batch: int, kind: str = "mixed_5b"):
    m = FFModel(FFConfig(["-b", str(batch)]))
    x = m.create_tensor([batch, 192, 35, 35], DataType.DT_FLOAT)
    relu = ActiMode.AC_MODE_RELU

    def conv(t, c, k, name):
        return m.conv2d(t, c, k, k, 1, 1, k // 2, k // 2, relu, use_bias=False, name=name)
    if kind == "equal":
        ys = [conv(x, 64, 1, f"b{i}") for i in range(4)]
    else:
        pooled = m.pool2d(x, 3, 3, 1, 1, 1, 1, PoolType.POOL_AVG, name="branch_pool.avg")
        ys = [conv(x, 64, 1, "branch1x1"),
              conv(conv(x, 48, 1, "branch5x5_1"), 64, 5, "branch5x5_2"),
              conv(conv(conv(x, 64, 1, "branch3x3dbl_1"), 96, 3, "branch3x3dbl_2"), 96, 3, "branch3x3dbl_3"),
              conv(pooled, 32, 1, "branch_pool")]
    t = m.pool2d(m.concat(ys, 1, name="cat"), 35, 35, 1, 1, 0, 0, PoolType.POOL_AVG, name="pool")
    m.softmax(m.dense(m.flat(t, name="flat"), 10, name="fc"), name="softmax")
    return m.pcg


def measured(pcg, strategy, machine, cost, steps: int, seed: int = 0) -> tuple[float, float, float]:
    """(simulated iteration, simulated summed task time, median measured iteration after the first) in
    seconds, on random data for ``pcg``'s inputs."""
    s = Session(strategy, machine, cost_model=cost, mode="serial")
    rng = np.random.default_rng(seed)
    inputs = {n.name: rng.standard_normal(n.attrs.shape.dims).astype(np.float32) for n in pcg.nodes
              if n.op_type is OpType.INPUT}
    labels = rng.integers(0, 10, (next(iter(inputs.values())).shape[0], 1)).astype(np.int32)
    walls = [s.step(inputs, labels).wall_s for _ in range(steps)]
    return s.predicted_time_s, s.predicted_summed_s, statistics.median(walls[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", choices=("mixed_5b", "equal"), default="mixed_5b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    machine = load_machine("local")
    pcg = block(args.batch, args.block)
    with tempfile.TemporaryDirectory() as tmp:
        profiled = ProfiledCostModel("numpy", cache_path=os.path.join(tmp, "profile.json"))
        rows = {}
        for label, cost, rules in (("profiled, library", profiled, None), ("profiled, no rules", profiled, []),
                                   ("analytic, library", AnalyticCostModel(), None)):
            r = unity(pcg, machine, cost, budget=args.budget, rules=rules, progress=False)
            convs = sum(n.op_type is OpType.CONV2D for n in r.strategy.pcg.nodes)
            rows[label] = (r.strategy, convs, len(folded(r.strategy.pcg)))
        print(f"block {args.block}, batch {args.batch}, local machine ({machine.num_devices} NumPy devices), "
              f"Unity budget {args.budget}; load average {os.getloadavg()[0]:.2f}")
        times: dict = {k: [] for k in rows}
        sims: dict = {}
        for _ in range(args.repeat):          # alternate, so that load drifts hit every strategy alike
            for label, (strategy, _, _) in rows.items():
                sim, summed, wall = measured(pcg, strategy, machine, profiled, args.steps)
                sims[label] = (sim, summed)
                times[label].append(wall)
        print(f"{'strategy':20} {'convs':>5} {'folded':>6} {'sim ms':>8} {'summed ms':>9} {'measured ms':>11}  runs")
        for label, (_, convs, nfold) in rows.items():
            sim, summed = sims[label]
            print(f"{label:20} {convs:5d} {nfold:6d} {sim * 1e3:8.2f} {summed * 1e3:9.2f} "
                  f"{statistics.median(times[label]) * 1e3:11.2f}  {', '.join(f'{t * 1e3:.1f}' for t in times[label])}")
        a, b = "profiled, no rules", "profiled, library"
        print(f"unmerged / merged (profiled): simulated {sims[a][0] / sims[b][0]:.2f}x, summed "
              f"{sims[a][1] / sims[b][1]:.2f}x, measured {statistics.median(times[a]) / statistics.median(times[b]):.2f}x; "
              f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
