"""``megatron_gpt``: one GPT run under Megatron-LM's strategy, as ``flexrt simulate gpt --megatron``
runs it (what Narayanan et al.'s Table 1 reports), and its inputs checked when the file is read."""

from __future__ import annotations

import json

import pytest

from flexrt.cli import main
from flexrt.errors import ConfigError
from flexrt.experiments import kind, parse_experiment
from flexrt.experiments.megatron import megatron_argv

TINY = {"layers": 2, "hidden": 64, "heads": 8, "tensor": 8, "pipeline": 2, "gpus": 32, "batch": 16, "micro_batch": 1,
        "seq_length": 64, "vocab": 1024, "machine": "dgx_a100", "precision": "fp16", "recompute": "full",
        "attention": "materialized", "schedule": "1f1b", "grad_sync": "after_backward"}


def test_the_run_is_the_command_a_user_runs(capsys):
    """The run's numbers are `flexrt simulate`'s for the same command line: 2 replicas of 16 GPUs (t=8
    over a node, p=2), symmetric, 8 micro-batches of one sequence each."""
    argv = megatron_argv(TINY)
    assert argv[argv.index("--micro-batches") + 1] == "8" and "--symmetric" in argv and "--nodes" in argv
    assert argv[argv.index("--grad-sync") + 1] == "after-backward"   # Megatron-LM's default
    out = kind("megatron_gpt").fn(TINY).metrics
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert out["iteration_s"] == doc["iteration_time_s"] and out["tasks"] == doc["num_tasks"]
    assert out["hardware_tflops_per_gpu"] == doc["hardware_tflops_per_gpu"] > out["model_tflops_per_gpu"]  # recomputed
    assert out["fits"] and 0 < out["bubble"] < 1


def test_materialized_attention_is_slower_than_fused():
    fused = kind("megatron_gpt").fn({**TINY, "attention": "fused"}).metrics
    materialized = kind("megatron_gpt").fn(TINY).metrics
    assert materialized["iteration_s"] > fused["iteration_s"]


def test_one_stage_accumulates_micro_batches_and_is_not_symmetric_below_a_node():
    argv = megatron_argv({**TINY, "tensor": 2, "pipeline": 1, "gpus": 8, "micro_batch": 2})
    assert argv[argv.index("--micro-batches") + 1] == "2" and "--symmetric" not in argv   # 16 / (4 replicas x 2)


@pytest.mark.parametrize("change, message", [
    ({"gpus": 12}, "12 GPUs are not whole 8-GPU nodes of dgx_a100"),
    ({"gpus": 40, "pipeline": 2}, "40 GPUs are not whole 8-GPU nodes of dgx_a100 divided by tensor 8 x pipeline 2"),
    ({"batch": 15}, "batch 15 does not divide into micro-batches of 1 over 2 data-parallel replicas"),
])
def test_inputs_that_do_not_go_together_are_refused_when_read(change, message):
    with pytest.raises(ConfigError, match=message):
        megatron_argv({**TINY, **change})
    run = ", ".join(f"{k}: {v}" for k, v in {**TINY, **change}.items())
    text = (f"name: demo\ntitle: t\npaper: megatron\nreproduces: r\nkind: megatron_gpt\nruns:\n  - {{{run}}}\n"
            f"measure: [iteration_s]\n")
    with pytest.raises(ConfigError, match=message):
        parse_experiment(text, "demo.yaml")
