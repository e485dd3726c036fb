"""``Pool2D``: NCHW max or average pooling (average counts padding, as cuDNN in FlexFlow)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType

from flexrt.ir.enums import ActiMode, PoolType


@dataclass(frozen=True, slots=True)
class Pool2DAttrs:
    op_type: ClassVar[OpType] = OpType.POOL2D
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    padding_h: int = 0
    padding_w: int = 0
    pool_type: PoolType = PoolType.POOL_MAX
    activation: ActiMode = ActiMode.AC_MODE_NONE
