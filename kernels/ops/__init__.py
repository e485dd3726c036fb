"""Forward kernels, one module per operator family; importing this package registers them."""

from flexrt.kernels.ops import bias_add, dense, elementwise  # noqa: F401
from flexrt.kernels.ops import conv_pool, embedding_dropout, normalization  # noqa: F401
from flexrt.kernels.ops import lsh_attention, matmul_attention, reduce_lstm, shape_ops  # noqa: F401
