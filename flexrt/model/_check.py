"""Argument checks shared by the model API; each raises ConfigError saying what, where and what is valid."""

from __future__ import annotations

import enum
import math
from typing import Any, Optional

from flexrt.errors import ConfigError
from flexrt.inputs import short


def number(where: str, name: str, value: Any, low: Optional[float] = None, low_open: bool = False,
           high: Optional[float] = None, high_open: bool = False) -> float:
    """A finite real number within bounds; returned as float."""
    valid = _range_text("a number", low, low_open, high, high_open)
    try:   # math.isfinite of an int beyond float's range raises OverflowError
        finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise ConfigError(f"{where}: {name} must be {valid} (finite), got {short(value)}")
    if (low is not None and (value < low or (low_open and value == low))) or \
            (high is not None and (value > high or (high_open and value == high))):
        raise ConfigError(f"{where}: {name} must be {valid}, got {short(value)}")
    return float(value)


def integer(where: str, name: str, value: Any, low: Optional[int] = None) -> int:
    """An int (not a bool) >= ``low``."""
    valid = _range_text("an integer", low, False, None, False)
    if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
        raise ConfigError(f"{where}: {name} must be {valid}, got {short(value)}")
    return int(value)


def int_tuple(where: str, name: str, value: Any, low: Optional[int] = None, allow_int: bool = False) -> tuple[int, ...]:
    """A list or tuple of ints (or a single int when ``allow_int``)."""
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: {name} must be a list of integers, got {value!r}")
    return tuple(integer(where, f"{name}[{i}]", v, low) for i, v in enumerate(value))


def flag(where: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {name} must be True or False, got {value!r}")
    return value


def member(where: str, name: str, value: Any, enum_type: type[enum.Enum]) -> Any:
    """A member of ``enum_type``."""
    if not isinstance(value, enum_type):
        article = "an" if enum_type.__name__[0] in "AEIOU" else "a"
        raise ConfigError(f"{where}: {name} must be {article} {enum_type.__name__}, got {value!r}; valid: "
                          f"{', '.join(f'{enum_type.__name__}.{m.name}' for m in enum_type)}")
    return value


def _range_text(what: str, low, low_open, high, high_open) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    return what + (" " + " and ".join(parts) if parts else "")


def regularizer(where: str, name: str, value: Any):
    """FlexFlow's regularizer argument as a weight penalty: None (none, or REG_MODE_NONE), else
    ("l1" | "l2", its ``_lambda``); an object without FlexFlow's ``type`` and ``_lambda`` is a
    ConfigError."""
    if value is None:
        return None
    from flexrt.model.enums import RegularizerMode
    mode, factor = getattr(value, "type", None), getattr(value, "_lambda", None)
    if isinstance(mode, str) and mode in RegularizerMode.__members__:
        mode = RegularizerMode[mode]
    if not isinstance(mode, RegularizerMode):
        raise ConfigError(f"{where}: {name} must be None or a regularizer with FlexFlow's type (RegularizerMode) and "
                          f"_lambda, got {value!r}")
    if mode is RegularizerMode.REG_MODE_NONE:
        return None
    return ("l1" if mode is RegularizerMode.REG_MODE_L1 else "l2",
            number(where, f"{name}._lambda", factor, 0.0))
