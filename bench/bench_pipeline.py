"""How fast pipelined strategies simulate, and how the cost grows with micro-batches and layers.

    python bench/bench_pipeline.py [--repeat 3] [--quick]
    python bench/bench_pipeline.py --gpt3 192 [--recompute full]

For GPT under Megatron-LM's 3-D strategy (``megatron_lm``: tensor parallel 8 within a DGX-A100 node,
a pipeline across nodes, 1F1B), it prints per configuration:
- the task count;
- the median wall time of building the strategy and of one full simulation, and the simulated
  iteration time;
- the ratio to the first row measured in this run.

These numbers show how far a 1,024-GPU GPT-3 iteration is from simulating in a minute without
exploiting symmetric replicas. The host is shared: the load average is printed beside them.

``--gpt3 M``: GPT-3 175B on 128 DGX A100 nodes under Megatron-LM's strategy (t=8, p=16, d=8, batch
1536, vocabulary padded to 51,200, bf16, Adam, 1F1B with M micro-batches), simulated symmetrically
(one data-parallel replica): the seconds to build the strategy, to lower and simulate it, this
process's peak memory, the tasks, the iteration and the hardware TFLOP/s per GPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search.baselines import megatron_lm
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator


def measure(layers: int, nodes: int, pipeline: int, micro: int, repeat: int) -> tuple:
    model = load_model("gpt", ["-b", str(4 * micro), "--config", "gpt2-medium", "--layers", str(layers),
                               "--seq-length", "512", "--vocab", "50304"]).model
    machine = load_machine("dgx_a100", nodes=nodes)
    builds, sims, result = [], [], None
    for _ in range(repeat):
        t = time.perf_counter()
        strategy = megatron_lm(model.pcg, machine, tensor=8, pipeline=pipeline, micro_batches=micro)
        builds.append(time.perf_counter() - t)
        sim = Simulator(machine, AnalyticCostModel(), "adam", detail=False, incremental=False)
        t = time.perf_counter()
        result = sim.full(strategy)
        sims.append(time.perf_counter() - t)
    return result.num_tasks, statistics.median(builds), statistics.median(sims), result.iteration_time_s


def gpt3(micro: int, recompute: str) -> None:
    """One symmetric simulation of GPT-3 175B under Megatron-LM's strategy (module doc)."""
    from flexrt.cli._large import flops_report
    from flexrt.ir.precision import with_precision
    from flexrt.simulator.folding import Fold
    from flexrt.strategy.config import wiring_of
    from flexrt.strategy.recompute import recompute_set
    full, sub = load_machine("dgx_a100", nodes=128), load_machine("dgx_a100", nodes=16)
    replicas = full.num_nodes // sub.num_nodes
    t0 = time.perf_counter()
    base = with_precision(load_model("gpt", ["--config", "gpt3-175b", "--vocab", "51200", "-b",
                                             str(1536 // replicas)]).model.pcg, "bf16")
    strategy = megatron_lm(base, sub, tensor=8, pipeline=16, micro_batches=micro)
    if recompute != "none":
        strategy = strategy.with_recompute(recompute_set(wiring_of(base), recompute))
    t1 = time.perf_counter()
    sim = Simulator(sub, AnalyticCostModel(), "adam", detail=False, incremental=False, fold=Fold(replicas, full, sub))
    result = sim.full(strategy)
    t2 = time.perf_counter()
    whole = with_precision(load_model("gpt", ["--config", "gpt3-175b", "--vocab", "51200", "-b", "1536"]).model.pcg,
                           "bf16")
    flops = flops_report(whole, strategy, result.iteration_time_s, full.num_devices)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"GPT-3 175B, 1,024 GPUs, {micro} micro-batches, recompute {recompute}: build {t1 - t0:.1f} s, lower and "
          f"simulate {t2 - t1:.1f} s, peak memory {peak_gb:.2f} GB, {result.num_tasks:,} tasks; iteration "
          f"{result.iteration_time_s:.2f} s, {flops['hardware_tflops_per_gpu']:.1f} hardware TFLOP/s per GPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the first three configurations only")
    parser.add_argument("--gpt3", type=int, metavar="M", help="GPT-3 175B at M micro-batches (module doc)")
    parser.add_argument("--recompute", default="full", choices=["none", "full", "selective"])
    args = parser.parse_args()
    if args.gpt3:
        gpt3(args.gpt3, args.recompute)
        return
    configs = [(8, 2, 2, 4), (8, 2, 2, 8), (8, 2, 2, 16), (16, 4, 4, 16), (24, 4, 4, 32)]
    if args.quick:
        configs = configs[:3]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; median of {args.repeat}")
    print(f"{'layers':>6} {'GPUs':>5} {'p':>3} {'m':>4} {'tasks':>9} {'build s':>8} {'simulate s':>10} "
          f"{'iteration ms':>13} {'sim / first':>11}")
    first = None
    for layers, nodes, p, m in configs:
        tasks, build, sim, it = measure(layers, nodes, p, m, args.repeat)
        first = first or sim
        print(f"{layers:>6} {8 * nodes:>5} {p:>3} {m:>4} {tasks:>9,} {build:>8.2f} {sim:>10.2f} {it * 1e3:>13.2f} "
              f"{sim / first:>10.1f}x")


if __name__ == "__main__":
    main()
