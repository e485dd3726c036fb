"""op_cost on full and piece shapes."""

from flexrt.ir import DataType, OpType, TensorShape
from flexrt.ir.costs import op_cost
from flexrt.ir.ops import ElementUnaryAttrs, LinearAttrs, ReplicateAttrs


def test_linear_cost_full_and_piece():
    x, w, y = TensorShape((64, 784)), TensorShape((784, 512)), TensorShape((64, 512))
    c = op_cost(LinearAttrs(512, False), [x, w], [y])
    assert c.forward_flops == 2 * 64 * 784 * 512
    assert c.backward_flops == 2 * c.forward_flops
    assert c.bytes_read == 4 * (64 * 784 + 784 * 512) and c.bytes_written == 4 * 64 * 512
    assert c.activation_bytes == 4 * 64 * 512
    half = op_cost(LinearAttrs(512, False), [TensorShape((32, 784)), w], [TensorShape((32, 512))])
    assert half.forward_flops * 2 == c.forward_flops


def test_parallel_ops_keep_no_activations_and_dtype_sizes_count():
    s = TensorShape((8, 8), DataType.DT_DOUBLE)
    assert op_cost(ReplicateAttrs(2), [s], [s]).activation_bytes == 0
    assert op_cost(ElementUnaryAttrs(OpType.RELU), [s], [s]).bytes_written == 8 * 64
