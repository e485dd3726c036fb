"""``flexrt search MODEL --machine M --algo ...``: find a strategy and print its simulated iteration
time beside data parallelism's and the expert strategy's.

FlexFlow's search flags (``--budget``, ``--alpha``, ``--only-data-parallel``,
``--enable-parameter-parallel``, ``--enable-attribute-parallel``, ``--search-num-nodes``,
``--search-num-workers``, ``--import``, ``--export``) work here as in a definition script.
Ctrl-C stops the search and keeps (and exports) the best strategy so far.

``--algo disco`` searches the fusion plan of data parallelism (or of the ``--import``ed strategy);
``--fusion POLICY`` applies a named fusion policy (``flexrt.search.fusion_policies``) to the found
strategy, or with ``--algo disco`` gives the plan the search starts from.

Every strategy here, the chosen algorithm's and the baselines it is compared with, comes from
``flexrt.search.search`` with a ``SearchRequest``; a flag the chosen algorithm does not take
(``--split-size`` with ``--algo mcmc``, ``--import`` with ``--algo unity``) is an error.
"""

from __future__ import annotations

import sys

from flexrt.cli._common import (add_comm_cost_flag, add_cost_flags, operator_cost_model, add_fused_cost_flag, add_fusion_flag, add_json_flag,
                                add_precision_flags, check_comm_cost, check_model_flags, comm_cost_model,
                                compiled_optimizer, count, emit_json, fused_cost_model, fused_result, fusion_arg,
                                number, precision_arg, simulated_kind, warn_data_parallel, warn_inference)
from flexrt.errors import ConfigError
from flexrt.inputs import writable_file
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search import SearchRequest, algorithm, describe, search
from flexrt.search.api import MAX_BUDGET
from flexrt.search.baselines import expert_name
from flexrt.search.fusion_policies import apply_policy
from flexrt.search.pipelines import checked_schedules
from flexrt.simulator.sync_lowering import parse_grad_sync
from flexrt.strategy import SearchSpace, data_parallel, export_strategy, load_strategy

NAME = "search"
HELP = ("search for a parallelization strategy (MCMC, exhaustive, Unity, DisCo's fusion search, or a baseline) and "
        "compare it with the baselines")
ACCEPTS_MODEL_FLAGS = True
ALGOS = ("mcmc", "exhaustive", "unity", "sequential", "disco", "pipeline", "data-parallel", "model-parallel", "expert")
SEARCHES = ("mcmc", "exhaustive", "unity", "sequential", "disco", "pipeline")
FUSIONS = ("off", "none", "xla", "combiner", "horovod", "ddp", "jax")
# FlexFlow's flags (among the model flags) this command honours, beside the batch size.
HONOURED = frozenset({"search_budget", "search_alpha", "only_data_parallel", "enable_parameter_parallel",
                      "enable_attribute_parallel", "import_strategy_file", "export_strategy_file",
                      "search_num_nodes", "search_num_workers"})
