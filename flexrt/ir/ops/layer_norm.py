"""``LayerNorm``: normalizes over ``axes``; with ``elementwise_affine`` weights gamma, beta of those dims.

y = (x - mean) / sqrt(var + eps) * gamma + beta, mean and (biased) var taken over ``axes``, which
must be the trailing dimensions of x (any order, negative allowed: -1 and rank-1 are the same);
gamma and beta have the shape of those dimensions. ``use_bias=False`` (FlexFlow's) drops beta:
y = xhat * gamma.

Parallel axes: every dimension that is not normalized (sample / attribute; gamma and beta
replicated) and ``replica``. A normalized dimension cannot be cut: each piece would use the
statistics of its own slice.

Entry point: ``LayerNormAttrs``; the rules register on import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import dim_kind, numel
from flexrt.ir.registry import COPY, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape

# FLOPs per element: mean (1), variance (3), normalize (2), affine (2 when present).
_FORWARD_FLOPS_PER_ELEMENT = 6
_BACKWARD_FLOPS_PER_ELEMENT = 10
_AFFINE_FLOPS_PER_ELEMENT = 2


@dataclass(frozen=True, slots=True)
class LayerNormAttrs:
    """Example: ``LayerNormAttrs((-1,))`` normalizes the last dimension (a transformer's LayerNorm)."""

    op_type: ClassVar[OpType] = OpType.LAYER_NORM
    axes: tuple[int, ...]
    elementwise_affine: bool = True
    eps: float = 1e-5
    use_bias: bool = True  # beta; only with elementwise_affine

    def __post_init__(self):
        try:
            axes = tuple(self.axes)
        except TypeError:
            raise ShapeError(f"layer_norm: axes must be a sequence of ints, got {self.axes!r}") from None
        if not axes or any(not isinstance(a, int) or isinstance(a, bool) for a in axes):
            raise ShapeError(f"layer_norm: axes must be a non-empty sequence of ints, got {self.axes!r}")
        object.__setattr__(self, "axes", axes)
        if not isinstance(self.elementwise_affine, bool):
            raise ShapeError(f"layer_norm: elementwise_affine must be a bool, got {self.elementwise_affine!r}")
        if not isinstance(self.eps, (int, float)) or isinstance(self.eps, bool) or not self.eps > 0:
            raise ShapeError(f"layer_norm: eps must be a number > 0, got {self.eps!r}")
        object.__setattr__(self, "eps", float(self.eps))
        if not isinstance(self.use_bias, bool):
            raise ShapeError(f"layer_norm: use_bias must be a bool, got {self.use_bias!r}")


def normalized_axes(attrs: LayerNormAttrs, x: TensorShape) -> tuple[int, ...]:
    """The normalized dimensions of ``x`` in increasing order; ShapeError unless they are the trailing ones."""
    r = x.rank
    bad = [a for a in attrs.axes if not -r <= a < r]
    if bad:
        raise ShapeError(f"layer_norm: axes {list(attrs.axes)} out of range for input {x} of rank {r}; "
                         f"valid: {-r}..{r - 1}")
    axes = sorted(a % r for a in attrs.axes)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"layer_norm: axes {list(attrs.axes)} name a dimension twice (input {x})")
    trailing = list(range(r - len(axes), r))
    if axes != trailing:
        raise ShapeError(f"layer_norm: axes {list(attrs.axes)} (dims {axes}) of input {x} are not the trailing "
                         f"dimensions; valid for {len(axes)} axes: {trailing}")
    return tuple(axes)


def output_shapes(attrs: LayerNormAttrs, inputs):
    (x,) = inputs
    normalized_axes(attrs, x)
    if not x.dtype.is_floating:
        raise ShapeError(f"layer_norm: input {x} has dtype {x.dtype.name}; valid: a floating type")
    return (x,)


def weight_shapes(attrs: LayerNormAttrs, inputs):
    (x,) = inputs
    axes = normalized_axes(attrs, x)
    w = TensorShape(tuple(x.dims[a] for a in axes), x.dtype)
    return (w,) * len(weight_names(attrs))


def weight_names(attrs: LayerNormAttrs):
    if not attrs.elementwise_affine:
        return ()
    return ("gamma", "beta") if attrs.use_bias else ("gamma",)


def weight_inits(attrs: LayerNormAttrs):
    """gamma starts at one and beta at zero (FlexFlow's, PyTorch's): the identity transform."""
    return ("one", "zero")[:len(weight_names(attrs))]


def parallel_axes(attrs: LayerNormAttrs, inputs):
    (x,) = inputs
    axes = normalized_axes(attrs, x)
    nw = len(weight_names(attrs))
    weights = tuple((1 + i, COPY) for i in range(nw))
    result = [ParallelAxis(f"dim{d}", dim_kind(d), ((0, shard(d)),) + weights, ((0, shard(d)),))
              for d in range(x.rank) if d not in axes]
    result.append(ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY),) + weights, ((0, COPY),)))
    return tuple(result)


def _per_element(attrs: LayerNormAttrs, base: int) -> int:
    return base + (_AFFINE_FLOPS_PER_ELEMENT if attrs.elementwise_affine else 0)


def flops(attrs: LayerNormAttrs, ins, outs):
    return _per_element(attrs, _FORWARD_FLOPS_PER_ELEMENT) * numel(outs[0])


def backward_flops(attrs: LayerNormAttrs, ins, outs):
    return _per_element(attrs, _BACKWARD_FLOPS_PER_ELEMENT) * numel(outs[0])


def extra_memory_bytes(attrs: LayerNormAttrs, ins, outs) -> int:
    """The saved mean and inverse standard deviation of each normalized row of this piece."""
    x = ins[0]
    rows = numel(x) // numel(TensorShape(tuple(x.dims[a] for a in normalized_axes(attrs, x))))
    return 2 * rows * x.dtype.size_bytes


register_op(OpDef(OpType.LAYER_NORM, LayerNormAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  weight_shapes=weight_shapes, weight_names=weight_names, weight_inits=weight_inits,
                  parallel_axes=parallel_axes, backward_flops=backward_flops, extra_memory_bytes=extra_memory_bytes))
