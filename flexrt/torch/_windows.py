"""Sliding windows of a tensor from FFModel's split, reshape and concat: slices with a step
(``x[:, 1::2]``, Swin's patch merging), torch's Unfold (im2col: TNT's patches) and, on top of it,
convolutions with dilation (a dense layer over the windows); and cumulative sums, the sums of
growing windows (a constant triangular matrix along the axis). The windows compute nothing on the
values, so each is exact and its gradient is torch's.

Entry points: ``strided`` (one axis, used by the index builder), ``unfold``, ``dilated_weight_kind``,
``dense_kernel`` / ``conv_weight`` (a dilated convolution's weight in the dense layer's layout and
back), ``HANDLERS`` (UNFOLD, CONV2D_DILATED, CUMSUM).
"""

from __future__ import annotations

import numpy as np

from flexrt.errors import ShapeError
from flexrt.model.tensor import Tensor
from flexrt.torch._build_base import node_error, norm_axis
from flexrt.torch._composites import constant_pad, resample


def strided(b, node, x: Tensor, dim: int, lo: int, step: int, count: int, tag: int) -> Tensor:
    """Elements lo, lo + step, ... (``count`` of them) of ``x`` along ``dim``: the whole groups of
    ``step`` from lo cut out (a split), each group's first taken (a reshape making the groups an
    axis, then a split of it), and a last element past the whole groups appended (a concat)."""
    ff, name, size = b.ff, f"{node.name}.stride{tag}", x.dims[dim]
    full = min(count, (size - lo) // step)
    cuts = [c for c in (lo, full * step, size - lo - full * step) if c]
    pieces = ff.split(x, cuts, dim, name=f"{name}.cut") if len(cuts) > 1 else [x]
    taken = []
    if full:
        slab = pieces[1 if lo else 0]
        d = list(slab.dims)
        groups = ff.reshape(slab, d[:dim] + [full, step] + d[dim + 1:], name=f"{name}.groups")
        first = ff.split(groups, [1, step - 1], dim + 1, name=f"{name}.first")[0]
        taken.append(ff.reshape(first, d[:dim] + [full] + d[dim + 1:], name=f"{name}.taken"))
    if full < count:   # the last element, past the whole groups: the first of the rest
        rest = pieces[-1]
        taken.append(rest if rest.dims[dim] == 1 else
                     ff.split(rest, [1, rest.dims[dim] - 1], dim, name=f"{name}.last")[0])
    return taken[0] if len(taken) == 1 else ff.concat(taken, dim, name=name)


def _take(b, node, x, dim: int, lo: int, step: int, count: int, tag: str):
    """Positions lo, lo + step, ... (``count``) of ``x`` along ``dim``."""
    if step > 1:
        return strided(b, node, x, dim, lo, step, count, tag)
    size = x.dims[dim]
    if (lo, count) == (0, size):
        return x
    cuts = [c for c in (lo, count, size - lo - count) if c]
    return b.ff.split(x, cuts, dim, name=f"{node.name}.take{tag}")[1 if lo else 0]


def unfold(b, node, x, kernel, dilation, padding, stride, base: str):
    """torch's Unfold of [N, C, H, W]: [N, C * kh * kw, L], channel c's window position (i, j) at
    row c * kh * kw + i * kw + j, the L = oh * ow windows in row-major order: each kernel position's
    strided slice of the padded input, stacked behind the channels, then the rows flattened (the
    last layer named ``base``)."""
    if x.num_dims != 4:
        raise node_error(node, f"unfold takes [N, C, H, W], got {list(x.dims)}", ShapeError)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel, dilation, padding, stride
    if min(kh, kw, dh, dw, sh, sw) < 1 or min(ph, pw) < 0:
        raise node_error(node, f"unfold with kernel {(kh, kw)}, dilation {(dh, dw)}, padding {(ph, pw)}, stride "
                               f"{(sh, sw)}: sizes and steps must be >= 1, padding >= 0", ShapeError)
    if (ph, pw) != (0, 0):
        x = constant_pad(b, node, x, [pw, pw, ph, ph], 0.0, f"{base}.pad")
    n, c, h, w = x.dims
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise node_error(node, f"unfold: a {kh}x{kw} window (dilation {(dh, dw)}) does not fit {h}x{w}", ShapeError)
    cols = []
    for i in range(kh):
        rows = _take(b, node, x, 2, i * dh, sh, oh, f"r{i}")
        for j in range(kw):
            piece = _take(b, node, rows, 3, j * dw, sw, ow, f"r{i}c{j}")
            cols.append(b.ff.reshape(piece, [n, c, 1, oh * ow], name=f"{base}.w{i}_{j}"))
    stacked = cols[0] if len(cols) == 1 else b.ff.concat(cols, 2, name=f"{base}.stack")
    return b.ff.reshape(stacked, [n, c * kh * kw, oh * ow], name=base), (oh, ow)


def _unfold(b, node, ins, f):
    """UNFOLD (fields: kernel, dilation, padding, stride, each a pair)."""
    pairs = [tuple(b.resolve(node, v)) for v in f[:4]]
    return unfold(b, node, b.tensor(node, ins[0]), *pairs, node.name)[0]


def dilated_weight_kind(groups: int, in_channels: int, out_channels: int, bias: bool) -> str | None:
    """The weight kind (``flexrt.torch._weights``) of a dilated convolution flexrt builds: groups 1
    (``conv2d_dilated``: a dense layer over the windows), depthwise without a bias (``parameter``:
    per-channel weights); None for any other."""
    if groups == 1:
        return "conv2d_dilated"
    return "parameter" if groups == in_channels == out_channels and not bias else None


def dense_kernel(weight: np.ndarray) -> np.ndarray:
    """A convolution's weight (out, in, kh, kw) as the dense kernel [in kh kw, out] over the windows."""
    return np.ascontiguousarray(weight.reshape(weight.shape[0], -1).T)


def conv_weight(kernel: np.ndarray, kh: int, kw: int) -> np.ndarray:
    """The inverse of ``dense_kernel``."""
    return np.ascontiguousarray(kernel.T.reshape(kernel.shape[1], -1, kh, kw))


def _conv2d_dilated(b, node, ins, f):
    """A convolution with dilation (FFModel.conv2d has none): the input's windows (``unfold``, with
    the dilation), then a dense layer named after the node whose kernel [C kh kw, out] is the
    convolution's weight flattened (weight kind ``conv2d_dilated``), moved back to [N, out, oh, ow].
    Fields as CONV2D's; keyword ``dilation`` (a pair); groups 1, or depthwise without a bias: each
    channel's windows times its weights (a parameter: the dense layer of the constant 1, weight
    kind ``parameter``), summed over the window."""
    from flexrt.ir.enums import ActiMode
    oc, kh, kw, sh, sw, ph, pw, acti, groups, use_bias = f[:10]
    x = b.tensor(node, ins[0])
    kind = dilated_weight_kind(groups, x.dims[1], oc, bool(use_bias))
    depthwise = kind == "parameter"
    if kind is None or depthwise and acti != ActiMode.AC_MODE_NONE.value:
        raise node_error(node, f"a dilated convolution of {groups} groups, {x.dims[1]} input and {oc} output "
                               f"channels{', a bias' if use_bias else ''}; valid: groups=1, or depthwise (groups = "
                               f"input = output channels) without a bias")
    cols, (oh, ow) = unfold(b, node, x, (kh, kw), tuple(node.kw("dilation")), (ph, pw), (sh, sw), f"{node.name}.windows")
    if depthwise:   # each channel's windows times its own kh kw weights, summed (weight kind "parameter")
        n, c = x.dims[0], x.dims[1]
        one = b.ff.create_constant([1, 1], 1.0, x.data_type)
        kernel = b.ff.dense(one, c * kh * kw, use_bias=False, shared_op=node.kw("shares"), name=node.name)
        w = b.ff.reshape(kernel, [1, c, kh * kw, 1], name=f"{node.name}.weights")
        windows = b.ff.reshape(cols, [n, c, kh * kw, oh * ow], name=f"{node.name}.per_channel")
        y = b.ff.reduce_sum(b.ff.multiply(windows, w, name=f"{node.name}.products"), [2], keepdims=False,
                            name=f"{node.name}.sum")
        return b.ff.reshape(y, [n, c, oh, ow], name=f"{node.name}.out")
    rows = b.ff.transpose(cols, [0, 2, 1], name=f"{node.name}.rows")
    y = b.ff.dense(rows, oc, ActiMode(acti), bool(use_bias), shared_op=node.kw("shares"), name=node.name)
    y = b.ff.transpose(y, [0, 2, 1], name=f"{node.name}.channels")
    return b.ff.reshape(y, [x.dims[0], oc, oh, ow], name=f"{node.name}.out")


def _cumsum(b, node, ins, f):
    """torch.cumsum / ONNX CumSum along dimension ``f[0]`` (not the batch): each position the sum of
    those up to it (keywords ``exclusive``: before it; ``reverse``: from the end), a constant
    triangular matrix along the axis (``resample``: linear, so the gradient is exact)."""
    if isinstance(ins[0], np.ndarray):    # a constant made in forward (EdgeNeXt's positions): folded
        v, axis = ins[0], norm_axis(node, f[0], ins[0].ndim)
        v = np.flip(v, axis) if node.kw("reverse", False) else v
        out = np.cumsum(v, axis=axis, dtype=v.dtype if v.dtype.kind == "f" else np.int64)
        if node.kw("exclusive", False):
            out = out - v
        return np.flip(out, axis) if node.kw("reverse", False) else out
    x = b.tensor(node, ins[0])
    axis = norm_axis(node, f[0], x.num_dims)
    if axis == 0:
        raise node_error(node, f"a cumulative sum along dimension 0 (the batch) of {list(x.dims)}; valid: the "
                               f"others, whose positions one sample holds", ShapeError)
    n = x.dims[axis]
    exclusive, reverse = bool(node.kw("exclusive", False)), bool(node.kw("reverse", False))
    m = np.triu(np.ones((n, n)), 1 if exclusive else 0) if reverse else np.tril(np.ones((n, n)), -1 if exclusive else 0)
    return resample(b, node, x, {axis: m}, node.name)


HANDLERS = {"UNFOLD": _unfold, "CONV2D_DILATED": _conv2d_dilated, "CUMSUM": _cumsum}
READS_ARRAYS = frozenset({"CUMSUM"})   # a constant's is folded
