"""Operators FFModel has no layer for, built from its layers: the IR builder's handlers for them and
the helpers ``flexrt.torch._build`` calls. Every form is exact (up to rounding) in the forward and
in the gradient, so the layers train as torch's operator does:

- linear resampling of spatial axes by constant matrices (``resample``): torch's interpolation
  (nearest, nearest-exact, linear, bilinear; ONNX Resize), adaptive average pooling with uneven
  windows, and the transposed convolution's stride dilation and padding, before an FFModel conv2d;
- group and instance normalization: a layer norm over each group's values, then the per-channel
  scale and shift; batch normalization with fixed (running) statistics, torch's eval mode;
- log-softmax and logsumexp (stable: the max subtracted first), softplus and mish, abs;
- variance and standard deviation, p-norm normalization (F.normalize), the L2 norm (ReduceL2),
  clamping to bounds (torch.clamp, ONNX Clip);
- the maximum over dimensions (one max-pool window), max pooling's ceil_mode padding;
- padding (constant, reflect, replicate, circular) by the same 0/1 matrices; PReLU;
- gathers by constant index arrays (advanced indexing) by one-hot matrices;
- einsum of one or two tensors as one batch matmul;
- tensors made in forward (torch.full, zeros, ones) and Unflatten.

Layers are named ``{node}.{part}``; the last one ``{node}`` where the form allows.

Entry points: ``HANDLERS`` (IR op -> handler), ``resample``, ``gather``, ``window_matrix``, ``ceil_extra``,
``ceil_pad``, ``reduce_max``.
"""

from __future__ import annotations

import math

import numpy as np

from flexrt.errors import ShapeError
from flexrt.ir.datatype import DataType
from flexrt.ir.enums import ActiMode, PoolType
from flexrt.model import composites
from flexrt.model.dataloader import batch_dtype
from flexrt.model.tensor import Tensor
from flexrt.torch._build_base import (DTYPES, FLOATS, check_size, describe, is_number, node_error, norm_axis,
                                     shape_with_inferred)
from flexrt.torch._values import ARRAY_TYPES, finite


# ---- resampling by constant matrices ----------------------------------------------------------
def resample(b, node, x: Tensor, matrices: dict[int, np.ndarray], name: str) -> Tensor:
    """``x`` with each axis k of ``matrices`` (k >= 1) mapped by M_k ([out, in]): the axis moved last,
    the tensor viewed as [N, rest, in] and batch-multiplied by the constant M_k^T broadcast over the
    batch only ([N, in, out]), then shaped and ordered back. Linear, so the gradient is exact."""
    ff, n = b.ff, x.dims[0]
    dtype = batch_dtype(x.data_type)
    steps = sorted(matrices.items(), reverse=True)     # the last axis first: it needs no transpose
    for i, (k, m) in enumerate(steps):
        last = i == len(steps) - 1
        r = x.num_dims
        if m.shape[1] != x.dims[k]:
            raise node_error(node, f"resampling matrix {list(m.shape)} for axis {k} of {list(x.dims)}", ShapeError)
        check_size(node, n * m.shape[0] * m.shape[1], f"the resampling constant of axis {k}")
        perm = [d for d in range(r) if d != k] + [k]
        t = x if k == r - 1 else ff.transpose(x, perm, name=f"{name}.move{k}")
        lead = list(t.dims[:-1])
        flat = t if r == 3 else ff.reshape(t, [n, math.prod(lead[1:]), m.shape[1]], name=f"{name}.flat{k}")
        const = np.ascontiguousarray(np.broadcast_to(m.T.astype(dtype), (n, m.shape[1], m.shape[0])))
        mat = ff.create_constant([n, m.shape[1], m.shape[0]], const, x.data_type)
        back_shape = r != 3
        back_perm = k != r - 1
        y = ff.batch_matmul(flat, mat, name=name if last and not (back_shape or back_perm) else f"{name}.mm{k}")
        if back_shape:
            y = ff.reshape(y, lead + [m.shape[0]], name=name if last and not back_perm else f"{name}.shape{k}")
        if back_perm:
            y = ff.transpose(y, [perm.index(d) for d in range(r)], name=name if last else f"{name}.back{k}")
        x = y
    return x


def window_matrix(size: int, out: int) -> np.ndarray:
    """[out, size]: row i averages torch's adaptive window i, [floor(i size / out), ceil((i+1) size / out))."""
    m = np.zeros((out, size))
    for i in range(out):
        lo, hi = (i * size) // out, -(-((i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


# coordinate transformation -> source coordinate of output position d for ratio in/out (float32,
# as torch and ONNX runtimes compute it)
_COORDS = {
    "asymmetric": lambda d, ratio, n_in, n_out: d * ratio,
    "half_pixel": lambda d, ratio, n_in, n_out: (d + np.float32(0.5)) * ratio - np.float32(0.5),
    "pytorch_half_pixel": lambda d, ratio, n_in, n_out:
        (d + np.float32(0.5)) * ratio - np.float32(0.5) if n_out > 1 else np.float32(0.0),
    "align_corners": lambda d, ratio, n_in, n_out:
        d * np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0.0),
}
_ROUND = {"floor": np.floor, "ceil": np.ceil,
          "round_prefer_floor": lambda v: np.ceil(v - np.float32(0.5)),
          "round_prefer_ceil": lambda v: np.floor(v + np.float32(0.5))}
MODES = ("nearest", "linear", "cubic")
CUBIC_A = -0.75     # torch's bicubic and ONNX Resize's default cubic_coeff_a


