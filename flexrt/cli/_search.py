"""``flexrt search MODEL --machine M --algo ...``: find a strategy and print its simulated iteration
time beside data parallelism's and the expert strategy's.

FlexFlow's search flags (``--budget``, ``--alpha``, ``--only-data-parallel``,
``--enable-parameter-parallel``, ``--enable-attribute-parallel``, ``--search-num-nodes``,
``--search-num-workers``, ``--import``, ``--export``) work here as in a definition script.
Ctrl-C stops the search and keeps (and exports) the best strategy so far.
"""

from __future__ import annotations

from flexrt.cli._common import add_json_flag, check_model_flags, emit_json
from flexrt.errors import ConfigError
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search import SearchSpace, describe, exhaustive, fixed_result, mcmc
from flexrt.simulator.cost_model import AnalyticCostModel, ProfiledCostModel
from flexrt.simulator.strategy import data_parallel, load_strategy, save_strategy

NAME = "search"
HELP = "search for a parallelization strategy (MCMC, exhaustive, or a baseline) and compare it with the baselines"
ACCEPTS_MODEL_FLAGS = True
ALGOS = ("mcmc", "exhaustive", "unity", "sequential", "data-parallel", "model-parallel", "expert")
SEARCHES = ("mcmc", "exhaustive", "unity", "sequential")


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL", help="zoo name (see `flexrt models`) or path to a .py script")
    parser.add_argument("--machine", required=True, help="preset name (see `flexrt machines`) or machine YAML")
    parser.add_argument("--nodes", type=int, help="scale the machine to this many nodes")
    parser.add_argument("--algo", choices=ALGOS, default="mcmc")
    parser.add_argument("--budget", type=int, help="MCMC proposals / exhaustive leaves (default: FFConfig's, 1000)")
    parser.add_argument("--alpha", type=float, help="MCMC: inverse temperature per percent of the data-parallel "
                        "time; unity: the pruning threshold (candidates over alpha x best are dropped; default 1.05)")
    parser.add_argument("--split-size", type=int, default=None,
                        help="unity: minimum operators per subgraph when splitting large graphs (default 10; 0: off)")
    parser.add_argument("--no-cache", action="store_true", help="unity: no machine-mapping cache across candidates")
    parser.add_argument("--devices", type=int, help="unity: use only the machine's first N devices")
    parser.add_argument("--min-degree", type=int, default=1,
                        help="unity: every operator on at least this many devices (default 1)")
    parser.add_argument("--enable-pipeline", action="store_true",
                        help="unity: pipeline parallelism (not implemented yet: refused with an error)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only-data-parallel", action="store_true", default=None)
    parser.add_argument("--enable-parameter-parallel", action="store_true", default=None,
                        help="let proposals split parameter and reduction axes")
    parser.add_argument("--enable-attribute-parallel", action="store_true", default=None,
                        help="let proposals split attribute axes (e.g. image height and width)")
    parser.add_argument("--search-num-nodes", type=int, help="search for a machine with this many nodes")
    parser.add_argument("--import", dest="import_file", metavar="FILE",
                        help="a strategy file (JSON, or FlexFlow text if .txt) used as an initial candidate")
    parser.add_argument("--export", metavar="FILE", help="write the best strategy (FlexFlow text format if .txt)")
    parser.add_argument("--plot", metavar="FILE", help="draw the best strategy as PNG")
    parser.add_argument("--cost", choices=("analytic", "profiled"), default="analytic")
    parser.add_argument("--optimizer", choices=("sgd", "momentum", "adam"), default="sgd")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    add_json_flag(parser)


def _baselines():
    try:
        from flexrt.search import baselines
    except ImportError as e:
        raise ConfigError(f"the baseline strategies (flexrt.search.baselines) cannot be loaded: {e}") from None
    return baselines


def _expert(model_name: str, base, machine):
    try:
        return _baselines().expert_strategy(model_name, base, machine)
    except ConfigError:
        return None


def _import(path: str, base, machine):
    if path.endswith(".txt"):
        try:
            from flexrt.simulator.strategy_text import load_text_strategy
        except ImportError as e:
            raise ConfigError(f"FlexFlow text strategies cannot be read here: {e}") from None
        return load_text_strategy(path, base, machine)
    return load_strategy(path, base, machine)


def export_strategy(path: str, strategy, machine) -> str:
    """JSON, or FlexFlow's text format when the file name ends in .txt."""
    try:
        if path.endswith(".txt"):
            from flexrt.simulator.strategy_text import save_text_strategy
            save_text_strategy(path, strategy, machine)
        else:
            save_strategy(path, strategy, machine)
    except ImportError as e:
        raise ConfigError(f"cannot write FlexFlow text strategies: {e}") from None
    except OSError as e:
        raise ConfigError(f"cannot write the strategy to {path}: {e.strerror or e}") from None
    return path