# The flag of each algorithm option this command sets (only where given, so that an algorithm's
# own default applies and a flag the algorithm does not take is an error, not ignored).
OPTION_FLAGS = {"alpha": "--alpha", "split_size": "--split-size", "cache": "--no-cache", "devices": "--devices",
                "min_degree": "--min-degree", "enable_pipeline": "--enable-pipeline", "beta": "--beta",
                "patience": "--patience", "methods": "--methods", "config_ratio": "--config-ratio",
                "pipeline_schedules": "--pipeline-schedules"}


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL", help="zoo name (see `flexrt models`), path to a .py script, or an .onnx file")
    parser.add_argument("--machine", required=True, help="preset name (see `flexrt machines`) or machine YAML")
    parser.add_argument("--nodes", type=count(1), help="scale the machine to this many nodes")
    parser.add_argument("--algo", choices=ALGOS, default="mcmc")
    parser.add_argument("--budget", type=count(0, MAX_BUDGET), help="MCMC proposals / exhaustive leaves (default: FFConfig's, 1000)")
    parser.add_argument("--alpha", type=number(above=0.0), help="MCMC: inverse temperature per percent of the data-parallel "
                        "time; unity, disco: the pruning threshold (candidates over alpha x best are dropped; default 1.05)")
    parser.add_argument("--split-size", type=count(0), default=None,
                        help="unity: minimum operators per subgraph when splitting large graphs (default 10; 0: off)")
    parser.add_argument("--no-cache", action="store_true", help="unity: no machine-mapping cache across candidates")
    parser.add_argument("--devices", type=count(1), help="unity: use only the machine's first N devices")
    parser.add_argument("--min-degree", type=count(1),
                        help="unity: every operator on at least this many devices (default 1)")
    parser.add_argument("--config-ratio", type=number(minimum=0.0), metavar="R",
                        help="unity, sequential: leave out an operator's configurations whose own cost exceeds R x its "
                             "parallel width x its cheapest's (default 4; 0: every configuration, the exact DP)")
    parser.add_argument("--enable-pipeline", action="store_true",
                        help="unity: pipelined strategies among the finalists (stages, micro-batches and schedule searched)")
    parser.add_argument("--pipeline-schedules", metavar="LIST",
                        help="unity --enable-pipeline, pipeline: the schedules to choose among, comma-separated, of "
                             "gpipe,1f1b,interleaved,zb-h1,2bw (default the flushed four; 2bw trains on one-step-old "
                             "weights, PipeDream-2BW, as Unity's pipelines do)")
    parser.add_argument("--beta", type=count(1, 10_000), help="disco: each method is applied up to BETA times per candidate "
                        "(default 10)")
    parser.add_argument("--patience", type=count(1), help="disco: stop after this many candidates without "
                        "improvement (default 1000)")
    parser.add_argument("--methods", help="disco: comma-separated subset of op,dup,allreduce (default all)")
    add_fusion_flag(parser, "the found strategy; with --algo disco, the plan the search starts from")
    add_precision_flags(parser)
    parser.add_argument("--seed", type=count(0), default=0)
    parser.add_argument("--only-data-parallel", action="store_true", default=None)
    parser.add_argument("--enable-parameter-parallel", action="store_true", default=None,
                        help="let proposals split parameter and reduction axes")
    parser.add_argument("--enable-attribute-parallel", action="store_true", default=None,
                        help="let proposals split attribute axes (e.g. image height and width)")
    parser.add_argument("--search-num-nodes", type=count(1), help="search for a machine with this many nodes")
    parser.add_argument("--import", dest="import_file", metavar="FILE",
                        help="a strategy file (JSON or FlexFlow text) used as an initial candidate")
    parser.add_argument("--export", metavar="FILE", help="write the best strategy (FlexFlow text format if .txt)")
    parser.add_argument("--plot", metavar="FILE", help="draw the best strategy as PNG")
    add_cost_flags(parser)
    add_fused_cost_flag(parser)
    add_comm_cost_flag(parser)
    parser.add_argument("--optimizer", choices=[k.short_name for k in OptimizerKind],
                        help="the optimizer whose state is costed (default: the script's compile(), else sgd)")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    add_json_flag(parser)


def _space(args, cfg) -> SearchSpace:
    """FlexFlow's axis flags (here or among the model flags); Unity searches every axis unless they
    narrow it."""
    flags = (args.only_data_parallel, args.enable_parameter_parallel, args.enable_attribute_parallel)
    if args.algo in ("unity", "sequential") and not any(flags + (cfg.only_data_parallel, cfg.enable_parameter_parallel,
                                                                 cfg.enable_attribute_parallel)):
        return SearchSpace.full()
    pick = lambda a, c: c if a is None else a  # noqa: E731
    return SearchSpace.from_flags(pick(args.only_data_parallel, cfg.only_data_parallel),
                                  pick(args.enable_parameter_parallel, cfg.enable_parameter_parallel),
                                  pick(args.enable_attribute_parallel, cfg.enable_attribute_parallel))


