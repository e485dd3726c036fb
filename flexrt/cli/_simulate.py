"""``flexrt simulate MODEL --machine M``: simulate one training iteration of a strategy and print
the iteration time, compute vs communication, data moved, link traffic and memory per device."""

from __future__ import annotations

import sys
import time

from flexrt.cli._common import (add_comm_cost_flag, add_cost_flags, operator_cost_model, add_fused_cost_flag, add_fusion_flag, add_json_flag,
                                add_precision_flags,
                                add_pipeline_flags, check_comm_cost, check_model_flags, comm_cost_model,
                                compiled_optimizer, count, emit_json, fused_cost_model, fusion_arg, pipeline_arg,
                                precision_arg, recompute_arg, simulated_kind, warn_data_parallel, warn_inference,
                                write_text)
from flexrt.cli._large import add_symmetric_flag, flops_report, own_cost, symmetric_simulation
from flexrt.errors import ConfigError, StrategyError
from flexrt.gc_pause import no_gc
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.ir.summary import format_count
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.simulator.sync_lowering import parse_grad_sync
from flexrt.strategy import ConfigStrategy, data_parallel, load_strategy, random_strategy
from flexrt.strategy.pipeline_2bw import delays_updates

NAME = "simulate"
HELP = "simulate one training iteration of a strategy on a machine (model flags such as -b 64 follow MODEL)"
ACCEPTS_MODEL_FLAGS = True


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL", help="zoo name (see `flexrt models`), path to a .py script, or an .onnx file")
    parser.add_argument("--machine", required=True, help="preset name (see `flexrt machines`) or machine YAML")
    parser.add_argument("--nodes", type=count(1), help="scale the machine to this many nodes")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--strategy", metavar="FILE",
                       help="strategy file, JSON or FlexFlow text (from --export or a search)")
    which.add_argument("--data-parallel", action="store_true", help="data parallelism over every device (default)")
    which.add_argument("--random-strategy", type=count(0), metavar="SEED", help="a random valid strategy")
    parser.add_argument("--method", choices=("full", "delta"), default="full",
                        help="full simulation, or delta: reach the strategy from data parallelism one operator "
                             "at a time by delta simulation (same final result)")
    add_pipeline_flags(parser)
    add_symmetric_flag(parser)
    add_precision_flags(parser)
    add_fusion_flag(parser, "the strategy before simulating it")
    add_cost_flags(parser)
    add_fused_cost_flag(parser)
    add_comm_cost_flag(parser)
    parser.add_argument("--optimizer", choices=[k.short_name for k in OptimizerKind],
                        help="the optimizer whose state is costed (default: the script's compile(), else sgd)")
    parser.add_argument("--trace", metavar="FILE", help="write the timeline as Chrome trace JSON (Perfetto)")
    parser.add_argument("--taskgraph", metavar="FILE", help="write the task graph as Graphviz dot")
    add_json_flag(parser)


def _strategy(args, base, machine):
    return recompute_arg(args, base, _chosen(args, base, machine))


def _chosen(args, base, machine):
    pipelined = pipeline_arg(args, base, machine)
    if pipelined is not None:
        if args.strategy or args.random_strategy is not None or args.data_parallel:
            raise ConfigError("--pipeline and --megatron build their own strategy: leave out --strategy, "
                              "--random-strategy and --data-parallel")
        return pipelined
    if args.strategy:
        return load_strategy(args.strategy, base, machine)
    if args.random_strategy is not None:
        return random_strategy(base, machine, args.random_strategy)
    warn_data_parallel(base, machine)
    return data_parallel(base, machine)


def _delta_walk(sim: Simulator, base, machine, target):
    """From data parallelism to ``target`` one operator at a time, each step delta-simulated. An
    operator whose new configuration its neighbours' current ones cannot take yet (a copy feeding a
    split: copies only multiply) waits until they have changed; what never can changes at once."""
    if not isinstance(target, ConfigStrategy):
        raise ConfigError("--method delta needs a per-operator strategy (this file holds a whole PCG)")
    if getattr(target, "pipeline", None) is not None:
        raise ConfigError("--method delta walks one operator's configuration at a time; a pipelined strategy "
                          "(micro-batch copies of every operator) has none to walk: simulate it with --method full")
    current = data_parallel(base, machine)
    if target.recompute:         # recomputing the same operators all the way
        current = current.with_recompute(sorted(target.recompute))
    result = sim.full(current)
    steps = 0
    pending = [nid for nid in sorted(target.configs) if current.configs[nid] != target.configs[nid]]
    while pending:
        waiting = []
        for nid in pending:
            try:
                step = current.with_config(nid, target.configs[nid])     # checks its edges
            except StrategyError:
                waiting.append(nid)
                continue
            current = step
            result = sim.delta(current, {base.node(nid).name})
            steps += 1
        if len(waiting) == len(pending):      # no single change is valid alone: the rest together
            current = current.with_configs({nid: target.configs[nid] for nid in waiting})
            result = sim.delta(current, {base.node(nid).name for nid in waiting})
            steps += 1
            waiting = []
        pending = waiting
    return result, steps


