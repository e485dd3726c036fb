"""FlexFlow's command-line flags (and the Legion/Realm flags FlexFlow users type), as data.

``FLAGS`` lists every flag ``FFConfig`` understands: its spellings, the ``FFConfig`` attribute it
sets, its kind, default and valid range. ``parse_flags`` turns an argv list into attribute values;
every problem is a ``ConfigError`` that names the flag and says what is valid (never argparse's
``SystemExit``, so a definition script loaded by the CLI cannot end the process).

``IGNORED_FLAGS`` lists FlexFlow's flags that flexrt parses but does not act on (each says why);
``parse_flags`` warns once per such flag (``FlagWarning``). ``parse_flags(argv, tolerant=True)`` is
FlexFlow's own parser: it leaves every token it does not know to the script (FlexFlow's scripts read
``-a``, ``--seq-length`` with argparse), warning only where a token looks like a typo of a known flag.

Entry points: ``parse_flags``, ``FLAGS`` (``FLAG_BY_NAME``), ``IGNORED_FLAGS`` (``IGNORED_BY_NAME``),
``known_flags_text``.
"""

from __future__ import annotations

import difflib
import enum
import math
import warnings
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from flexrt.errors import ConfigError
from flexrt.inputs import plain_number, short
from flexrt.search.api import MAX_BUDGET


class FlagWarning(UserWarning):
    """A FlexFlow flag flexrt ignores, or a token left to the script that looks like a mistyped flag."""


