"""FlexFlow's command-line flags (and the Legion/Realm flags FlexFlow users type), as data.

``FLAGS`` lists every flag ``FFConfig`` understands: its spellings, the ``FFConfig`` attribute it
sets, its kind, default and valid range. ``parse_flags`` turns an argv list into attribute values;
every problem is a ``ConfigError`` that names the flag and says what is valid (never argparse's
``SystemExit``, so a definition script loaded by the CLI cannot end the process).

Entry points: ``parse_flags``, ``FLAGS`` (``FLAG_BY_NAME``), ``known_flags_text``.
"""

from __future__ import annotations

import difflib
import enum
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from flexrt.errors import ConfigError
from flexrt.inputs import short


class Kind(enum.Enum):
    INT = "integer"
    FLOAT = "number"
    SWITCH = "switch"   # takes no value
    PATH = "file"
    TEXT = "value"      # Legion/Realm flags: kept verbatim


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: ``names`` (first short, then long spellings), the attribute it sets, its kind and range.

    ``low`` is the smallest valid value (``low_open``: strictly greater than ``low``).
    """

    names: tuple[str, ...]
    attr: str
    kind: Kind
    default: Any
    help: str
    low: Optional[float] = None
    low_open: bool = False
    choices: tuple = ()    # the valid values of a TEXT flag (empty: any)

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
        bound = f"{self.low:g}" if self.kind is Kind.FLOAT else str(int(self.low))
        return f"{article} {self.kind.value} {'>' if self.low_open else '>='} {bound}"

    @property
    def spelling(self) -> str:
        return "/".join(self.names)


def _f(names, attr, kind, default, help, low=None, low_open=False, choices=()) -> Flag:
    return Flag(tuple(names.split("|")), attr, kind, default, help, low, low_open, tuple(choices))


# The searches compile can run (flexrt.search's algorithms that search a space; a test keeps them equal).
SEARCH_ALGORITHMS = ("mcmc", "unity", "sequential", "exhaustive")

# FlexFlow's flags (config.cc / FFConfig::parse_args), defaults as FlexFlow's except where noted.
FLAGS: tuple[Flag, ...] = (
    _f("-e|--epochs", "epochs", Kind.INT, 1, "training epochs", 1),
    _f("-b|--batch-size", "batch_size", Kind.INT, 64, "global batch size", 1),
    _f("--lr|--learning-rate", "learning_rate", Kind.FLOAT, 0.01, "learning rate", 0.0, True),
    _f("--wd|--weight-decay", "weight_decay", Kind.FLOAT, 1e-4, "weight decay", 0.0),
    _f("-p|--print-freq", "print_frequency", Kind.INT, 10, "print metrics every N iterations", 1),
    _f("-d|--dataset", "dataset_path", Kind.PATH, None, "dataset file or folder"),
    # Upstream's budget is unbounded by default (a known complaint); ours is bounded.
    _f("--budget|--search-budget", "search_budget", Kind.INT, 1000, "search iterations", 0),
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
    _f("--fusion", "perform_fusion", Kind.SWITCH, False, "fuse operators"),
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

FLAG_BY_NAME: dict[str, Flag] = {name: flag for flag in FLAGS for name in flag.names}
assert len(FLAG_BY_NAME) == sum(len(f.names) for f in FLAGS), "a flag spelling is listed twice"


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
        value = int(raw) if flag.kind is Kind.INT else float(raw)
    except ValueError:
        raise ConfigError(f"flag {name} got {raw!r}; valid: {flag.valid}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"flag {name} got {raw!r}; valid: {flag.valid} (finite)")
    check_range(flag, name, value)
    return value


def check_range(flag: Flag, name: str, value: Any) -> None:
    """Raise a ConfigError when ``value`` is below the flag's lower bound."""
    if flag.low is None or value is None:
        return
    if value < flag.low or (flag.low_open and value == flag.low):
        raise ConfigError(f"flag {name} got {value!r}; valid: {flag.valid}")


def flag_for(attr: str) -> Flag:
    for f in FLAGS:
        if f.attr == attr:
            return f
    raise ConfigError(f"FFConfig has no setting '{attr}'; valid: {', '.join(f.attr for f in FLAGS)}")


def _unknown(name: str) -> ConfigError:
    spellings = list(FLAG_BY_NAME) + list(LEGION_VALUE_FLAGS) + list(LEGION_SWITCHES)
    close = difflib.get_close_matches(name, spellings, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    ours = " ".join(f.names[-1] for f in FLAGS)  # one spelling each: the message stays one short line
    return ConfigError(f"unknown flag {short(name)}{hint}; known flags: {ours}, and Legion's -ll:*/-lg:* flags")


def parse_flags(argv: Sequence[str]) -> tuple[dict[str, Any], dict[str, Optional[str]]]:
    """Parse ``argv`` (without the program name) into (attribute values, Legion/Realm flags).

    Values accept ``--flag value`` and ``--flag=value``; a repeated flag keeps its last value, as
    FlexFlow's parser does. Legion switches map to None in the second dict.

    Example:
        >>> values, legion = parse_flags(["-b", "32", "-ll:gpu", "4", "-ll:fsize", "14000"])
        >>> values["batch_size"], values["workers_per_node"], legion
        (32, 4, {'-ll:fsize': '14000'})
    """
    values = defaults()
    legion: dict[str, Optional[str]] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        if not isinstance(token, str):
            raise ConfigError(f"command-line arguments must be strings, got {token!r} at position {i}")
        i += 1
        if not token.startswith("-") or token == "-":
            raise ConfigError(f"unexpected argument {token!r}; flags start with '-' (known flags: "
                              f"{known_flags_text()})")
        name, inline = token, None
        if token.startswith("--") and "=" in token:
            name, inline = token.split("=", 1)
        if name in LEGION_SWITCHES:
            if inline is not None:
                raise ConfigError(f"flag {name} takes no value, got {inline!r}")
            legion[name] = None
            continue
        flag = FLAG_BY_NAME.get(name)
        if flag is None and name not in LEGION_VALUE_FLAGS:
            raise _unknown(name)
        if flag is not None and flag.kind is Kind.SWITCH:
            if inline is not None:
                raise ConfigError(f"flag {name} is a switch and takes no value, got {inline!r}")
            values[flag.attr] = True
            continue
        if inline is None:
            if i >= len(args):
                valid = flag.valid if flag is not None else "a value"
                raise ConfigError(f"flag {name} needs a value ({valid})")
            inline = args[i]
            i += 1
        if flag is None:
            legion[name] = _convert(Flag((name,), "", Kind.TEXT, None, ""), name, inline)
        else:
            values[flag.attr] = _convert(flag, name, inline)
    return values, legion
