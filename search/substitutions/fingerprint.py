"""Exact evaluation of pattern operators on parallel tensors, for fingerprints (TASO §3, Unity §4).

A tensor is a ``ParallelValue`` (flexrt.kernels.pieces): one array per piece of its
``ParallelTensorShape``, keyed by (shard index, partial-sum index, copy index), so the degrees and
how the partial sums are split are part of the value. The generator evaluates on int64 arrays with
every piece reduced modulo a prime ``P`` after each operator; ReLU is replaced by the non-linear
polynomial ``x*x + 3x`` (TASO's trick: a rule that only holds for linear functions is rejected), and
a fused ReLU (``OP_LINEAR`` or ``OP_CONV2D`` with ``PM_ACTI`` 2) likewise. The operators that are
not polynomials (sigmoid, tanh, gelu, elu, exp, sin, cos, fused sigmoid / tanh / gelu, softmax, layer
norm, batch norm) are *uninterpreted*: each output element is a 64-bit mix (splitmix64) of the exact input value it
depends on and the operator's own salt, reduced modulo ``P`` (TASO treats non-linear operators the
same way): element-wise operators hash their element; softmax hashes the element with the sum of
the hashes of its row along the softmax dim; layer norm likewise over its normalized dims, then
scales by gamma and adds beta exactly; batch norm likewise per channel over the batch, height and
width (its fused ReLU the polynomial after). Two graphs then collide only when they apply the same
functions to equal values (or by a 1 in ``P`` accident, which the second input set catches). These
are evaluated on the whole logical value (pieces gathered, the function applied, the result laid
out in the output's parallel shape), which is what the operator computes whenever flexrt's shape
inference accepts its layout. Everything else (linear with or without a bias, convolution, bias
add, batch matmul, embedding lookups and bags, concat, split, transpose, element-wise add and
multiply, scalar multiply) runs exactly through flexrt's own kernels piece by piece (``run_pieces``,
``apply_parallel_op``), after flexrt's parallel shape inference (the same ``infer_node_shapes``
that ``PCG.add_node`` runs) accepted the operator; an embedding index outside its table is a
ShapeError, so such a graph is dropped.

The same functions evaluate a rule side on float arrays with the real kernels (``modulus=None``):
that is the concrete soundness check of a generated rule.

Entry points: ``P``, ``apply_op``, ``evaluate_side``, ``value_digest``, ``to_pcg``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

import dataclasses

from flexrt.ir.enums import ActiMode
from flexrt.ir.op_type import PARALLEL_OPS, OpType
from flexrt.ir.ops import InputAttrs
from flexrt.ir.ops.softmax import softmax_axis
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.ir.pcg import PCG, TensorRef, infer_node_shapes
from flexrt.ir.tensor_shape import TensorShape
from flexrt.kernels.pieces import ParallelValue, apply_parallel_op, gather, piece_keys, run_pieces, scatter
from flexrt.search.substitutions.rule import PatternOp, Slot  # noqa: F401  (Slot: docstring example)
from flexrt.search.substitutions.semantics import to_attrs

# Largest prime below 2**23: a linear's products of two residues stay below 2**46, and a sum of a few
# thousand of them below 2**63, so int64 arithmetic is exact before the reduction.
P = 2 ** 23 - 15


def _poly(x, modulus: int):
    """The stand-in for ReLU in exact arithmetic: x*x + 3x (mod p), not linear, not idempotent."""
    return (x * x + 3 * x) % modulus


# Salts of the uninterpreted operators; a fused activation uses its operator's salt, so that
# linear(sigmoid) and sigmoid(linear) agree.
_SALT = {OpType.SIGMOID: 1, OpType.TANH: 2, OpType.GELU: 3, OpType.ELU: 4, OpType.EXP: 5, OpType.SIN: 6,
         OpType.COS: 7, OpType.SOFTMAX: 8, OpType.LAYER_NORM: 9, OpType.BATCH_NORM: 10, OpType.LOG: 11}
_FUSED = {ActiMode.AC_MODE_SIGMOID: OpType.SIGMOID, ActiMode.AC_MODE_TANH: OpType.TANH,
          ActiMode.AC_MODE_GELU: OpType.GELU}
_FUSING = (OpType.LINEAR, OpType.CONV2D)   # operators with a fused activation (PM_ACTI)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(a: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    a = (a ^ (a >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    a = (a ^ (a >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return a ^ (a >> np.uint64(31))


def uninterpreted(op_type: OpType, x: np.ndarray, context: np.ndarray | None = None,
                  modulus: int = P) -> np.ndarray:
    """``f_op(x)`` (or ``f_op(context, x)``) element by element: a hash of the exact residue, mod p."""
    with np.errstate(over="ignore"):
        a = x.astype(np.int64).astype(np.uint64) + np.uint64(_SALT[op_type]) * _GOLDEN
        if context is not None:
            a = a ^ _mix(context.astype(np.int64).astype(np.uint64) + _GOLDEN)
        return (_mix(a) % np.uint64(modulus)).astype(np.int64)


def _whole(attrs, operands: Sequence[ParallelValue], out_shape: ParallelTensorShape, modulus: int) -> ParallelValue:
    """An uninterpreted operator on the whole logical values, laid out as ``out_shape``."""
    full = [gather(np, v).astype(np.int64) % modulus for v in operands]
    x, t = full[0], attrs.op_type
    if t is OpType.SOFTMAX:
        axis = softmax_axis(attrs, x.ndim)
        row = np.sum(uninterpreted(t, x, None, modulus), axis=axis, keepdims=True) % modulus
        y = uninterpreted(t, x, np.broadcast_to(row, x.shape), modulus)
    elif t is OpType.LAYER_NORM:
        axes = tuple(range(x.ndim - len(attrs.axes), x.ndim))
        group = np.sum(uninterpreted(t, x, None, modulus), axis=axes, keepdims=True) % modulus
        y = uninterpreted(t, x, np.broadcast_to(group, x.shape), modulus)
        for w, combine in zip(full[1:], (np.multiply, np.add)):   # gamma, then beta
            y = combine(y, w) % modulus
    elif t is OpType.BATCH_NORM:   # NCHW: each channel's statistics over N, H, W; scale and bias per channel
        group = np.sum(uninterpreted(t, x, None, modulus), axis=(0, 2, 3), keepdims=True) % modulus
        y = uninterpreted(t, x, np.broadcast_to(group, x.shape), modulus)
        y = (y * full[1].reshape(1, -1, 1, 1) + full[2].reshape(1, -1, 1, 1)) % modulus
        if attrs.relu:
            y = _poly(y, modulus)
    else:
        y = uninterpreted(t, x, None, modulus)
    return scatter(np, y, out_shape)


def infer_op(op: PatternOp, shapes: Sequence[ParallelTensorShape]):
    """(flexrt attrs, output parallel shapes) of ``op`` on operands of these parallel shapes.

    Raises a FlexrtError (ShapeError, GraphError) when flexrt's shape inference rejects it.
    """
    attrs = to_attrs(op, [s.tensor_shape for s in shapes])
    return attrs, infer_node_shapes(attrs, list(shapes), op.type)


def apply_op(op: PatternOp, operands: Sequence[ParallelValue], modulus: int | None = P,
             attrs=None) -> tuple[ParallelValue, ...]:
    """Evaluate ``op`` piece by piece; exact modulo ``modulus`` (int64 operands), or the real float
    kernels when ``modulus`` is None. Raises a FlexrtError when shape inference rejects the operator."""
    if attrs is None:
        attrs, _ = infer_op(op, [v.shape for v in operands])
    if modulus is not None and attrs.op_type in _SALT:
        (out_shape,) = infer_node_shapes(attrs, [v.shape for v in operands], op.type)
        return (_whole(attrs, operands, out_shape, modulus),)
    fused = _FUSED.get(attrs.activation) if attrs.op_type in _FUSING and modulus is not None else None
    if fused is not None:
        attrs = dataclasses.replace(attrs, activation=ActiMode.AC_MODE_NONE)
    if attrs.op_type in PARALLEL_OPS:
        outs = (apply_parallel_op(np, attrs, operands[0]),)
    else:
        outs = tuple(run_pieces(np, attrs, list(operands), op.type))
    if modulus is None:
        return outs
    nonlinear = attrs.op_type is OpType.RELU or (
        attrs.op_type in _FUSING and attrs.activation is ActiMode.AC_MODE_RELU)
    # Residues are non-negative, so the kernels' max(x, 0) was the identity; apply the polynomial.
    if nonlinear:
        fn = lambda a: _poly(a.astype(np.int64) % modulus, modulus)  # noqa: E731
    elif fused is not None:  # a fused sigmoid / tanh: element-wise, so piece by piece is the whole value
        fn = lambda a: uninterpreted(fused, a.astype(np.int64) % modulus, None, modulus)  # noqa: E731
    else:
        fn = lambda a: a.astype(np.int64) % modulus  # noqa: E731
    return tuple(ParallelValue(v.shape, {k: fn(a) for k, a in v.pieces.items()}) for v in outs)


def value_digest(value: ParallelValue) -> bytes:
    """A 16-byte hash of a parallel value: its parallel shape and every piece, in piece order."""
    h = hashlib.blake2b(digest_size=16)
    s = value.shape
    h.update(repr((s.sizes, s.shard_degrees, s.sum_degree, s.discard_copy_degree)).encode())
    for k in piece_keys(s):
        h.update(np.ascontiguousarray(value.pieces[k]).tobytes())
    return h.digest()


def full_value(array) -> ParallelValue:
    """An unpartitioned parallel value (one piece) holding ``array``."""
    return scatter(np, array, ParallelTensorShape.of(array.shape))


def _as_value(x) -> ParallelValue:
    return x if isinstance(x, ParallelValue) else full_value(x)


def evaluate_side(ops: Sequence[PatternOp], inputs: Mapping[int, np.ndarray | ParallelValue],
                  modulus: int | None = None) -> list[tuple[ParallelValue, ...]]:
    """Evaluate a rule side (pattern operators over external inputs ``-1, -2, ...``) on full arrays
    (unpartitioned) or parallel values.

    Returns every operator's outputs. Float kernels by default; exact modulo ``modulus`` if given.

    Example:
        >>> x = np.ones((4, 4))
        >>> outs = evaluate_side([PatternOp("OP_RELU", (Slot(-1, 0),))], {-1: x})
        >>> outs[0][0].shape.sizes
        (4, 4)
    """
    values: list[tuple[ParallelValue, ...]] = []
    for op in ops:
        operands = [_as_value(inputs[s.op]) if s.external else values[s.op][s.ts] for s in op.inputs]
        values.append(apply_op(op, operands, modulus))
    return values


def to_pcg(ops: Sequence[PatternOp], input_shapes: Mapping[int, TensorShape],
           cut=None, reshape=None) -> tuple[PCG, list[list[TensorRef]]]:
    """The flexrt PCG of a rule side: one ``Input`` node per external input, one node per operator
    (``PCG.add_node`` runs flexrt's shape inference and raises on an invalid side). ``cut``: where a
    split cuts a dimension of size n, ``cut(n)`` (None: in the middle); ``reshape``: a reshape's
    target on an input of shape x, ``reshape(x)`` (None: ``semantics.default_reshape``)."""
    g = PCG()
    ext = {k: TensorRef(g.add_node(InputAttrs(shape), name=f"in{-k - 1}")) for k, shape in sorted(input_shapes.items(),
                                                                                               reverse=True)}
    refs: list[list[TensorRef]] = []
    for i, op in enumerate(ops):
        ins = [ext[s.op] if s.external else refs[s.op][s.ts] for s in op.inputs]
        shapes = [g.shape(r).tensor_shape for r in ins]
        choice = None
        if cut is not None and op.type == "OP_SPLIT":
            choice = cut(shapes[0].dims[shapes[0].rank - 1 - op.param("PM_AXIS")])
        elif reshape is not None and op.type == "OP_RESHAPE":
            choice = reshape(shapes[0])
        attrs = to_attrs(op, shapes, choice)
        nid = g.add_node(attrs, ins, name=f"op{i}_{op.type}")
        refs.append(list(g.outputs(nid)))
    return g, refs


__all__ = ["P", "apply_op", "evaluate_side", "full_value", "infer_op", "to_pcg", "uninterpreted", "value_digest"]
