"""Activations FFModel has no layer for, built exactly from its element-wise layers; shared by the
front ends (PyTorch, ONNX, Keras), each of which names the parts after its own node or layer.

Every function takes the FFModel, the input tensor and ``name``: the parts are named
``{name}.{part}`` and the last layer ``name``. Each is exact in the forward and has the framework's
gradient off its kinks:

- ``capped_relu``: min(max(x, 0), cap) = relu(x) - relu(x - cap) (ReLU6: cap 6);
- ``leaky_relu``: relu(x) - slope * relu(-x);
- ``silu``: x * sigmoid(x) (Keras' swish);
- ``hard_sigmoid``: relu6(x + 3) / 6 (torch's and Keras 3's); ``hard_swish``: x * hard_sigmoid(x);
- ``absolute``: relu(x) + relu(-x) (gradient 0 at 0, as torch's);
- ``softplus``: log(1 + exp(beta x)) / beta as relu(y) + log(1 + exp(-|y|)), y = beta x: stable
  for every x;
- ``softsign``: x / (1 + |x|);
- ``elu``: FFModel's elu for alpha 1, else relu(x) + alpha (exp(min(x, 0)) - 1), min(x, 0) as
  -relu(-x); ``celu``: relu(x) + alpha (exp(min(x, 0) / alpha) - 1); ``selu``: torch's and Keras'
  scale 1.0507... times the elu of alpha 1.6732...;
- ``log1p``: log(1 + x);
- ``gelu_tanh``: GELU's tanh approximation (torch's ``approximate='tanh'``, GPT-2's ``gelu_new``,
  ONNX Gelu's ``approximate="tanh"``): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).

Boolean tensors (``DT_BOOLEAN``: a cast to it is ``x != 0``) take part through casts:

- ``logical_not``: (float(m) - 1) != 0;
- ``where``: b - b c + a c, c the condition as the operands' type: exactly ``a`` where it holds and
  ``b`` elsewhere, for finite values (0 * inf would be NaN); the gradients are c and 1 - c, as
  torch's (``masked_fill`` is where(mask, value, x)).

Entry points: the functions above.
"""

from __future__ import annotations

import math

from flexrt.ir.datatype import DataType


def capped_relu(ff, x, cap: float, name: str):
    return ff.subtract(ff.relu(x, name=f"{name}.relu"),
                       ff.relu(ff.scalar_sub(x, float(cap), name=f"{name}.minus_cap"), name=f"{name}.relu_minus_cap"),
                       name=name)


def leaky_relu(ff, x, slope: float, name: str):
    neg = ff.relu(ff.scalar_multiply(x, -1.0, name=f"{name}.neg"), name=f"{name}.relu_neg")
    return ff.subtract(ff.relu(x, name=f"{name}.relu"), ff.scalar_multiply(neg, float(slope), name=f"{name}.slope"),
                       name=name)


def silu(ff, x, name: str):
    return ff.multiply(x, ff.sigmoid(x, name=f"{name}.sigmoid"), name=name)


def hard_sigmoid(ff, x, name: str):
    h = capped_relu(ff, ff.scalar_add(x, 3.0, name=f"{name}.plus3"), 6.0, f"{name}.relu6")
    return ff.scalar_true_divide(h, 6.0, name=name)


def hard_swish(ff, x, name: str):
    return ff.multiply(x, hard_sigmoid(ff, x, f"{name}.hardsigmoid"), name=name)


def absolute(ff, x, name: str):
    neg = ff.relu(ff.scalar_multiply(x, -1.0, name=f"{name}.neg_in"), name=f"{name}.neg")
    return ff.add(ff.relu(x, name=f"{name}.pos"), neg, name=name)


def softplus(ff, x, beta: float, name: str):
    y = x if beta == 1 else ff.scalar_multiply(x, float(beta), name=f"{name}.beta")
    pos, neg = ff.relu(y, name=f"{name}.pos"), ff.relu(ff.scalar_multiply(y, -1.0, name=f"{name}.neg_in"),
                                                       name=f"{name}.neg")
    tail = ff.exp(ff.scalar_multiply(ff.add(pos, neg, name=f"{name}.abs"), -1.0, name=f"{name}.minus_abs"),
                  name=f"{name}.exp")
    sp = ff.add(pos, ff.log(ff.scalar_add(tail, 1.0, name=f"{name}.one_plus"), name=f"{name}.log"),
                name=name if beta == 1 else f"{name}.softplus")
    return sp if beta == 1 else ff.scalar_true_divide(sp, float(beta), name=name)


