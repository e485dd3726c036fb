"""FFModel layers that move or reduce data: concat, split, reshape, transpose, reverse, flat, gather,
reduce_sum, mean, softmax, dropout, cast. Signatures are FlexFlow's."""

from __future__ import annotations

from flexrt.errors import ConfigError, ShapeError
from flexrt.ir.datatype import DataType
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import (CastAttrs, ConcatAttrs, DropoutAttrs, FlatAttrs, GatherAttrs, ReduceAttrs, ReshapeAttrs,
                           ReverseAttrs, SoftmaxAttrs, SplitAttrs, TransposeAttrs)
from flexrt.ir.parallel_tensor import divisors
from flexrt.ir.tensor_shape import normalize_axis
from flexrt.model import _check
from flexrt.model.tensor import Tensor


class ShapeLayers:
    """Mixin of ``FFModel``; every method adds one layer through ``FFModel._add_layer``."""

    def concat(self, tensors, axis, name=None):
        """Concatenate ``tensors`` along ``axis``."""
        if not isinstance(tensors, (list, tuple)) or not tensors:
            raise ConfigError(f"concat: tensors must be a non-empty list of Tensors, got {tensors!r}")
        attrs = ConcatAttrs(_check.integer("concat", "axis", axis))
        return self._add_layer("concat", attrs, list(tensors), name).outputs[0]

    def split(self, input, sizes, axis, name=None):
        """Split along ``axis`` into ``sizes`` pieces (an int: that many equal pieces) or pieces of
        the listed sizes; returns a list of Tensors."""
        w = "split"
        axis = _check.integer(w, "axis", axis)
        if isinstance(sizes, int) and not isinstance(sizes, bool):
            count = _check.integer(w, "sizes", sizes, 1)
            if isinstance(input, Tensor):
                d = normalize_axis(axis, input.num_dims, "split: axis")
                size = input.dims[d]
                if size % count:
                    raise ShapeError(f"split: {count} equal pieces do not divide dimension {d} of size {size} "
                                     f"(shape {list(input.dims)}); valid counts: "
                                     f"{', '.join(map(str, divisors(size)))}, or a list of sizes")
                sizes = [size // count] * count
        attrs = SplitAttrs(_check.int_tuple(w, "sizes", sizes, 1), axis)
        return list(self._add_layer(w, attrs, [input], name).outputs)

    def reshape(self, input, shape, name=None):
        """Same elements, new sizes (one entry may be -1)."""
        attrs = ReshapeAttrs(_check.int_tuple("reshape", "shape", shape))
        return self._add_layer("reshape", attrs, [input], name).outputs[0]

    def transpose(self, input, perm, name=None):
        """Permute the dimensions by ``perm``."""
        attrs = TransposeAttrs(_check.int_tuple("transpose", "perm", perm))
        return self._add_layer("transpose", attrs, [input], name).outputs[0]

    def reverse(self, input, axis, name=None):
        """Reverse the order of the elements along ``axis`` (np.flip)."""
        attrs = ReverseAttrs(_check.integer("reverse", "axis", axis))
        return self._add_layer("reverse", attrs, [input], name).outputs[0]

    def flat(self, input, name=None):
        """[N, C, H, W] -> [N, C*H*W]."""
        return self._add_layer("flat", FlatAttrs(), [input], name).outputs[0]

    def gather(self, input, index, dim, name=None):
        """out[i][j] = input[index[i][j]][j] along ``dim`` (torch.gather)."""
        attrs = GatherAttrs(_check.integer("gather", "dim", dim))
        return self._add_layer("gather", attrs, [input, index], name).outputs[0]

    def reduce_sum(self, input, axes, keepdims=False, name=None):
        """Sum over ``axes``."""
        w = "reduce_sum"
        attrs = ReduceAttrs(OpType.REDUCE_SUM, _check.int_tuple(w, "axes", axes, allow_int=True),
                            _check.flag(w, "keepdims", keepdims))
        return self._add_layer(w, attrs, [input], name).outputs[0]

    def mean(self, input, dims, keepdims=False, name=None):
        """Mean over ``dims``."""
        attrs = ReduceAttrs(OpType.MEAN, _check.int_tuple("mean", "dims", dims, allow_int=True),
                            _check.flag("mean", "keepdims", keepdims))
        return self._add_layer("mean", attrs, [input], name).outputs[0]

    def softmax(self, input, axis=-1, name=None, *, causal=False):
        """Softmax along ``axis``. ``causal`` (keyword-only, flexrt's): attention scores [..., L, S]
        along the last axis, row i seeing columns 0..i only (GPT's mask; torch's ``is_causal``)."""
        axis = _check.integer("softmax", "axis", axis)
        if _check.flag("softmax", "causal", causal):
            rank = len(getattr(input, "dims", ()))
            if rank < 2 or axis % rank != rank - 1:
                raise ShapeError(f"softmax: causal=True runs along the last axis of [..., rows, columns] scores; "
                                 f"got axis {axis} of an input of shape {list(getattr(input, 'dims', ()))}")
            attrs = SoftmaxAttrs(rank - 1, causal=True)
        else:
            attrs = SoftmaxAttrs(axis)
        return self._add_layer("softmax", attrs, [input], name).outputs[0]

    def dropout(self, input, rate, seed, name=None):
        """Zero each element with probability ``rate`` (deterministic for ``seed``)."""
        attrs = DropoutAttrs(_check.number("dropout", "rate", rate, low=0.0, high=1.0, high_open=True),
                             _check.integer("dropout", "seed", seed))
        return self._add_layer("dropout", attrs, [input], name).outputs[0]

    def cast(self, input, dtype, name=None):
        """Convert elements to ``dtype``."""
        attrs = CastAttrs(_check.member("cast", "dtype", dtype, DataType))
        return self._add_layer("cast", attrs, [input], name).outputs[0]
