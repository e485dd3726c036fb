"""``MultiHeadAttention``: query [N, Lq, E], key [N, Lk, kdim], value [N, Lk, vdim] -> [N, Lq, E]."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class MultiHeadAttentionAttrs:
    op_type: ClassVar[OpType] = OpType.MULTIHEAD_ATTENTION
    embed_dim: int
    num_heads: int
    kdim: int = 0
    vdim: int = 0
    dropout: float = 0.0
    bias: bool = True
    add_bias_kv: bool = False
    add_zero_attn: bool = False