def softsign(ff, x, name: str):
    return ff.divide(x, ff.scalar_add(absolute(ff, x, f"{name}.abs"), 1.0, name=f"{name}.one_plus"), name=name)


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def elu(ff, x, alpha: float, name: str):
    if alpha == 1.0:
        return ff.elu(x, name=name)
    return _exp_below_zero(ff, x, float(alpha), 1.0, name)


def celu(ff, x, alpha: float, name: str):
    return _exp_below_zero(ff, x, float(alpha), 1.0 / float(alpha), name)


def selu(ff, x, name: str):
    return ff.scalar_multiply(_exp_below_zero(ff, x, SELU_ALPHA, 1.0, f"{name}.elu"), SELU_SCALE, name=name)


def _exp_below_zero(ff, x, alpha: float, inside: float, name: str):
    """relu(x) + alpha (exp(inside min(x, 0)) - 1)."""
    below = ff.scalar_multiply(ff.relu(ff.scalar_multiply(x, -1.0, name=f"{name}.neg_in"), name=f"{name}.neg"),
                               -inside, name=f"{name}.below")
    tail = ff.scalar_multiply(ff.scalar_sub(ff.exp(below, name=f"{name}.exp"), 1.0, name=f"{name}.expm1"), alpha,
                              name=f"{name}.alpha")
    return ff.add(ff.relu(x, name=f"{name}.pos"), tail, name=name)


def log1p(ff, x, name: str):
    return ff.log(ff.scalar_add(x, 1.0, name=f"{name}.one_plus"), name=name)


def gelu_tanh(ff, x, name: str):
    cube = ff.pow(x, 3.0, name=f"{name}.cube")
    inner = ff.add(x, ff.scalar_multiply(cube, 0.044715, name=f"{name}.cubic"), name=f"{name}.inner")
    t = ff.tanh(ff.scalar_multiply(inner, math.sqrt(2.0 / math.pi), name=f"{name}.scaled"), name=f"{name}.tanh")
    half = ff.scalar_multiply(ff.scalar_add(t, 1.0, name=f"{name}.one_plus"), 0.5, name=f"{name}.half")
    return ff.multiply(x, half, name=name)


def logical_not(ff, m, name: str):
    """Not ``m`` (a boolean tensor): (float(m) - 1) cast to boolean."""
    f = ff.cast(m, DataType.DT_FLOAT, name=f"{name}.float")
    return ff.cast(ff.scalar_sub(f, 1.0, name=f"{name}.minus_one"), DataType.DT_BOOLEAN, name=name)


def where(ff, cond, a, b, name: str, dtype=None):
    """``a`` where the boolean ``cond`` holds, else ``b`` (tensors of one floating type, or finite
    numbers; two numbers need ``dtype``): b - b c + a c, c the condition as that type."""
    numbers = [v for v in (a, b) if isinstance(v, (int, float))]
    if any(not math.isfinite(v) for v in numbers) or len(numbers) == 2 and dtype is None:
        raise ValueError(f"where needs finite numbers (and a dtype for two), got {a!r} and {b!r}")
    dtype = dtype or next(v.data_type for v in (a, b) if not isinstance(v, (int, float)))
    c = ff.cast(cond, dtype, name=f"{name}.cond")
    if len(numbers) == 2:     # b + (a - b) c
        return ff.scalar_add(ff.scalar_multiply(c, float(a) - float(b), name=f"{name}.then"), float(b), name=name)

    def times_c(v, part):
        return ff.scalar_multiply(c, float(v), name=f"{name}.{part}") if isinstance(v, (int, float)) else \
            ff.multiply(v, c, name=f"{name}.{part}")
    if isinstance(b, (int, float)):
        rest = ff.scalar_add(times_c(-b, "else_masked"), float(b), name=f"{name}.else")
    else:
        rest = ff.subtract(b, times_c(b, "else_masked"), name=f"{name}.else")
    return ff.add(rest, times_c(a, "then"), name=name)
