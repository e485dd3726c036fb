"""Unity's machine-mapping DP on summit: its estimates against full simulation, and its cost.

    python bench/bench_unity_mapping.py --estimates        the DP's estimate of its own mapping vs the
                                                           full simulation of that mapping, with and
                                                           without the contention model, and with the
                                                           overlap model (LocalCosts(overlap=True)) (Unity's
                                                           seven models at 6..48 GPUs; per-GPU batch as §6.1)
    python bench/bench_unity_mapping.py --dlrm             DLRM: simulated iteration ms of Unity's
                                                           strategy, data parallelism and the expert's
    python bench/bench_unity_mapping.py --scaling          ResNeXt-50: seconds of one DP solve with and
                                                           without the model, median of --repeat, and
                                                           the ratio to 6 GPUs measured in the same run
    python bench/bench_unity_mapping.py --search           ResNeXt-50: seconds of Unity's whole search
                                                           (bench_unity.py --scaling's) with the model
                                                           and without it (the DP as it was), runs
                                                           interleaved, and the found strategies' ms
    python bench/bench_unity_mapping.py --peel             the DP's peel orders (mapping.PEEL_ORDERS): per
                                                           model and size, the simulated ms of the mapping
                                                           each order alone finds and all of them together,
                                                           and the seconds of one solve (median of --repeat)
                                                           in graph order and with all (their ratio)
    --models dlrm mlp --devices 6 12 --repeat 3 --budget N narrow any of them

Costs: the analytic model. Times are wall-clock seconds on this machine; every line ends with the
1-minute load average when it was printed (other work on the machine slows the timings).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search.api import fixed_result
from flexrt.search.baselines import expert_strategy
from flexrt.search.unity import PEEL_ORDERS, LocalCosts, MappingDP, unity
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import SearchSpace, Strategy, data_parallel

COST = AnalyticCostModel()
MODELS = {"resnext50": 64, "inception_v3": 64, "bert_large": 4, "dlrm": 1024, "xdl": 1024, "candle_uno": 256,
          "mlp": 256}
DEVICES = (6, 12, 24, 48)


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def _setup(name: str, devices: int):
    machine = load_machine("summit", nodes=max(1, devices // 6))
    flags = ["-b", str(MODELS[name] * devices)] + (["--seq-length", "512"] if name == "bert_large" else [])
    return machine, load_model(name, flags).model.pcg


def _solve(machine, pcg, contention: bool, overlap: bool = False, peel=PEEL_ORDERS):
    t = time.perf_counter()
    got = MappingDP(machine, LocalCosts(machine, COST, SearchSpace.full().kinds, overlap=overlap),
                    contention=contention, peel=peel).solve(pcg)
    return got, time.perf_counter() - t


def peel(models, devices, repeat: int) -> None:
    orders = [(o,) for o in PEEL_ORDERS] + [PEEL_ORDERS]
    print("The DP's mapping peeled in each order alone and in all (the default): simulated ms; one solve's "
          f"seconds in graph order and with all orders, median of {repeat}")
    print(f"{'model':<13} {'GPUs':>4} " + " ".join(f"{o[0] if len(o) == 1 else 'all':>10}" for o in orders)
          + f" {'graph s':>8} {'all s':>8} {'ratio':>6}")
    for name in models:
        for n in devices:
            machine, pcg = _setup(name, n)
            sim = Simulator(machine, COST, detail=False)
            found, walls = [], {}
            for o in orders:
                timed = o in (orders[0], orders[-1])      # the two timed: graph order alone, and all
                runs = [_solve(machine, pcg, True, peel=o) for _ in range(repeat if timed else 1)]
                walls[o] = statistics.median(t for _, t in runs)
                sim.full(Strategy.from_configs(pcg, runs[0][0].configs))
                found.append(sim.iteration_time() * 1e3)
            g, a = walls[orders[0]], walls[orders[-1]]
            print(f"{name:<13} {n:>4} " + " ".join(f"{v:10.3f}" for v in found) + f" {g:8.2f} {a:8.2f} {a / g:6.2f}"
                  f"  {_load()}", flush=True)


def estimates(models, devices) -> None:
    print("The DP's estimate of its mapping / the full simulation of that mapping (ms): contention model on, off, "
          "and on with the overlap model")
    print(f"{'model':<13} {'GPUs':>4} {'on: est':>9} {'sim':>9} {'ratio':>6} {'off: est':>9} {'sim':>9} {'ratio':>6}"
          f" {'overlap: est':>12} {'sim':>9} {'ratio':>6} {'DP s on/off/overlap':>20}")
    for name in models:
        for n in devices:
            machine, pcg = _setup(name, n)
            sim = Simulator(machine, COST, detail=False)
            cells, took = [], []
            for contention, overlap in ((True, False), (False, False), (True, True)):
                got, t = _solve(machine, pcg, contention, overlap)
                sim.full(Strategy.from_configs(pcg, got.configs))
                cells.append((got.cost_s * 1e3, sim.iteration_time() * 1e3))
                took.append(t)
            row = " ".join(f"{e:{w}.3f} {s:9.3f} {e / s:6.3f}" for (e, s), w in zip(cells, (9, 9, 12)))
            print(f"{name:<13} {n:>4} {row} {'/'.join(f'{t:.1f}' for t in took):>20}  {_load()}", flush=True)


def dlrm(devices, budget: int) -> None:
    print(f"DLRM (per-GPU batch 1024) on summit: simulated iteration ms; Unity budget {budget}")
    print(f"{'GPUs':>5} {'unity':>9} {'data-par':>9} {'expert':>9} {'DP mapping':>11} {'unity/DP':>9} {'unity/exp':>9}")
    for n in devices:
        machine, pcg = _setup("dlrm", n)
        dp = fixed_result("dp", data_parallel(pcg, machine), machine, COST).cost_s
        ex = fixed_result("expert", expert_strategy("dlrm", pcg, machine), machine, COST).cost_s
        got, _ = _solve(machine, pcg, True)
        mapping = fixed_result("mapping", Strategy.from_configs(pcg, got.configs), machine, COST).cost_s
        u = unity(pcg, machine, COST, budget=budget, progress=False).cost_s
        print(f"{n:>5} {u * 1e3:9.3f} {dp * 1e3:9.3f} {ex * 1e3:9.3f} {mapping * 1e3:11.3f} {u / dp:9.3f} {u / ex:9.3f}"
              f"  {_load()}", flush=True)


def scaling(devices, repeat: int) -> None:
    print(f"ResNeXt-50 (per-GPU batch 64) on summit: one DP solve, median of {repeat} (min..max), ratio to the "
          f"first size in this run")
    print(f"{'GPUs':>5} {'on s':>7} {'range':>13} {'ratio':>6} {'off s':>7} {'range':>13} {'ratio':>6} {'on/off':>7}")
    first = None
    for n in devices:
        machine, pcg = _setup("resnext50", n)
        med = []
        rng = []
        for contention in (True, False):
            walls = [_solve(machine, pcg, contention)[1] for _ in range(repeat)]
            med.append(statistics.median(walls))
            rng.append(f"{min(walls):5.2f}..{max(walls):<5.2f}")
        first = first or med
        print(f"{n:>5} {med[0]:7.2f} {rng[0]:>13} {med[0] / first[0]:6.2f} {med[1]:7.2f} {rng[1]:>13} "
              f"{med[1] / first[1]:6.2f} {med[0] / med[1]:7.2f}  {_load()}", flush=True)


def search(devices, repeat: int, budget: int) -> None:
    """Unity's search with and without the model; without it, the search module's DP is given
    ``contention=False`` (the DP as it was before the model), runs alternating so load hits both."""
    import functools

    import flexrt.search.unity.search as unity_search
    plain = unity_search.MappingDP
    print(f"ResNeXt-50 (per-GPU batch 64) on summit: Unity's search (budget {budget}), median of {repeat} runs "
          f"(min..max), ratio to the first size in this run; found: the simulated ms of the strategy returned")
    print(f"{'GPUs':>5} {'on s':>7} {'range':>13} {'ratio':>6} {'off s':>7} {'range':>13} {'ratio':>6} {'on/off':>7}"
          f" {'found on':>10} {'found off':>10}")
    first = None
    try:
        for n in devices:
            machine, pcg = _setup("resnext50", n)
            walls: dict = {True: [], False: []}
            found = {}
            for _ in range(repeat):
                for contention in (True, False):
                    unity_search.MappingDP = functools.partial(plain, contention=contention)
                    t = time.perf_counter()
                    found[contention] = unity(pcg, machine, COST, budget=budget, progress=False).cost_s
                    walls[contention].append(time.perf_counter() - t)
            med = [statistics.median(walls[c]) for c in (True, False)]
            rng = [f"{min(walls[c]):5.2f}..{max(walls[c]):<5.2f}" for c in (True, False)]
            first = first or med
            print(f"{n:>5} {med[0]:7.2f} {rng[0]:>13} {med[0] / first[0]:6.2f} {med[1]:7.2f} {rng[1]:>13} "
                  f"{med[1] / first[1]:6.2f} {med[0] / med[1]:7.2f} {found[True] * 1e3:10.4f} {found[False] * 1e3:10.4f}"
                  f"  {_load()}", flush=True)
    finally:
        unity_search.MappingDP = plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--estimates", action="store_true")
    ap.add_argument("--dlrm", action="store_true")
    ap.add_argument("--scaling", action="store_true")
    ap.add_argument("--search", action="store_true")
    ap.add_argument("--peel", action="store_true")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--devices", type=int, nargs="+", default=list(DEVICES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--budget", type=int, default=1000)
    args = ap.parse_args()
    if not (args.estimates or args.dlrm or args.scaling or args.search or args.peel):
        args.estimates = True
    if args.estimates:
        estimates(args.models, args.devices)
    if args.dlrm:
        dlrm(args.devices, args.budget)
    if args.scaling:
        scaling(args.devices, args.repeat)
    if args.search:
        search(args.devices, args.repeat, args.budget)
    if args.peel:
        peel(args.models, args.devices, args.repeat)


if __name__ == "__main__":
    main()
