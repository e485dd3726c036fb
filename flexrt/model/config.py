"""``FFConfig``: FlexFlow's run configuration, parsed from the command line.

Example:
    >>> cfg = FFConfig(["-b", "32", "--budget", "200", "-ll:gpu", "4"])
    >>> cfg.batch_size, cfg.search_budget, cfg.workers_per_node
    (32, 200, 4)

Entry point: ``FFConfig``.
"""

from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional, Sequence

from flexrt.errors import ConfigError
from flexrt.inputs import short
from flexrt.model.flags import FLAGS, IGNORED_FLAGS, Kind, check_range, defaults, flag_for, parse_argv


@dataclass(frozen=True, init=False)
class FFConfig:
    """FlexFlow's ``FFConfig``: every setting from FlexFlow's flags, with FlexFlow's Python names.

    ``FFConfig()`` parses ``sys.argv[1:]`` as FlexFlow's does: it reads the flags it knows and leaves
    every other token to the script (``unknown_args``; the script's own argparse flags such as ``-a``),
    warning only about a token that looks like a mistyped flag. ``FFConfig(argv)`` (the CLI, tests)
    parses the given list strictly: an unknown token is a ``ConfigError`` (``tolerant=True`` leaves
    it to the script, as for ``sys.argv``). Either way a bad value of a
    known flag raises ``ConfigError`` naming the flag and what is valid, and FlexFlow's flags that
    flexrt does not act on (``IGNORED_FLAGS``) are accepted with one ``FlagWarning`` each and kept in
    ``ignored_flags``. The value is immutable; ``with_values(batch_size=128)`` gives a changed copy.
    """

    batch_size: int
    epochs: int
    learning_rate: float
    weight_decay: float
    print_frequency: int
    dataset_path: Optional[str]
    search_budget: int
    search_alpha: float
    search_algorithm: str
    only_data_parallel: bool
    enable_parameter_parallel: bool
    enable_attribute_parallel: bool
    import_strategy_file: Optional[str]
    export_strategy_file: Optional[str]
    search_num_nodes: Optional[int]
    search_num_workers: Optional[int]
    machine_model_file: Optional[str]
    machine_file: Optional[str]
    taskgraph_file: Optional[str]
    compgraph_file: Optional[str]
    substitution_json: Optional[str]
    num_nodes: int
    profiling: bool
    perform_fusion: bool
    fusion_policy: str
    workers_per_node: int
    cpus_per_node: int
    legion_flags: Mapping[str, Optional[str]] = field(compare=False)
    argv: tuple[str, ...] = field(compare=False)
    # FlexFlow's flags flexrt ignores, by FlexFlow's setting name (only those given)
    ignored_flags: Mapping[str, Any] = field(compare=False)
    # tokens of sys.argv[1:] left to the script (always empty for an explicit argv)
    unknown_args: tuple[str, ...] = field(compare=False)

    def __init__(self, argv: Optional[Sequence[str]] = None, *, tolerant: Optional[bool] = None) -> None:
        tolerant = argv is None if tolerant is None else tolerant
        if not isinstance(tolerant, bool):
            raise ConfigError(f"FFConfig: tolerant must be True or False, got {tolerant!r}")
        if argv is not None and (isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence)
                                 or not all(isinstance(a, str) for a in argv)):
            raise ConfigError(f"FFConfig: argv must be a list of strings (as sys.argv[1:], e.g. ['-b', '64']), got "
                              f"{type(argv).__name__} {short(argv)}")
        argv = tuple(sys.argv[1:] if argv is None else argv)
        parsed = parse_argv(argv, tolerant=tolerant)
        self._set(parsed.values, parsed.legion, argv, parsed.ignored, parsed.unknown)

    def _set(self, values: dict[str, Any], legion: Mapping[str, Optional[str]], argv: tuple[str, ...],
             ignored: Mapping[str, Any], unknown: tuple[str, ...]) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "legion_flags", types.MappingProxyType(dict(legion)))
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "ignored_flags", types.MappingProxyType(dict(ignored)))
        object.__setattr__(self, "unknown_args", tuple(unknown))

    def with_values(self, **changes: Any) -> "FFConfig":
        """A copy with some settings changed, each checked as its flag would be.

        Example:
            >>> FFConfig([]).with_values(batch_size=256).batch_size
            256
        """
        values = {f.attr: getattr(self, f.attr) for f in FLAGS}
        for attr, value in changes.items():
            flag = flag_for(attr)
            _check_value(flag, attr, value)
            values[attr] = value
        new = object.__new__(FFConfig)
        new._set(values, self.legion_flags, self.argv, self.ignored_flags, self.unknown_args)
        return new

    # FlexFlow's FFConfig methods ---------------------------------------------------------------
    def get_current_time(self) -> float:
        """Microseconds on a monotonic clock, as FlexFlow's (scripts subtract two readings)."""
        return time.perf_counter_ns() / 1000.0

    def begin_trace(self, trace_id: int) -> None:
        """Legion tracing hint; nothing to do here (kept so training loops run unchanged)."""

    def end_trace(self, trace_id: int) -> None:
        """Legion tracing hint; nothing to do here."""

    def _ignored(self, attr: str) -> Any:
        return self.ignored_flags.get(attr, _IGNORED_DEFAULTS[attr])

    # FlexFlow's read-only FFConfig properties for flags flexrt ignores (FlexFlow's defaults)
    @property
    def enable_control_replication(self) -> bool:
        return not self._ignored("disable_control_replication")

    @property
    def data_parallelism_degree(self) -> int:
        return self._ignored("data_parallelism_degree")

    @property
    def tensor_parallelism_degree(self) -> int:
        return self._ignored("tensor_parallelism_degree")

    @property
    def pipeline_parallelism_degree(self) -> int:
        return self._ignored("pipeline_parallelism_degree")

    @property
    def python_data_loader_type(self) -> int:
        return self._ignored("python_data_loader_type")

    @property
    def cpu_offload(self) -> bool:
        return self._ignored("cpu_offload")

    @property
    def total_workers(self) -> int:
        """Devices in the machine running: nodes times devices per node."""
        return self.num_nodes * self.workers_per_node

    def to_dict(self) -> dict[str, Any]:
        """Every setting (not the Legion flags) as plain values, for JSON output."""
        return {f.attr: getattr(self, f.attr) for f in FLAGS}


