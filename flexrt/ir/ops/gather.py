"""``Gather`` (torch.gather semantics): out[i][j] = input[index[i][j]][j] along ``dim``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class GatherAttrs:
    op_type: ClassVar[OpType] = OpType.GATHER
    dim: int
