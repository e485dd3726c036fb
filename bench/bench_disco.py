"""DisCo's evaluation in simulation (never part of the test run): Table 1, Tables 3 and 4, Fig. 10.

Every model is trained data parallel on every GPU of DisCo's clusters (``disco_a``: 6 nodes x 2 GTX
1080 Ti; ``disco_b``: 8 nodes x 8 T4), and each fusion policy (``flexrt.search.fusion_policies``) is
applied to that strategy and simulated with the analytic cost model:

- ``table1``: per-iteration time of every baseline (no fusion, XLA op fusion, the AllReduce combiner,
  PyTorch DDP, JAX default, Horovod), of ``disco`` (DisCo's Algorithm 1 from data parallelism) and of
  the fully-overlapped bound FO (of the JAX-default plan, as DisCo reports it); DisCo's speed-up over
  the best baseline, (T_min - T_disco) / T_disco, FO's, (T_min - T_FO) / T_FO, and the share of the
  gap from the best baseline to FO that disco closes. DisCo reports 5.1-26.7 % on A, 8.6-20.6 % on B.
- ``tables34``: disco's per-iteration time and search time for alpha in {1, 1.05, 1.1} (beta 10) and
  beta in {1, 5, 10, 30} (alpha 1.05), on cluster A (DisCo: 6-258 minutes per search).
- ``fig10``: disco restricted to each subset of its three methods (op fusion, duplicate fusion,
  AllReduce fusion) on cluster A: each method's contribution.

Batch sizes per GPU follow the models' usual training (DisCo uses the largest that fits). Search
times are this host's wall time; the load average is printed. Reformer runs at sequence length 1024.

    python bench/bench_disco.py table1 [--clusters disco_a,disco_b] [--models vgg19,resnet50,...]
                                       [--patience N] [--budget N] [--seed S] [--out FILE.json]
    python bench/bench_disco.py tables34 [--models ...] [--patience N]
    python bench/bench_disco.py fig10 [--models ...] [--patience N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search import SearchRequest, search
from flexrt.search.fusion_policies import fully_overlapped, fusion_policy
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import data_parallel

# model -> (per-GPU batch, extra script flags)
MODELS = {"vgg19": (32, []), "resnet50": (64, []), "transformer": (32, []), "rnnlm": (64, []),
          "bert_large": (8, []), "reformer": (4, ["--seq-length", "1024"])}
BASELINES = ("none", "xla", "combiner", "ddp", "jax", "horovod")
COST = AnalyticCostModel()


def _strategy(model: str, machine):
    per_gpu, extra = MODELS[model]
    loaded = load_model(model, ["-b", str(per_gpu * machine.num_devices), *extra])
    return data_parallel(loaded.model.pcg, machine)


def _time(strategy, machine) -> tuple[float, object]:
    sim = Simulator(machine, COST, detail=False, incremental=False)
    sim.time_full(strategy)
    return sim.iteration_time(), sim


def _disco(strategy, machine, args, **options):
    opts = {"patience": args.patience, **options}
    t0 = time.perf_counter()
    result = search("disco", SearchRequest(strategy.base, machine, COST, budget=args.budget, seed=args.seed,
                                           initial=(strategy,), options=opts, progress=False))
    return result, time.perf_counter() - t0


def table1(args) -> list[dict]:
    rows = []
    for cluster in args.clusters:
        machine = load_machine(cluster)
        for model in args.models:
            s = _strategy(model, machine)
            times = {}
            for name in BASELINES:
                times[name] = _time(s.with_fusion(fusion_policy(name)(s, machine, COST)), machine)[0]
            jax_sim = _time(s.with_fusion(fusion_policy("jax")(s, machine, COST)), machine)[1]
            fo = fully_overlapped(jax_sim)
            result, search_s = _disco(s, machine, args)
            t_disco = result.cost_s
            best = min(times.values())
            row = {"cluster": cluster, "model": model, "devices": machine.num_devices, **times, "disco": t_disco,
                   "fo": fo, "disco_speedup": (best - t_disco) / t_disco, "fo_speedup": (best - fo) / fo,
                   "gap_closed": (best - t_disco) / (best - fo) if best > fo else float("nan"),
                   "search_s": search_s, "plan_groups": len(result.strategy.fusion.groups) if result.strategy.fusion
                   else 0, "plan_buckets": len(result.strategy.fusion.buckets) if result.strategy.fusion else 0}
            rows.append(row)
            print(_fmt_row(row), flush=True)
    return rows


def _fmt_row(r: dict) -> str:
    base = " ".join(f"{k} {r[k] * 1e3:8.2f}" for k in BASELINES)
    return (f"{r['cluster']:<8}{r['model']:<12} ms: {base} | disco {r['disco'] * 1e3:8.2f} FO {r['fo'] * 1e3:8.2f} | "
            f"disco +{r['disco_speedup'] * 100:5.1f}% FO +{r['fo_speedup'] * 100:5.1f}% gap closed "
            f"{r['gap_closed'] * 100:5.1f}% | search {r['search_s']:6.1f} s ({r['plan_groups']} groups, "
            f"{r['plan_buckets']} buckets)")


def tables34(args) -> list[dict]:
    machine = load_machine("disco_a")
    rows = []
    grid = [("alpha", a, {"alpha": a, "beta": 10}) for a in (1.0, 1.05, 1.1)] + \
           [("beta", b, {"alpha": 1.05, "beta": b}) for b in (1, 5, 10, 30)]
    for model in args.models:
        s = _strategy(model, machine)
        for knob, value, opts in grid:
            result, search_s = _disco(s, machine, args, **opts)
            row = {"model": model, "knob": knob, "value": value, "time_s": result.cost_s, "search_s": search_s,
                   "steps": result.log.proposals}
            rows.append(row)
            print(f"{model:<12} {knob}={value:<5} iteration {result.cost_s * 1e3:8.2f} ms  search {search_s:6.1f} s "
                  f"({row['steps']} candidates)", flush=True)
    return rows


def fig10(args) -> list[dict]:
    machine = load_machine("disco_a")
    rows = []
    for model in args.models:
        s = _strategy(model, machine)
        base = _time(s, machine)[0]
        for methods in (("op",), ("dup",), ("allreduce",), ("op", "dup"), ("op", "allreduce"),
                        ("op", "dup", "allreduce")):
            result, search_s = _disco(s, machine, args, methods=list(methods))
            row = {"model": model, "methods": "+".join(methods), "time_s": result.cost_s, "no_fusion_s": base,
                   "speedup": (base - result.cost_s) / result.cost_s, "search_s": search_s}
            rows.append(row)
            print(f"{model:<12} {row['methods']:<18} {result.cost_s * 1e3:8.2f} ms (no fusion {base * 1e3:8.2f}) "
                  f"+{row['speedup'] * 100:5.1f}%  search {search_s:6.1f} s", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("table1", "tables34", "fig10"))
    p.add_argument("--clusters", default="disco_a,disco_b")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--patience", type=int, default=200)
    p.add_argument("--budget", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    args.clusters = args.clusters.split(",")
    args.models = args.models.split(",")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; patience {args.patience}, "
          f"budget {args.budget}", flush=True)
    rows = {"table1": table1, "tables34": tables34, "fig10": fig10}[args.what](args)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
