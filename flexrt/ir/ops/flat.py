"""``Flat``: [N, C, H, W] -> [N, C*H*W] (every dimension after the first folded into one)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class FlatAttrs:
    op_type: ClassVar[OpType] = OpType.FLAT