def _options(args, cfg, model_name: str) -> dict:
    """The algorithm options given on the command line (``--search-alpha`` among the model flags too),
    checked against what ``--algo`` takes."""
    alpha_given = any(a.split("=")[0] in ("--alpha", "--search-alpha") for a in cfg.argv)
    given = {"alpha": args.alpha if args.alpha is not None else (cfg.search_alpha if alpha_given else None),
             "split_size": args.split_size, "cache": False if args.no_cache else None, "devices": args.devices,
             "min_degree": args.min_degree, "enable_pipeline": True if args.enable_pipeline else None,
             "beta": args.beta, "patience": args.patience, "methods": args.methods, "config_ratio": args.config_ratio,
             "pipeline_schedules": args.pipeline_schedules}
    options = {k: v for k, v in given.items() if v is not None}
    if args.algo in ("unity", "sequential", "disco") and options.get("alpha", 1.0) < 1.0:
        raise ConfigError(f"--alpha {options['alpha']:g}: for --algo {args.algo} alpha is the pruning threshold "
                          f"(candidates over alpha x the best are dropped); give a number >= 1")
    takes = algorithm(args.algo).options
    wrong = [OPTION_FLAGS[k] for k in options if k not in takes]
    if wrong:
        valid = [f for k, f in OPTION_FLAGS.items() if k in takes]
        raise ConfigError(f"{', '.join(wrong)}: --algo {args.algo} takes no such option; its options here: "
                          f"{', '.join(valid) or 'none'}")
    if "pipeline_schedules" in options and args.algo in ("unity", "sequential") and not options.get("enable_pipeline"):
        raise ConfigError(f"--pipeline-schedules: --algo {args.algo} searches pipelines only with --enable-pipeline; "
                          f"give it too")
    if args.grad_sync == "after-backward" and "pipeline_schedules" in options and \
            "2bw" in checked_schedules(options["pipeline_schedules"]):
        raise ConfigError("--pipeline-schedules 2bw with --grad-sync after-backward: a 2bw pipeline's iterations "
                          "overlap by design; leave out one of them")
    if args.algo == "expert":
        options["model"] = model_name
    return options


def _check_against_machine(args, machine) -> None:
    """Flags whose valid range depends on the machine: --devices and --min-degree at most its devices."""
    n = machine.num_devices
    for flag, value in (("--devices", args.devices), ("--min-degree", args.min_degree)):
        if value is not None and value > n:
            raise ConfigError(f"{flag} {value}: the machine {machine.name} has {n} devices; give 1..{n}")
    if args.devices is not None and args.min_degree is not None and args.min_degree > args.devices:
        raise ConfigError(f"--min-degree {args.min_degree} exceeds --devices {args.devices}; give at most "
                          f"{args.devices}")


def _initial(args, expert, given: list) -> tuple:
    """Initial candidates: the expert strategy where the algorithm takes some, and the imported one."""
    takes = "initial" in algorithm(args.algo).fields
    if given and not takes:
        raise ConfigError(f"--import: --algo {args.algo} takes no initial strategy; algorithms that do: "
                          f"{', '.join(a for a in SEARCHES if 'initial' in algorithm(a).fields)}")
    if args.algo == "disco":  # DisCo searches the fusion of one strategy: the imported one, else data parallelism
        return tuple(given)
    return tuple(s for s in ((expert.strategy if expert and takes else None), *given) if s is not None)


def _export(path: str, strategy, machine) -> str:
    """Write the found strategy to ``path``; where FlexFlow's text format cannot hold it (a rewritten
    graph, a pipeline Unity chose), to the same name as JSON instead, saying so: the search is not lost."""
    from flexrt.errors import StrategyError
    try:
        return export_strategy(path, strategy, machine)
    except StrategyError:
        if not path.endswith(".txt"):
            raise
        instead = path[:-len(".txt")] + ".json"
        written = export_strategy(instead, strategy, machine)
        print(f"flexrt: warning: --export {path}: FlexFlow's text format cannot hold this strategy (a rewritten graph "
              f"or a pipeline); wrote it as JSON to {instead}", file=sys.stderr)
        return written