def _cubic_weights(t: np.ndarray, a: float) -> list[np.ndarray]:
    """Keys' cubic convolution weights of the four source positions floor(src) - 1 .. + 2 at the
    fraction ``t``, as torch's upsample_bicubic2d computes them."""
    def near(x):     # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1
    def far(x):      # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def interpolation_matrix(n_in: int, n_out: int, ratio: float, mode: str, coords: str, rounding: str) -> np.ndarray:
    """[n_out, n_in]: torch's (and ONNX Resize's) 1-D resampling. ``ratio``: the source step per
    output step (in/out, or 1/scale_factor when a scale is given); ``mode`` nearest, linear
    (bilinear is linear on each axis) or cubic (bicubic is cubic on each axis: Keys' kernel of
    a = -0.75 over four positions clamped to the axis, the source not clamped at 0, as torch's);
    ``coords`` ONNX's coordinate_transformation_mode (torch: nearest = asymmetric + floor,
    nearest-exact = half_pixel + round_prefer_ceil, linear and cubic = half_pixel (linear's
    clamped at 0), or align_corners)."""
    d = np.arange(n_out, dtype=np.float32)
    src = _COORDS[coords](d, np.float32(ratio), n_in, n_out).astype(np.float32)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    if mode == "nearest":
        m[rows, np.clip(_ROUND[rounding](src).astype(np.int64), 0, n_in - 1)] = 1.0
        return m
    if mode == "cubic":
        base = np.floor(src).astype(np.int64)
        t = (src - base).astype(np.float64)
        for k, w in enumerate(_cubic_weights(t, CUBIC_A)):
            np.add.at(m, (rows, np.clip(base - 1 + k, 0, n_in - 1)), w)
        return m
    src = np.maximum(src, 0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    lam = (src - lo).astype(np.float64)
    np.add.at(m, (rows, lo), 1.0 - lam)
    np.add.at(m, (rows, hi), lam)
    return m


def _interpolate(b, node, ins, f):
    """torch's F.interpolate / nn.Upsample and ONNX Resize on [N, C, *spatial] (1 or 2 spatial axes):
    keywords ``size`` or ``scale`` (per spatial axis), ``mode`` (nearest, linear), ``coords`` and
    ``rounding`` (``interpolation_matrix``); a scale gives floor(in * scale) positions at the step
    1/scale, a size the step in/size."""
    x = b.tensor(node, ins[0])
    spatial = x.num_dims - 2
    mode, coords, rounding = node.kw("mode", "nearest"), node.kw("coords", "asymmetric"), node.kw("rounding", "floor")
    if spatial not in (1, 2) or node.kw("spatial", spatial) != spatial:
        want = "[N, C, H, W]" if node.kw("spatial") == 2 else "[N, C, L] or [N, C, H, W]"
        raise node_error(node, f"interpolation ({mode}) needs {want}, got {list(x.dims)}", ShapeError)
    if mode not in MODES or coords not in _COORDS or rounding not in _ROUND:
        raise node_error(node, f"mode={mode!r}, coords={coords!r}, rounding={rounding!r}; valid modes: "
                               f"{', '.join(MODES)}; coords: {', '.join(_COORDS)}; rounding: {', '.join(_ROUND)}")
    size, scale = b.resolve(node, node.kw("size")), node.kw("scale")
    per_axis = [v if isinstance(v, (tuple, list)) else (v,) * spatial for v in (size, scale)]
    if (size is None) == (scale is None) or len(per_axis[0 if size is not None else 1]) != spatial:
        raise node_error(node, f"give one of size or scale, one per spatial axis of {list(x.dims)}; got size={size!r}, "
                               f"scale={scale!r}")
    matrices = {}
    for i in range(spatial):
        n_in = x.dims[2 + i]
        if size is not None:
            n_out = per_axis[0][i]
            if not isinstance(n_out, int) or isinstance(n_out, bool) or n_out < 1:
                raise node_error(node, f"output size {n_out!r} must be an int >= 1", ShapeError)
            ratio = np.float32(n_in) / np.float32(n_out)
        else:
            s = per_axis[1][i]
            if not is_number(s) or not 0 < s < float("inf"):
                raise node_error(node, f"scale {s!r} must be a number > 0", ShapeError)
            n_out, ratio = int(math.floor(n_in * s)), np.float32(1.0) / np.float32(s)
            if n_out < 1:
                raise node_error(node, f"scale {s} leaves no positions of {n_in}", ShapeError)
            if node.kw("recompute", False):    # torch's recompute_scale_factor: the step of the rounded size
                ratio = np.float32(n_in) / np.float32(n_out)
        check_size(node, n_in * n_out * x.dims[0], f"interpolating {n_in} positions to {n_out}")
        m = interpolation_matrix(n_in, n_out, ratio, mode, coords, rounding)
        if n_out != n_in or not np.array_equal(m, np.eye(n_in)):
            matrices[2 + i] = m
    return resample(b, node, x, matrices, node.name) if matrices else x


PAD_MODES = ("constant", "reflect", "replicate", "circular")


def pad_matrix(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    """[n + lo + hi, n]: torch's F.pad of one axis (a negative ``lo`` / ``hi`` crops, constant mode):
    output j reads input j - lo, reflected, clamped or wrapped at the ends, or nothing (constant)."""
    out = n + lo + hi
    m = np.zeros((out, n))
    for j in range(out):
        src = j - lo
        if mode == "reflect":
            src = -src if src < 0 else 2 * (n - 1) - src if src >= n else src
        elif mode == "replicate":
            src = min(max(src, 0), n - 1)
        elif mode == "circular":
            src %= n
        if 0 <= src < n:
            m[j, src] = 1.0
    return m


def _pad(b, node, ins, f):
    """torch's F.pad / padding modules and ONNX Pad: ``f`` the pads in torch's order (the last axis'
    (left, right) first), keywords ``mode`` (constant, reflect, replicate, circular) and ``value``
    (constant mode). Constant mode: per axis, a crop (a split) where a pad is negative and blocks of
    the value concatenated on either side (no arithmetic on the data, so its cost is a copy); the
    other modes: a resampling by 0/1 matrices."""
    x = b.tensor(node, ins[0])
    pads = list(f[0]) if len(f) == 1 and isinstance(f[0], (tuple, list)) else list(f)
    mode, value = node.kw("mode", "constant"), node.kw("value", 0.0) or 0.0
    while len(pads) // 2 > x.num_dims - 1 and len(pads) % 2 == 0 and pads[-2:] == [0, 0]:
        pads = pads[:-2]       # (0, 0) for the batch axis (MobileBERT pads all three axes of [N, T, E])
    if mode not in PAD_MODES or len(pads) % 2 or len(pads) // 2 > x.num_dims - 1 or \
            any(not isinstance(p, int) or isinstance(p, bool) for p in pads) or not is_number(value):
        raise node_error(node, f"pads {pads}, mode {mode!r}, value {value!r}: give (left, right) pairs of ints from "
                               f"the last axis back, for at most {x.num_dims - 1} axes (not the batch); modes "
                               f"{', '.join(PAD_MODES)}", ShapeError)
    if mode == "constant":
        return constant_pad(b, node, x, pads, float(value))
    matrices = {}
    for i in range(len(pads) // 2):
        ax, (lo, hi) = x.num_dims - 1 - i, pads[2 * i: 2 * i + 2]
        n = x.dims[ax]
        if n + lo + hi < 1 or mode == "reflect" and (lo >= n or hi >= n) or mode != "constant" and min(lo, hi) < 0 \
                or mode == "circular" and (lo > n or hi > n):
            raise node_error(node, f"pads ({lo}, {hi}) of an axis of {n} in {mode} mode: reflect pads must be smaller "
                                   f"than the axis, circular ones at most it, and only constant mode crops", ShapeError)
        if (lo, hi) != (0, 0):
            check_size(node, x.dims[0] * n * (n + lo + hi), f"padding an axis of {n} by ({lo}, {hi})")
            matrices[ax] = pad_matrix(n, lo, hi, mode)
    if not matrices:
        return x
    y = resample(b, node, x, matrices, node.name if mode != "constant" or value == 0 else f"{node.name}.resample")
    if mode == "constant" and value != 0:   # the value where no input is read
        dtype = batch_dtype(x.data_type)
        read = np.ones(x.dims, dtype=dtype)
        for ax, m in matrices.items():
            read = np.moveaxis(np.moveaxis(read, ax, -1) @ m.T.astype(dtype), -1, ax)
        fill = b.ff.create_constant(list(y.dims), np.ascontiguousarray((1 - read) * value), x.data_type)
        y = b.ff.add(y, fill, name=node.name)
    return y


def constant_pad(b, node, x, pads: list, value: float, base: str | None = None):
    """F.pad in constant mode: each axis cropped (negative pads: a split) and given blocks of
    ``value`` on either side (a concat with constants of the model); the last layer named ``base``
    (default: the node's name)."""
    ff, y, base = b.ff, x, base or node.name
    steps = [(x.num_dims - 1 - i, pads[2 * i], pads[2 * i + 1]) for i in range(len(pads) // 2)]
    steps = [(ax, lo, hi) for ax, lo, hi in steps if (lo, hi) != (0, 0)]
    for k, (ax, lo, hi) in enumerate(steps):
        n = y.dims[ax]
        if n + lo + hi < 1:
            raise node_error(node, f"pads ({lo}, {hi}) leave nothing of an axis of {n}", ShapeError)
        name = base if k == len(steps) - 1 else f"{base}.axis{ax}"
        if min(lo, hi) < 0:      # crops: the kept middle of a split
            sizes = [s for s in (max(-lo, 0), n - max(-lo, 0) - max(-hi, 0), max(-hi, 0)) if s]
            y = ff.split(y, sizes, ax, name=f"{name}.crop")[1 if lo < 0 else 0] if len(sizes) > 1 else y
        def block(size):      # ``size`` positions of the value along the axis
            check_size(node, math.prod(y.dims) // y.dims[ax] * size, f"padding an axis of {n} by ({lo}, {hi})")
            return ff.create_constant([size if d == ax else s for d, s in enumerate(y.dims)], value, y.data_type)
        parts = ([block(lo)] if lo > 0 else []) + [y] + ([block(hi)] if hi > 0 else [])
        y = ff.concat(parts, ax, name=name) if len(parts) > 1 else y
    return y


def _prelu(b, node, ins, f):
    """PReLU: relu(x) - a * relu(-x), ``a`` (input 2) one slope or one per channel (axis 1)."""
    x, a = b.tensor(node, ins[0]), b.tensor(node, ins[1], "its slope")
    ff, name, n = b.ff, node.name, math.prod(a.dims)
    if n not in (1, x.dims[1] if x.num_dims > 1 else 1):
        raise node_error(node, f"{n} slopes for input {list(x.dims)}; valid: 1 or one per channel (axis 1)",
                         ShapeError)
    shape = [n] + [1] * (x.num_dims - 2) if n > 1 else [1]
    slope = ff.reshape(a, shape, name=f"{name}.slope") if list(a.dims) != shape else a
    neg = ff.relu(ff.scalar_multiply(x, -1.0, name=f"{name}.neg_in"), name=f"{name}.neg")
    return ff.subtract(ff.relu(x, name=f"{name}.pos"), ff.multiply(slope, neg, name=f"{name}.scaled"), name=name)


def _dilation_matrix(n_in: int, stride: int, lo: int, hi: int) -> np.ndarray:
    """[n_out, n_in]: input i at position i * stride + lo of (n_in - 1) * stride + 1 + lo + hi
    positions (zeros between and around; a negative ``lo`` / ``hi`` crops)."""
    n_out = (n_in - 1) * stride + 1 + lo + hi
    m = np.zeros((n_out, n_in))
    for i in range(n_in):
        p = i * stride + lo
        if 0 <= p < n_out:
            m[p, i] = 1.0
    return m


def _conv_transpose2d(b, node, ins, f):
    """torch's ConvTranspose2d (ONNX ConvTranspose), fields as CONV2D's (out_channels, kernel,
    stride, padding, activation, groups, use_bias), keywords ``output_padding`` and
    ``padding_end`` (ONNX's end pads; torch's equal the begin pads): the input dilated by the
    stride and padded by kernel - 1 - padding (constant 0/1 matrices, ``resample``), then an
    FFModel conv2d of stride 1 whose kernel is the transposed convolution's, flipped and with its
    channel axes swapped (``flexrt.torch._weights``: ``conv_transpose2d``)."""
    x = b.tensor(node, ins[0])
    if x.num_dims != 4 or len(f) < 10:
        raise node_error(node, f"needs an NCHW input and 10 fields, got {list(x.dims)} and {len(f)}", ShapeError)
    oc, kh, kw, sh, sw, ph, pw, acti, groups, use_bias = f[:10]
    oph, opw = node.kw("output_padding", (0, 0))
    eh, ew = node.kw("padding_end", (ph, pw))
    if any(not isinstance(v, int) or v < 0 for v in (ph, pw, eh, ew, oph, opw)) or min(kh, kw, sh, sw) < 1:
        raise node_error(node, f"kernel {kh}x{kw}, stride {sh}x{sw}, padding {ph},{pw} (end {eh},{ew}), output "
                               f"padding {oph},{opw}: sizes >= 1, paddings >= 0", ShapeError)
    if oph >= sh or opw >= sw:
        raise node_error(node, f"output_padding ({oph}, {opw}) must be smaller than the stride ({sh}, {sw})", ShapeError)
    pads = ((kh - 1 - ph, kh - 1 - eh + oph), (kw - 1 - pw, kw - 1 - ew + opw))
    h, w = x.dims[2:]
    out = ((h - 1) * sh + kh - ph - eh + oph, (w - 1) * sw + kw - pw - ew + opw)
    if min(out) < 1:
        raise node_error(node, f"the output of a {h}x{w} input would be {out[0]}x{out[1]}", ShapeError)
    ch = node.kw("in_channels")
    if ch is not None and x.dims[1] != ch:
        raise node_error(node, f"declares in_channels={ch}, its input {list(x.dims)} has {x.dims[1]}", ShapeError)
    if (sh, sw) == (1, 1) and pads[0][0] == pads[0][1] >= 0 and pads[1][0] == pads[1][1] >= 0:
        y, cp = x, (pads[0][0], pads[1][0])       # a stride-1 transposed convolution is a padded convolution
    else:
        check_size(node, x.dims[0] * (h * sh + kh) * (w * sw + kw) * max(h, w), "the dilated input's constants")
        matrices = {2: _dilation_matrix(h, sh, *pads[0]), 3: _dilation_matrix(w, sw, *pads[1])}
        y, cp = resample(b, node, x, matrices, f"{node.name}.dilate"), (0, 0)
    return b.ff.conv2d(y, oc, kh, kw, 1, 1, cp[0], cp[1], ActiMode(acti), groups, bool(use_bias),
                       shared_op=node.kw("shares"), name=node.name)


def _conv1d(b, node, ins, f):
    """torch's Conv1d (ONNX Conv of a 1-D kernel), fields (out_channels, kernel, stride, padding,
    activation, groups, use_bias): FFModel's conv2d of a 1 x kernel window over [N, C, 1, L] (the
    kernel [out, in / groups, 1, k]: ``flexrt.torch._weights`` ``conv1d``)."""
    x = b.tensor(node, ins[0])
    if x.num_dims != 3 or len(f) < 7:
        raise node_error(node, f"needs [N, C, L] and 7 fields, got {list(x.dims)} and {len(f)}", ShapeError)
    oc, k, s, p, acti, groups, use_bias = f[:7]
    ff, name = b.ff, node.name
    image = ff.reshape(x, [x.dims[0], x.dims[1], 1, x.dims[2]], name=f"{name}.image")
    y = ff.conv2d(image, oc, 1, k, 1, s, 0, p, ActiMode(acti), groups, bool(use_bias), shared_op=node.kw("shares"),
                  name=name)
    return ff.reshape(y, [y.dims[0], y.dims[1], y.dims[3]], name=f"{name}.back")


def _pool1d(b, node, ins, f):
    """MaxPool1d / AvgPool1d (fields kernel, stride, padding, pool type; ONNX 1-D pools) and their
    adaptive forms (keyword ``output_size``): FFModel's pool2d over [N, C, 1, L]."""
    x = b.tensor(node, ins[0])
    if x.num_dims != 3:
        raise node_error(node, f"needs [N, C, L], got {list(x.dims)}", ShapeError)
    ff, name = b.ff, node.name
    pool = PoolType(f[3]) if len(f) > 3 else PoolType.POOL_MAX
    image = ff.reshape(x, [x.dims[0], x.dims[1], 1, x.dims[2]], name=f"{name}.image")
    out = node.kw("output_size")
    if out is not None:
        if not isinstance(out, int) or isinstance(out, bool) or out < 1 or x.dims[2] % out:
            raise node_error(node, f"adaptive pooling of {x.dims[2]} positions to {out!r}: the output size must "
                                   f"divide the length", ShapeError)
        k = s = x.dims[2] // out
        p = 0
    else:
        k, s, p = f[0], (f[1] if f[1] not in (None, ()) else f[0]), f[2]
    y = ff.pool2d(image, 1, k, 1, s, 0, p, pool, name=name)
    return ff.reshape(y, [y.dims[0], y.dims[1], y.dims[3]], name=f"{name}.back")


# ---- normalization ---------------------------------------------------------------------------
def _group_norm(b, node, ins, f):
    """torch's GroupNorm (field: the groups) and InstanceNorm (field None: one group per channel;
    ONNX InstanceNormalization) on [N, C, *]: each group's values normalized by a layer norm
    without weights (torch's biased variance, eps inside the root), then times the per-channel
    scale and plus the shift (inputs 2 and 3, [C], when affine)."""
    x = b.tensor(node, ins[0])
    rank = node.kw("rank")     # an InstanceNorm module's: 3 (1d) or 4 (2d)
    if x.num_dims < 2 or rank is not None and x.num_dims != rank:
        raise node_error(node, f"needs [N, C, *]{f' of rank {rank}' if rank else ''}, got {list(x.dims)}",
                         ShapeError)
    n, c = x.dims[:2]
    groups = f[0] if f and f[0] is not None else c
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or c % groups:
        raise node_error(node, f"{groups!r} groups do not divide {c} channels", ShapeError)
    eps = node.kw("eps", 1e-5)
    if not is_number(eps) or not 0 <= eps < 1:
        raise node_error(node, f"eps={eps!r}: must be a number in [0, 1)")
    ff, name = b.ff, node.name
    affine = [b.tensor(node, t, f"its {what}") for t, what in zip(ins[1:3], ("scale", "shift")) if t is not None]
    g = ff.reshape(x, [n, groups, math.prod(x.dims[1:]) // groups], name=f"{name}.groups")
    g = ff.layer_norm(g, [2], False, float(eps), name=f"{name}.norm")
    y = ff.reshape(g, list(x.dims), name=name if not affine else f"{name}.shape")
    return _per_channel_affine(b, node, y, affine)


def _per_channel_affine(b, node, y: Tensor, affine: list) -> Tensor:
    """``y`` [N, C, *] times the scale and plus the shift (``affine``: none, the scale, or both,
    each [C]), broadcast over the other axes; the last layer named after the node."""
    c, ff, name = y.dims[1], b.ff, node.name
    per_channel = [c] + [1] * (y.num_dims - 2)
    for i, t in enumerate(affine):
        part = ("scale", "shift")[i]
        if math.prod(t.dims) != c:
            raise node_error(node, f"its {part} {list(t.dims)} must hold one value per channel ({c})", ShapeError)
        t = ff.reshape(t, per_channel, name=f"{name}.{part}_shape")
        y = (ff.multiply if i == 0 else ff.add)(y, t, name=name if i == len(affine) - 1 else f"{name}.scaled")
    return y


def _frozen_batch_norm(b, node, ins, f):
    """A BatchNorm with fixed statistics: torch's BatchNorm in eval mode, ONNX BatchNormalization in
    inference form. Inputs x [N, C, *], the running mean and variance (arrays), and, when affine,
    the scale and shift (trainable, [C]): (x - mean) / sqrt(var + eps) * scale + shift, as torch
    computes it; its gradient is torch's eval-mode one (the statistics are constants)."""
    x = b.tensor(node, ins[0])
    if x.num_dims < 2:
        raise node_error(node, f"needs [N, C, *], got {list(x.dims)}", ShapeError)
    c, eps = x.dims[1], node.kw("eps", 1e-5)
    if not is_number(eps) or not 0 <= eps < 1:
        raise node_error(node, f"eps={eps!r}: must be a number in [0, 1)")
    stats = [np.asarray(v, dtype=np.float64).reshape(-1) if isinstance(v, np.ndarray) else None for v in ins[1:3]]
    if len(stats) != 2 or any(s is None or s.size != c for s in stats) or np.any(stats[1] + eps <= 0):
        raise node_error(node, f"the running mean and variance must be {c} constants (variance + eps > 0)",
                         ShapeError)
    ff, name, dtype = b.ff, node.name, batch_dtype(x.data_type)
    per_channel = [c] + [1] * (x.num_dims - 2)

    def constant(values):
        return ff.create_constant(per_channel, np.ascontiguousarray(values.astype(dtype).reshape(per_channel)),
                                  x.data_type)
    affine = [b.tensor(node, b.constant(t, node), what) for t, what in zip(ins[3:5], ("scale", "shift"))]
    y = ff.multiply(ff.subtract(x, constant(stats[0]), name=f"{name}.centered"),
                    constant(1.0 / np.sqrt(stats[1] + eps)), name=name if not affine else f"{name}.normalized")
    return _per_channel_affine(b, node, y, affine)


def _moments(b, node, x: Tensor, axes: list, keep: bool, correction, name: str) -> Tensor:
    """The variance of ``x`` over ``axes``: mean((x - mean(x))^2) * n / (n - correction)."""
    ff = b.ff
    n = math.prod(x.dims[a] for a in axes)
    if not is_number(correction) or correction < 0 or n - correction <= 0:
        raise node_error(node, f"correction {correction!r} leaves no degrees of freedom over {n} values", ShapeError)
    centered = ff.subtract(x, ff.mean(x, axes, True, name=f"{name}.mean"), name=f"{name}.centered")
    sq = ff.multiply(centered, centered, name=f"{name}.square")
    if correction == 0:
        return ff.mean(sq, axes, keep, name=name)
    return ff.scalar_multiply(ff.mean(sq, axes, keep, name=f"{name}.biased"), n / (n - correction), name=name)


def _var(b, node, ins, f):
    """torch's var / std over the dimensions ``f`` (all when none): keywords ``keepdim``,
    ``correction`` (1: unbiased, torch's default), ``std`` (the square root of the variance)."""
    x = b.tensor(node, ins[0])
    if x.data_type not in FLOATS:
        raise node_error(node, f"var/std need a floating tensor, got {x.data_type.name}")
    axes = sorted({norm_axis(node, d, x.num_dims) for d in f}) if f else list(range(x.num_dims))
    keep = bool(node.kw("keepdim", False))
    std = bool(node.kw("std", False))
    to_scalar = not keep and len(axes) == x.num_dims
    inner = f"{node.name}.var" if std or to_scalar else node.name
    v = _moments(b, node, x, axes, keep or to_scalar, node.kw("correction", 1), inner)
    if std:
        v = b.ff.pow(v, 0.5, name=node.name if not to_scalar else f"{node.name}.std")
    return b.ff.reshape(v, [1], name=node.name) if to_scalar else v


def _l2(b, node, x: Tensor, axes: list, keep: bool, name: str) -> Tensor:
    ff = b.ff
    return ff.pow(ff.reduce_sum(ff.multiply(x, x, name=f"{name}.square"), axes, keep, name=f"{name}.sum"), 0.5,
                  name=name)


def _reduce_l2(b, node, ins, f):
    """ONNX ReduceL2: sqrt(sum(x^2)) over the axes ``f`` (all when none), keyword ``keepdim``."""
    x = b.tensor(node, ins[0])
    axes = sorted({norm_axis(node, d, x.num_dims) for d in f}) if f else list(range(x.num_dims))
    keep = bool(node.kw("keepdim", True))
    if not keep and len(axes) == x.num_dims:
        return b.ff.reshape(_l2(b, node, x, axes, True, f"{node.name}.all"), [1], name=node.name)
    return _l2(b, node, x, axes, keep, node.name)


def _normalize(b, node, ins, f):
    """F.normalize(x, p=2, dim, eps): x / max(||x||_2 over dim, eps) (fields p, dim, eps)."""
    x = b.tensor(node, ins[0])
    p, dim, eps = (list(f) + [2.0, 1, 1e-12][len(f):])[:3]
    if p != 2:
        raise node_error(node, f"F.normalize with p={p!r}: only p=2 maps")
    if not is_number(eps) or eps < 0:
        raise node_error(node, f"eps={eps!r} must be a number >= 0")
    ff, name = b.ff, node.name
    norm = _l2(b, node, x, [norm_axis(node, dim, x.num_dims)], True, f"{name}.norm")
    floor = ff.create_constant(list(norm.dims), float(eps), norm.data_type)
    return ff.divide(x, ff.max(norm, floor, name=f"{name}.clamp"), name=name)


def _clamp(b, node, ins, f):
    """torch.clamp(min, max) and ONNX Clip (fields: the bounds, None for none): max and min with
    constants of the input's shape, exact in the forward and the gradient."""
    x, (lo, hi) = ins[0], (list(f) + [None, None])[:2]
    if any(v is not None and not is_number(v) for v in (lo, hi)) or lo is None and hi is None:
        raise node_error(node, f"clamp bounds must be numbers (at least one), got {lo!r}, {hi!r}")
    if is_number(x):
        return min(max(x, lo if lo is not None else x), hi if hi is not None else x)
    x, ff, name = b.tensor(node, x), b.ff, node.name
    for i, (v, op) in enumerate(((lo, ff.max), (hi, ff.min))):
        if v is not None:
            last = i == 1 or hi is None
            x = op(x, ff.create_constant(list(x.dims), float(v), x.data_type), name=name if last else f"{name}.min")
    return x


def _softmax_parts(b, node, x: Tensor, axes: list, name: str) -> tuple[Tensor, Tensor]:
    """(x - max, log(sum(exp(x - max)))) over ``axes`` (kept): the stable pieces of log-softmax and
    logsumexp. The gradient through the max cancels (d/dm of x - m - log sum exp(x - m) is 0)."""
    ff = b.ff
    shifted = ff.subtract(x, reduce_max(b, node, x, axes, True, f"{name}.max"), name=f"{name}.shifted")
    total = ff.reduce_sum(ff.exp(shifted, name=f"{name}.exp"), axes, True, name=f"{name}.sum")
    return shifted, ff.log(total, name=f"{name}.log")


def _log_softmax(b, node, ins, f):
    """torch's log_softmax / nn.LogSoftmax / ONNX LogSoftmax over ``dim`` (keyword, or torch's implicit)."""
    x = b.tensor(node, ins[0])
    dim = b.resolve(node, node.kw("dim", -1))
    if dim == "implicit":   # torch's softmax without dim (F._get_softmax_dim)
        dim = 0 if x.num_dims in (0, 1, 3) else 1
    shifted, lse = _softmax_parts(b, node, x, [norm_axis(node, dim, x.num_dims)], node.name)
    return b.ff.subtract(shifted, lse, name=node.name)


def _logsumexp(b, node, ins, f):
    """torch.logsumexp over the dimensions ``f`` (keyword ``keepdim``): max + log(sum(exp(x - max)))."""
    x = b.tensor(node, ins[0])
    axes = sorted({norm_axis(node, d, x.num_dims) for d in f}) if f else list(range(x.num_dims))
    keep = bool(node.kw("keepdim", False))
    shifted, lse = _softmax_parts(b, node, x, axes, node.name)
    top = reduce_max(b, node, x, axes, True, f"{node.name}.top")
    out = b.ff.add(top, lse, name=node.name if keep else f"{node.name}.kept")
    if keep:
        return out
    shape = [d for i, d in enumerate(x.dims) if i not in axes] or [1]
    return b.ff.reshape(out, shape, name=node.name)


def _abs(b, node, ins, f):
    """|x| (``flexrt.model.composites.absolute``: torch's gradient, 0 at 0)."""
    x = ins[0]
    if is_number(x):
        return abs(x)
    return composites.absolute(b.ff, b.tensor(node, x), node.name)


def _softplus(b, node, ins, f):
    """softplus(x) = log(1 + exp(beta x)) / beta (``flexrt.model.composites.softplus``: exact for every
    x, where torch returns x itself past ``threshold``, which the converters check); MISH:
    x * tanh(softplus(x))."""
    x, ff, name = b.tensor(node, ins[0]), b.ff, node.name
    beta = f[0] if f and node.op == "SOFTPLUS" else 1.0
    if not is_number(beta) or beta <= 0:
        raise node_error(node, f"beta={beta!r}: must be a number > 0")
    if node.op == "MISH":
        sp = composites.softplus(ff, x, 1.0, f"{name}.softplus")
        return ff.multiply(x, ff.tanh(sp, name=f"{name}.tanh"), name=name)
    return composites.softplus(ff, x, float(beta), name)


# ---- gathers by constant indices -------------------------------------------------------------------
def gather(b, node, x: Tensor, index: tuple) -> Tensor:
    """NumPy's advanced indexing of ``x`` by constant integer (or bool) arrays at adjacent axes after
    the batch (DLRM's ``Z[:, li, lj]``, ``x[:, perm]``), with ``:`` elsewhere: the indexed axes moved
    last and flattened, multiplied by a constant one-hot matrix (``resample``: the gradient adds
    into the positions read), shaped as the broadcast indices, and moved back."""
    index = list(index)
    dots = [i for i, item in enumerate(index) if item is Ellipsis]
    if dots:
        k = dots[0]
        index[k:k + 1] = [slice(None)] * (x.num_dims - len(index) + 1)
    index += [slice(None)] * (x.num_dims - len(index))
    if len(index) != x.num_dims:
        raise node_error(node, f"index {tuple(index)} has more entries than rank {x.num_dims}", ShapeError)
    arrays = {}
    for ax, item in enumerate(index):
        if isinstance(item, (np.ndarray, tuple)) or isinstance(item, int) and not isinstance(item, bool):
            arr = np.asarray(item)
            arr = np.nonzero(arr)[0] if arr.dtype == bool and arr.ndim == 1 else arr
            if arr.dtype.kind not in "iu":
                raise node_error(node, f"index {describe(item)} at axis {ax}: only integer (or 1-D bool) arrays gather",
                                 ShapeError)
            arrays[ax] = arr
        elif not (isinstance(item, slice) and item == slice(None)):
            raise node_error(node, f"index item {item!r} beside array indices; valid there: ':'", ShapeError)
    axes = sorted(arrays)
    if axes != list(range(axes[0], axes[-1] + 1)) or axes[0] == 0:
        raise node_error(node, f"array indices at axes {axes}: they must be adjacent and after the batch axis",
                         ShapeError)
    try:
        parts = np.broadcast_arrays(*(arrays[a] for a in axes))
    except ValueError as e:
        raise node_error(node, f"array indices do not broadcast: {e}", ShapeError) from None
    sizes = [x.dims[a] for a in axes]
    for a, p in zip(axes, parts):
        if p.size and (p.min() < -x.dims[a] or p.max() >= x.dims[a]):
            raise node_error(node, f"an index at axis {a} is out of range for size {x.dims[a]}", ShapeError)
    check_size(node, parts[0].size * math.prod(sizes) * x.dims[0], "the gather's one-hot constant")
    flat = np.ravel_multi_index(tuple(p % s for p, s in zip(parts, sizes)), sizes).reshape(-1)
    ff, name, r = b.ff, node.name, x.num_dims
    rest = [a for a in range(r) if a not in axes]
    t = x if axes[-1] == r - 1 else ff.transpose(x, rest + axes, name=f"{name}.to_last")
    t = ff.reshape(t, [x.dims[a] for a in rest] + [math.prod(sizes)], name=f"{name}.flat")
    pick = np.zeros((flat.size, math.prod(sizes)))
    pick[np.arange(flat.size), flat] = 1.0
    y = resample(b, node, t, {len(rest): pick}, f"{name}.pick")
    shape = list(parts[0].shape)
    y = ff.reshape(y, [x.dims[a] for a in rest] + shape, name=name if axes[-1] == r - 1 or not shape
                   else f"{name}.shape")
    if axes[-1] == r - 1 or not shape:
        return y
    k = axes[0]     # the gathered dimensions back where the indexed axes were
    perm = list(range(k)) + list(range(len(rest), len(rest) + len(shape))) + list(range(k, len(rest)))
    return ff.transpose(y, perm, name=name)


# ---- einsum --------------------------------------------------------------------------------------
def _einsum_terms(node, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The operands' and the output's index letters, '...' expanded to letters for the rank it covers."""
    if not isinstance(equation, str) or equation.count("->") > 1:
        raise node_error(node, f"einsum equation {equation!r} must be a string with at most one '->'")
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node_error(node, f"einsum {equation!r} names {len(terms)} operands, got {len(ranks)}")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation]
    width = max([r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t] or [0])
    dots = "".join(spare[:width])
    out_terms = []
    for t, r in zip(terms, ranks):
        t = t.replace("...", dots[width - (r - len(t.replace("...", ""))):] if "..." in t else "")
        if len(t) != r or not t.isalpha() or len(set(t)) != len(t):
            raise node_error(node, f"einsum term {t!r} does not index a tensor of rank {r} (repeated indices, "
                                   f"diagonals, are not supported)", ShapeError)
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", dots)
    else:     # implicit output: the letters seen once, in alphabetical order (after '...')
        seen = "".join(out_terms)
        out = dots + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in dots))
    if not out.isalpha() and out or len(set(out)) != len(out) or any(c not in "".join(out_terms) for c in out):
        raise node_error(node, f"einsum output {out!r} must name distinct indices of the operands", ShapeError)
    return out_terms, out


def _einsum(b, node, ins, f):
    """torch.einsum / ONNX Einsum of one or two tensors (field: the equation): indices only one
    operand has and the output lacks are summed first; two operands become one batch matmul of
    [batch, left, contracted] @ [batch, contracted, right] (transposes and reshapes around it)."""
    xs = [b.tensor(node, t, f"operand {i}") for i, t in enumerate(ins)]
    if len(xs) not in (1, 2):
        raise node_error(node, f"einsum of {len(xs)} operands; valid: 1 or 2")
    terms, out = _einsum_terms(node, f[0], [x.num_dims for x in xs])
    ff, name = b.ff, node.name
    sizes = {}
    for t, x in zip(terms, xs):
        for c, d in zip(t, x.dims):
            if sizes.setdefault(c, d) != d:
                raise node_error(node, f"einsum index {c!r} is {sizes[c]} and {d} (broadcasting is not supported)",
                                 ShapeError)
    for i, (t, x) in enumerate(zip(terms, xs)):      # indices no one else reads: summed now
        others = out + "".join(terms[j] for j in range(len(xs)) if j != i)
        gone = [k for k, c in enumerate(t) if c not in others]
        if len(gone) == len(t):
            if len(xs) == 1:     # a full sum: one element
                return ff.reshape(ff.reduce_sum(x, gone, True, name=f"{name}.sum"), [1], name=name)
            raise node_error(node, f"einsum {f[0]!r} sums operand {i} whole; give its sum as a separate step")
        if gone:
            xs[i] = ff.reduce_sum(x, gone, False, name=f"{name}.sum{i}")
            terms[i] = "".join(c for c in t if c in others)
    if len(xs) == 1:
        return _arranged(b, xs[0], terms[0], out, sizes, name)
    (ta, tb), (xa, xb) = terms, xs
    batch = [c for c in ta if c in tb and c in out]
    con = [c for c in ta if c in tb and c not in out]
    left, right = [c for c in ta if c not in tb], [c for c in tb if c not in ta]
    nb, nl, nk, nr = (math.prod(sizes[c] for c in g) for g in (batch, left, con, right))
    a = _arranged(b, xa, ta, "".join(batch + left + con), sizes, f"{name}.a")
    bb = _arranged(b, xb, tb, "".join(batch + con + right), sizes, f"{name}.b")
    y = ff.batch_matmul(ff.reshape(a, [nb, nl, nk], name=f"{name}.a3"), ff.reshape(bb, [nb, nk, nr], name=f"{name}.b3"),
                        name=f"{name}.bmm")
    return _arranged(b, y, "".join(batch + left + right), out, sizes, name, from_flat=True)


def _arranged(b, x: Tensor, have: str, want: str, sizes: dict, name: str, from_flat: bool = False) -> Tensor:
    """``x`` indexed by ``have`` (or, ``from_flat``, a 3-D view of it) shaped and transposed to ``want``."""
    ff = b.ff
    if from_flat:
        shape = [sizes[c] for c in have] or [1]
        if have == want or list(x.dims) == shape:
            return ff.reshape(x, shape, name=name) if list(x.dims) != shape else x
        x = ff.reshape(x, shape, name=f"{name}.unflat")
    if have == want:
        return x
    return ff.transpose(x, [have.index(c) for c in want], name=name)


# ---- max ---------------------------------------------------------------------------------------
def reduce_max(b, node, x: Tensor, axes: list, keep: bool, name: str) -> Tensor:
    """The maximum over ``axes`` (torch's amax, ONNX ReduceMax), which FFModel has no layer for: the
    reduced dimensions moved last, the tensor viewed as [kept, 1, reduced, 1] and max-pooled by one
    window over the reduced positions, then shaped as the result."""
    r = x.num_dims
    kept = [d for d in range(r) if d not in axes]
    order = kept + axes
    t = x if order == list(range(r)) else b.ff.transpose(x, order, name=f"{name}.order")
    m, n = math.prod(x.dims[d] for d in kept), math.prod(x.dims[d] for d in axes)
    image = b.ff.reshape(t, [m, 1, n, 1], name=f"{name}.image")
    pooled = b.ff.pool2d(image, n, 1, n, 1, 0, 0, PoolType.POOL_MAX, name=f"{name}.pool")
    shape = [1 if d in axes else x.dims[d] for d in range(r)] if keep else [x.dims[d] for d in kept]
    return b.ff.reshape(pooled, shape or [1], name=name)


def rescale_average(b, node, y: Tensor, size: tuple, kernel: tuple, stride: tuple, pad: tuple, divisor) -> Tensor:
    """An average pool ``y`` (sums over the window, padding included, divided by its area) divided
    instead by ``divisor`` (divisor_override) or, without one, by the positions of each window
    inside the input (count_include_pad=False): times a constant [1, 1, oh, ow]."""
    area = kernel[0] * kernel[1]
    if divisor is not None:
        if not is_number(divisor) or divisor == 0:
            raise node_error(node, f"divisor_override={divisor!r} must be a nonzero number")
        return b.ff.scalar_multiply(y, area / float(divisor), name=node.name)
    counts = []
    for n, k, s, p, o in zip(size, kernel, stride, pad, y.dims[2:]):
        starts = np.arange(o) * s - p
        counts.append(np.minimum(starts + k, n) - np.maximum(starts, 0))
    inside = np.outer(counts[0], counts[1]).astype(np.float64)
    scale = (area / np.maximum(inside, 1)).astype(batch_dtype(y.data_type)).reshape(1, 1, *inside.shape)
    return b.ff.multiply(y, b.ff.create_constant(list(scale.shape), np.ascontiguousarray(scale), y.data_type),
                         name=node.name)


def ceil_extra(size: int, k: int, s: int, p: int) -> int:
    """How many positions past the padded end torch's ceil_mode windows reach: out = ceil((size + 2p
    - k) / s) + 1, less one when the last window would start in the right padding."""
    out = -(-(size + 2 * p - k) // s) + 1
    if (out - 1) * s >= size + p:
        out -= 1
    return max(0, (out - 1) * s + k - (size + 2 * p))


def ceil_pad(b, node, x: Tensor, extra: tuple[int, int]) -> Tensor:
    """``x`` extended at the bottom and right by ``extra`` rows and columns of the dtype's lowest
    number, which no max takes (every ceil_mode window holds an input position): max pooling with
    ceil_mode as FFModel's floor-rounded pool2d."""
    low = float(np.finfo(batch_dtype(x.data_type)).min)
    for ax, e in ((2, extra[0]), (3, extra[1])):
        if e:
            dims = list(x.dims)
            dims[ax] = e
            fill = b.ff.create_constant(dims, low, x.data_type)
            x = b.ff.concat([x, fill], ax, name=f"{node.name}.ceil_pad{ax}")
    return x


# ---- tensors made in forward, shapes -----------------------------------------------------------
def _full(b, node, ins, f):
    """torch.full(size, value) / zeros / ones made in forward: a constant of the model (fields: the
    sizes, the value; keyword ``dtype``, else int64 for an int value and float32 otherwise, as torch)."""
    sizes, value = f[0], f[1] if len(f) > 1 else 0.0
    sizes = list(sizes) if isinstance(sizes, (tuple, list)) else [sizes]
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):   # torch.zeros(x.size()): one traced size tuple
        sizes = list(sizes[0])
    if not sizes or any(not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in sizes):
        raise node_error(node, f"sizes {sizes} must be ints >= 1 (FFModel's tensors have at least one dimension)",
                         ShapeError)
    if not isinstance(value, (int, float)):
        raise node_error(node, f"the fill value must be a number, got {value!r}")
    check_size(node, math.prod(sizes), f"a tensor of sizes {sizes}")
    name = b.resolve(node, node.kw("dtype"))     # a name, or x.dtype read when built
    dtype = DTYPES.get(name) if name else (DataType.DT_BOOLEAN if isinstance(value, bool) else
                                           DataType.DT_INT64 if isinstance(value, int) else DataType.DT_FLOAT)
    if dtype is None:
        raise node_error(node, f"dtype {name!r} is not supported; valid: {', '.join(sorted(DTYPES))}")
    if dtype.is_floating and not math.isfinite(value):   # -inf where not a causal mask: the largest finite, said
        value = float(finite(node, np.asarray(value, dtype=np.float64), dtype))
    if dtype in ARRAY_TYPES:   # an array: what reads it folds (triu, comparisons, arithmetic), else a constant
        return np.full(sizes, value, dtype=dtype.numpy_name)
    return b.ff.create_constant(sizes, float(value), dtype)


def _unflatten(b, node, ins, f):
    """nn.Unflatten / Tensor.unflatten(dim, sizes): dimension ``dim`` viewed as ``sizes`` (one may be -1)."""
    x = b.tensor(node, ins[0])
    d = norm_axis(node, f[0], x.num_dims)
    sizes = shape_with_inferred(node, x.dims[d], list(f[1]) if isinstance(f[1], (tuple, list)) else [f[1]])
    return b.ff.reshape(x, [*x.dims[:d], *sizes, *x.dims[d + 1:]], name=node.name)


HANDLERS = {"INTERPOLATE": _interpolate, "CONV_TRANSPOSE2D": _conv_transpose2d, "GROUP_NORM": _group_norm,
            "VAR": _var, "REDUCE_L2": _reduce_l2, "CLAMP": _clamp,
            "LOG_SOFTMAX": _log_softmax, "LOGSUMEXP": _logsumexp, "SOFTPLUS": _softplus, "MISH": _softplus,
            "ABS": _abs, "PAD": _pad, "PRELU": _prelu,
            "EINSUM": _einsum, "FROZEN_BATCH_NORM": _frozen_batch_norm, "CONV1D": _conv1d, "POOL1D": _pool1d, "NORMALIZE": _normalize, "FULL": _full, "UNFLATTEN": _unflatten}
