"""Parallelization operators (Unity §3.3) as ordinary operators.

- Repartition(dim, degree): cut dimension ``dim`` into ``degree`` times more pieces. Back-prop: Combine.
- Combine(dim, degree): join pieces of ``dim``, dividing its degree by ``degree``. Back-prop: Repartition.
- Replicate(degree): ``degree`` times more copies. Back-prop: Reduction (this is weight-gradient sync).
- Reduction(degree): sum groups of ``degree`` partial sums. Back-prop: Replicate.
- AllReduce(degree): Reduction then Replicate, fused (sum degree / d, copy degree * d). Back-prop: AllReduce.
- Pipeline(dim, degree): process ``dim`` in ``degree`` sequential micro-batches (size / degree,
  degree unchanged). Back-prop: Batch.
- Batch(dim, degree): gather ``degree`` micro-batches back (size * degree). Back-prop: Pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import numel
from flexrt.ir.parallel_tensor import ParallelDim, ParallelTensorShape, divisors
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.tensor_shape import TensorShape, normalize_axis


def _check_degree(op, degree):
    if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
        raise ShapeError(f"{op}: degree must be an int >= 1, got {degree!r}")


@dataclass(frozen=True, slots=True)
class RepartitionAttrs:
    op_type: ClassVar[OpType] = OpType.REPARTITION
    dim: int
    degree: int

    def __post_init__(self):
        _check_degree("repartition", self.degree)


@dataclass(frozen=True, slots=True)
class CombineAttrs:
    op_type: ClassVar[OpType] = OpType.COMBINE
    dim: int
    degree: int

    def __post_init__(self):
        _check_degree("combine", self.degree)


@dataclass(frozen=True, slots=True)
class ReplicateAttrs:
    op_type: ClassVar[OpType] = OpType.REPLICATE
    degree: int

    def __post_init__(self):
        _check_degree("replicate", self.degree)


@dataclass(frozen=True, slots=True)
class ReductionAttrs:
    op_type: ClassVar[OpType] = OpType.REDUCTION
    degree: int

    def __post_init__(self):
        _check_degree("reduction", self.degree)


@dataclass(frozen=True, slots=True)
class AllReduceAttrs:
    op_type: ClassVar[OpType] = OpType.ALLREDUCE
    degree: int

    def __post_init__(self):
        _check_degree("allreduce", self.degree)


@dataclass(frozen=True, slots=True)
class PipelineAttrs:
    op_type: ClassVar[OpType] = OpType.PIPELINE
    dim: int
    degree: int

    def __post_init__(self):
        _check_degree("pipeline", self.degree)


@dataclass(frozen=True, slots=True)
class BatchAttrs:
    op_type: ClassVar[OpType] = OpType.BATCH
    dim: int
    degree: int

    def __post_init__(self):
        _check_degree("batch", self.degree)


def _set_dim(s: ParallelTensorShape, dim: int, pdim: ParallelDim) -> ParallelTensorShape:
    dims = list(s.dims)
    dims[dim] = pdim
    return replace(s, dims=tuple(dims))


def _dim(op, attrs, s):
    return normalize_axis(attrs.dim, s.rank, f"{op}: dim")


def _repartition(attrs, inputs):
    (s,) = inputs
    d = _dim("repartition", attrs, s)
    pd = s.dims[d]
    new = pd.degree * attrs.degree
    if pd.size % new:
        valid = [k for k in divisors(pd.size // pd.degree)]
        raise ShapeError(f"repartition: degree {attrs.degree} on dimension {d} of {s} would give degree {new}, "
                         f"which does not divide size {pd.size}; valid repartition degrees: "
                         f"{', '.join(map(str, valid))}")
    return (_set_dim(s, d, ParallelDim(pd.size, new)),)


def _combine(attrs, inputs):
    (s,) = inputs
    d = _dim("combine", attrs, s)
    pd = s.dims[d]
    if pd.degree % attrs.degree:
        raise ShapeError(f"combine: degree {attrs.degree} does not divide the degree {pd.degree} of dimension {d} "
                         f"of {s}; valid: {', '.join(map(str, divisors(pd.degree)))}")
    return (_set_dim(s, d, ParallelDim(pd.size, pd.degree // attrs.degree)),)


def _replicate(attrs, inputs):
    (s,) = inputs
    return (replace(s, discard_copy_degree=s.discard_copy_degree * attrs.degree),)


def _reduce_sum_degree(op, attrs, s):
    if s.sum_degree % attrs.degree:
        raise ShapeError(f"{op}: degree {attrs.degree} does not divide the sum degree {s.sum_degree} of {s}; "
                         f"valid: {', '.join(map(str, divisors(s.sum_degree)))}")
    return s.sum_degree // attrs.degree


def _reduction(attrs, inputs):
    (s,) = inputs
    return (replace(s, sum_degree=_reduce_sum_degree("reduction", attrs, s)),)


def _allreduce(attrs, inputs):
    (s,) = inputs
    return (replace(s, sum_degree=_reduce_sum_degree("allreduce", attrs, s),
                    discard_copy_degree=s.discard_copy_degree * attrs.degree),)


def _pipeline(attrs, inputs):
    (s,) = inputs
    d = _dim("pipeline", attrs, s)
    pd = s.dims[d]
    if pd.size % (attrs.degree * pd.degree):
        raise ShapeError(f"pipeline: {attrs.degree} micro-batches of dimension {d} of {s} do not divide it evenly "
                         f"(size {pd.size}, degree {pd.degree}); valid: "
                         f"{', '.join(map(str, divisors(pd.size // pd.degree)))}")
    return (_set_dim(s, d, ParallelDim(pd.size // attrs.degree, pd.degree)),)


def _batch(attrs, inputs):
    (s,) = inputs
    d = _dim("batch", attrs, s)
    pd = s.dims[d]
    return (_set_dim(s, d, ParallelDim(pd.size * attrs.degree, pd.degree)),)


def _dim_sizes(attrs, inputs):
    (x,) = inputs
    if hasattr(attrs, "dim"):
        normalize_axis(attrs.dim, x.rank, f"{attrs.op_type.value}: dim")
    return (x,)


def _pipeline_shapes(attrs, inputs):
    (x,) = inputs
    d = normalize_axis(attrs.dim, x.rank, "pipeline: dim")
    if x.dims[d] % attrs.degree:
        raise ShapeError(f"pipeline: {attrs.degree} micro-batches do not divide dimension {d} of {x}")
    dims = list(x.dims)
    dims[d] //= attrs.degree
    return (TensorShape(tuple(dims), x.dtype),)


def _batch_shapes(attrs, inputs):
    (x,) = inputs
    d = normalize_axis(attrs.dim, x.rank, "batch: dim")
    dims = list(x.dims)
    dims[d] *= attrs.degree
    return (TensorShape(tuple(dims), x.dtype),)


def _no_flops(attrs, ins, outs):
    return 0


def _reduction_flops(attrs, ins, outs):
    return (attrs.degree - 1) * numel(outs[0])


_RULES = (
    (OpType.REPARTITION, RepartitionAttrs, _repartition, _dim_sizes, _no_flops),
    (OpType.COMBINE, CombineAttrs, _combine, _dim_sizes, _no_flops),
    (OpType.REPLICATE, ReplicateAttrs, _replicate, _dim_sizes, _no_flops),
    (OpType.REDUCTION, ReductionAttrs, _reduction, _dim_sizes, _reduction_flops),
    (OpType.ALLREDUCE, AllReduceAttrs, _allreduce, _dim_sizes, _reduction_flops),
    (OpType.PIPELINE, PipelineAttrs, _pipeline, _pipeline_shapes, _no_flops),
    (OpType.BATCH, BatchAttrs, _batch, _batch_shapes, _no_flops),
)
for _t, _cls, _rule, _shapes, _flops in _RULES:
    register_op(OpDef(_t, _cls, output_shapes=_shapes, flops=_flops, num_inputs=1, parallel_rule=_rule,
                      backward_flops=_flops))


def backward_partner(attrs):
    """The operator that back-propagation applies in place of ``attrs`` (Unity §3.3's pairs)."""
    t = attrs.op_type
    if t is OpType.REPARTITION:
        return CombineAttrs(attrs.dim, attrs.degree)
    if t is OpType.COMBINE:
        return RepartitionAttrs(attrs.dim, attrs.degree)
    if t is OpType.REPLICATE:
        return ReductionAttrs(attrs.degree)
    if t is OpType.REDUCTION:
        return ReplicateAttrs(attrs.degree)
    if t is OpType.ALLREDUCE:
        return AllReduceAttrs(attrs.degree)
    if t is OpType.PIPELINE:
        return BatchAttrs(attrs.dim, attrs.degree)
    if t is OpType.BATCH:
        return PipelineAttrs(attrs.dim, attrs.degree)
    raise ShapeError(f"{t.value} is not a parallelization operator")


def inverse(attrs):
    """The operator that undoes ``attrs`` on values, or None (Replicate/Reduction are not inverses:
    Reduction(Replicate(x)) = d * x, Unity §5.3)."""
    t = attrs.op_type
    if t in (OpType.REPARTITION, OpType.COMBINE, OpType.PIPELINE, OpType.BATCH):
        return backward_partner(attrs)
    return None
