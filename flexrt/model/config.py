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
from flexrt.model.flags import FLAGS, Kind, check_range, defaults, flag_for, parse_flags


@dataclass(frozen=True, init=False)
class FFConfig:
    """FlexFlow's ``FFConfig``: every setting from FlexFlow's flags, with FlexFlow's Python names.

    ``FFConfig()`` parses ``sys.argv[1:]`` (as FlexFlow's does); ``FFConfig(argv)`` parses the given
    list. Unknown flags and bad values raise ``ConfigError`` naming the flag and what is valid.
    The value is immutable; ``with_values(batch_size=128)`` gives a changed copy.
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
    workers_per_node: int
    cpus_per_node: int
    legion_flags: Mapping[str, Optional[str]] = field(compare=False)
    argv: tuple[str, ...] = field(compare=False)

    def __init__(self, argv: Optional[Sequence[str]] = None) -> None:
        argv = tuple(sys.argv[1:] if argv is None else argv)
        values, legion = parse_flags(argv)
        self._set(values, legion, argv)

    def _set(self, values: dict[str, Any], legion: Mapping[str, Optional[str]], argv: tuple[str, ...]) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "legion_flags", types.MappingProxyType(dict(legion)))
        object.__setattr__(self, "argv", argv)

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
        new._set(values, self.legion_flags, self.argv)
        return new

    # FlexFlow's FFConfig methods ---------------------------------------------------------------
    def get_current_time(self) -> float:
        """Microseconds on a monotonic clock, as FlexFlow's (scripts subtract two readings)."""
        return time.perf_counter_ns() / 1000.0

    def begin_trace(self, trace_id: int) -> None:
        """Legion tracing hint; nothing to do here (kept so training loops run unchanged)."""

    def end_trace(self, trace_id: int) -> None:
        """Legion tracing hint; nothing to do here."""

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
        raise ConfigError(f"FFConfig.{attr} (flag {flag.spelling}) got {value!r}; valid: "
                          f"{'True or False' if kind is Kind.SWITCH else flag.valid}")
    if flag.choices and value not in flag.choices:
        raise ConfigError(f"FFConfig.{attr} (flag {flag.spelling}) got {value!r}; valid: {flag.valid}")
    check_range(flag, f"{flag.spelling} (FFConfig.{attr})", value)


# Every flag sets a declared field, and every declared setting has a flag.
assert {f.attr for f in FLAGS} == {f.name for f in fields(FFConfig)} - {"legion_flags", "argv"}
assert set(defaults()) == {f.attr for f in FLAGS}
