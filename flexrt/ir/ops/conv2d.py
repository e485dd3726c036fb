"""``Conv2D``: NCHW convolution with groups; weights kernel [out, in/groups, kh, kw] and bias [out]."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType

from flexrt.ir.enums import ActiMode


@dataclass(frozen=True, slots=True)
class Conv2DAttrs:
    op_type: ClassVar[OpType] = OpType.CONV2D
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    padding_h: int = 0
    padding_w: int = 0
    groups: int = 1
    use_bias: bool = True
    activation: ActiMode = ActiMode.AC_MODE_NONE
