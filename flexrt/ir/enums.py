"""Operator-level enums with FlexFlow's names and values (``ActiMode.AC_MODE_RELU``)."""

from __future__ import annotations

import enum


class ActiMode(enum.Enum):
    __hash__ = object.__hash__  # members are singletons compared by identity; Enum's own hash is slow

    AC_MODE_NONE = 10
    AC_MODE_RELU = 11
    AC_MODE_SIGMOID = 12
    AC_MODE_TANH = 13
    AC_MODE_GELU = 14


class PoolType(enum.Enum):
    __hash__ = object.__hash__  # members are singletons compared by identity; Enum's own hash is slow

    POOL_MAX = 30
    POOL_AVG = 31


class AggrMode(enum.Enum):
    AGGR_MODE_NONE = 20
    AGGR_MODE_SUM = 21
    AGGR_MODE_AVG = 22
