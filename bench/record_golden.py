"""Record (or check) the simulated iteration times of every zoo model under data parallelism and its
expert strategy: the regression reference of tests/simulator/test_golden_times.py.

    python bench/record_golden.py [--write]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.model.loader import zoo_models
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import simulate

PATH = Path(__file__).resolve().parents[1] / "tests" / "simulator" / "data" / "golden_times.json"
CASES = [("flexflow_p100", 1), ("flexflow_p100", 4)]


def record() -> dict:
    from flexrt.search.baselines import expert_strategy
    from flexrt.strategy import data_parallel
    out = {}
    for z in zoo_models():
        for mname, nodes in CASES:
            machine = load_machine(mname, nodes=nodes)
            n = machine.num_devices
            base = load_model(z.name, ["-b", str(16 * n)]).model.pcg
            for label, fn in (("dp", lambda: data_parallel(base, machine)),
                              ("expert", lambda: expert_strategy(z.name, base, machine))):
                s = fn()
                if s is None:
                    continue
                r = simulate(s, machine, AnalyticCostModel())
                out[f"{z.name}/{mname}x{nodes}/{label}"] = {
                    "iteration_time_s": r.iteration_time_s.hex(), "num_tasks": r.num_tasks,
                    "moved_elements": r.total_moved_elements}
                print(z.name, mname, nodes, label, r.iteration_time_s, r.num_tasks, flush=True)
    return out


if __name__ == "__main__":
    data = record()
    if "--write" in sys.argv:
        PATH.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
