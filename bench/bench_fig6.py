"""FlexFlow Fig. 6 in simulation: MCMC's speed-up over data parallelism and over the expert strategy.

For AlexNet, Inception-v3, ResNet-101, RNNTC, RNNLM and NMT on the ``flexflow_p100`` and
``flexflow_k80`` presets at 4, 8 and 16 devices: the simulated iteration time of data parallelism,
of the expert strategy (``flexrt.search.baselines``) and of the MCMC strategy (every SOAP axis
enabled, seeded with both), the two speed-ups, and the search time; then, per model, what the
best strategy found does (which operators left plain data parallelism; cf. FlexFlow §8.4).

    python bench/bench_fig6.py            quick: AlexNet and RNNTC, 4 devices, budget 80 (< 5 min, 2 cores)
    python bench/bench_fig6.py --full     the whole table (budget 1000; about an hour on 2 cores)
    python bench/bench_fig6.py --models alexnet --devices 4 8 --budget 100 --sync back
"""

from __future__ import annotations

import argparse
import sys
import time

from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search import SearchRequest, describe, fixed_result, search
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import SearchSpace, data_parallel

MODELS = ("alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt")
MACHINES = ("flexflow_p100", "flexflow_k80")
DEVICES = (4, 8, 16)


def _expert(name, base, machine):
    try:
        from flexrt.search.baselines import expert_strategy
    except ImportError:
        return None
    return expert_strategy(name, base, machine)


def run(models, machines, devices, budget, seed, sync) -> list[dict]:
    rows = []
    cost = AnalyticCostModel()
    for name in models:
        base = load_model(name).model.pcg
        for mname in machines:
            per_node = load_machine(mname).devices_per_node
            for n in devices:
                if n % per_node:
                    continue
                machine = load_machine(mname, nodes=n // per_node)
                dp = fixed_result("data-parallel", data_parallel(base, machine), machine, cost)
                ex_s = _expert(name, base, machine)
                ex = fixed_result("expert", ex_s, machine, cost) if ex_s is not None else None
                t = time.perf_counter()
                r = search("mcmc", SearchRequest(base, machine, cost, budget=budget, seed=seed, space=SearchSpace.full(),
                                                 initial=(ex_s,) if ex_s is not None else (), progress=False,
                                                 options={"sync": sync}))
                rows.append({"model": name, "machine": mname, "devices": n, "dp_ms": dp.cost_s * 1e3,
                             "expert_ms": ex.cost_s * 1e3 if ex else None, "mcmc_ms": r.cost_s * 1e3,
                             "vs_dp": dp.cost_s / r.cost_s, "vs_expert": ex.cost_s / r.cost_s if ex else None,
                             "search_s": time.perf_counter() - t, "proposals": r.log.proposals,
                             "acceptance": r.log.acceptance_rate, "summary": describe(r.strategy, machine, 6)})
                row = rows[-1]
                print(f"{name:<13} {mname:<14} {n:>3}  dp {row['dp_ms']:9.3f} ms  expert "
                      f"{row['expert_ms'] if ex else float('nan'):9.3f} ms  mcmc {row['mcmc_ms']:9.3f} ms  "
                      f"x{row['vs_dp']:.2f} vs dp  x{row['vs_expert'] or float('nan'):.2f} vs expert  "
                      f"search {row['search_s']:6.1f} s ({row['proposals']} proposals)", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="every model, machine and device count, budget 1000")
    p.add_argument("--models", nargs="+", choices=MODELS)
    p.add_argument("--machines", nargs="+", choices=MACHINES)
    p.add_argument("--devices", nargs="+", type=int)
    p.add_argument("--budget", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sync", choices=("lazy", "back"), default="lazy",
                   help="after a rejected proposal: fold it into the next delta (lazy) or simulate back")
    a = p.parse_args(argv)
    models = a.models or (MODELS if a.full else ("alexnet", "rnntc"))
    machines = a.machines or MACHINES
    devices = a.devices or (DEVICES if a.full else (4,))
    budget = a.budget if a.budget is not None else (1000 if a.full else 80)
    t = time.perf_counter()
    rows = run(models, machines, devices, budget, a.seed, a.sync)
    print(f"\nFig. 6 (simulated): MCMC speed-up over data parallelism / expert, budget {budget}, "
          f"{time.perf_counter() - t:.0f} s in all")
    print(f"{'model':<13} {'machine':<14} {'dev':>3} {'vs DP':>7} {'vs expert':>10} {'search s':>9}")
    for r in rows:
        ve = f"{r['vs_expert']:.2f}x" if r["vs_expert"] else "-"
        print(f"{r['model']:<13} {r['machine']:<14} {r['devices']:>3} {r['vs_dp']:>6.2f}x {ve:>10} "
              f"{r['search_s']:>9.1f}")
    print("\nWhat the best strategies do (largest configuration of each model):")
    for name in dict.fromkeys(r["model"] for r in rows):
        last = [r for r in rows if r["model"] == name][-1]
        print(f"- {name} ({last['machine']}, {last['devices']} devices):")
        for line in last["summary"]:
            print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