def run(args, extra) -> int:
    cfg = check_model_flags(NAME, args.model, extra, HONOURED)
    fusion_arg(args, NAME)
    if cfg.search_num_workers is not None:
        raise ConfigError("--search-num-workers: machine presets fix the devices per node; describe another "
                          "machine in YAML (--machine FILE) and use --nodes / --search-num-nodes for the node count")
    export = args.export or cfg.export_strategy_file
    for path, flag in ((export, "--export"), (args.plot, "--plot")):
        if path is not None:
            writable_file(path, flag)      # before the search: its result is not lost on a bad path
    if (export or "").endswith(".txt") and (args.algo in ("pipeline", "disco") or args.fusion != "off"):
        raise ConfigError(f"--export {export}: FlexFlow's text format holds neither "
                          f"pipelines nor fusion plans, which --algo {args.algo}"
                          + (f" with --fusion {args.fusion}" if args.fusion != "off" else "") + " finds; export to a "
                          ".json file")
    nodes = args.search_num_nodes or cfg.search_num_nodes or args.nodes
    machine = load_machine(args.machine, nodes=nodes)
    _check_against_machine(args, machine)
    check_comm_cost(args, machine)
    loaded = load_model(args.model, extra)
    base = precision_arg(args, loaded.model.pcg)
    budget = args.budget if args.budget is not None else cfg.search_budget
    space = _space(args, cfg)
    options = _options(args, cfg, loaded.name)
    cost = comm_cost_model(args, fused_cost_model(args, operator_cost_model(args)))
    imported = args.import_file or cfg.import_strategy_file
    given = [load_strategy(imported, base, machine)] if imported else []  # JSON or FlexFlow text
    optimizer = simulated_kind(*compiled_optimizer(loaded.model, args.optimizer))
    warn_inference(loaded.model, NAME)

    warn_data_parallel(base, machine)  # the baseline compared with
    # the baselines compared with, then the requested algorithm: all through search()
    fixed = SearchRequest(base, machine, cost, budget=0, seed=args.seed, optimizer=optimizer, progress=False)
    dp = search("data-parallel", fixed)
    has_expert = expert_name(loaded.name) is not None
    expert = search("expert", SearchRequest(base, machine, cost, budget=0, seed=args.seed, optimizer=optimizer,
                                            progress=False, options={"model": loaded.name})) if has_expert else None
    takes_space = "space" in algorithm(args.algo).fields
    initial = _initial(args, expert, given)
    if args.algo == "disco" and args.fusion != "off":  # the policy's plan is where the search starts
        initial = (apply_policy(args.fusion, initial[0] if initial else data_parallel(base, machine), machine, cost),)
    request = SearchRequest(base, machine, cost, budget=budget, seed=args.seed, space=space if takes_space else None,
                            initial=initial, optimizer=optimizer,
                            progress=False if (args.no_progress or args.json) else None, options=options)
    result = search(args.algo, request)
    if args.min_degree:
        from flexrt.search.api import below_degree
        short = below_degree(result.strategy, args.min_degree)
        if short:
            print(f"flexrt: warning: --min-degree {args.min_degree}: {len(short)} operator(s) run on fewer devices, as "
                  f"their shapes allow no more pieces: {', '.join(short[:4])}" + (", ..." if len(short) > 4 else ""),
                  file=sys.stderr)
    unfused_s = None
    if args.algo != "disco" and args.fusion != "off":
        unfused_s = result.cost_s
        result = fused_result(args.fusion, result, machine, cost, optimizer)

    files = {}
    if export:
        files["strategy"] = _export(export, result.strategy, machine)
    if args.plot:
        try:
            from flexrt.search.plot import plot_strategy
        except ImportError as e:
            raise ConfigError(f"cannot plot strategies: {e}") from None
        try:
            plot_strategy(result.strategy, machine, args.plot)
        except OSError as e:
            raise ConfigError(f"cannot write the plot to {args.plot}: {e.strerror or e}") from None
        files["plot"] = args.plot
    if args.json:
        emit_json({"model": loaded.name, "machine": machine.name, "num_devices": machine.num_devices,
                   "algorithm": args.algo, "space": str(space), "budget": budget, "seed": args.seed,
                   "precision": args.precision,
                   "fusion": args.fusion, "fused_cost": args.fused_cost, "comm_cost": args.comm_cost,
                   "grad_sync": parse_grad_sync(args.grad_sync),
                   "unfused_s": unfused_s,
                   "iteration_time_s": result.cost_s, "data_parallel_s": dp.cost_s,
                   "expert_s": expert.cost_s if expert else None,
                   "speedup_over_data_parallel": dp.cost_s / result.cost_s,
                   "speedup_over_expert": expert.cost_s / result.cost_s if expert else None,
                   "log": result.log.to_json(), "strategy": describe(result.strategy, machine, limit=1000),
                   "files": files})
        return 0
    _print_text(args, loaded.name, machine, space, budget, result, dp, expert, files)
    return 130 if result.log.interrupted else 0


