"""``Split`` a tensor along ``axis`` into pieces of the given sizes (several outputs)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class SplitAttrs:
    op_type: ClassVar[OpType] = OpType.SPLIT
    sizes: tuple[int, ...]
    axis: int
