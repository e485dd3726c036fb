"""``Embedding`` (and EmbeddingBag): integer indices -> rows of a [num_entries, out_channels] table;
aggregation none keeps one row per index, sum / avg reduce the last index dimension (a bag)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType

from flexrt.ir.enums import AggrMode


@dataclass(frozen=True, slots=True)
class EmbeddingAttrs:
    op_type: ClassVar[OpType] = OpType.EMBEDDING
    num_entries: int
    out_channels: int
    aggr: AggrMode = AggrMode.AGGR_MODE_NONE
