"""Symmetric simulation (``flexrt.simulator.folding``): one of R identical data-parallel replicas,
its gradient rings folded onto itself, simulates the whole machine's iteration exactly, on sizes
where both run: data parallelism, Megatron-LM's tensor, pipeline and data parallelism, with and
without recomputation and mixed precision."""

from __future__ import annotations

import json

import pytest

from flexrt.cli import main
from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import MachineSpecError, StrategyError
from flexrt.examples.gpt import build_model
from flexrt.ir.precision import with_precision
from flexrt.machine import load_machine
from flexrt.search.baselines import megatron_lm
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.folding import Fold
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import data_parallel
from flexrt.strategy.config import wiring_of
from flexrt.strategy.recompute import recompute_set


def gpt(batch: int, layers: int = 2):
    return build_model(FFConfig(["-b", str(batch)]), "gpt-tiny", layers=layers, hidden=64, heads=8, seq_length=32,
                       vocab=128).pcg


def mlp(batch: int):
    m = FFModel(FFConfig(["-b", str(batch)]))
    t = m.create_tensor([batch, 256], DataType.DT_FLOAT)
    for i in range(3):
        t = m.dense(t, 256, ActiMode.AC_MODE_RELU, name=f"fc{i}")
    m.softmax(m.dense(t, 16, name="head"), name="sm")
    return m.pcg


def both(full_strategy, sub_strategy, full, sub, replicas):
    whole = Simulator(full, AnalyticCostModel(), detail=False, incremental=False).full(full_strategy)
    folded = Simulator(sub, AnalyticCostModel(), detail=False, incremental=False,
                       fold=Fold(replicas, full, sub)).full(sub_strategy)
    return whole, folded


@pytest.mark.parametrize("nodes, replicas", [(2, 2), (4, 4), (4, 2), (2, 1)])
def test_data_parallel_replicas_fold_exactly(nodes, replicas):
    full, sub = load_machine("dgx_a100", nodes=nodes), load_machine("dgx_a100", nodes=nodes // replicas)
    whole, folded = both(data_parallel(mlp(64 * replicas), full), data_parallel(mlp(64), sub), full, sub, replicas)
    assert folded.iteration_time_s == pytest.approx(whole.iteration_time_s, rel=1e-12)
    assert folded.num_tasks < whole.num_tasks or replicas == 1
    assert folded.memory_bytes[0] == whole.memory_bytes[0]


@pytest.mark.parametrize("nodes, pipeline, replicas, extra", [
    (2, 1, 2, ""), (4, 2, 2, ""), (8, 2, 4, ""), (8, 4, 2, ""), (4, 2, 2, "recompute"), (4, 2, 2, "bf16"),
    (4, 2, 2, "small"), (8, 2, 4, "small"), (2, 2, 1, "")])
def test_megatron_replicas_fold_exactly(nodes, pipeline, replicas, extra):
    """Also where a micro-batch holds one sample per replica ("small": the output is split along the
    sequence within a replica, and each replica scores its own rows, as a framework does), and one
    replica alone (its rings close inside it: they ran to a device past the machine's)."""
    m = 4 if pipeline > 1 else 1
    batch = m * replicas * (1 if extra == "small" else 8)     # else micro-batches split over a whole stage block
    full, sub = load_machine("dgx_a100", nodes=nodes), load_machine("dgx_a100", nodes=nodes // replicas)
    big, small = gpt(batch), gpt(batch // replicas)
    if extra == "bf16":
        big, small = with_precision(big, "bf16"), with_precision(small, "bf16")
    sf = megatron_lm(big, full, tensor=8, pipeline=pipeline, micro_batches=m)
    ss = megatron_lm(small, sub, tensor=8, pipeline=pipeline, micro_batches=m)
    if extra == "recompute":
        names = recompute_set(wiring_of(big), "full", segment_ops=3)
        sf, ss = sf.with_recompute(names), ss.with_recompute(names)
    whole, folded = both(sf, ss, full, sub, replicas)
    assert folded.iteration_time_s == pytest.approx(whole.iteration_time_s, rel=1e-12)
    assert folded.num_tasks * replicas == pytest.approx(whole.num_tasks, rel=0.05)


def test_folding_is_checked():
    full, sub = load_machine("dgx_a100", nodes=4), load_machine("dgx_a100", nodes=2)
    with pytest.raises(MachineSpecError, match="do not make machine"):
        Fold(3, full, sub)
    with pytest.raises(StrategyError, match="without detail"):
        Simulator(sub, AnalyticCostModel(), fold=Fold(2, full, sub))


def test_simulate_symmetric_reports_throughput_flops_and_its_own_cost(capsys):
    args = ["simulate", "gpt", "--config", "gpt-tiny", "--layers", "2", "--hidden", "64", "--heads", "8",
            "--seq-length", "32", "--vocab", "128", "-b", "64", "--machine", "dgx_a100", "--nodes", "4", "--megatron",
            "--pipeline", "2", "--micro-batches", "4"]
    assert main(args + ["--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main(args + ["--json", "--symmetric"]) == 0
    folded = json.loads(capsys.readouterr().out)
    assert folded["symmetric_replicas"] == 2 and whole["symmetric_replicas"] == 1
    assert folded["totals_of"] == "one data-parallel replica" and whole["totals_of"] == "the machine"
    assert folded["compute_time_s"] == pytest.approx(whole["compute_time_s"] / 2, rel=1e-9)  # one replica's of two
    assert folded["iteration_time_s"] == pytest.approx(whole["iteration_time_s"], rel=1e-12)
    assert folded["model_tflops_per_gpu"] == pytest.approx(whole["model_tflops_per_gpu"], rel=1e-9)
    assert folded["model_tflops_per_gpu"] > 0
    assert folded["simulation_wall_s"] > 0 and folded["simulation_peak_rss_bytes"] > 0
    assert main([a for a in args if a != "--megatron"] + ["--symmetric"]) == 1
    assert "--symmetric folds Megatron-LM's data-parallel replicas: give --megatron" in capsys.readouterr().err
    assert main(args + ["--symmetric", "--tensor-parallel", "4"]) == 1
    assert "tensor parallelism over whole nodes" in capsys.readouterr().err
    four_heads = [a if a != "8" else "4" for a in args]       # --heads 4: no 8-way tensor group
    assert main(four_heads + ["--symmetric"]) == 1
    assert "attention heads allow only 4, 2, 1" in capsys.readouterr().err
    one = [a if a != "4" else "2" for a in args]               # --nodes 2 --pipeline 2: one replica
    assert main(one + ["--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(one + ["--json", "--symmetric"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == pytest.approx(alone["iteration_time_s"],
                                                                                    rel=1e-12)