def _pipeline_report(sim: Simulator, result, strategy, batch: int) -> dict | None:
    """A pipelined strategy's stages, micro-batches, schedule, bubble and throughput (None otherwise)."""
    plan = getattr(strategy, "pipeline", None)
    if plan is None:
        return None
    from flexrt.simulator.pipeline_lowering import idle_fractions, steady_idle_fractions
    idle = steady_idle_fractions(sim.graph, result.iteration_time_s) if delays_updates(strategy) else \
        idle_fractions(sim.graph, result.timeline)
    return {"stages": plan.stages, "chunks": plan.chunks, "micro_batches": plan.micro_batches,
            "schedule": plan.schedule.value, "stage_of": dict(plan.stage_of),
            "bubble": sum(idle.values()) / len(idle) if idle else 0.0,
            "samples_per_s": batch / result.iteration_time_s}


def _fits_used(sim: Simulator) -> list | None:
    """The device groups whose rings ``--comm-cost measured`` timed, with their fits (None: analytic)."""
    fits = sim.lowering.ring_fits
    if fits is None:
        return None
    return [{"devices": g, "nodes": k, "measured": measured, "c_s_per_byte": fits.fit_of(g, k).c_s_per_byte,
             "d_s": fits.fit_of(g, k).d_s} for (g, k), measured in sorted(fits.used.items())]


def run(args, extra) -> int:
    # millions of small acyclic objects at scale, alive until the command ends: no collector passes;
    # as the process's whole job, what is alive at the end is frozen (no pass walks it at exit either)
    with no_gc(freeze=getattr(args, "_process", False)):
        return _run(args, extra)


def _run(args, extra) -> int:
    check_model_flags(NAME, args.model, extra)
    fusion_arg(args, NAME)
    machine = load_machine(args.machine, nodes=args.nodes)
    check_comm_cost(args, machine)
    t0 = time.perf_counter()
    loaded = load_model(args.model, extra)
    base = precision_arg(args, loaded.model.pcg)
    cost = comm_cost_model(args, fused_cost_model(args, operator_cost_model(args)))
    optimizer = simulated_kind(*compiled_optimizer(loaded.model, args.optimizer))
    warn_inference(loaded.model, NAME)
    if args.symmetric:
        result, strategy, sim, replicas = symmetric_simulation(args, extra, loaded, machine, cost, optimizer)
        return _report(args, loaded, machine, base, strategy, sim, result, None, {}, t0, replicas)
    strategy = _strategy(args, base, machine)
    planned = bool(getattr(strategy, "fusion", None))
    if planned and args.method == "delta":
        raise ConfigError(f"--method delta: the strategy file {args.strategy} holds a fusion plan, and delta simulation "
                          f"walks per-operator changes without fusion; use --method full")
    if planned and args.fusion != "off":
        print(f"flexrt: warning: --fusion {args.fusion} replaces the fusion plan the strategy file {args.strategy} "
              f"holds", file=sys.stderr)
    if args.fusion != "off":
        from flexrt.search.fusion_policies import apply_policy
        if args.method == "delta":
            raise ConfigError(f"--fusion {args.fusion}: delta simulation walks per-operator changes without fusion; "
                              f"use --method full")
        strategy = apply_policy(args.fusion, strategy, machine, cost)
    if args.fused_cost and not getattr(strategy, "fusion", None):
        print(f"flexrt: warning: --fused-cost {args.fused_cost} times fused tasks, and this strategy has none (give "
              f"--fusion POLICY, or a strategy file with a fusion plan)", file=sys.stderr)
    sim = Simulator(machine, cost, optimizer, detail=bool(args.trace or args.taskgraph),
                    incremental=args.method == "delta")
    steps = None
    if args.method == "delta":
        result, steps = _delta_walk(sim, base, machine, strategy)
        check = Simulator(machine, cost, optimizer, detail=False, incremental=False).full(strategy)
        if not timelines_equal(result, check):
            raise ConfigError("internal error: delta simulation diverged from full simulation")
    else:
        result = sim.full(strategy)
    files = {}
    if args.trace:
        import json
        files["trace"] = write_text(args.trace, json.dumps(sim.chrome_trace(result)), "trace")
    if args.taskgraph:
        files["taskgraph"] = write_text(args.taskgraph, sim.graph.to_dot(), "task graph")
    return _report(args, loaded, machine, base, strategy, sim, result, steps, files, t0, 1)


