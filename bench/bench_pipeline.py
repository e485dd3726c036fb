"""How fast pipelined strategies simulate, and how the cost grows with micro-batches and layers.

    python bench/bench_pipeline.py [--repeat 3] [--quick]
    python bench/bench_pipeline.py --gpt3 192 [--recompute full]
    python bench/bench_pipeline.py --search [--budget 100] [--seeds 3]

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
(one data-parallel replica), through ``flexrt simulate``: the iteration, TFLOP/s per GPU, memory per
GPU, and the simulation's own time and peak memory.

``--search [--budget N] [--seeds K]``: what the pipeline MCMC's configuration move adds. On each model
and machine below, ``--algo pipeline`` over the sample axis alone (stages data parallel over their
blocks) against the whole space (each operator's degrees within its block searched too), the median
over K seeds of the best simulated iteration, data parallelism's beside, and the ratio.
"""

from __future__ import annotations

import argparse
import os
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


def gpt3(micro: int, recompute: str) -> int:
    """One symmetric simulation of GPT-3 175B under Megatron-LM's strategy (module doc), run as the
    ``flexrt simulate`` command that the README gives: its report ends with the simulation's own
    time and peak memory."""
    from flexrt.cli import main as flexrt
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return flexrt(["simulate", "gpt", "--config", "gpt3-175b", "--vocab", "51200", "-b", "1536", "--machine",
                   "dgx_a100", "--nodes", "128", "--megatron", "--pipeline", "16", "--micro-batches", str(micro),
                   "--symmetric", "--precision", "bf16", "--recompute", recompute, "--optimizer", "adam"])


SEARCH_CASES = (("transformer", 32, "dgx1_v100", 1), ("bert_large", 16, "dgx1_v100", 1), ("alexnet", 64, "summit", 2))


def search_quality(budget: int, seeds: int) -> None:
    """The ``--search`` table (module doc)."""
    from flexrt.search import SearchRequest, search
    from flexrt.strategy import SearchSpace, data_parallel
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; budget {budget}, median of {seeds} seeds")
    print(f"{'model':>12} {'machine':>13} {'DP ms':>8} {'sample ms':>10} {'whole ms':>9} {'sample / whole':>15} "
          f"{'search s':>9}")
    for name, batch, preset, nodes in SEARCH_CASES:
        machine = load_machine(preset, nodes=nodes)
        pcg = load_model(name, ["-b", str(batch)]).model.pcg
        sim = Simulator(machine, AnalyticCostModel(), detail=False, incremental=False)
        dp = sim.full(data_parallel(pcg, machine)).iteration_time_s
        best, secs = {}, []
        for label, space in (("sample", None), ("whole", SearchSpace.full())):
            times = []
            for seed in range(seeds):
                t0 = time.perf_counter()
                times.append(search("pipeline", SearchRequest(pcg, machine, AnalyticCostModel(), budget=budget,
                                                              seed=seed, space=space)).cost_s)
                secs.append(time.perf_counter() - t0)
            best[label] = statistics.median(times)
        print(f"{name:>12} {f'{preset}x{nodes}':>13} {dp * 1e3:>8.2f} {best['sample'] * 1e3:>10.2f} "
              f"{best['whole'] * 1e3:>9.2f} {best['sample'] / best['whole']:>14.3f}x {statistics.median(secs):>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the first three configurations only")
    parser.add_argument("--gpt3", type=int, metavar="M", help="GPT-3 175B at M micro-batches (module doc)")
    parser.add_argument("--recompute", default="full", choices=["none", "full", "selective"])
    parser.add_argument("--search", action="store_true", help="the pipeline MCMC's configuration move (module doc)")
    parser.add_argument("--budget", type=int, default=100, help="proposals per search (--search)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per search (--search)")
    args = parser.parse_args()
    if args.search:
        return search_quality(args.budget, args.seeds)
    if args.gpt3:
        raise SystemExit(gpt3(args.gpt3, args.recompute))
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
