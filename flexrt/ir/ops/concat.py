"""``Concat`` of any number of tensors along ``axis``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class ConcatAttrs:
    op_type: ClassVar[OpType] = OpType.CONCAT
    axis: int
