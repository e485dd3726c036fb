"""How fast FlexFlow's MCMC searches, with the two ways of resyncing the delta simulator after a
rejected proposal (``sync``: "lazy" folds the rejected operator into the next delta, "back"
simulates back to the current strategy at once): whole-search wall time and proposals per second.

FlexFlow's Fig. 6 itself (speed-ups over data parallelism and the expert strategy) is the experiment
``configs/experiments/flexflow_fig6.yaml``: ``flexrt run flexflow_fig6 [--quick]``. This script runs
that experiment's run kind (``search_speedup``) and keeps only the speed of the search.

    python bench/bench_fig6.py                         AlexNet and RNNTC, 4 devices, budget 200
    python bench/bench_fig6.py --models nmt --devices 16 --budget 500
"""

from __future__ import annotations

import argparse
import os
import sys

from flexrt.experiments import kind

MODELS = ("alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", choices=MODELS, default=["alexnet", "rnntc"])
    p.add_argument("--machine", default="flexflow_p100")
    p.add_argument("--devices", nargs="+", type=int, default=[4])
    p.add_argument("--budget", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    run = kind("search_speedup")
    defaults = {q.name: q.default for q in run.params if not q.required}
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; MCMC budget {a.budget}")
    print(f"{'model':<13} {'dev':>4} {'sync':<5} {'search s':>9} {'proposals/s':>12} {'found ms':>10}")
    for model in a.models:
        for n in a.devices:
            for sync in ("lazy", "back"):
                inputs = {**defaults, "model": model, "machine": a.machine, "devices": n, "budget": a.budget,
                          "seed": a.seed, "options": {"sync": sync}}
                m = run.fn(inputs).metrics
                print(f"{model:<13} {n:>4} {sync:<5} {m['search_s']:>9.2f} {m['proposals'] / m['search_s']:>12.1f} "
                      f"{m['found_ms']:>10.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
