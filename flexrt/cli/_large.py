"""What ``flexrt simulate`` adds for large-model training: the symmetric simulation of Megatron-LM's
strategy (``--symmetric``: one data-parallel replica for the whole machine, ``flexrt.simulator.
folding``) and the figures large-model papers report (achieved TFLOP/s per GPU, model and hardware,
and the simulation's own run time and peak memory).

Entry points: ``add_symmetric_flag``, ``symmetric_simulation``, ``flops_report``.
"""

from __future__ import annotations

import resource
import sys
import time

from flexrt.errors import ConfigError
from flexrt.ir.costs import op_cost
from flexrt.machine import load_machine
from flexrt.model import load_model


def add_symmetric_flag(parser) -> None:
    parser.add_argument("--symmetric", action="store_true",
                        help="with --megatron: simulate one data-parallel replica for the whole machine (identical "
                             "replicas fold into one; tensor parallel over whole nodes)")


def _replica_argv(extra, batch: int) -> list:
    """The model flags with the batch replaced (the last -b wins)."""
    return list(extra) + ["-b", str(batch)]


def symmetric_simulation(args, extra, loaded, machine, cost, optimizer):
    """(result, the replica's strategy, the simulator, replicas) of ``--symmetric``: Megatron-LM's
    strategy for ``machine`` folded onto one data-parallel replica (ConfigError where it cannot be)."""
    from flexrt.cli._common import precision_arg, recompute_arg, warn_megatron_shortfalls
    from flexrt.search.baselines import megatron_lm, tensor_degrees
    from flexrt.simulator.folding import Fold
    from flexrt.simulator.simulate import Simulator
    if not args.megatron:
        raise ConfigError("--symmetric folds Megatron-LM's data-parallel replicas: give --megatron")
    if args.trace or args.taskgraph or args.method != "full" or args.fusion != "off":
        raise ConfigError("--symmetric simulates timings only: leave out --trace, --taskgraph, --method delta and "
                          "--fusion")
    t = args.tensor_parallel or machine.devices_per_node
    p = args.pipeline or 1
    if t != machine.devices_per_node:
        raise ConfigError(f"--symmetric needs tensor parallelism over whole nodes (--tensor-parallel "
                          f"{machine.devices_per_node}), so that replicas are groups of nodes; got {t}")
    if machine.num_devices % (t * p):
        raise ConfigError(f"--symmetric: tensor {t} x pipeline {p} does not divide the machine's {machine.num_devices} "
                          f"devices")
    replicas = machine.num_devices // (t * p)
    batch = loaded.config.batch_size
    if batch % replicas:
        raise ConfigError(f"--symmetric: batch {batch} does not divide over {replicas} data-parallel replicas")
    m = args.micro_batches
    if m and (batch // replicas) % m:
        raise ConfigError(f"the batch of {batch} over {replicas} data-parallel replicas is {batch // replicas} a "
                          f"replica, which does not divide into {m} micro-batches (--micro-batches); give a batch that "
                          f"is a multiple of {replicas * m}, or --micro-batches dividing {batch // replicas}")
    sub = load_machine(args.machine, nodes=machine.num_nodes // replicas)
    one = load_model(args.model, _replica_argv(extra, batch // replicas))
    base = precision_arg(args, one.model.pcg)
    valid = tensor_degrees(base, sub)
    if t not in valid:
        raise ConfigError(f"--symmetric folds replicas of whole nodes, so its tensor parallel degree is a node's {t} "
                          f"devices, but this model's attention heads allow only {', '.join(map(str, valid))} "
                          f"(Megatron-LM's degree must divide them): simulate it without --symmetric")
    warn_megatron_shortfalls(base, sub, t, p)
    strategy = megatron_lm(base, sub, tensor=t, pipeline=p, micro_batches=args.micro_batches, schedule=args.schedule,
                           chunks=args.chunks or (2 if args.schedule == "interleaved" else 1),
                           sequence_parallel=args.sequence_parallel)
    strategy = recompute_arg(args, base, strategy)
    sim = Simulator(sub, cost, optimizer, detail=False, incremental=False, fold=Fold(replicas, machine, sub))
    return sim.full(strategy), strategy, sim, replicas


def flops_report(base, strategy, iteration_s: float, gpus: int) -> dict:
    """Achieved TFLOP/s per GPU: model FLOPs (forward and backward of the whole batch's model ``base``)
    and hardware FLOPs (with the forwards recomputation repeats), over ``gpus`` devices."""
    recomputed = getattr(strategy, "recompute", frozenset())
    model = hardware = 0
    for node in base.operators():
        ins = [base.shape(r).tensor_shape for r in node.inputs]
        outs = [s.tensor_shape for s in base.output_shapes(node.id)]
        c = op_cost(node.attrs, ins, outs)
        model += c.forward_flops + c.backward_flops
        hardware += c.forward_flops + c.backward_flops + (c.forward_flops if node.name in recomputed else 0)
    scale = 1e12 * iteration_s * gpus
    return {"model_flops": model, "hardware_flops": hardware, "model_tflops_per_gpu": model / scale,
            "hardware_tflops_per_gpu": hardware / scale}


def own_cost(t0: float) -> dict:
    """This process's run time since ``t0`` and its peak resident memory."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"wall_s": time.perf_counter() - t0, "peak_rss_bytes": rss * (1 if sys.platform == "darwin" else 1024)}
