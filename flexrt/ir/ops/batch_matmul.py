"""``BatchMatmul``: [..., m, k] x [..., k, n] -> [..., m, n] (FlexFlow batch_matmul; the seq-length
dims are FlexFlow's hints for incremental decoding, kept as attributes)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class BatchMatmulAttrs:
    op_type: ClassVar[OpType] = OpType.BATCH_MATMUL
    a_seq_length_dim: Optional[int] = None
    b_seq_length_dim: Optional[int] = None
