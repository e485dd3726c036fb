"""Conv2D and Pool2D forwards (NCHW), array-module generic.

Both gather their windows the same way (``windows``): one strided slice of the padded input per
kernel offset (kh * kw slices, each [N, C, Ho, Wo]), so the code is plain slicing and works on NumPy
and CuPy alike. Convolution stacks the slices into im2col columns and multiplies them by the kernel
group by group in one batched matmul.
"""

from __future__ import annotations

from flexrt.errors import ShapeError
from flexrt.ir.enums import PoolType
from flexrt.ir.op_type import OpType
from flexrt.kernels.ops.activation import apply_activation
from flexrt.kernels.registry import register_forward


def windows(xp, x, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, fill: float = 0.0):
    """The kh * kw strided views of padded ``x`` [N, C, H, W], offset (i, j) first, each [N, C, Ho, Wo]."""
    if ph or pw:
        x = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    h, w = x.shape[2], x.shape[3]
    if h < kh or w < kw:
        raise ShapeError(f"window {kh}x{kw} does not fit the padded input [{h}, {w}]")
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    return [x[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw] for i in range(kh) for j in range(kw)]


@register_forward(OpType.CONV2D)
def conv2d_forward(xp, attrs, operands):
    x, k = operands[0], operands[1]
    n, c = x.shape[0], x.shape[1]
    out, cg, kh, kw = k.shape
    g = attrs.groups
    if c != cg * g or out % g:
        raise ShapeError(f"conv2d: input channels {c} and kernel {list(k.shape)} do not match groups {g}")
    views = windows(xp, x, kh, kw, attrs.stride_h, attrs.stride_w, attrs.padding_h, attrs.padding_w)
    ho, wo = views[0].shape[2], views[0].shape[3]
    cols = xp.stack(views, axis=2)                                   # [N, C, kh*kw, Ho, Wo]
    cols = cols.reshape(n, g, cg * kh * kw, ho * wo)                 # channel-major, as the kernel
    kern = k.reshape(g, out // g, cg * kh * kw)
    y = xp.matmul(kern[None], cols).reshape(n, out, ho, wo)          # [N, G, out/G, Ho*Wo]
    if attrs.use_bias:
        y = y + operands[2].reshape(1, out, 1, 1)
    return (apply_activation(xp, attrs.activation, y),)


@register_forward(OpType.POOL2D)
def pool2d_forward(xp, attrs, operands):
    (x,) = operands
    is_max = attrs.pool_type is PoolType.POOL_MAX
    views = windows(xp, x, attrs.kernel_h, attrs.kernel_w, attrs.stride_h, attrs.stride_w,
                    attrs.padding_h, attrs.padding_w, fill=float("-inf") if is_max else 0.0)
    y = views[0].copy()
    for v in views[1:]:
        y = xp.maximum(y, v) if is_max else y + v
    if not is_max:
        y = y / x.dtype.type(attrs.kernel_h * attrs.kernel_w)  # counts the padding (cuDNN INCLUDE_PADDING)
    return (apply_activation(xp, attrs.activation, y),)
