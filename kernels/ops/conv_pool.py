"""Conv2D and Pool2D forwards and backwards (NCHW), array-module generic.

Both gather their windows the same way (``windows``): one strided slice of the padded input per
kernel offset (kh * kw slices, each [N, C, Ho, Wo]), so the code is plain slicing and works on NumPy
and CuPy alike. Convolution stacks the slices into im2col columns and multiplies them by the kernel
group by group in one batched matmul. The backwards add each offset's window gradient back into a
zero padded input through the same strided slices (``_add_windows``) and crop the padding off.
"""

from __future__ import annotations

from flexrt.errors import ShapeError
from flexrt.ir.enums import PoolType
from flexrt.ir.op_type import OpType
from flexrt.kernels.ops.activation import activation_grad, apply_activation
from flexrt.kernels.registry import register_backward, register_forward


def windows(xp, x, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, fill: float = 0.0):
    """The kh * kw strided views of padded ``x`` [N, C, H, W], offset (i, j) first, each [N, C, Ho, Wo]."""
    if ph or pw:
        x = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    h, w = x.shape[2], x.shape[3]
    if h < kh or w < kw:
        raise ShapeError(f"window {kh}x{kw} does not fit the padded input [{h}, {w}]")
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    return [x[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw] for i in range(kh) for j in range(kw)]


def _conv_cols(xp, attrs, x, k):
    """im2col columns [N, G, cg*kh*kw, Ho*Wo] of ``x`` for kernel ``k``, and (Ho, Wo)."""
    n, c = x.shape[0], x.shape[1]
    out, cg, kh, kw = k.shape
    g = attrs.groups
    if c != cg * g or out % g:
        raise ShapeError(f"conv2d: input channels {c} and kernel {list(k.shape)} do not match groups {g}")
    views = windows(xp, x, kh, kw, attrs.stride_h, attrs.stride_w, attrs.padding_h, attrs.padding_w)
    ho, wo = views[0].shape[2], views[0].shape[3]
    cols = xp.stack(views, axis=2).reshape(n, g, cg * kh * kw, ho * wo)
    return cols, ho, wo


def _add_windows(xp, dxp, grads, kh: int, kw: int, sh: int, sw: int, ho: int, wo: int):
    """Add the per-offset window gradients ``grads`` (kh * kw arrays [N, C, Ho, Wo], offset (i, j) at
    i * kw + j) into the padded input gradient ``dxp`` in place."""
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw] += grads[i * kw + j]


def _padded_zeros(xp, x, ph: int, pw: int):
    n, c, h, w = x.shape
    return xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=x.dtype)


def _crop(dxp, ph: int, pw: int):
    h, w = dxp.shape[2], dxp.shape[3]
    return dxp[:, :, ph:h - ph, pw:w - pw]


@register_forward(OpType.CONV2D)
def conv2d_forward(xp, attrs, operands):
    x, k = operands[0], operands[1]
    n = x.shape[0]
    out, cg, kh, kw = k.shape
    g = attrs.groups
    cols, ho, wo = _conv_cols(xp, attrs, x, k)                       # [N, G, cg*kh*kw, Ho*Wo]
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


@register_backward(OpType.CONV2D)
def conv2d_backward(xp, attrs, operands, outputs, grad_outputs):
    x, k = operands[0], operands[1]
    n, c = x.shape[0], x.shape[1]
    out, cg, kh, kw = k.shape
    g = attrs.groups
    cols, ho, wo = _conv_cols(xp, attrs, x, k)
    kern = k.reshape(g, out // g, cg * kh * kw)

    def pre():
        z = xp.matmul(kern[None], cols).reshape(n, out, ho, wo)
        return z + operands[2].reshape(1, out, 1, 1) if attrs.use_bias else z

    dy = activation_grad(xp, attrs.activation, outputs[0], grad_outputs[0], pre)
    dy4 = dy.reshape(n, g, out // g, ho * wo)
    dk = xp.matmul(dy4, xp.swapaxes(cols, -1, -2)).sum(axis=0).reshape(k.shape)   # [G, out/G, cg*kh*kw]
    dcols = xp.matmul(xp.swapaxes(kern, -1, -2)[None], dy4)                       # [N, G, cg*kh*kw, HoWo]
    dcols = dcols.reshape(n, c, kh * kw, ho, wo)
    ph, pw = attrs.padding_h, attrs.padding_w
    dxp = _padded_zeros(xp, x, ph, pw)
    _add_windows(xp, dxp, [dcols[:, :, o] for o in range(kh * kw)], kh, kw, attrs.stride_h, attrs.stride_w,
                 ho, wo)
    dx = _crop(dxp, ph, pw).copy()
    if attrs.use_bias:
        return dx, dk, dy.sum(axis=(0, 2, 3))
    return dx, dk


@register_backward(OpType.POOL2D)
def pool2d_backward(xp, attrs, operands, outputs, grad_outputs):
    (x,) = operands
    is_max = attrs.pool_type is PoolType.POOL_MAX
    kh, kw, sh, sw = attrs.kernel_h, attrs.kernel_w, attrs.stride_h, attrs.stride_w
    ph, pw = attrs.padding_h, attrs.padding_w
    views = windows(xp, x, kh, kw, sh, sw, ph, pw, fill=float("-inf") if is_max else 0.0)
    ho, wo = views[0].shape[2], views[0].shape[3]
    z = views[0].copy()
    for v in views[1:]:
        z = xp.maximum(z, v) if is_max else z + v
    if not is_max:
        z = z / x.dtype.type(kh * kw)
    dy = activation_grad(xp, attrs.activation, outputs[0], grad_outputs[0], lambda: z)
    if is_max:  # every window's gradient to its first maximal position
        taken = xp.zeros(z.shape, dtype=bool)
        grads = []
        zero = dy.dtype.type(0)
        for v in views:
            hit = (v == z) & ~taken
            taken = taken | hit
            grads.append(xp.where(hit, dy, zero))
    else:  # spread evenly over the kernel area, padding included (as the forward divides)
        share = dy / x.dtype.type(kh * kw)
        grads = [share] * (kh * kw)
    dxp = _padded_zeros(xp, x, ph, pw)
    _add_windows(xp, dxp, grads, kh, kw, sh, sw, ho, wo)
    return (_crop(dxp, ph, pw).copy(),)
