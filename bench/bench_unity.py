"""Unity's search speed and memory: ResNeXt-50 on summit at 6..48 GPUs (the shape of Unity's Table 2).

    python bench/bench_unity.py [--model resnext50] [--devices 6 12 24 48] [--budget 1000] [--repeat 3]
                                 [--config-ratio 4 [0 ...]] [--save DIR]
                                 median search wall seconds over --repeat runs, the found strategy's
                                 simulated iteration time, and the process's peak resident memory so far
                                 (sizes run in increasing order, so it is the largest size's peak; the
                                 mapping DP's memo is bounded: README, "Unity's search") (--save DIR
                                 writes each found strategy as JSON, to compare runs); per
                                 --config-ratio (the configurations' pruning bound, 0: none; default
                                 the search's), with the wall-time ratio to the first one given (the
                                 peak is the process's so far: run one ratio per process to compare
                                 peaks)

The papers' figures (Unity Fig. 2, Table 2, Fig. 14, Fig. 15a and 15b) are experiments:
`flexrt run configs/experiments/unity_fig14.yaml [--quick]` etc. (README, "Experiments"). Per-GPU
batch 64 (Unity §6.1); costs: the analytic model; times are wall-clock seconds on this machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

from flexrt.cli._common import count
from flexrt.errors import ConfigError
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search.unity import DEFAULT_CONFIG_RATIO, unity
from flexrt.search.unity.costs import check_config_ratio
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import save_strategy

COST = AnalyticCostModel()
MODELS = {"resnext50": 64, "inception_v3": 64, "bert_large": 4, "dlrm": 1024, "xdl": 1024, "candle_uno": 256,
          "mlp": 256}
DEVICES = (6, 12, 24, 48)


def _machine(devices: int):
    return load_machine("summit", nodes=devices // load_machine("summit").devices_per_node)


def _model(name: str, devices: int, extra=()):
    flags = ["-b", str(MODELS[name] * devices), *extra]
    if name == "bert_large":
        flags += ["--seq-length", "512"]
    return load_model(name, flags)


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20    # KiB on Linux


def scaling(devices, budget: int, repeat: int, save_dir, model: str = "resnext50",
            ratios=(DEFAULT_CONFIG_RATIO,)) -> None:
    print(f"{model} on summit, per-GPU batch {MODELS[model]}, budget {budget}: median of {repeat} Unity searches")
    print(f"{'GPUs':>5} {'ratio':>5} {'wall s':>8} {'min s':>7} {'max s':>7} {'x first':>7} {'found ms':>10} "
          f"{'DP est ms':>10} {'peak GiB':>9}  load avg")
    unity(_model("mlp", 6).model.pcg, _machine(6), COST, budget=2, progress=False)   # one-time loads, untimed
    for n in sorted(devices):
        machine = _machine(n)
        base = _model(model, n).model.pcg
        first = None
        for ratio in ratios:
            walls, r = [], None
            for _ in range(repeat):
                t = time.perf_counter()
                r = unity(base, machine, COST, budget=budget, progress=False, config_ratio=ratio)
                walls.append(time.perf_counter() - t)
            if save_dir:
                os.makedirs(save_dir, exist_ok=True)
                save_strategy(os.path.join(save_dir, f"{model}_summit_{n}_r{ratio:g}.json"), r.strategy, machine)
            wall = statistics.median(walls)
            first = first or wall
            print(f"{n:>5} {ratio:5g} {wall:8.2f} {min(walls):7.2f} {max(walls):7.2f} {wall / first:7.3f} "
                  f"{r.cost_s * 1e3:10.4f} {r.log.notes['estimated_s'] * 1e3:10.4f} {_peak_gib():9.2f}  "
                  f"{os.getloadavg()[0]:.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="resnext50")
    ap.add_argument("--repeat", type=count(1), default=3, help="searches per size (the median is printed)")
    ap.add_argument("--save", metavar="DIR", help="write each found strategy to DIR")
    ap.add_argument("--devices", type=count(1), nargs="+", default=list(DEVICES))
    ap.add_argument("--budget", type=count(0), default=1000)
    ap.add_argument("--config-ratio", type=float, nargs="+", default=[DEFAULT_CONFIG_RATIO],
                    help="the configurations' pruning bound(s) to compare (0: none)")
    ap.add_argument("--scaling", action="store_true", help="(the default and only measurement; kept for old scripts)")
    args = ap.parse_args()
    per_node = load_machine("summit").devices_per_node
    if any(n % per_node for n in args.devices):
        ap.error(f"--devices: summit has {per_node} devices per node; give whole nodes, got {args.devices}")
    for ratio in args.config_ratio:
        try:
            check_config_ratio(ratio)
        except ConfigError as e:
            ap.error(f"--config-ratio: {e}")
    scaling(args.devices, args.budget, args.repeat, args.save, args.model, args.config_ratio)


if __name__ == "__main__":
    main()