class Kind(enum.Enum):
    INT = "integer"
    FLOAT = "number"
    SWITCH = "switch"   # takes no value
    PATH = "file"
    TEXT = "value"      # Legion/Realm flags: kept verbatim


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: ``names`` (first short, then long spellings), the attribute it sets, its kind and range.

    ``low`` is the smallest valid value (``low_open``: strictly greater than ``low``), ``high`` the
    largest.
    """

    names: tuple[str, ...]
    attr: str
    kind: Kind
    default: Any
    help: str
    low: Optional[float] = None
    low_open: bool = False
    choices: tuple = ()    # the valid values of a TEXT flag (empty: any)
    high: Optional[float] = None

    @property
    def valid(self) -> str:
        """What a value must be, in words: 'an integer >= 1'."""
        if self.kind is Kind.SWITCH:
            return "no value"
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        if self.kind in (Kind.PATH, Kind.TEXT):
            return f"a {self.kind.value}"
        article = "an" if self.kind is Kind.INT else "a"
        if self.low is None:
            return f"{article} {self.kind.value}"
        shown = (lambda v: f"{v:g}") if self.kind is Kind.FLOAT else (lambda v: f"{int(v):,}")
        if self.high is not None:
            return f"{article} {self.kind.value} between {shown(self.low)} and {shown(self.high)}"
        return f"{article} {self.kind.value} {'>' if self.low_open else '>='} {shown(self.low)}"

    @property
    def spelling(self) -> str:
        return "/".join(self.names)


def _f(names, attr, kind, default, help, low=None, low_open=False, choices=(), high=None) -> Flag:
    return Flag(tuple(names.split("|")), attr, kind, default, help, low, low_open, tuple(choices), high)



# The searches compile can run (flexrt.search's algorithms that search a space; a test keeps them equal).
SEARCH_ALGORITHMS = ("mcmc", "unity", "sequential", "exhaustive", "pipeline")
# flexrt's fusion policies (``flexrt.search.fusion_policies``) and DisCo's search
FUSION_POLICIES = ("off", "xla", "combiner", "horovod", "ddp", "jax", "disco")

# FlexFlow's flags (config.cc / FFConfig::parse_args), defaults as FlexFlow's except where noted.
FLAGS: tuple[Flag, ...] = (
    _f("-e|--epochs", "epochs", Kind.INT, 1, "training epochs", 1),
    _f("-b|--batch-size", "batch_size", Kind.INT, 64, "global batch size", 1),
    _f("--lr|--learning-rate", "learning_rate", Kind.FLOAT, 0.01, "learning rate", 0.0, True),
    _f("--wd|--weight-decay", "weight_decay", Kind.FLOAT, 1e-4, "weight decay", 0.0),
    _f("-p|--print-freq", "print_frequency", Kind.INT, 10, "print metrics every N iterations", 1),
    _f("-d|--dataset", "dataset_path", Kind.PATH, None, "dataset file or folder"),
    # Upstream's budget is unbounded by default (a known complaint); ours is bounded.
    _f("--budget|--search-budget", "search_budget", Kind.INT, 1000, "search iterations", 0, high=MAX_BUDGET),
    # Unity's relaxation factor (§5); FlexFlow's MCMC reads it as its temperature.
    _f("--alpha|--search-alpha", "search_alpha", Kind.FLOAT, 1.05, "search alpha", 0.0, True),
    # flexrt's: which search compile runs when it searches (FlexFlow's MCMC or Unity's, §5)
    _f("--search-algorithm", "search_algorithm", Kind.TEXT, "mcmc",
       "search compile runs: a registered search algorithm (mcmc, unity, sequential, exhaustive)",
       choices=SEARCH_ALGORITHMS),
    _f("--only-data-parallel", "only_data_parallel", Kind.SWITCH, False, "use data parallelism only"),
    _f("--enable-parameter-parallel", "enable_parameter_parallel", Kind.SWITCH, False,
       "let the search partition parameters"),
    _f("--enable-attribute-parallel", "enable_attribute_parallel", Kind.SWITCH, False,
       "let the search partition attribute dimensions"),
    _f("--import|--import-strategy", "import_strategy_file", Kind.PATH, None, "strategy file to use"),
    _f("--export|--export-strategy", "export_strategy_file", Kind.PATH, None, "write the found strategy here"),
    _f("--search-num-nodes", "search_num_nodes", Kind.INT, None, "nodes of the machine searched for", 1),
    _f("--search-num-workers", "search_num_workers", Kind.INT, None, "devices per node of the machine searched for",
       1),
    _f("--machine-model-file", "machine_model_file", Kind.PATH, None, "FlexFlow machine model file"),
    _f("--machine", "machine_file", Kind.PATH, None, "flexrt machine YAML"),
    _f("--taskgraph", "taskgraph_file", Kind.PATH, None, "write the simulated task graph (dot) here"),
    _f("--compgraph", "compgraph_file", Kind.PATH, None, "write the computation graph (dot) here"),
    _f("--substitution-json", "substitution_json", Kind.PATH, None, "substitution rule file"),
    _f("--nodes", "num_nodes", Kind.INT, 1, "nodes", 1),
    _f("--profiling", "profiling", Kind.SWITCH, False, "profile every operator"),
    _f("--fusion", "perform_fusion", Kind.SWITCH, False, "fuse operators (flexrt: the xla policy)"),
    # flexrt's: how compile fuses the chosen strategy (DisCo): a named policy, or disco's search
    _f("--fusion-policy", "fusion_policy", Kind.TEXT, "off",
       "fusion of the strategy: off, xla, combiner, horovod, ddp, jax, or disco (DisCo's search)",
       choices=FUSION_POLICIES),
    # Legion's processor counts, which FlexFlow reads as devices per node.
    _f("-ll:gpu", "workers_per_node", Kind.INT, 1, "devices (GPUs) per node", 1),
    _f("-ll:cpu", "cpus_per_node", Kind.INT, 1, "CPU processors per node", 0),
)

# Legion/Realm flags that take a value; accepted and kept verbatim in ``FFConfig.legion_flags``.
LEGION_VALUE_FLAGS: tuple[str, ...] = (
    "-ll:util", "-ll:bgwork", "-ll:py", "-ll:pyimport", "-ll:fsize", "-ll:zsize", "-ll:csize", "-ll:rsize",
    "-ll:nsize", "-ll:ncsize", "-ll:gsize", "-ll:ib_rsize", "-ll:ib_zsize", "-ll:dma", "-ll:ahandlers",
    "-ll:streams", "-ll:d2d_streams", "-ll:pin", "-ll:omps", "-ll:othr", "-ll:ocpu", "-ll:cpu_bgwork",
    "-ll:msize", "-ll:stacksize", "-ll:gpu_ids", "-lg:prof", "-lg:prof_logfile", "-lg:eager_alloc_percentage",
    "-lg:window", "-lg:sched", "-lg:parallel_replay", "-lg:registration", "-logfile", "-level",
)
# Legion/Realm switches (no value).
LEGION_SWITCHES: tuple[str, ...] = (
    "-lg:spy", "-lg:warn", "-lg:inorder", "-lg:safe_ctrlrepl", "-lg:no_tracing", "-lg:debug",
    "-ll:force_kthreads", "-ll:show_rsrv",
)

_SERVE = "a FlexFlow Serve (inference) setting; flexrt trains and does not serve"
_SEARCH = "flexrt's strategy comes from its search (--budget, --only-data-parallel, --import)"

# FlexFlow's flags (FFConfig::parse_args, ff_arg_to_sysarg) that flexrt accepts and ignores; ``help``
# says why, ``attr`` is FlexFlow's name of the setting. Parsed and checked like FLAGS; values are
# kept in ``FFConfig.ignored_flags``.
IGNORED_FLAGS: tuple[Flag, ...] = (
    _f("--memory-search", "perform_memory_search", Kind.SWITCH, False,
       "flexrt's search does not do FlexFlow's memory-aware search"),
    _f("--overlap", "search_overlap_backward_update", Kind.SWITCH, False,
       "flexrt overlaps gradient synchronization with the backward pass unless --grad-sync after-backward "
       "(FlexFlow's default without --overlap) is given to the flexrt command"),
    _f("--simulator-workspace-size", "simulator_workspace_size", Kind.INT, None,
       "flexrt's simulator needs no device workspace", 0),
    _f("--simulator-segment-size", "simulator_segment_size", Kind.INT, 16777216,
       "flexrt's communication model does not cut transfers into segments", 1),
    _f("--simulator-max-num-segments", "simulator_max_num_segments", Kind.INT, 1,
       "flexrt's communication model does not cut transfers into segments", 1),
    _f("--machine-model-version", "machine_model_version", Kind.INT, 0,
       "flexrt's machine model is its YAML (--machine) or FlexFlow's file (--machine-model-file)", 0),
    _f("--disable-control-replication", "disable_control_replication", Kind.SWITCH, False,
       "flexrt has no Legion runtime, so no control replication"),
    _f("--enable-propagation", "enable_propagation", Kind.SWITCH, False,
       "flexrt's MCMC does not do FlexFlow's propagation of parallel configurations"),
    _f("--enable-inplace-optimization|--enable-inplace-optimizations", "enable_inplace_optimizations",
       Kind.SWITCH, False, "flexrt's kernels always write fresh outputs"),
    _f("--allow-tensor-op-math-conversion", "allow_tensor_op_math_conversion", Kind.SWITCH, False,
       "flexrt's kernels do not convert to Tensor Core math"),
    _f("--include-costs-dot-graph", "include_costs_dot_graph", Kind.SWITCH, False,
       "flexrt's dot exports (--taskgraph, --compgraph) carry no cost annotations"),
    _f("--base-optimize-threshold", "base_optimize_threshold", Kind.INT, 10,
       "a knob of FlexFlow's graph optimizer; flexrt's Unity search takes --budget", 0),
    _f("--python-data-loader-type", "python_data_loader_type", Kind.INT, 2, "flexrt has one data loader", 1),
    _f("--benchmarking", "benchmarking", Kind.SWITCH, False,
       "flexrt has no benchmarking mode (it always runs the real data)"),
    _f("--inference-debugging", "inference_debugging", Kind.SWITCH, False, _SERVE),
    _f("-data-parallelism-degree", "data_parallelism_degree", Kind.INT, 1, f"{_SERVE}; {_SEARCH}", 1),
    _f("-tensor-parallelism-degree", "tensor_parallelism_degree", Kind.INT, 1, f"{_SERVE}; {_SEARCH}", 1),
    _f("-pipeline-parallelism-degree", "pipeline_parallelism_degree", Kind.INT, 1, f"{_SERVE}; {_SEARCH}", 1),
    _f("-offload", "cpu_offload", Kind.SWITCH, False, _SERVE),
    _f("-offload-reserve-space-size", "offload_reserve_space_size", Kind.INT, None, _SERVE, 0),
    _f("--4bit-quantization", "use_4bit_quantization", Kind.SWITCH, False, _SERVE),
    _f("--8bit-quantization", "use_8bit_quantization", Kind.SWITCH, False, _SERVE),
    _f("-enable-peft", "enable_peft", Kind.SWITCH, False, _SERVE),
    _f("-peft-activation-reserve-space-size", "peft_activation_reserve_space_size", Kind.INT, None, _SERVE, 0),
    _f("-peft-weight-reserve-space-size", "peft_weight_reserve_space_size", Kind.INT, None, _SERVE, 0),
)

FLAG_BY_NAME: dict[str, Flag] = {name: flag for flag in FLAGS for name in flag.names}
assert len(FLAG_BY_NAME) == sum(len(f.names) for f in FLAGS), "a flag spelling is listed twice"
IGNORED_BY_NAME: dict[str, Flag] = {name: flag for flag in IGNORED_FLAGS for name in flag.names}
assert not set(IGNORED_BY_NAME) & set(FLAG_BY_NAME), "a flag is both used and ignored"


def defaults() -> dict[str, Any]:
    """Every attribute's default value."""
    return {f.attr: f.default for f in FLAGS}


