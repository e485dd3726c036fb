"""Run kinds that check the simulator against Megatron-LM's published GPT measurements.

- ``megatron_weak_scaling``: tensor parallelism within one DGX-2H node, weak scaling (Shoeybi et al.
  2019, §5.1, Table 1): the efficiency of 2-8 GPUs against one.
- ``megatron_gpt``: one GPT training run under Megatron-LM's 3-D strategy (tensor parallel within a
  node, pipeline across nodes, data parallel over the rest), as ``flexrt simulate gpt --megatron``
  runs it (the symmetric simulation where the tensor group is a whole node), reporting achieved
  TFLOP/s per GPU, iteration time and memory: the numbers of Narayanan et al. 2021, Table 1.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import sys

from flexrt.errors import ConfigError
from flexrt.experiments.common import COST, machine_param, precision_param
from flexrt.experiments.kinds import REQUIRED, Outcome, Param, problem_of, register_kind
from flexrt.ir.precision import with_precision
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import load_machine
from flexrt.search.api import fixed_result
from flexrt.simulator.cost_model import ATTENTION_KERNELS
from flexrt.simulator.sync_lowering import GRAD_SYNCS
from flexrt.strategy.pipeline import Schedule
from flexrt.strategy.recompute import Granularity

# GPUs -> (layers, hidden, heads): Megatron-LM's weak-scaling models (Shoeybi et al. 2019, Table 1)
MEGATRON_WEAK = {1: (40, 1536, 16), 2: (54, 1920, 20), 4: (64, 2304, 24), 8: (72, 3072, 32)}


@functools.lru_cache(maxsize=None)
def _megatron_rate(efficiency: float, gpus: int) -> float:
    """Model TFLOP/s per GPU of Megatron-LM's weak-scaling GPT on ``gpus`` GPUs of the dgx2h preset at
    ``efficiency`` of peak, one tensor group (batch 8, sequence 1,024, vocabulary 51,200, fp16, Adam);
    computed once per process (every run of a weak-scaling experiment divides by the 1-GPU rate)."""
    import dataclasses
    from flexrt.machine.load import load_spec
    from flexrt.machine.spec import build_machine
    from flexrt.cli._large import flops_report
    from flexrt.model import load_model
    from flexrt.search.baselines import megatron_lm
    spec = load_spec("dgx2h")
    machine = build_machine(dataclasses.replace(spec, device_kinds=tuple(
        dataclasses.replace(k, efficiency=efficiency) for k in spec.device_kinds)))
    layers, hidden, heads = MEGATRON_WEAK[gpus]
    model = load_model("gpt", ["-b", "8", "--layers", str(layers), "--hidden", str(hidden), "--heads", str(heads),
                               "--seq-length", "1024", "--vocab", "51200"])
    pcg = with_precision(model.model.pcg, "fp16")
    strategy = megatron_lm(pcg, machine, tensor=gpus, data=1)
    r = fixed_result("megatron", strategy, machine, COST, OptimizerKind.ADAM)
    return flops_report(pcg, strategy, r.cost_s, gpus)["model_tflops_per_gpu"]


@register_kind(
    "megatron_weak_scaling",
    params=(Param("gpus", "int", REQUIRED, choices=tuple(MEGATRON_WEAK), help="GPUs of the tensor group"),
            Param("efficiency", "float", 0.8, minimum=0.01, maximum=1.0,
                  help="the GPUs' fraction of peak (the dgx2h preset's 0.8; Megatron-LM v1.0 measured 48 %)")),
    metrics=("tflops_per_gpu", "tflops_per_gpu_one", "efficiency"),
    description="Megatron-LM's tensor parallelism within a DGX-2H node, weak scaling (Shoeybi et al. 2019 §5.1): "
                "what checks the simulator's cost of tensor parallelism")
def megatron_weak_scaling(inputs) -> Outcome:
    rate, one = _megatron_rate(inputs["efficiency"], inputs["gpus"]), _megatron_rate(inputs["efficiency"], 1)
    return Outcome({"tflops_per_gpu": rate, "tflops_per_gpu_one": one, "efficiency": rate / one})


def _simulate_json(argv: list) -> dict:
    """``flexrt simulate ARGV --json`` run in this process: its JSON document; its error as ours."""
    from flexrt.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv + ["--json"])
    if status == 130:
        raise KeyboardInterrupt
    for line in err.getvalue().splitlines():     # the command's warnings reach the user; its error is ours below
        if status == 0 or not line.startswith("flexrt: error"):
            print(line, file=sys.stderr)
    if status:
        lines = err.getvalue().strip().splitlines()
        raise ConfigError(f"flexrt {' '.join(argv)}: {lines[-1] if lines else f'exit status {status}'}")
    return json.loads(out.getvalue())


def megatron_argv(inputs) -> list:
    """The ``flexrt simulate`` command line of one ``megatron_gpt`` run: Megatron-LM's strategy on
    ``gpus`` GPUs of ``machine`` with tensor t, pipeline p and data d = gpus / (t p); the batch in
    micro-batches of ``micro_batch`` sequences per replica (batch / (d micro_batch) of them);
    symmetric (one replica simulated) where the tensor group is a whole node and there are several."""
    machine = load_machine(inputs["machine"])
    per_node, gpus, t, p = machine.devices_per_node, inputs["gpus"], inputs["tensor"], inputs["pipeline"]
    if gpus % per_node or gpus % (t * p):
        raise ConfigError(f"megatron_gpt: {gpus} GPUs are not whole {per_node}-GPU nodes of {inputs['machine']} "
                          f"divided by tensor {t} x pipeline {p}")
    d = gpus // (t * p)
    if inputs["batch"] % (d * inputs["micro_batch"]):
        raise ConfigError(f"megatron_gpt: batch {inputs['batch']} does not divide into micro-batches of "
                          f"{inputs['micro_batch']} over {d} data-parallel replicas")
    argv = ["simulate", "gpt", "--layers", str(inputs["layers"]), "--hidden", str(inputs["hidden"]),
            "--heads", str(inputs["heads"]), "--seq-length", str(inputs["seq_length"]), "--vocab", str(inputs["vocab"]),
            "-b", str(inputs["batch"]), "--machine", inputs["machine"], "--nodes", str(gpus // per_node),
            "--megatron", "--tensor-parallel", str(t), "--pipeline", str(p),
            "--micro-batches", str(inputs["batch"] // (d * inputs["micro_batch"])), "--schedule", inputs["schedule"],
            "--precision", inputs["precision"], "--recompute", inputs["recompute"], "--attention", inputs["attention"],
            "--optimizer", "adam", "--grad-sync", inputs["grad_sync"].replace("_", "-")]
    return argv + (["--symmetric"] if t == per_node and d > 1 else [])


@register_kind(
    "megatron_gpt",
    params=(Param("layers", "int", REQUIRED, minimum=1), Param("hidden", "int", REQUIRED, minimum=1),
            Param("heads", "int", REQUIRED, minimum=1), Param("tensor", "int", 1, minimum=1, help="tensor parallel t"),
            Param("pipeline", "int", 1, minimum=1, help="pipeline stages p"),
            Param("gpus", "int", REQUIRED, minimum=1, help="GPUs in all (data parallel d = gpus / (t p))"),
            Param("batch", "int", REQUIRED, minimum=1, help="global batch (sequences)"),
            Param("micro_batch", "int", 1, minimum=1, help="sequences per micro-batch per replica"),
            Param("seq_length", "int", 2048, minimum=1), Param("vocab", "int", 51200, minimum=1),
            machine_param("dgx_a100"), precision_param(),
            Param("recompute", "str", "full", choices=tuple(g.value for g in Granularity)),
            Param("attention", "str", "materialized", choices=ATTENTION_KERNELS,
                  help="how attention's scores are timed (materialized: Megatron-LM before FlashAttention)"),
            Param("schedule", "str", "1f1b", choices=tuple(s.value for s in Schedule)),
            Param("grad_sync", "str", "after_backward", choices=GRAD_SYNCS,
                  help="when gradients are all-reduced (after_backward: Megatron-LM's default, "
                       "overlap_grad_reduce off)")),
    metrics=("iteration_s", "hardware_tflops_per_gpu", "model_tflops_per_gpu", "memory_gb", "fits", "bubble",
             "simulation_s", "simulation_gb", "tasks"),
    description="one GPT run under Megatron-LM's 3-D strategy, simulated as `flexrt simulate gpt --megatron` "
                "does: achieved TFLOP/s per GPU (Narayanan et al. 2021, Table 1)",
    check=lambda inputs: problem_of(megatron_argv, inputs))
def megatron_gpt(inputs) -> Outcome:
    doc = _simulate_json(megatron_argv(inputs))
    memory = max(m["total"] for m in doc["memory_bytes"].values())
    pipeline = doc["pipeline"] or {}
    return Outcome({"iteration_s": doc["iteration_time_s"], "hardware_tflops_per_gpu": doc["hardware_tflops_per_gpu"],
                    "model_tflops_per_gpu": doc["model_tflops_per_gpu"], "memory_gb": memory / 1e9,
                    "fits": not doc["over_capacity"], "bubble": pipeline.get("bubble"),
                    "simulation_s": doc["simulation_wall_s"], "simulation_gb": doc["simulation_peak_rss_bytes"] / 1e9,
                    "tasks": doc["num_tasks"]})
