"""Megatron-LM's tensor parallelism within a node, simulated against what Megatron-LM measured.

    python bench/bench_megatron_tp.py            weak scaling on a DGX-2H (Shoeybi et al. 2019, Table 1
                                                 and §5.1): GPT-2 models of 1.2B, 2.5B, 4.2B and 8.3B
                                                 parameters on 1, 2, 4 and 8 GPUs, tensor parallel over
                                                 all of them, batch 8, sequence 1024, vocabulary 51,200,
                                                 mixed precision, Adam; per-GPU TFLOP/s and scaling
                                                 efficiency against the 1-GPU run
    python bench/bench_megatron_tp.py --bert     BERT-Large on 6..48 GPUs of summit (Unity's Fig. 14
                                                 setting): every Megatron configuration Megatron-LM
                                                 supports (tensor degrees dividing the 16 heads, pipelines)
                                                 against data parallelism

Megatron-LM reports 77% weak-scaling efficiency at 8-way tensor parallelism (paper, §5.1; 39 TFLOP/s on
one GPU); its v1.0 release (nv-adlr.github.io/MegatronLMV1, Table 1, models of 1.2/2.0/4.2/8.7B) reports
90.7%, 86.5% and 79.6% at 2, 4 and 8 GPUs (62.4 TFLOP/s on one). Simulated with the analytic costs;
times are simulated, the wall seconds are this host's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from flexrt.cli._large import flops_report
from flexrt.ir.precision import with_precision
from flexrt.ir.summary import totals
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import load_machine
from flexrt.machine.load import load_spec
from flexrt.machine.spec import build_machine
from flexrt.model import load_model
from flexrt.search.api import fixed_result
from flexrt.search.baselines import megatron_best, megatron_lm
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import data_parallel

COST = AnalyticCostModel()
# GPUs -> (layers, hidden, heads) of Megatron-LM's Table 1
WEAK = {1: (40, 1536, 16), 2: (54, 1920, 20), 4: (64, 2304, 24), 8: (72, 3072, 32)}
PAPER = {1: 1.00, 2: None, 4: None, 8: 0.77}
RELEASE = {1: 1.00, 2: 0.907, 4: 0.865, 8: 0.796}


def _dgx2h(efficiency: float | None):
    """The dgx2h preset, its GPUs' fraction of peak replaced where ``efficiency`` is given."""
    spec = load_spec("dgx2h")
    if efficiency is not None:
        spec = dataclasses.replace(spec, device_kinds=tuple(dataclasses.replace(k, efficiency=efficiency)
                                                            for k in spec.device_kinds))
    return build_machine(spec)


def weak_scaling(efficiency: float | None) -> None:
    machine = _dgx2h(efficiency)
    print(f"Megatron-LM weak scaling on dgx2h, GPU efficiency {machine.devices[0].spec.efficiency} (batch 8, "
          f"sequence 1024, fp16, Adam): simulated")
    print(f"{'GPUs':>4} {'params':>7} {'iter ms':>9} {'TFLOP/s/GPU':>12} {'efficiency':>10} {'paper':>6} "
          f"{'v1.0':>6} {'wall s':>7}")
    base_rate = None
    for gpus, (layers, hidden, heads) in WEAK.items():
        t0 = time.perf_counter()
        model = load_model("gpt", ["-b", "8", "--layers", str(layers), "--hidden", str(hidden), "--heads", str(heads),
                                   "--seq-length", "1024", "--vocab", "51200"])
        pcg = with_precision(model.model.pcg, "fp16")
        strategy = megatron_lm(pcg, machine, tensor=gpus, data=1)
        r = fixed_result("megatron", strategy, machine, COST, OptimizerKind.ADAM)
        rate = flops_report(pcg, strategy, r.cost_s, gpus)["model_tflops_per_gpu"]
        base_rate = base_rate or rate
        params = totals(pcg).params / 1e9
        paper = f"{PAPER[gpus]:6.2f}" if PAPER[gpus] else f"{'-':>6}"
        print(f"{gpus:>4} {params:6.2f}B {r.cost_s * 1e3:9.1f} {rate:12.1f} {rate / base_rate:10.2f} {paper} "
              f"{RELEASE[gpus]:6.3f} {time.perf_counter() - t0:7.1f}", flush=True)


def bert(devices) -> None:
    print("BERT-Large on summit (per-GPU batch 4, sequence 512, SGD): Megatron-LM's supported configurations "
          "(t tensor, p pipeline; d data = GPUs / (t p)) against data parallelism, simulated ms")
    for n in devices:
        machine = load_machine("summit", nodes=max(1, n // 6))
        pcg = load_model("bert_large", ["-b", str(4 * n), "--seq-length", "512"]).model.pcg
        t0 = time.perf_counter()
        dp = fixed_result("dp", data_parallel(pcg, machine), machine, COST).cost_s
        best = megatron_best(pcg, machine, COST)
        tried = " ".join(f"{k}:{v * 1e3:.0f}" for k, v in best.log.notes["configurations"].items())
        print(f"{n:>3} GPUs: data parallel {dp * 1e3:.1f}; Megatron best {best.log.notes['chosen']} "
              f"{best.cost_s * 1e3:.1f} ({dp / best.cost_s:.2f}x DP); all: {tried}  ({time.perf_counter() - t0:.0f} s, "
              f"load {os.getloadavg()[0]:.1f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bert", action="store_true")
    ap.add_argument("--efficiency", type=float, nargs="+", default=[0.8, 0.48],
                    help="weak scaling: the GPUs' fraction of peak, one run each (the preset's 0.8, and 0.48: "
                         "Megatron-LM v1.0 measured 48%% of peak on one GPU)")
    ap.add_argument("--devices", type=int, nargs="+", default=[6, 12, 24, 48])
    args = ap.parse_args()
    if args.bert:
        bert(args.devices)
    else:
        for e in args.efficiency:
            weak_scaling(e)


if __name__ == "__main__":
    main()