def _check_value(flag, attr: str, value: Any) -> None:
    kind = flag.kind
    ok = {
        Kind.INT: isinstance(value, int) and not isinstance(value, bool),
        Kind.FLOAT: isinstance(value, (int, float)) and not isinstance(value, bool),
        Kind.SWITCH: isinstance(value, bool),
        Kind.PATH: isinstance(value, str) and value != "",
        Kind.TEXT: isinstance(value, str),
    }[kind]
    if value is None and flag.default is None:
        return
    if not ok:
        raise ConfigError(f"FFConfig.{attr} (flag {flag.spelling}) got {short(value)}; valid: "
                          f"{'True or False' if kind is Kind.SWITCH else flag.valid}")
    if flag.choices and value not in flag.choices:
        raise ConfigError(f"FFConfig.{attr} (flag {flag.spelling}) got {short(value)}; valid: {flag.valid}")
    check_range(flag, f"{flag.spelling} (FFConfig.{attr})", value)


_IGNORED_DEFAULTS = {f.attr: f.default for f in IGNORED_FLAGS}

# Every flag sets a declared field, and every declared setting has a flag.
assert {f.attr for f in FLAGS} == {f.name for f in fields(FFConfig)} - {"legion_flags", "argv", "ignored_flags",
                                                                        "unknown_args"}
assert set(defaults()) == {f.attr for f in FLAGS}
