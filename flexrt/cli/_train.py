"""``flexrt train MODEL --machine M``: run training iterations of a strategy on synthetic data and
print, per step, the loss and the measured time beside the simulated one; then the median measured
vs simulated time and the peak memory measured vs predicted per device."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import statistics

from flexrt.cli._common import (add_comm_cost_flag, add_cost_flags, operator_cost_model, add_json_flag, add_pipeline_flags, add_precision_flags,
                                check_comm_cost, loss_scale_arg, precision_arg,
                                check_model_flags, comm_cost_model, compiled_loss, compiled_optimizer, count,
                                emit_json, number, pipeline_arg, recompute_arg, warn_data_parallel, warn_inference,
                                write_text)
from flexrt.errors import ConfigError
from flexrt.ir.summary import format_count
from flexrt.kernels.losses import CROSS_ENTROPIES, LossType
from flexrt.kernels.metrics import MetricsType
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.model.training import synthetic_data
from flexrt.runtime import mpi
from flexrt.runtime.backend import BACKENDS
from flexrt.runtime.executor import MODES
from flexrt.runtime.session import OPTIMIZER_PARAMS, Session
from flexrt.simulator.sync_lowering import parse_grad_sync
from flexrt.strategy import data_parallel, load_strategy, random_strategy

NAME = "train"
HELP = "train a model with a strategy on synthetic data, measured time beside simulated (model flags follow MODEL)"
ACCEPTS_MODEL_FLAGS = True
DEFAULT_LOSS = LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
LOSSES = (DEFAULT_LOSS.short_name,) + tuple(l.short_name for l in LossType if l is not DEFAULT_LOSS)
GPU_INSTALL = 'pip install -e ".[gpu]"'


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL", help="zoo name (see `flexrt models`), path to a .py script, or an .onnx file")
    parser.add_argument("--machine", required=True, help="preset name (see `flexrt machines`) or machine YAML")
    parser.add_argument("--nodes", type=count(1), help="scale the machine to this many nodes")
    parser.add_argument("--strategy", metavar="FILE",
                        help="strategy file, JSON or FlexFlow text (from --export or a search); default: data "
                             "parallelism over every device")
    parser.add_argument("--random-strategy", type=count(0), metavar="SEED",
                        help="train a random valid strategy (every operator a random SOAP configuration and view)")
    add_pipeline_flags(parser)
    add_precision_flags(parser, loss_scale=True)
    parser.add_argument("--backend", default="numpy", help=f"array backend: {' or '.join(BACKENDS)} (default numpy)")
    parser.add_argument("--mode", default="serial", help=f"executor: {' or '.join(MODES)} (default serial)")
    parser.add_argument("--steps", type=count(1), default=10, help="training iterations to run (default 10)")
    parser.add_argument("--optimizer", choices=[k.short_name for k in OPTIMIZER_PARAMS],
                        help="default: the script's compile() optimizer, else sgd")
    parser.add_argument("--lr", type=number(above=0.0),
                        help="learning rate (SGD lr, Adam alpha; default: the optimizer's, else 0.01)")
    parser.add_argument("--loss", choices=LOSSES, help=f"default: the script's compile() loss, else {LOSSES[0]}")
    add_cost_flags(parser, "cost model of the simulated times (profiled: time the NumPy kernels here)")
    add_comm_cost_flag(parser)
    parser.add_argument("--seed", type=count(0), default=0, help="seed of the initial weights and the synthetic data")
    parser.add_argument("--trace", metavar="FILE", help="write the last step as Chrome trace JSON (Perfetto)")
    add_json_flag(parser)


def _check_backend(name: str) -> None:
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; valid: {', '.join(BACKENDS)}")
    if name == "cupy" and importlib.util.find_spec("cupy") is None:
        raise ConfigError(f"--backend cupy: CuPy is not installed; install it with {GPU_INSTALL} "
                          f"(or use --backend numpy)")


def _session(args, strategy, machine, optimizer: OptimizerKind, params: dict, loss: LossType) -> Session:
    try:
        cost = comm_cost_model(args, operator_cost_model(args))
        return Session(strategy, machine, cost_model=cost, backend=args.backend, mode=args.mode,
                       optimizer=optimizer,
                       loss=loss, metrics=(MetricsType.METRICS_ACCURACY,) if loss in CROSS_ENTROPIES else (),
                       seed=args.seed, loss_scale=loss_scale_arg(args), **params)
    except ModuleNotFoundError as e:
        if args.backend == "cupy":
            raise ConfigError(f"--backend cupy: the CuPy backend cannot be loaded ({e}); install it with "
                              f"{GPU_INSTALL}") from None
        raise


def _launch_local(args, machine) -> int:
    """The ``local`` machine of several processes (``mpiexec -n R flexrt calibrate`` wrote it: one
    node per process on this host): start them, one MPI rank per node, each pinned to a core where
    the OS allows, with this very command line, and pass on their output."""
    ranks = machine.num_nodes
    if mpi.find_mpiexec() is None:
        raise ConfigError(f"--machine local is {ranks} processes on this host; start them with `mpiexec -n {ranks} "
                          f"flexrt train ...` (no mpiexec here: pip install -e \".[mpi]\")")
    mpi.launch(ranks, mpi.flexrt_command() + list(getattr(args, "_argv", ())), echo=True)
    return 0


def run(args, extra) -> int:
    if args.mode not in MODES:
        raise ConfigError(f"unknown mode {args.mode!r}; valid: {', '.join(MODES)}")
    _check_backend(args.backend)
    check_model_flags(NAME, args.model, extra)
    machine = load_machine(args.machine, nodes=args.nodes)
    launcher = machine.name == "local" and machine.num_nodes > 1 and not mpi.launched_by_mpi()
    check_comm_cost(args, machine)
    loaded = load_model(args.model, extra)
    base = precision_arg(args, loaded.model.pcg)
    if sum(x is not None and x is not False for x in (args.strategy, args.random_strategy,
                                                      args.pipeline or args.megatron or None)) > 1:
        raise ConfigError("give one of --strategy FILE, --random-strategy SEED and --pipeline P (or --megatron)")
    pipelined = pipeline_arg(args, base, machine)
    if pipelined is not None:
        plan = getattr(pipelined, "pipeline", None)
        strategy = pipelined
        described = ("Megatron-LM, " if args.megatron else "") + (plan.describe() if plan is not None else
                                                                 "tensor and data parallel")
    elif args.strategy:
        strategy, described = load_strategy(args.strategy, base, machine), f"strategy {args.strategy}"
    elif args.random_strategy is not None:
        strategy, described = random_strategy(base, machine, args.random_strategy), \
            f"random strategy (seed {args.random_strategy})"
    else:
        warn_data_parallel(base, machine)
        strategy, described = data_parallel(base, machine), "data parallel"
    strategy = recompute_arg(args, base, strategy)
    if args.recompute != "none":
        described += f", {args.recompute} recomputation"
    loss = compiled_loss(loaded.model, args.loss)
    optimizer, params = compiled_optimizer(loaded.model, args.optimizer, args.lr)
    if launcher:    # checked here first: a mistake is said once, not by every rank and then the launcher
        return _launch_local(args, machine)
    warn_inference(loaded.model, NAME)
    described += f"; {optimizer.short_name} {', '.join(f'{k} {v:g}' for k, v in params.items() if v)}, " \
                 f"{loss.short_name}"
    session = _session(args, strategy, machine, optimizer, params, loss)
    if not session.is_root:  # under MPI every rank trains; rank 0 reports and writes files
        with contextlib.redirect_stdout(io.StringIO()):
            _train(args, loaded, machine, session, described, loss)
        return 0
    return _train(args, loaded, machine, session, described, loss)


def _train(args, loaded, machine, session, described, loss: LossType) -> int:
    base = loaded.model.pcg
    batch = next(n.attrs.shape.dims[0] for n in base.nodes if n.op_type.value == "input")
    model = base if getattr(session.strategy, "pipeline", None) is not None else session.base  # not micro-batches
    xs, labels = synthetic_data(model, loss, batch, args.seed)
    inputs = {name: xs[name] for name in session.input_names}
    predicted_ms = session.predicted_time_s * 1e3
    # a serial executor in one process runs every device's tasks one after the other: its fair
    # prediction is the sum of the task times, not the parallel makespan
    summed_ms = session.predicted_summed_s * 1e3
    if not args.json:
        print(f"model {loaded.name} (batch {batch}) on {machine.name}: {machine.num_devices} devices; "
              f"{described}; backend {args.backend}, "
              f"{args.mode} executor"
              + ("; simulated AllReduces timed by measured T = C x + D" if args.comm_cost == "measured" else ""))
    steps = []
    result = None
    for i in range(1, args.steps + 1):
        result = session.step(inputs, labels)
        steps.append({"step": i, "loss": result.loss, "measured_ms": result.wall_s * 1e3, "metrics": result.metrics,
                      "skipped": result.skipped})
        if not args.json:
            scaler = session.executor.scaler
            print(f"step {i:>3}  loss {result.loss:.6f}  measured {result.wall_s * 1e3:9.3f} ms  "
                  f"simulated {predicted_ms:9.3f} ms"
                  + (f"  loss scale {scaler.scale:g}" if scaler is not None else "")
                  + ("  (gradients overflowed: step skipped)" if result.skipped else ""))
    median = statistics.median(s["measured_ms"] for s in steps)
    memory = session.memory_report(result)
    files = {}
    if args.trace and session.is_root:
        files["trace"] = write_text(args.trace, json.dumps(session.chrome_trace(result)), "trace")
    if args.json:
        emit_json({"model": loaded.name, "machine": machine.name, "num_devices": machine.num_devices,
                   "backend": args.backend, "mode": args.mode, "comm_cost": args.comm_cost,
                   "grad_sync": parse_grad_sync(args.grad_sync), "steps": steps,
                   "median_measured_ms": median,
                   "simulated_ms": predicted_ms, "simulated_summed_ms": summed_ms,
                   "ratio": median / predicted_ms if predicted_ms else None,
                   "memory": {str(d): v for d, v in memory.items()}, "files": files})
        return 0
    ratio = f"{median / predicted_ms:.2f}x" if predicted_ms else "n/a"
    print(f"median measured {median:.3f} ms vs simulated {predicted_ms:.3f} ms per iteration "
          f"(measured / simulated {ratio})")
    print(f"simulated task times summed over all devices: {summed_ms:.3f} ms (what one serial worker runs; "
          f"measured / summed {median / summed_ms:.2f}x)")
    for d, m in memory.items():
        err = f"{m['relative_error']:+.1%}" if m.get("relative_error") is not None else "n/a"
        print(f"device {d:>2} peak memory measured {format_count(m['measured_peak'], 'B'):>10}  "
              f"predicted {format_count(m['predicted_peak'], 'B'):>10} ({err})")
    for what, path in files.items():
        print(f"wrote the {what} of the last step to {path}")
    return 0