def _print_text(args, model_name: str, machine, space, budget: int, result, dp, expert, files: dict) -> None:
    log = result.log
    print(f"model {model_name} on {machine.name}: {machine.num_nodes} node(s), {machine.num_devices} devices; "
          f"{args.algo} over {space}" + (f", budget {budget}, seed {args.seed}" if args.algo in SEARCHES else "")
          + (f"; {args.precision} mixed precision" if args.precision != "fp32" else "")
          + ("; AllReduces timed by the machine's measured T = C x + D" if args.comm_cost == "measured" else ""))
    if args.algo in ("unity", "sequential"):
        n = log.notes
        print(f"search: {log.proposals} candidate graphs costed in {log.elapsed_s:.1f} s ({log.stop_reason}); "
              f"segments {n.get('segments')}; " + (f"mapping cache {n['dp_cache_hits']} hits / "
                                                  f"{n['dp_cache_misses']} misses; " if "dp_cache_hits" in n else "")
              + f"graph {'rewritten' if n.get('rewritten') else 'unchanged'}; chosen: {n.get('chosen')}"
              + ("; INTERRUPTED, keeping the best so far" if log.interrupted else ""))
        if n.get("pipeline_candidates_s"):
            pipes = n["pipeline_candidates_s"]
            label = min(pipes, key=pipes.get)
            print(f"pipelines: {len(pipes)} candidates simulated, the best {label} at {pipes[label] * 1e3:.3f} ms, "
                  f"then {n.get('pipeline_refine_simulations', 0)} stage-boundary moves tried")
    if args.algo == "disco":
        n = log.notes
        print(f"search: {log.proposals} fusion plans in {log.elapsed_s:.1f} s ({log.stop_reason}; "
              f"{n['candidates_per_s']:.1f} candidates/s); improvements by method {n['improvements']}; "
              f"best plan: {n['groups']} groups, {n['buckets']} buckets"
              + ("; INTERRUPTED, keeping the best so far" if log.interrupted else ""))
    if args.fusion != "off":
        print(f"fusion policy {args.fusion}" + (" (the search's start)" if args.algo == "disco" else
                                               " applied to the found strategy"))
    if args.algo in ("mcmc", "exhaustive"):
        print(f"search: {log.proposals} {'proposals' if args.algo == 'mcmc' else 'strategies simulated'} in "
              f"{log.elapsed_s:.1f} s ({log.stop_reason}"
              + (f"; acceptance {log.acceptance_rate:.0%}" if args.algo == "mcmc" else "") + ")"
              + ("; INTERRUPTED, keeping the best so far" if log.interrupted else ""))
    kept = log.notes.get("initial_kept")
    if kept:
        print(f"an initial candidate (the expert strategy or --import) simulates faster ({kept['initial_s'] * 1e3:.3f} "
              f"ms) than what the search found ({kept['found_s'] * 1e3:.3f} ms): keeping it")
    print(f"{'found' if args.algo in SEARCHES else args.algo:<14} {result.cost_s * 1e3:10.3f} ms")
    print(f"{'data parallel':<14} {dp.cost_s * 1e3:10.3f} ms   (speed-up {dp.cost_s / result.cost_s:.2f}x)")
    if expert:
        print(f"{'expert':<14} {expert.cost_s * 1e3:10.3f} ms   (speed-up {expert.cost_s / result.cost_s:.2f}x)")
    else:
        print(f"{'expert':<14} {'-':>10}      (no expert strategy for {model_name})")
    for line in describe(result.strategy, machine):
        print(f"  {line}")
    for what, path in files.items():
        print(f"wrote the {what} to {path}")