def _report(args, loaded, machine, base, strategy, sim, result, steps, files, t0, replicas: int) -> int:
    """Print (or emit as JSON) what the simulation found; ``replicas`` > 1: ``sim`` simulated one of
    that many identical data-parallel replicas (``--symmetric``)."""
    pipeline = _pipeline_report(sim, result, strategy, loaded.config.batch_size)
    recomputed = sorted(getattr(strategy, "recompute", ()))
    flops = flops_report(base, strategy, result.iteration_time_s, machine.num_devices)
    cost_of_run = own_cost(t0)
    if args.json:
        emit_json({"model": loaded.name, "machine": machine.name, "num_devices": machine.num_devices,
                   "pipeline": pipeline, "recompute": {"granularity": args.recompute, "operators": recomputed},
                   "precision": args.precision, "symmetric_replicas": replicas,
                   "totals_of": "one data-parallel replica" if replicas > 1 else "the machine", **flops,
                   "simulation_wall_s": cost_of_run["wall_s"], "simulation_peak_rss_bytes": cost_of_run["peak_rss_bytes"],
                   "method": args.method, "delta_steps": steps, "cost": args.cost,
                   "attention": args.attention or ("fused" if args.cost == "analytic" else None), "fusion": args.fusion,
                   "fused_cost": args.fused_cost, "comm_cost": args.comm_cost,
                   "grad_sync": parse_grad_sync(args.grad_sync),
                   "fusion_groups": len(strategy.fusion.groups) if getattr(strategy, "fusion", None) else 0,
                   "allreduce_fits": _fits_used(sim),
                   **result.to_json(),
                   "files": files})
        return 0
    print(f"model {loaded.name} (batch {loaded.config.batch_size}) on {machine.name}: {machine.num_nodes} node(s), "
          f"{machine.num_devices} devices; {args.method} simulation, {args.cost} costs"
          + (f" (attention {args.attention})" if args.attention else "")
          + (f" ({steps} delta steps from data parallelism)" if steps is not None else "")
          + ("; the strategy file holds its own PCG" if not isinstance(strategy, ConfigStrategy) else "")
          + (f"; fusion policy {args.fusion}" if args.fusion != "off" else
             f"; the strategy's fusion plan ({len(strategy.fusion.groups)} groups, {len(strategy.fusion.buckets)} "
             f"buckets)" if getattr(strategy, "fusion", None) else "")
          + (f"; fused tasks timed {args.fused_cost}" if args.fused_cost else ""))
    if sim.lowering.ring_fits is not None:
        from flexrt.simulator.collectives import describe_used
        print(f"AllReduces timed by measured T = C x + D: {describe_used(sim.lowering.ring_fits.used)}")
    if pipeline is not None:
        print(strategy.pipeline.describe())
        span = "each steady-state iteration" if delays_updates(strategy) else "the pipeline's span"
        print(f"bubble             {pipeline['bubble']:.1%} of {span} idle (mean over devices); "
              f"{pipeline['samples_per_s']:,.0f} samples/s")
    if recomputed:
        print(f"recompute          {args.recompute}: activations of {len(recomputed)} of {len(base.operators())} "
              f"operators recomputed before their backward")
    if replicas > 1:
        print(f"symmetric          {replicas} identical data-parallel replicas: one simulated on its "
              f"{sim.machine.num_nodes} node(s), gradient AllReduces over all of them")
    print(f"iteration time     {result.iteration_time_s * 1e3:.3f} ms   ({result.num_tasks} tasks)")
    print(f"achieved           {flops['model_tflops_per_gpu']:.1f} TFLOP/s per GPU (model), "
          f"{flops['hardware_tflops_per_gpu']:.1f} with recomputation's forwards (hardware)")
    of = " of one replica" if replicas > 1 else ""     # --symmetric: the totals are the simulated replica's
    print(f"compute / comm     {result.compute_time_s * 1e3:.3f} ms / {result.communication_time_s * 1e3:.3f} ms "
          f"(summed task times{of})")
    for cat, n in result.moved_elements.items():
        print(f"moved {cat:<12} {n:,} elements ({format_count(result.moved_bytes[cat], 'B')}){of}")
    for lt, b in sorted(result.link_bytes.items()):
        print(f"link {lt:<13} {format_count(b, 'B')} (all hops{of})")
    peak = max(result.memory_bytes.items(), key=lambda kv: kv[1]["total"])
    print(f"peak memory        device {peak[0]}: {format_count(peak[1]['total'], 'B')} of "
          f"{format_count(result.memory_capacity[peak[0]], 'B')}"
          + (f"; OVER CAPACITY on devices {result.over_capacity}" if result.over_capacity else ""))
    for what, path in files.items():
        print(f"wrote the {what} to {path}")
    print(f"simulation         {cost_of_run['wall_s']:.1f} s, peak memory {format_count(cost_of_run['peak_rss_bytes'], 'B')}")
    return 0
