"""Every operator's attributes and rules; importing this package registers them all."""

from flexrt.ir.ops import (  # noqa: F401  (import registers)
    attention, batch_matmul, batch_norm, bias_add, cast, concat, conv2d, dropout, element_binary, element_unary,
    embedding, flat, gather, layer_norm, linear, lsh_attention, lstm, parallel, pool2d, reduce, reshape, reverse,
    rms_norm, softmax, source, split, transpose,
)
from flexrt.ir.ops.attention import MultiHeadAttentionAttrs
from flexrt.ir.ops.batch_matmul import BatchMatmulAttrs
from flexrt.ir.ops.batch_norm import BatchNormAttrs
from flexrt.ir.ops.bias_add import BiasAddAttrs
from flexrt.ir.ops.cast import CastAttrs
from flexrt.ir.ops.concat import ConcatAttrs
from flexrt.ir.ops.conv2d import Conv2DAttrs
from flexrt.ir.ops.dropout import DropoutAttrs
from flexrt.ir.ops.element_binary import ElementBinaryAttrs
from flexrt.ir.ops.element_unary import ElementUnaryAttrs
from flexrt.ir.ops.embedding import EmbeddingAttrs
from flexrt.ir.ops.flat import FlatAttrs
from flexrt.ir.ops.gather import GatherAttrs
from flexrt.ir.ops.layer_norm import LayerNormAttrs
from flexrt.ir.ops.linear import LinearAttrs
from flexrt.ir.ops.lsh_attention import LSHSelfAttentionAttrs
from flexrt.ir.ops.lstm import LSTMAttrs
from flexrt.ir.ops.parallel import (AllReduceAttrs, BatchAttrs, CombineAttrs, PipelineAttrs, ReductionAttrs,
                                    RepartitionAttrs, ReplicateAttrs, backward_partner, inverse)
from flexrt.ir.ops.pool2d import Pool2DAttrs
from flexrt.ir.ops.reduce import ReduceAttrs
from flexrt.ir.ops.reshape import ReshapeAttrs
from flexrt.ir.ops.reverse import ReverseAttrs
from flexrt.ir.ops.rms_norm import RMSNormAttrs
from flexrt.ir.ops.softmax import SoftmaxAttrs
from flexrt.ir.ops.source import InputAttrs, WeightAttrs
from flexrt.ir.ops.split import SplitAttrs
from flexrt.ir.ops.transpose import TransposeAttrs

__all__ = [
    "AllReduceAttrs",
    "BatchAttrs",
    "BatchMatmulAttrs",
    "BatchNormAttrs",
    "BiasAddAttrs",
    "CastAttrs",
    "CombineAttrs",
    "ConcatAttrs",
    "Conv2DAttrs",
    "DropoutAttrs",
    "ElementBinaryAttrs",
    "ElementUnaryAttrs",
    "EmbeddingAttrs",
    "FlatAttrs",
    "GatherAttrs",
    "InputAttrs",
    "LSHSelfAttentionAttrs",
    "LSTMAttrs",
    "LayerNormAttrs",
    "LinearAttrs",
    "MultiHeadAttentionAttrs",
    "PipelineAttrs",
    "Pool2DAttrs",
    "RMSNormAttrs",
    "ReduceAttrs",
    "ReductionAttrs",
    "RepartitionAttrs",
    "ReplicateAttrs",
    "ReshapeAttrs",
    "ReverseAttrs",
    "SoftmaxAttrs",
    "SplitAttrs",
    "TransposeAttrs",
    "WeightAttrs",
    "backward_partner",
    "inverse",
]
