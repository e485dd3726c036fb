"""Unity's evaluation in simulation: Fig. 2, Table 2 (search time) and Fig. 14 (speed-ups).

    python bench/bench_unity.py --fig2                   Unity's Fig. 2 MLP on 2 GPUs: joint vs sequential
    python bench/bench_unity.py --table2                 ResNeXt-50 search time on summit, 6..48 GPUs:
                                                         everything on / no graph splitting / no cache and
                                                         no splitting (Unity Table 2)
    python bench/bench_unity.py --fig14                  the seven models at 6..48 GPUs: simulated speed-up
                                                         of Unity over data parallelism, the expert strategy
                                                         and the sequential baseline, with search times;
                                                         BERT-Large against Megatron
    python bench/bench_unity.py --fig15a                 BERT-Large at 6..48 GPUs, Unity's search with its dimensions
                                                         added one at a time: data+model (sample splits and
                                                         placement), +reduction, +attention-head (parameter
                                                         axes: heads, and linears' outputs), +pipeline; speed-ups
                                                         over data+model (Unity Fig. 15a: 1.0x, 1.2x, 1.4x)
    python bench/bench_unity.py --scaling                ResNeXt-50 on summit, 6..48 GPUs (1..8 nodes): median
                                                         search wall seconds over --repeat runs and the found
                                                         strategy's simulated iteration time (--save DIR writes
                                                         each found strategy as JSON, to compare runs)
    --devices 6 12 --models mlp dlrm --budget N          narrow any of them
    --ablation-up-to 12                                  --table2: ablations only up to 12 GPUs (they are slow)

Per-GPU batch sizes as Unity §6.1: 64 ResNeXt-50 and Inception-v3, 4 BERT-Large, 1024 DLRM and
XDL, 256 CANDLE-Uno and MLP (global batch = devices x per-GPU batch). Costs: the analytic model.
Times are wall-clock seconds on this machine; speed-ups are ratios of simulated iteration times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from flexrt.ir.registry import AxisKind
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search.api import fixed_result
from flexrt.search.baselines import expert_strategy, megatron_best
from flexrt.search.unity import sequential, unity
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import SearchSpace, data_parallel, load_strategy, save_strategy

COST = AnalyticCostModel()
MODELS = {"resnext50": 64, "inception_v3": 64, "bert_large": 4, "dlrm": 1024, "xdl": 1024, "candle_uno": 256,
          "mlp": 256}
DEVICES = (6, 12, 24, 48)


def _machine(devices: int):
    return load_machine("summit", nodes=max(1, devices // 6))


def _model(name: str, devices: int, extra=()):
    flags = ["-b", str(MODELS[name] * devices), *extra]
    if name == "bert_large":
        flags += ["--seq-length", "512"]
    return load_model(name, flags)


def fig2() -> None:
    from flexrt.examples.strategies import unity_fig2
    machine = load_machine("dgx1_v100")
    base = load_model("mlp_unity_fig2", ["-b", "64"]).model.pcg
    sim = Simulator(machine, COST)
    print("Unity Fig. 2: MLP b=64, 784-512-10, 2 GPUs of dgx1_v100")
    for label, space, md in (("data+reduction, every op on both GPUs (the figure's space)",
                              SearchSpace(frozenset({AxisKind.SAMPLE, AxisKind.REDUCTION})), 2),
                             ("every axis, any placement", SearchSpace.full(), 1)):
        print(f"  space: {label}")
        for fn in (unity, sequential):
            t = time.perf_counter()
            r = fn(base, machine, COST, budget=50, devices=2, space=space, min_degree=md, progress=False)
            moved = sim.full(r.strategy).moved_elements
            print(f"    {fn.__name__:<11} {r.cost_s * 1e6:8.1f} us  moved {dict(moved)}  rewritten "
                  f"{r.log.notes['rewritten']}  ({time.perf_counter() - t:.2f} s)")
    sim.full(load_strategy(str(unity_fig2.FILE), None, machine))
    print(f"  the paper's Fig. 2b strategy itself: {sim.iteration_time() * 1e6:.1f} us, moved "
          f"{dict(sim.result().moved_elements)}")


def table2(devices, budget: int, ablation_up_to: int) -> None:
    print(f"ResNeXt-50 on summit, per-GPU batch 64, budget {budget}: search seconds (Unity Table 2: "
          f"57 s, 107 s, 180 s, 355 s with everything; 4.3x / 38.5x slower without splitting / without cache "
          f"and splitting at 6 GPUs)")
    print(f"{'GPUs':>5} {'everything':>11} {'no split':>9} {'no cache+split':>15} {'ratios':>14}  found / DP ms")
    for n in devices:
        machine = _machine(n)
        base = _model("resnext50", n).model.pcg
        times, res = [], None
        for split, cache in ((10, True), (0, True), (0, False)):
            if (split, cache) != (10, True) and n > ablation_up_to:
                times.append(float("nan"))
                continue
            t = time.perf_counter()
            r = unity(base, machine, COST, budget=budget, devices=n, split_size=split, cache=cache, progress=False)
            times.append(time.perf_counter() - t)
            res = res or r
        dp = fixed_result("dp", data_parallel(base, machine), machine, COST).cost_s
        print(f"{n:>5} {times[0]:>10.1f}s {times[1]:>8.1f}s {times[2]:>14.1f}s  {times[1] / times[0]:5.1f}x "
              f"{times[2] / times[0]:5.1f}x  {res.cost_s * 1e3:.1f} / {dp * 1e3:.1f}", flush=True)


def scaling(devices, budget: int, repeat: int, save_dir) -> None:
    print(f"ResNeXt-50 on summit, per-GPU batch 64, budget {budget}: median of {repeat} Unity searches")
    print(f"{'GPUs':>5} {'wall s':>8} {'min s':>7} {'max s':>7} {'found ms':>10} {'DP est ms':>10}  load avg")
    for n in devices:
        machine = _machine(n)
        base = _model("resnext50", n).model.pcg
        walls, r = [], None
        for _ in range(repeat):
            t = time.perf_counter()
            r = unity(base, machine, COST, budget=budget, progress=False)
            walls.append(time.perf_counter() - t)
        if save_dir:
            os.makedirs(save_dir, exist_ok=True)
            save_strategy(os.path.join(save_dir, f"resnext50_summit_{n}.json"), r.strategy, machine)
        print(f"{n:>5} {statistics.median(walls):8.2f} {min(walls):7.2f} {max(walls):7.2f} {r.cost_s * 1e3:10.4f} "
              f"{r.log.notes['estimated_s'] * 1e3:10.4f}  {os.getloadavg()[0]:.2f}", flush=True)


def fig14(models, devices, budget: int) -> None:
    print(f"Fig. 14 on summit (simulated, analytic costs, budget {budget}): iteration ms and Unity's speed-up")
    print(f"{'model':<13} {'GPUs':>4} {'DP':>9} {'expert':>9} {'sequent.':>9} {'unity':>9} {'vs DP':>6} "
          f"{'vs exp':>6} {'vs seq':>6} {'search s':>8}")
    for name in models:
        for n in devices:
            machine = _machine(n)
            base = _model(name, n).model.pcg
            dp = fixed_result("dp", data_parallel(base, machine), machine, COST).cost_s
            ex = expert_strategy(name, base, machine)
            exp = fixed_result("expert", ex, machine, COST).cost_s if ex is not None else None
            seq = sequential(base, machine, COST, budget=budget, progress=False).cost_s
            t = time.perf_counter()
            r = unity(base, machine, COST, budget=budget, progress=False)
            took = time.perf_counter() - t
            e = f"{exp * 1e3:9.2f}" if exp else f"{'-':>9}"
            ve = f"{exp / r.cost_s:6.2f}" if exp else f"{'-':>6}"
            print(f"{name:<13} {n:>4} {dp * 1e3:9.2f} {e} {seq * 1e3:9.2f} {r.cost_s * 1e3:9.2f} "
                  f"{dp / r.cost_s:6.2f} {ve} {seq / r.cost_s:6.2f} {took:8.1f}", flush=True)
            if name == "bert_large":     # Megatron-LM pipelines, so Unity may too here (Unity §6.1)
                mg = megatron_best(base, machine, COST)
                t = time.perf_counter()
                up = unity(base, machine, COST, budget=budget, progress=False, enable_pipeline=True)
                print(f"{'':<13} {'':>4} Megatron-LM at its best ({mg.log.notes['chosen']}) {mg.cost_s * 1e3:.2f} ms; "
                      f"Unity / Megatron time {r.cost_s / mg.cost_s:.2f}; Unity with pipelines "
                      f"({up.log.notes['chosen']}) {up.cost_s * 1e3:.2f} ms, / Megatron {up.cost_s / mg.cost_s:.2f} "
                      f"({time.perf_counter() - t:.0f} s)", flush=True)


def fig15a(devices, budget: int) -> None:
    S, R, P = AxisKind.SAMPLE, AxisKind.REDUCTION, AxisKind.PARAMETER
    steps = (("data+model", {S}, False), ("+reduction", {S, R}, False), ("+attention head", {S, R, P}, False),
             ("+pipeline", {S, R, P}, True))
    print(f"Fig. 15a on summit: BERT-Large (per-GPU batch 4, sequence 512), Unity's search (budget {budget}) as its "
          f"dimensions are added; iteration ms, speed-up over data+model, search s")
    print(f"{'GPUs':>5} " + " ".join(f"{label:>22}" for label, _, _ in steps))
    for n in devices:
        machine = _machine(n)
        base = _model("bert_large", n).model.pcg
        cells, first = [], None
        for label, kinds, pipe in steps:
            t = time.perf_counter()
            r = unity(base, machine, COST, budget=budget, space=SearchSpace(frozenset(kinds)), enable_pipeline=pipe,
                      progress=False)
            took = time.perf_counter() - t
            first = first or r.cost_s
            pipelined = " P" if getattr(r.strategy, "pipeline", None) is not None else ""
            cells.append(f"{r.cost_s * 1e3:9.1f} {first / r.cost_s:4.2f}x {took:5.0f}s{pipelined}")
        print(f"{n:>5} " + " ".join(f"{c:>22}" for c in cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fig2", action="store_true")
    ap.add_argument("--table2", action="store_true")
    ap.add_argument("--fig14", action="store_true")
    ap.add_argument("--scaling", action="store_true")
    ap.add_argument("--fig15a", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="--scaling: searches per size (the median is printed)")
    ap.add_argument("--save", metavar="DIR", help="--scaling: write each found strategy to DIR")
    ap.add_argument("--devices", type=int, nargs="+", default=list(DEVICES))
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--ablation-up-to", type=int, default=12,
                    help="--table2: run the slow ablations (no split, no cache) only up to this many GPUs")
    args = ap.parse_args()
    if not (args.fig2 or args.table2 or args.fig14 or args.scaling or args.fig15a):
        args.fig2 = True
    if args.fig2:
        fig2()
    if args.table2:
        table2(args.devices, args.budget, args.ablation_up_to)
    if args.fig14:
        fig14(args.models, args.devices, args.budget)
    if args.scaling:
        scaling(args.devices, args.budget, args.repeat, args.save)
    if args.fig15a:
        fig15a(args.devices, args.budget)


if __name__ == "__main__":
    main()
