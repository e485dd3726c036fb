"""``LSTM`` cell, one unrolled step: (x [N, in], h [N, H], c [N, H]) -> (h', c'); weights
w_ih [in, 4H], w_hh [H, 4H], bias [4H] (gate blocks in the order i, f, g, o). Unrolled steps share
the weight nodes.

    gates = x @ w_ih + h @ w_hh + bias;  i, f, o = sigmoid(.), g = tanh(.)
    c' = f * c + i * g;  h' = o * tanh(c')

Parallel axes: the sample dimension (weights replicated) and replicas, as FlexFlow's LSTM, which is
data parallel; model parallelism comes from placing unrolled cells on different devices. Partial
sums never pass (the gates are non-linear).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.registry import COPY, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape

# Element-wise FLOPs per hidden unit and sample: 2 adds of 4H gate pre-activations (8), 3 sigmoids
# and a tanh on the gates (4 each: 16), the cell update f*c + i*g (3), tanh(c') and o * tanh(c') (5).
_ELEMENTWISE_FLOPS_PER_UNIT = 8 + 16 + 3 + 5


@dataclass(frozen=True, slots=True)
class LSTMAttrs:
    op_type: ClassVar[OpType] = OpType.LSTM
    hidden_size: int

    def __post_init__(self):
        if not isinstance(self.hidden_size, int) or isinstance(self.hidden_size, bool) or self.hidden_size < 1:
            raise ShapeError(f"lstm: hidden_size must be an int >= 1, got {self.hidden_size!r}")


def _check(attrs: LSTMAttrs, inputs) -> None:
    x, h, c = inputs
    for what, t in (("x", x), ("h", h), ("c", c)):
        if t.rank != 2:
            raise ShapeError(f"lstm: {what} {t} has rank {t.rank}; valid rank: 2 ([N, features])")
    hs = attrs.hidden_size
    for what, t in (("h", h), ("c", c)):
        if t.dims != (x.dims[0], hs):
            raise ShapeError(f"lstm: {what} is {list(t.dims)} but x {list(x.dims)} and hidden_size {hs} "
                             f"need [{x.dims[0]}, {hs}]")
    if not x.dtype == h.dtype == c.dtype:
        raise ShapeError(f"lstm: dtypes differ (x {x.dtype.name}, h {h.dtype.name}, c {c.dtype.name})")


def output_shapes(attrs: LSTMAttrs, inputs):
    _check(attrs, inputs)
    h = inputs[1]
    return (h, h)


def weight_names(attrs: LSTMAttrs):
    return ("w_ih", "w_hh", "bias")


def weight_shapes(attrs: LSTMAttrs, inputs):
    _check(attrs, inputs)
    x = inputs[0]
    g = 4 * attrs.hidden_size
    return (TensorShape((x.dims[1], g), x.dtype), TensorShape((attrs.hidden_size, g), x.dtype),
            TensorShape((g,), x.dtype))


def parallel_axes(attrs: LSTMAttrs, inputs):
    _check(attrs, inputs)
    weights = ((3, COPY), (4, COPY), (5, COPY))
    return (
        ParallelAxis("sample", AxisKind.SAMPLE, ((0, shard(0)), (1, shard(0)), (2, shard(0))) + weights,
                     ((0, shard(0)), (1, shard(0)))),
        ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY), (1, COPY), (2, COPY)) + weights,
                     ((0, COPY), (1, COPY))),
    )


def flops(attrs, ins, outs):
    x, h = ins[0], ins[1]
    n, hidden = h.dims
    return 2 * n * (x.dims[1] + hidden) * 4 * hidden + _ELEMENTWISE_FLOPS_PER_UNIT * n * hidden


def backward_flops(attrs, ins, outs):
    x, h = ins[0], ins[1]
    n, hidden = h.dims
    # gradients of x, h and both weights: two products per forward product
    return 4 * n * (x.dims[1] + hidden) * 4 * hidden + 2 * _ELEMENTWISE_FLOPS_PER_UNIT * n * hidden


def extra_memory_bytes(attrs, ins, outs):
    """The four gate activations and tanh(c'), kept for the backward pass."""
    n, hidden = ins[1].dims
    return 5 * n * hidden * ins[0].dtype.size_bytes


register_op(OpDef(OpType.LSTM, LSTMAttrs, output_shapes=output_shapes, flops=flops, num_inputs=3,
                  weight_shapes=weight_shapes, weight_names=weight_names, parallel_axes=parallel_axes,
                  backward_flops=backward_flops, extra_memory_bytes=extra_memory_bytes))