def known_flags_text() -> str:
    """The known flags on one line each group, for error messages."""
    ours = ", ".join(f.spelling for f in FLAGS)
    return f"{ours}; Legion/Realm: {', '.join(LEGION_VALUE_FLAGS + LEGION_SWITCHES)}"


def _convert(flag: Flag, name: str, raw: str) -> Any:
    if flag.kind in (Kind.PATH, Kind.TEXT):
        if raw == "":
            raise ConfigError(f"flag {name} got an empty value; valid: {flag.valid}")
        if flag.choices and raw not in flag.choices:
            raise ConfigError(f"flag {name} got {short(raw)}; valid: {flag.valid}")
        return raw
    try:
        if not plain_number(raw):
            raise ValueError(raw)
        value = int(raw) if flag.kind is Kind.INT else float(raw)
    except ValueError:
        raise ConfigError(f"flag {name} got {short(raw)}; valid: {flag.valid}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"flag {name} got {short(raw)}; valid: {flag.valid} (finite)")
    check_range(flag, name, value)
    return value


def check_range(flag: Flag, name: str, value: Any) -> None:
    """Raise a ConfigError when ``value`` is outside the flag's bounds."""
    if flag.low is None or value is None:
        return
    if value < flag.low or (flag.low_open and value == flag.low) or (flag.high is not None and value > flag.high):
        raise ConfigError(f"flag {name} got {short(value)}; valid: {flag.valid}")


def flag_for(attr: str) -> Flag:
    for f in FLAGS:
        if f.attr == attr:
            return f
    raise ConfigError(f"FFConfig has no setting '{attr}'; valid: {', '.join(f.attr for f in FLAGS)}")


def _spellings() -> list[str]:
    return list(FLAG_BY_NAME) + list(IGNORED_BY_NAME) + list(LEGION_VALUE_FLAGS) + list(LEGION_SWITCHES)


def _unknown(name: str) -> ConfigError:
    close = difflib.get_close_matches(name, _spellings(), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    ours = " ".join(f.names[-1] for f in FLAGS)  # one spelling each: the message stays one short line
    return ConfigError(f"unknown flag {short(name)}{hint}; known flags: {ours}, and Legion's -ll:*/-lg:* flags")


# A token left to the script is reported only when it is this close to a known spelling (difflib's
# ratio): '--epoch' (0.93 to '--epochs') is a typo, a script's own '--seq-length' is not.
_TYPO_CUTOFF = 0.8


def _warn(message: str, depth: int = 0) -> None:
    # stacklevel 4: parse_argv <- FFConfig.__init__ <- the script's FFConfig() call (plus helpers between)
    warnings.warn(message, FlagWarning, stacklevel=4 + depth)


def _left_to_script(token: str) -> None:
    """Warn when a token FlexFlow's parser would skip looks like a mistyped flexrt flag."""
    name = token.split("=", 1)[0]
    if not name.startswith("-") or name == "-":
        return
    close = difflib.get_close_matches(name, _spellings(), n=1, cutoff=_TYPO_CUTOFF)
    if close:
        _warn(f"flexrt: {short(name)} is not a flag FFConfig knows (did you mean {close[0]}?); left to the script",
              depth=1)


@dataclass(frozen=True, slots=True)
class ParsedArgs:
    """What ``parse_argv`` found: attribute values (every FLAGS attribute), Legion/Realm flags, the
    values of ignored FlexFlow flags (by FlexFlow's setting name) and the tokens left to the script."""

    values: dict
    legion: dict
    ignored: dict
    unknown: tuple[str, ...]


def _value(flag: Optional[Flag], name: str, inline: Optional[str], args: list, i: int) -> tuple[Any, int]:
    """The converted value of valued flag ``name`` (None: a Legion flag), and the next position."""
    if inline is None:
        if i >= len(args):
            raise ConfigError(f"flag {name} needs a value ({flag.valid if flag is not None else 'a value'})")
        inline = args[i]
        i += 1
    return _convert(flag or Flag((name,), "", Kind.TEXT, None, ""), name, inline), i


def parse_argv(argv: Sequence[str], tolerant: bool = False) -> ParsedArgs:
    """Parse ``argv`` (without the program name).

    Values accept ``--flag value`` and ``--flag=value``; a repeated flag keeps its last value, as
    FlexFlow's parser does. A flag of ``IGNORED_FLAGS`` is checked and warned about (``FlagWarning``).
    ``tolerant=False``: any other token is a ConfigError; ``tolerant=True`` (FlexFlow's behaviour):
    it is left to the script in ``unknown``, with a warning only where it looks like a typo.

    Example:
        >>> parse_argv(["-b", "32", "--seq-length", "8"], tolerant=True).unknown
        ('--seq-length', '8')
    """
    out = ParsedArgs(defaults(), {}, {}, ())
    unknown: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        if not isinstance(token, str):
            raise ConfigError(f"command-line arguments must be strings, got {token!r} at position {i}")
        i += 1
        name, inline = token, None
        if token.startswith("--") and "=" in token:
            name, inline = token.split("=", 1)
        flag = FLAG_BY_NAME.get(name) or IGNORED_BY_NAME.get(name)
        if flag is None and name not in LEGION_SWITCHES and name not in LEGION_VALUE_FLAGS:
            if not tolerant:
                if not token.startswith("-") or token == "-":
                    raise ConfigError(f"unexpected argument {token!r}; flags start with '-' (known flags: "
                                      f"{known_flags_text()})")
                raise _unknown(name)
            _left_to_script(token)
            unknown.append(token)
            continue
        if name in LEGION_SWITCHES or (flag is not None and flag.kind is Kind.SWITCH):
            if inline is not None:
                raise ConfigError(f"flag {name} is a switch and takes no value, got {inline!r}")
            value = True
        else:
            value, i = _value(flag, name, inline, args, i)
        if flag is None:
            out.legion[name] = None if value is True else value
        elif flag.attr in out.values:
            out.values[flag.attr] = value
        else:
            if flag.attr not in out.ignored:
                _warn(f"flexrt: {name}: {flag.help}; ignored")
            out.ignored[flag.attr] = value
    return ParsedArgs(out.values, out.legion, out.ignored, tuple(unknown))


def parse_flags(argv: Sequence[str]) -> tuple[dict[str, Any], dict[str, Optional[str]]]:
    """Parse ``argv`` strictly into (attribute values, Legion/Realm flags); see ``parse_argv``.

    Example:
        >>> values, legion = parse_flags(["-b", "32", "-ll:gpu", "4", "-ll:fsize", "14000"])
        >>> values["batch_size"], values["workers_per_node"], legion
        (32, 4, {'-ll:fsize': '14000'})
    """
    parsed = parse_argv(argv)
    return parsed.values, parsed.legion
