"""The simulated iteration time of every zoo model under data parallelism and its expert strategy
is bit-identical to the recorded reference (``bench/record_golden.py`` wrote it before the
strategy layer was rebuilt): refactors of lowering and simulation may not change a prediction."""

import json
from pathlib import Path

import pytest

from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search.baselines import expert_strategy
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import simulate
from flexrt.strategy import data_parallel

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden_times.json").read_text())
FAST = {"lenet", "mlp", "mlp_unity_fig2", "rnnlm_2step", "xdl", "alexnet", "rnntc"}


def _cases():
    for key in sorted(GOLDEN):
        model = key.split("/")[0]
        marks = () if model in FAST and "x1/" in key else (pytest.mark.slow,)
        yield pytest.param(key, marks=marks, id=key)


@pytest.mark.parametrize("key", list(_cases()))
def test_zoo_simulated_time_matches_recorded(key):
    model, where, label = key.split("/")
    mname, nodes = where.rsplit("x", 1)
    machine = load_machine(mname, nodes=int(nodes))
    base = load_model(model, ["-b", str(16 * machine.num_devices)]).model.pcg
    strategy = data_parallel(base, machine) if label == "dp" else expert_strategy(model, base, machine)
    r = simulate(strategy, machine, AnalyticCostModel())
    want = GOLDEN[key]
    assert (r.iteration_time_s.hex(), r.num_tasks, r.total_moved_elements) == (
        want["iteration_time_s"], want["num_tasks"], want["moved_elements"])
