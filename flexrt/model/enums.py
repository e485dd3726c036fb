"""Training-level enums with FlexFlow's names and values (``LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY``).

Operator-level enums (``ActiMode``, ``PoolType``, ``AggrMode``) and ``DataType`` live in ``flexrt.ir``
and are re-exported here, so ``from flexrt.core import *`` gives a script every name FlexFlow's does.
"""

from __future__ import annotations

import enum

from flexrt.ir.datatype import DataType
from flexrt.ir.enums import ActiMode, AggrMode, PoolType

__all__ = ["ActiMode", "AggrMode", "CompMode", "DataType", "LossType", "MetricsType", "PoolType"]


class LossType(enum.Enum):
    LOSS_CATEGORICAL_CROSSENTROPY = 50
    LOSS_SPARSE_CATEGORICAL_CROSSENTROPY = 51
    LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE = 52
    LOSS_MEAN_SQUARED_ERROR_SUM_REDUCE = 53


class MetricsType(enum.Enum):
    METRICS_ACCURACY = 1001
    METRICS_CATEGORICAL_CROSSENTROPY = 1002
    METRICS_SPARSE_CATEGORICAL_CROSSENTROPY = 1004
    METRICS_MEAN_SQUARED_ERROR = 1008
    METRICS_ROOT_MEAN_SQUARED_ERROR = 1016
    METRICS_MEAN_ABSOLUTE_ERROR = 1032


class CompMode(enum.Enum):
    COMP_MODE_TRAINING = 70
    COMP_MODE_INFERENCE = 71