def run(args, extra) -> int:
    cfg = check_model_flags(NAME, args.model, extra)
    if cfg.search_num_workers is not None:
        raise ConfigError("--search-num-workers: machine presets fix the devices per node; describe another "
                          "machine in YAML (--machine FILE) and use --nodes / --search-num-nodes for the node count")
    nodes = args.search_num_nodes or cfg.search_num_nodes or args.nodes
    machine = load_machine(args.machine, nodes=nodes)
    loaded = load_model(args.model, extra)
    base = loaded.model.pcg
    budget = args.budget if args.budget is not None else cfg.search_budget
    alpha = args.alpha if args.alpha is not None else cfg.search_alpha
    pick = lambda a, c: c if a is None else a  # noqa: E731
    space = SearchSpace.from_flags(pick(args.only_data_parallel, cfg.only_data_parallel),
                                   pick(args.enable_parameter_parallel, cfg.enable_parameter_parallel),
                                   pick(args.enable_attribute_parallel, cfg.enable_attribute_parallel))
    cost = AnalyticCostModel() if args.cost == "analytic" else ProfiledCostModel()
    progress = False if (args.no_progress or args.json) else None
    imported = args.import_file or cfg.import_strategy_file
    given = [_import(imported, base, machine)] if imported else []

    dp = fixed_result("data-parallel", data_parallel(base, machine), machine, cost, args.optimizer)
    expert_strategy = _expert(loaded.name, base, machine) if args.algo != "data-parallel" else None
    expert = fixed_result("expert", expert_strategy, machine, cost, args.optimizer) if expert_strategy else None
    if args.algo == "mcmc":
        result = mcmc(base, machine, cost, budget=budget, seed=args.seed, alpha=alpha, space=space,
                      initial=[s for s in (expert_strategy, *given) if s is not None], optimizer=args.optimizer,
                      progress=progress)
    elif args.algo == "exhaustive":
        result = exhaustive(base, machine, cost, budget=budget, seed=args.seed, space=space,
                            initial=[s for s in (expert_strategy, *given) if s is not None], optimizer=args.optimizer,
                            progress=progress)
    elif args.algo in ("unity", "sequential"):
        from flexrt.search.unity import DEFAULT_ALPHA, DEFAULT_SPLIT_SIZE, sequential, unity
        if not any((args.only_data_parallel, args.enable_parameter_parallel, args.enable_attribute_parallel,
                    cfg.only_data_parallel, cfg.enable_parameter_parallel, cfg.enable_attribute_parallel)):
            space = SearchSpace.full()  # Unity searches every axis unless FlexFlow's flags narrow it
        fn = unity if args.algo == "unity" else sequential
        result = fn(base, machine, cost, budget=budget, seed=args.seed,
                    alpha=args.alpha if args.alpha is not None else DEFAULT_ALPHA,
                    split_size=DEFAULT_SPLIT_SIZE if args.split_size is None else args.split_size,
                    cache=not args.no_cache, space=space,
                    min_degree=args.min_degree, devices=args.devices, optimizer=args.optimizer,
                    progress=progress, enable_pipeline=args.enable_pipeline)
    elif args.algo == "data-parallel":
        result = dp
    elif args.algo == "model-parallel":
        result = fixed_result("model-parallel", _baselines().model_parallel(base, machine), machine, cost,
                              args.optimizer)
    else:
        if expert is None:
            raise ConfigError(f"model {loaded.name} has no expert strategy; try --algo mcmc or model-parallel")
        result = expert

    files = {}
    export = args.export or cfg.export_strategy_file
    if export:
        files["strategy"] = export_strategy(export, result.strategy, machine)
    if args.plot:
        try:
            from flexrt.search.plot import plot_strategy
        except ImportError as e:
            raise ConfigError(f"cannot plot strategies: {e}") from None
        plot_strategy(result.strategy, machine, args.plot)
        files["plot"] = args.plot
    log = result.log
    if args.json:
        emit_json({"model": loaded.name, "machine": machine.name, "num_devices": machine.num_devices,
                   "algorithm": args.algo, "space": str(space), "budget": budget, "seed": args.seed,
                   "iteration_time_s": result.cost_s, "data_parallel_s": dp.cost_s,
                   "expert_s": expert.cost_s if expert else None,
                   "speedup_over_data_parallel": dp.cost_s / result.cost_s,
                   "speedup_over_expert": expert.cost_s / result.cost_s if expert else None,
                   "log": log.to_json(), "strategy": describe(result.strategy, machine, limit=1000),
                   "files": files})
        return 0
    print(f"model {loaded.name} on {machine.name}: {machine.num_nodes} node(s), {machine.num_devices} devices; "
          f"{args.algo} over {space}" + (f", budget {budget}, seed {args.seed}" if args.algo in SEARCHES else ""))
    if args.algo in ("unity", "sequential"):
        n = log.notes
        print(f"search: {log.proposals} candidate graphs costed in {log.elapsed_s:.1f} s ({log.stop_reason}); "
              f"segments {n.get('segments')}; " + (f"mapping cache {n['dp_cache_hits']} hits / "
                                                  f"{n['dp_cache_misses']} misses; " if "dp_cache_hits" in n else "")
              + f"graph {'rewritten' if n.get('rewritten') else 'unchanged'}; chosen: {n.get('chosen')}"
              + ("; INTERRUPTED, keeping the best so far" if log.interrupted else ""))
    if args.algo in ("mcmc", "exhaustive"):
        print(f"search: {log.proposals} {'proposals' if args.algo == 'mcmc' else 'strategies simulated'} in "
              f"{log.elapsed_s:.1f} s ({log.stop_reason}"
              + (f"; acceptance {log.acceptance_rate:.0%}" if args.algo == "mcmc" else "") + ")"
              + ("; INTERRUPTED, keeping the best so far" if log.interrupted else ""))
    print(f"{'found' if args.algo in SEARCHES else args.algo:<14} {result.cost_s * 1e3:10.3f} ms")
    print(f"{'data parallel':<14} {dp.cost_s * 1e3:10.3f} ms   (speed-up {dp.cost_s / result.cost_s:.2f}x)")
    if expert:
        print(f"{'expert':<14} {expert.cost_s * 1e3:10.3f} ms   (speed-up {expert.cost_s / result.cost_s:.2f}x)")
    else:
        print(f"{'expert':<14} {'-':>10}      (no expert strategy for {loaded.name})")
    for line in describe(result.strategy, machine):
        print(f"  {line}")
    for what, path in files.items():
        print(f"wrote the {what} to {path}")
    return 130 if log.interrupted else 0


