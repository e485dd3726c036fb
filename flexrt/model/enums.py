"""Training-level enums with FlexFlow's names and values (``LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY``).

Operator-level enums (``ActiMode``, ``PoolType``, ``AggrMode``) and ``DataType`` live in ``flexrt.ir``,
``LossType`` and ``MetricsType`` in ``flexrt.kernels`` (the losses and metrics key their tables by
them); all are re-exported here, so ``from flexrt.core import *`` gives a script every name FlexFlow's does.
"""

from __future__ import annotations

import enum

from flexrt.ir.datatype import DataType
from flexrt.ir.enums import ActiMode, AggrMode, PoolType
from flexrt.kernels.losses import LossType
from flexrt.kernels.metrics import MetricsType

__all__ = ["ActiMode", "AggrMode", "CompMode", "DataType", "LossType", "MetricsType", "PoolType", "RegularizerMode"]


class RegularizerMode(enum.Enum):
    """FlexFlow's weight regularizers (``dense(kernel_regularizer=...)``: an object with ``type`` and
    ``_lambda``, as FlexFlow's Keras ``L1`` / ``L2``)."""

    REG_MODE_NONE = 17
    REG_MODE_L1 = 18
    REG_MODE_L2 = 19


class CompMode(enum.Enum):
    COMP_MODE_TRAINING = 70
    COMP_MODE_INFERENCE = 71
    TRAINING = 70       # FlexFlow's Python spelling (aliases of the members above)
    INFERENCE = 71
