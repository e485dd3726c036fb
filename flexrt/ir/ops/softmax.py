"""``Softmax`` along ``axis``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class SoftmaxAttrs:
    op_type: ClassVar[OpType] = OpType.SOFTMAX
    axis: int = -1
