"""Build FFModel layers from ``IRNode``s: the one mapping of the PyTorch and ONNX front ends.

``flexrt.torch`` turns a torch.fx trace (or FlexFlow's text file) into IR nodes and
``flexrt.onnx`` turns an ONNX graph into the same nodes; ``build`` walks them in order and calls
FFModel's layer methods. A node's value is a ``Tensor``, a Python number or tuple (sizes, shapes),
a list of Tensors (split), or a tuple ``(Tensor, None)`` (attention: output, unused weights). Layer
names are the node names (``{name}.{part}`` for the extra layers of one node); an operator with
no FFModel equivalent raises ``ConfigError`` naming the node and where it came from.

Entry points: ``build``, ``DTYPES``, ``node_error``.
"""

from __future__ import annotations

import math
import operator

import numpy as np
from collections.abc import Callable, Sequence
from typing import Any

from flexrt.errors import ConfigError, FlexrtError, FrontendWarning, ShapeError, warn_caller
from flexrt.ir.datatype import DataType
from flexrt.ir.enums import ActiMode, AggrMode, PoolType
from flexrt.ir.ops import BatchNormAttrs
from flexrt.model import composites
from flexrt.model.tensor import Tensor
from flexrt.torch._composites import HANDLERS as COMPOSITES
from flexrt.torch._recurrent import HANDLERS as RECURRENT
from flexrt.torch._values import ARRAY_TYPES, HANDLERS as VALUES, READS_ARRAYS, TypeInfo
from flexrt.torch._windows import HANDLERS as WINDOWS, READS_ARRAYS as WINDOW_READS_ARRAYS, strided
from flexrt.torch._composites import (ceil_extra, ceil_pad, gather, reduce_max, resample, rescale_average,
                                     window_matrix)
from flexrt.torch._build_base import (DTYPES, FLOATS, _Builder, check_size, norm_axis, describe, flag, is_number,
                                     node_error, shape_with_inferred, split_sizes)
from flexrt.torch._ir import IRNode

__all__ = ["apply_op", "build", "DTYPES", "node_error", "shape_with_inferred", "split_sizes"]


# ---- handlers: (builder, node, inputs, fields) -> value ------------------------------------------
def _shared(b: _Builder, node: IRNode) -> str | None:
    return node.kw("shares")


def _check_features(node, x: Tensor, key: str, dim: int) -> None:
    """Warn when a layer's declared input size (``in_features``, ``in_channels``) is not its input's.
    FlexFlow's front ends build the layer from its input and ignore the declared size (FFModel's
    dense and conv2d take no input size), so flexrt builds it the same way; the source's weights for
    that layer no longer fit, and ``load_weights`` refuses them by name."""
    want = node.kw(key)
    if want is not None and x.dims[dim] != want:
        where = f" at {node.origin}" if node.origin else ""
        warn_caller(f"node '{node.name}' ({node.op}){where}: declares {key}={want}, but its input {list(x.dims)} has "
                    f"{x.dims[dim]}; built from the input's size as FlexFlow does (the source's weights for this "
                    f"layer do not fit it)", FrontendWarning)


def _linear(b, node, ins, f):
    x = b.tensor(node, ins[0])
    _check_features(node, x, "in_features", -1)
    out_dim, acti, use_bias = (list(f) + [None, ActiMode.AC_MODE_NONE.value, 1])[:3]
    return b.ff.dense(x, out_dim, ActiMode(acti), flag(node, use_bias, "use_bias (the third field)"),
                      shared_op=_shared(b, node), name=node.name)


def _conv2d(b, node, ins, f):
    x = b.tensor(node, ins[0])
    if len(f) < 10:
        raise node_error(node, f"needs 10 fields (out_channels, kernel_h, kernel_w, stride_h, stride_w, padding_h, "
                               f"padding_w, activation, groups, use_bias), got {len(f)}")
    oc, kh, kw, sh, sw, ph, pw, acti, groups, use_bias = f[:10]
    _check_features(node, x, "in_channels", 1)
    return b.ff.conv2d(x, oc, kh, kw, sh, sw, ph, pw, ActiMode(acti), groups,
                       flag(node, use_bias, "use_bias (the tenth field)"), shared_op=_shared(b, node), name=node.name)


def _pair_of(node, v) -> tuple[int, int]:
    """A pooling size (an int or two) resolved from traced sizes."""
    pair = (v, v) if isinstance(v, int) else tuple(v) if isinstance(v, (tuple, list)) else None
    if pair is None or len(pair) != 2 or not all(isinstance(d, int) and not isinstance(d, bool) for d in pair):
        raise node_error(node, f"a pooling size must be an int or two, got {v!r}", ShapeError)
    return pair


def _pool2d(b, node, ins, f):
    x = b.tensor(node, ins[0])
    if x.num_dims != 4:
        raise node_error(node, f"pooling needs an NCHW input, got {list(x.dims)}", ShapeError)
    pool_type = PoolType(f[3]) if len(f) > 3 else PoolType.POOL_MAX
    acti = ActiMode(f[4]) if len(f) > 4 else ActiMode.AC_MODE_NONE
    h, w = x.dims[2:]
    out = b.resolve(node, node.kw("output_size"))
    if out is not None:   # adaptive pooling: a pool2d where windows tile the input evenly
        oh, ow = (out, out) if isinstance(out, int) else (out[0] or h, out[1] or w)
        if h % oh or w % ow:
            if pool_type is PoolType.POOL_AVG and acti is ActiMode.AC_MODE_NONE:
                return resample(b, node, x, {2: window_matrix(h, oh), 3: window_matrix(w, ow)}, node.name)
            raise node_error(node, f"adaptive max pooling to {oh}x{ow} of a {h}x{w} input has uneven windows, which "
                                   f"FFModel.pool2d cannot express; valid output sizes divide {h} and {w}", ShapeError)
        kh, kw, sh, sw, ph, pw = h // oh, w // ow, h // oh, w // ow, 0, 0
    else:
        kh, sh, ph = f[0], f[1], f[2]
        kw, sw, pw = node.kw("kernel_w", kh), node.kw("stride_w", sh), node.kw("padding_w", ph)
        if node.kw("kernel") is not None:   # sizes read from the tensor when traced
            (kh, kw), (ph, pw) = (_pair_of(node, b.resolve(node, node.kw(k))) for k in ("kernel", "padding"))
            stride = node.kw("stride")
            sh, sw = (kh, kw) if stride is None else _pair_of(node, b.resolve(node, stride))
        extra = (ceil_extra(h, kh, sh, ph), ceil_extra(w, kw, sw, pw)) if node.kw("ceil_mode", False) else (0, 0)
        if any(extra):
            if pool_type is not PoolType.POOL_MAX:
                raise node_error(node, f"average pooling with ceil_mode=True here reaches {extra} positions past the "
                                       f"padded input, where torch divides by fewer positions than FFModel.pool2d; "
                                       f"use ceil_mode=False or an input size where both round alike", ShapeError)
            x = ceil_pad(b, node, x, extra)
    divisor, exclude = node.kw("divisor"), node.kw("exclude_pad", False) and (ph or pw)
    if pool_type is not PoolType.POOL_AVG or not exclude and divisor is None:
        return b.ff.pool2d(x, kh, kw, sh, sw, ph, pw, pool_type, acti, name=node.name)
    if acti is not ActiMode.AC_MODE_NONE or exclude and any(extra):
        raise node_error(node, "average pooling dividing by other than its window (count_include_pad=False or "
                               "divisor_override) with a fused activation or ceil_mode windows past the input")
    y = b.ff.pool2d(x, kh, kw, sh, sw, ph, pw, pool_type, acti, name=f"{node.name}.window")
    return rescale_average(b, node, y, (h, w), (kh, kw), (sh, sw), (ph, pw), divisor)


def _batch_norm(b, node, ins, f):
    x = b.tensor(node, ins[0])
    eps = node.kw("eps", 1e-5)
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0 < eps < 1):
        raise node_error(node, f"eps={eps!r}: must be a number between 0 and 1")
    image = x.num_dims == 3      # BatchNorm1d of [N, C, L]: the same statistics over [N, C, L, 1]
    t = b.ff.reshape(x, [*x.dims, 1], name=f"{node.name}.image") if image else x
    # FFModel.batch_norm takes only relu; eps is the operator's own attribute (as Keras' epsilon)
    y = b.ff.batch_norm(t, relu=False, name=node.name) if eps == 1e-5 else \
        b.ff._add_layer("batch_norm", BatchNormAttrs(relu=False, eps=float(eps)), [t], node.name).outputs[0]
    return b.ff.reshape(y, list(x.dims), name=f"{node.name}.back") if image else y


def _layer_norm(b, node, ins, f):
    x = b.tensor(node, ins[0])
    shape = node.kw("shape", (x.dims[-1],))
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if tuple(x.dims[len(x.dims) - len(shape):]) != shape:
        raise node_error(node, f"normalized shape {list(shape)} is not the trailing shape of input {list(x.dims)}",
                         ShapeError)
    axes = list(range(x.num_dims - len(shape), x.num_dims))
    return b.ff.layer_norm(x, axes, bool(node.kw("affine", True)), node.kw("eps", 1e-5),
                           bool(node.kw("bias", True)), name=node.name)


def _embedding(b, node, ins, f):
    x = b.tensor(node, ins[0])
    if x.data_type not in (DataType.DT_INT32, DataType.DT_INT64):
        raise node_error(node, f"embedding indices must be integers (DT_INT32 or DT_INT64), got {x.data_type.name}")
    aggr = node.kw("aggr")   # an EmbeddingBag's: sum or avg over the last index dimension (the bag)
    if aggr not in (None, "sum", "avg"):
        raise node_error(node, f"aggr={aggr!r}; valid: sum, avg")
    if aggr is not None and x.num_dims != 2:
        raise node_error(node, f"a bag of embeddings takes [batch, bag] indices, got {list(x.dims)}", ShapeError)
    mode = {None: AggrMode.AGGR_MODE_NONE, "sum": AggrMode.AGGR_MODE_SUM, "avg": AggrMode.AGGR_MODE_AVG}[aggr]
    return b.ff.embedding(x, f[0], f[1], mode, shared_op=_shared(b, node), name=node.name)


def _stack(b, node, ins, f):
    """torch.stack: each tensor given the new dimension, then concatenated along it."""
    ts = [b.tensor(node, t, f"tensor {i}") for i, t in enumerate(ins)]
    dim = f[0] if f else 0
    rank = ts[0].num_dims + 1
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise node_error(node, f"dimension {dim!r} is out of range for the stacked rank {rank}", ShapeError)
    dim %= rank
    parts = [b.ff.reshape(t, [*t.dims[:dim], 1, *t.dims[dim:]], name=f"{node.name}.part{i}") for i, t in enumerate(ts)]
    return parts[0] if len(parts) == 1 else b.ff.concat(parts, dim, name=node.name)


def _softmax(b, node, ins, f):
    x = b.tensor(node, ins[0])
    dim = b.resolve(node, node.kw("dim", -1))
    if dim == "implicit":   # torch's softmax without dim (F._get_softmax_dim)
        dim = 0 if x.num_dims in (0, 1, 3) else 1
    return b.ff.softmax(x, norm_axis(node, dim, x.num_dims), name=node.name,
                        causal=bool(node.kw("causal", False)))


def _parameter(b, node, ins, f):
    """A parameter the module reads directly, of shape ``f``: a bias-free dense layer (named after the
    node; its kernel [1, n] holds the values) of the constant 1, reshaped (``{node}.shape``). Its
    gradient is the parameter's, exactly; a second read of the parameter shares the layer's kernel."""
    if not f or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in f):
        raise node_error(node, f"a parameter's shape must be sizes >= 1, got {f}", ShapeError)
    dtype = DTYPES.get(node.kw("dtype") or "", DataType.DT_FLOAT)
    one = b.ff.create_constant([1, 1], 1.0, dtype)
    flat = b.ff.dense(one, math.prod(f), use_bias=False, shared_op=_shared(b, node), name=node.name)
    return b.ff.reshape(flat, list(f), name=f"{node.name}.shape")


def _constant(b, node, ins, f):
    """An array constant (a buffer the module reads, an ONNX constant operand): its values, made a
    constant of the model where a layer reads it (``_Builder.constant``), read as values by an index."""
    return np.asarray(f[0])


def _arange(b, node, ins, f):
    """torch.arange(start, end, step) as a constant of the model (FFModel.create_constant of the
    array): GPT's positions. Integer bounds give int64, as torch's."""
    if len(f) != 3 or not all(is_number(v) for v in f) or f[2] == 0:
        raise node_error(node, f"arange needs numbers start, end and a step != 0, got {f}")
    dtype = DTYPES.get(node.kw("dtype") or "", DataType.DT_INT64 if all(isinstance(v, int) for v in f)
                       else DataType.DT_FLOAT)
    check_size(node, max(0, math.ceil((f[1] - f[0]) / f[2])), f"arange({', '.join(map(str, f))})")
    values = np.arange(*f)
    if values.size == 0:
        raise node_error(node, f"arange({', '.join(map(str, f))}) is empty", ShapeError)
    if dtype in ARRAY_TYPES:   # an array: what reads it folds (comparisons, arithmetic), else a constant of the model
        return values.astype(dtype.numpy_name)
    return b.ff.create_constant([int(values.size)], values, dtype)


def _dropout(b, node, ins, f):
    return b.ff.dropout(b.tensor(node, ins[0]), float(f[0]) if f else 0.5, node.kw("seed", 0), name=node.name)


def _flat(b, node, ins, f):
    x = b.tensor(node, ins[0])
    r = x.num_dims
    start, end = norm_axis(node, node.kw("start_dim", 1), r), norm_axis(node, node.kw("end_dim", -1), r)
    if start == 1 and end == r - 1 and r == 4:
        return b.ff.flat(x, name=node.name)
    if start >= end:
        return x
    dims = list(x.dims[:start]) + [math.prod(x.dims[start:end + 1])] + list(x.dims[end + 1:])
    return b.ff.reshape(x, dims, name=node.name)


_UNARY = {"RELU": "relu", "IDENTITY": "identity", "GELU": "gelu", "SIGMOID": "sigmoid", "TANH": "tanh",
          "EXP": "exp", "LOG": "log", "SIN": "sin", "COS": "cos", "RSQRT": "rsqrt", "SQRT": "pow"}
_PY_UNARY = {"RELU": lambda v: max(v, 0), "IDENTITY": lambda v: v, "EXP": math.exp, "LOG": math.log, "SIN": math.sin,
             "COS": math.cos, "TANH": math.tanh, "RSQRT": lambda v: 1 / math.sqrt(v), "SQRT": math.sqrt,
             "CEIL": math.ceil, "FLOOR": math.floor}


_NUMPY_UNARY = {"RELU": lambda v: np.maximum(v, 0), "IDENTITY": lambda v: v, "EXP": np.exp, "LOG": np.log,
                "SIN": np.sin, "COS": np.cos, "TANH": np.tanh, "RSQRT": lambda v: 1 / np.sqrt(v), "SQRT": np.sqrt,
                "SIGMOID": lambda v: 1 / (1 + np.exp(-v))}


def _unary(b, node, ins, f):
    x = ins[0] if ins else None
    if isinstance(x, (int, float)) and node.op in _PY_UNARY:
        return _PY_UNARY[node.op](x)
    if isinstance(x, np.ndarray):     # a constant made in forward (XCiT's positions): folded, float32 as torch
        if node.op not in _NUMPY_UNARY:
            x = b.constant(x, node)
        else:
            out = _NUMPY_UNARY[node.op](x if x.dtype.kind == "f" else x.astype(np.float32))
            return out if node.op in ("RELU", "IDENTITY") and x.dtype.kind != "f" else out.astype(
                x.dtype if x.dtype.kind == "f" else np.float32)
    if node.op in ("CEIL", "FLOOR"):   # math.ceil(H / stride): sizes only
        raise node_error(node, f"math.{node.op.lower()} of {describe(x)}: valid on sizes (numbers) only")
    if node.op == "SQRT":   # FFModel has no sqrt layer: x ** 0.5
        return b.ff.pow(b.tensor(node, x), 0.5, name=node.name)
    return getattr(b.ff, _UNARY[node.op])(b.tensor(node, x), name=node.name)


def _composite(b, node, ins, f):
    """SiLU, ReLU6, Hardsigmoid, Hardswish (MobileNet, EfficientNet), LeakyReLU, ELU of any alpha,
    CELU, SELU, Softsign, log1p and GLU, which FFModel has no layer for (or an ELU of alpha 1 only),
    from its element-wise layers (``flexrt.model.composites``); the layers are named
    ``{node}.{part}``, the last one ``{node}``."""
    ff, x, name = b.ff, b.tensor(node, ins[0] if ins else None), node.name
    if node.op == "LEAKY_RELU":   # the slope: a field
        slope = f[0] if f else 0.01
        if not is_number(slope):
            raise node_error(node, f"the negative slope must be a number, got {slope!r}")
        return composites.leaky_relu(ff, x, float(slope), name)
    if node.op == "RELU6":
        return composites.capped_relu(ff, x, 6.0, name)
    if node.op in ("ELU", "CELU"):   # alpha: a field (1 when absent)
        alpha = f[0] if f else 1.0
        if not is_number(alpha) or (node.op == "CELU" and alpha == 0):
            raise node_error(node, f"alpha must be a number{' other than 0' if node.op == 'CELU' else ''}, got "
                                   f"{alpha!r}")
        return (composites.elu if node.op == "ELU" else composites.celu)(ff, x, float(alpha), name)
    if node.op == "GLU":            # the halves along dim (a field, -1 when absent): a * sigmoid(b)
        dim = norm_axis(node, f[0] if f else -1, x.num_dims)
        if x.dims[dim] % 2:
            raise node_error(node, f"glu halves dimension {dim} of {list(x.dims)}, which is odd", ShapeError)
        a, g = ff.split(x, [x.dims[dim] // 2] * 2, dim, name=f"{name}.halves")
        return ff.multiply(a, ff.sigmoid(g, name=f"{name}.gate"), name=name)
    return {"SILU": composites.silu, "HARDSIGMOID": composites.hard_sigmoid, "HARDSWISH": composites.hard_swish,
            "SELU": composites.selu, "SOFTSIGN": composites.softsign, "LOG1P": composites.log1p,
            "GELU_TANH": composites.gelu_tanh}[node.op](ff, x, name)


_COMPOSITE = ("SILU", "RELU6", "HARDSIGMOID", "HARDSWISH", "LEAKY_RELU", "ELU", "CELU", "SELU", "SOFTSIGN", "LOG1P",
              "GELU_TANH", "GLU")


# binary op -> (FFModel method, Python operator, scalar method, reversed scalar form)
_BINARY = {"ADD": ("add", operator.add), "SUBTRACT": ("subtract", operator.sub), "MULTIPLY": ("multiply", operator.mul),
           "DIVIDE": ("divide", operator.truediv), "MAX": ("max", max), "MIN": ("min", min)}
_SCALAR = {"SCALAR_ADD": "ADD", "SCALAR_SUB": "SUBTRACT", "SCALAR_MULTIPLY": "MULTIPLY", "SCALAR_TRUEDIV": "DIVIDE",
           "SCALAR_FLOORDIV": "FLOORDIV", "SCALAR_MOD": "MOD"}
# arithmetic of sizes only (Swin's padding: (w - H % w) % w): no FFModel layer computes it on tensors
_SIZE_ONLY = {"FLOORDIV": operator.floordiv, "MOD": operator.mod}


def _promoted(b, node, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """torch's type promotion of an integer (or bool) tensor meeting a floating one: the integer one
    cast to the floating type (a padding mask times the hidden states)."""
    fx_, fy = x.data_type in FLOATS, y.data_type in FLOATS
    if fx_ == fy:
        return x, y
    if fx_:
        return x, b.ff.cast(y, x.data_type, name=f"{node.name}.promote")
    return b.ff.cast(x, y.data_type, name=f"{node.name}.promote"), y


def _scalar_promoted(b, node, x: Tensor, s, op: str = "") -> Tensor:
    """torch's promotion of a tensor meeting a Python number: a boolean one takes the number's kind
    (float32 for a float, int64 for an int), an integer one meeting a float, or divided, is float32."""
    if op == "DIVIDE" and x.data_type not in FLOATS:
        want = DataType.DT_FLOAT
    elif x.data_type is DataType.DT_BOOLEAN:
        want = DataType.DT_FLOAT if isinstance(s, float) else DataType.DT_INT64
    elif x.data_type not in FLOATS and isinstance(s, float):
        want = DataType.DT_FLOAT
    else:
        return x
    return b.ff.cast(x, want, name=f"{node.name}.promote")


def _scalar_op(b, node, op: str, x, s, reverse: bool):
    """``x op s`` (``s op x`` when ``reverse``) for a tensor ``x`` and a number ``s``."""
    if op in _SIZE_ONLY:
        raise node_error(node, f"{op.lower()} of a tensor has no FFModel layer; valid: {op.lower()} of sizes")
    ff = b.ff
    if op == "ADD":
        return ff.scalar_add(x, s, name=node.name)
    if op == "MULTIPLY":
        return ff.scalar_multiply(x, s, name=node.name)
    if op == "SUBTRACT" and not reverse:
        return ff.scalar_sub(x, s, name=node.name)
    if op == "SUBTRACT":   # s - x = (-1) * x + s
        return ff.scalar_add(ff.scalar_multiply(x, -1.0, name=f"{node.name}.neg"), s, name=node.name)
    if op == "DIVIDE" and not reverse:
        return ff.scalar_true_divide(x, s, name=node.name)
    if op == "DIVIDE":     # s / x = s * x^-1
        return ff.scalar_multiply(ff.pow(x, -1.0, name=f"{node.name}.reciprocal"), s, name=node.name)
    raise node_error(node, f"{op} of a tensor and a number has no FFModel layer")


def _binary(b, node, ins, f):
    scalar = node.op in _SCALAR
    op = _SCALAR[node.op] if scalar else node.op
    if scalar:
        if len(ins) != 1 or len(f) != 1:
            raise node_error(node, f"takes one input and one scalar field, got {len(ins)} input(s), fields {f}")
        x, y = ins[0], f[0]
        if node.kw("reverse", False):
            x, y = y, x
    else:
        if len(ins) != 2:
            raise node_error(node, f"takes two inputs, got {len(ins)}")
        x, y = ins
    if is_number(x) and is_number(y):
        py = _SIZE_ONLY.get(op) or _BINARY[op][1]
        return py(x, y)
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        if all(isinstance(v, np.ndarray) or is_number(v) or isinstance(v, bool) for v in (x, y)):
            return _fold(node, op, x, y)             # constants made in forward (a mask, positions): folded
        x, y = b.constant(x, node), b.constant(y, node)
    if op == "ADD" and isinstance(x, tuple) and isinstance(y, tuple):   # sizes: x.size()[:-1] + (h, d)
        return x + y
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        if op in _SIZE_ONLY:
            raise node_error(node, f"{op.lower()} of tensors has no FFModel layer; valid: {op.lower()} of sizes")
        x, y = _promoted(b, node, x, y)
        if op == "DIVIDE" and x.data_type not in FLOATS:     # torch's true division of integers: float32
            x, y = (b.ff.cast(t, DataType.DT_FLOAT, name=f"{node.name}.{w}_float") for t, w in ((x, "x"), (y, "y")))
        return getattr(b.ff, _BINARY[op][0])(x, y, name=node.name)
    if isinstance(x, Tensor) and is_number(y):
        return _scalar_op(b, node, op, _scalar_promoted(b, node, x, y, op), float(y), False)
    if is_number(x) and isinstance(y, Tensor):
        if op in ("ADD", "MULTIPLY"):
            return _scalar_op(b, node, op, _scalar_promoted(b, node, y, x, op), float(x), False)
        return _scalar_op(b, node, op, _scalar_promoted(b, node, y, x, op), float(x), True)
    raise node_error(node, f"operands must be tensors or numbers, got {describe(x)} and {describe(y)}")


_NUMPY_BINARY = {"ADD": np.add, "SUBTRACT": np.subtract, "MULTIPLY": np.multiply, "DIVIDE": np.true_divide,
                 "MAX": np.maximum, "MIN": np.minimum, "FLOORDIV": np.floor_divide, "MOD": np.mod}


def _fold(node, op: str, x, y) -> np.ndarray:
    """x op y of constants, as torch computes it: a bool meeting a number is that number's type, an
    integer array divided is floating (float32, torch's default), integers stay integers."""
    xa, ya = (np.asarray(v) if isinstance(v, np.ndarray) else v for v in (x, y))
    arrays = [v for v in (xa, ya) if isinstance(v, np.ndarray)]
    out = _NUMPY_BINARY[op](xa, ya)
    if out.dtype == np.float64 and all(a.dtype != np.float64 for a in arrays):
        out = out.astype(np.float32)       # a float32 array (or integers divided) meeting a Python number
    check_size(node, out.size, "a folded constant")
    return out


def _concat(b, node, ins, f):
    ts = [b.tensor(node, t, f"input {i}") for i, t in enumerate(ins)]
    axis = f[0] if f else 1
    return b.ff.concat(ts, norm_axis(node, axis, ts[0].num_dims), name=node.name)


def _split(b, node, ins, f):
    x = b.tensor(node, ins[0])
    axis = norm_axis(node, f[0] if f else 0, x.num_dims)
    size = x.dims[axis]
    sizes = split_sizes(node, size, split_size=b.resolve(node, node.kw("split_size")),
                        sections=b.resolve(node, node.kw("sections")), chunks=b.resolve(node, node.kw("chunks")),
                        pieces=len(node.outputs))
    if len(sizes) == 1:
        return [x]
    return b.ff.split(x, sizes, axis, name=node.name)


def _unbind(b, node, ins, f):
    """The pieces of size 1 along a dimension, each without it."""
    x = b.tensor(node, ins[0])
    axis = norm_axis(node, f[0] if f else 0, x.num_dims)
    pieces = [x] if x.dims[axis] == 1 else b.ff.split(x, [1] * x.dims[axis], axis, name=f"{node.name}.pieces")
    shape = list(x.dims[:axis]) + list(x.dims[axis + 1:])
    return [b.ff.reshape(p, shape, name=f"{node.name}.{i}") for i, p in enumerate(pieces)]


def _additive_mask(b, node, ins, f):
    """Attention scores plus a floating mask (scaled_dot_product_attention's attn_mask that is not
    causal: a relative position bias); a boolean mask (True where a query may look) is refused."""
    scores, mask = (b.tensor(node, t, what) for t, what in zip(ins, ("the scores", "attn_mask")))
    if mask.data_type not in FLOATS:
        raise node_error(node, f"attn_mask of {mask.data_type.name}: flexrt adds a floating attn_mask to the "
                               f"scores; a boolean one (True where a query may look) maps only as a causal mask")
    return b.ff.add(scores, mask, name=node.name)


def _roll(b, node, ins, f):
    """torch.roll: along each dimension, the last ``shift`` positions moved first (a split and a
    concat of the two parts)."""
    x = b.tensor(node, ins[0])
    for k, (shift, dim) in enumerate(zip(b.resolve(node, f[0]), f[1])):
        d = norm_axis(node, dim, x.num_dims)
        size = x.dims[d]
        if not is_number(shift):
            raise node_error(node, f"a shift must be a number, got {describe(shift)}")
        s = int(shift) % size
        if s:
            head, tail = b.ff.split(x, [size - s, s], d, name=f"{node.name}.cut{k}")
            x = b.ff.concat([tail, head], d, name=f"{node.name}.{k}" if k < len(f[1]) - 1 else node.name)
    return x


def _getitem(b, node, ins, f):
    x = ins[0]
    index = f[0] if len(f) == 1 else tuple(f)
    if isinstance(x, tuple) and isinstance(index, slice):   # sizes: x.size()[2:]
        return x[index]
    if isinstance(x, (list, tuple)):
        if not isinstance(index, int) or not -len(x) <= index < len(x):
            raise node_error(node, f"index {index!r} is out of range for a value of {len(x)} items")
        v = x[index]
        if v is None and node.outputs:
            raise node_error(node, "reads a value no FFModel layer computes (attention weights: call "
                                   "MultiheadAttention with need_weights=False or leave its second output unused)")
        return v
    index = index if isinstance(index, tuple) else (index,)
    if isinstance(x, np.ndarray):   # an index of an array constant: its values (a mask's rows)
        return x[tuple(np.asarray(i) if isinstance(i, tuple) else i for i in index)]
    if any(isinstance(i, (np.ndarray, tuple)) for i in index):   # x[:, rows, cols]: a gather by constants
        return gather(b, node, b.tensor(node, b.constant(x, node)), index)
    return _slice_tensor(b, node, b.tensor(node, x), index)


def _slice_tensor(b, node, x: Tensor, index: tuple) -> Tensor:
    """Basic indexing of a tensor: ``:``, ``None`` (a new dimension), ``...``, ints and unit-step slices."""
    if index.count(Ellipsis) > 1:
        raise node_error(node, "at most one ... in an index")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > x.num_dims:
        raise node_error(node, f"index {index} has {used} entries for a tensor of rank {x.num_dims}", ShapeError)
    if Ellipsis in index:      # ... stands for the dimensions the other entries leave
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.num_dims - used) + index[k + 1:]
    else:                      # trailing dimensions not indexed are whole
        index = index + (slice(None),) * (x.num_dims - used)
    out, dim, shape, parts = x, 0, [], 0
    for item in index:
        if item is None:
            shape.append(1)
            continue
        size = x.dims[dim]
        if isinstance(item, int) and not isinstance(item, bool):
            if not -size <= item < size:
                raise node_error(node, f"index {item} is out of range for dimension {dim} of size {size}", ShapeError)
            lo, hi, keep = item % size, item % size + 1, False
        elif isinstance(item, slice) and (item.step is None or is_number(item.step) and item.step >= 1):
            lo, hi, step = item.indices(size)
            keep = True
            if hi <= lo:
                raise node_error(node, f"slice {item} of dimension {dim} (size {size}) is empty", ShapeError)
            if step > 1:     # x[..., lo:hi:step]: Swin's patch merging takes every second row
                parts += 1
                out = strided(b, node, out, dim, lo, step, len(range(lo, hi, step)), parts)
                shape.append(out.dims[dim])
                dim += 1
                continue
        else:
            raise node_error(node, f"index item {item!r} is not supported; valid: :, None, ..., ints, "
                                   f"slices with a positive step")
        if (lo, hi) != (0, size):
            sizes = [s for s in (lo, hi - lo, size - hi) if s]
            parts += 1
            pieces = b.ff.split(out, sizes, dim, name=f"{node.name}.slice{parts}")
            out = pieces[1 if lo else 0]
        if keep:
            shape.append(hi - lo)
        dim += 1
    if list(out.dims) != shape:
        out = b.ff.reshape(out, shape, name=node.name)
    return out


def _batch_matmul(b, node, ins, f):
    x, y = (b.tensor(node, t, f"input {i}") for i, t in enumerate(ins[:2]))
    if y.num_dims == 2 and x.num_dims >= 2:   # [..., m, k] @ [k, n]: the leading dimensions as rows
        rows = math.prod(x.dims[:-1])
        flat = x if x.num_dims == 2 else b.ff.reshape(x, [rows, x.dims[-1]], name=f"{node.name}.rows")
        r = b.ff.batch_matmul(b.ff.reshape(flat, [1, rows, x.dims[-1]], name=f"{node.name}.a"),
                              b.ff.reshape(y, [1, *y.dims], name=f"{node.name}.b"), name=f"{node.name}.bmm")
        return b.ff.reshape(r, [*x.dims[:-1], y.dims[1]], name=node.name)
    return b.ff.batch_matmul(x, y, name=node.name)


def _getattr(b, node, ins, f):
    x = ins[0]
    attr = f[0] if f else "shape"
    if attr in ("shape", "size") and isinstance(x, Tensor):
        if len(f) > 1 and f[1] is not None:
            return x.dims[norm_axis(node, f[1], x.num_dims)]
        return tuple(x.dims)
    if attr == "ndim" and isinstance(x, Tensor):
        return x.num_dims
    if attr == "dtype" and isinstance(x, Tensor):
        return next(k for k, v in DTYPES.items() if v is x.data_type)
    if isinstance(x, TypeInfo):   # torch.finfo(dtype).min
        if x.get(attr) is None:
            raise node_error(node, f"torch.finfo / iinfo({x.dtype}) has no attribute {attr!r}; valid: {', '.join(x.names)}")
        return x.get(attr)
    raise node_error(node, f"attribute {attr!r} of {describe(x)} is not supported; valid: shape, size, ndim, dtype")


def _transpose(b, node, ins, f):
    x = b.tensor(node, ins[0])
    d0, d1 = (norm_axis(node, d, x.num_dims) for d in f[:2])
    perm = list(range(x.num_dims))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.ff.transpose(x, perm, name=node.name)


def _permute(b, node, ins, f):
    x = b.tensor(node, ins[0])
    dims = list(f[0]) if len(f) == 1 and isinstance(f[0], tuple) else list(f)
    return b.ff.transpose(x, [norm_axis(node, d, x.num_dims) for d in dims], name=node.name)


def _reshape(b, node, ins, f):
    if isinstance(ins[0], np.ndarray) and len(ins) == 1 and not node.kw("copy_zeros"):
        # a view of a buffer (a relative position index): folded, so an index can read its values
        return ins[0].reshape(shape_with_inferred(node, ins[0].size, f))
    x = b.tensor(node, ins[0])
    if len(ins) == 2 and isinstance(ins[1], Tensor):      # FlexFlow's reshape_as
        f = list(ins[1].dims)
    if node.kw("copy_zeros"):   # ONNX Reshape: a 0 keeps the input's size at that position
        f = [x.dims[i] if s == 0 else s for i, s in enumerate(f)]
    shape = shape_with_inferred(node, math.prod(x.dims), f)
    if shape == list(x.dims):
        return x
    return b.ff.reshape(x, shape, name=node.name)


def _unsqueeze(b, node, ins, f):
    x = b.tensor(node, ins[0])
    d = norm_axis(node, f[0], x.num_dims + 1)
    return b.ff.reshape(x, list(x.dims[:d]) + [1] + list(x.dims[d:]), name=node.name)


def _squeeze(b, node, ins, f):
    x = b.tensor(node, ins[0])
    dims = {norm_axis(node, d, x.num_dims) for d in f} if f else set(range(x.num_dims))
    shape = [s for i, s in enumerate(x.dims) if not (i in dims and s == 1)]
    return x if shape == list(x.dims) else b.ff.reshape(x, shape, name=node.name)


def _repeat(b, node, ins, f):
    """x.repeat(*sizes): each dimension tiled sizes[d] times (concatenated copies); extra leading sizes
    add dimensions of 1 first, as torch does."""
    x = b.tensor(node, ins[0])
    sizes = list(f[0]) if len(f) == 1 and isinstance(f[0], tuple) else list(f)
    if any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in sizes) or len(sizes) < x.num_dims:
        raise node_error(node, f"repeat sizes must be positive integers, at least one per dimension of "
                               f"{list(x.dims)}; got {sizes}", ShapeError)
    lead = len(sizes) - x.num_dims
    if lead:
        x = b.ff.reshape(x, [1] * lead + list(x.dims), name=f"{node.name}.lead")
    tiled = [d for d, k in enumerate(sizes) if k > 1]
    for i, d in enumerate(tiled):
        x = b.ff.concat([x] * sizes[d], d, name=node.name if i == len(tiled) - 1 else f"{node.name}.dim{d}")
    return x if tiled else b.ff.identity(x, name=node.name)


def _pixel_shuffle(b, node, ins, f):
    """PixelShuffle(r): (N, C r^2, H, W) -> (N, C, H r, W r), as reshape, transpose, reshape."""
    x, r = b.tensor(node, ins[0]), f[0]
    if not isinstance(r, int) or isinstance(r, bool) or r < 1 or x.num_dims != 4 or x.dims[1] % (r * r):
        raise node_error(node, f"pixel_shuffle by {r!r} needs (N, C r^2, H, W) input, got {list(x.dims)}", ShapeError)
    n, c, h, w = x.dims
    t = b.ff.reshape(x, [n, c // (r * r), r, r, h, w], name=f"{node.name}.split")
    t = b.ff.transpose(t, [0, 1, 4, 2, 5, 3], name=f"{node.name}.interleave")
    return b.ff.reshape(t, [n, c // (r * r), h * r, w * r], name=node.name)


def _expand(b, node, ins, f):
    x = b.tensor(node, ins[0])
    sizes = list(f[0]) if len(f) == 1 and isinstance(f[0], tuple) else list(f)
    if len(ins) == 2 and isinstance(ins[1], Tensor):       # expand_as
        sizes = list(ins[1].dims)
    if node.kw("broadcast"):   # ONNX Expand: the broadcast of the input's shape and the target
        try:
            sizes = list(np.broadcast_shapes(tuple(x.dims), tuple(sizes)))
        except ValueError as e:
            raise node_error(node, f"cannot expand {list(x.dims)} to {sizes}: {e}", ShapeError) from None
    lead = len(sizes) - x.num_dims
    if lead < 0:
        raise node_error(node, f"expand to {sizes} has fewer dimensions than input {list(x.dims)}", ShapeError)
    target = [x.dims[i - lead] if s == -1 else s for i, s in enumerate(sizes)]
    for i, s in enumerate(x.dims):
        if s != 1 and s != target[i + lead]:
            raise node_error(node, f"cannot expand dimension {i} of size {s} to {target[i + lead]}", ShapeError)
    if target == list(x.dims):
        return x
    ones = b.ff.create_constant(target, 1.0, x.data_type)   # x * ones broadcasts x: expand, with summed gradients
    return b.ff.multiply(x, ones, name=node.name)


def _convert(b, node, ins, f):
    x = ins[0]
    if node.op == "TYPE_AS":
        want = b.tensor(node, ins[1], "its second input").data_type
    elif node.op == "FLOAT":
        want = DataType.DT_FLOAT
    else:
        name = f[0] if f else node.kw("dtype")
        if name is None or isinstance(name, Tensor):
            return x                                          # .to(device) or .to(other): the values stay
        if name not in DTYPES:
            return x if isinstance(name, str) and not name.startswith("torch.") else _bad_dtype(node, name)
        want = DTYPES[name]
    if isinstance(x, np.ndarray) and want in ARRAY_TYPES:   # a constant made in forward: folded
        return x.astype(want.numpy_name)
    if not isinstance(x, Tensor) or x.data_type is want:
        return x
    return b.ff.cast(x, want, name=node.name)


def _bad_dtype(node, name):
    raise node_error(node, f"dtype {name!r} is not supported; valid: {', '.join(sorted(DTYPES))}")


def _pass(b, node, ins, f):
    return ins[0]


def _pow(b, node, ins, f):
    x, e = ins[0], f[0]
    if node.kw("base", False):         # e ** x: a number raised to a constant (folded) or a tensor
        if isinstance(x, np.ndarray) or is_number(x):
            return np.power(float(e), x).astype(np.float32) if isinstance(x, np.ndarray) and x.dtype.kind != "f" \
                else np.power(e, x)
        if not is_number(e) or e <= 0:
            raise node_error(node, f"a number raised to a tensor maps for a base > 0 (exp(x log base)), got {e!r}")
        return b.ff.exp(b.ff.scalar_multiply(b.tensor(node, x), math.log(e), name=f"{node.name}.log"), name=node.name)
    if isinstance(x, np.ndarray):
        return np.power(x, e)
    if is_number(x):
        return x ** e
    if not is_number(e):
        raise node_error(node, f"the exponent must be a number, got {describe(e)}")
    return b.ff.pow(b.tensor(node, x), float(e), name=node.name)


def _reduce(b, node, ins, f):
    x = b.tensor(node, ins[0])
    dims = [d for d in f if not isinstance(d, bool)]
    dims = list(dims[0]) if len(dims) == 1 and isinstance(dims[0], tuple) else dims
    keep = node.kw("keepdim", any(d is True for d in f))
    axes = [norm_axis(node, d, x.num_dims) for d in dims] if dims else list(range(x.num_dims))
    if not keep and len(set(axes)) == x.num_dims:   # to a scalar (x.sum()): FFModel keeps one dimension
        return b.ff.reshape(_reduced(b, node, x, axes, True, f"{node.name}.all"), [1], name=node.name)
    return _reduced(b, node, x, axes, bool(keep), node.name)


def _reduced(b, node, x: Tensor, axes: list, keep: bool, name: str) -> Tensor:
    if node.op == "MEAN":
        return b.ff.mean(x, axes, keep, name=name)
    if node.op == "REDUCE_MAX":
        return reduce_max(b, node, x, sorted(set(axes)), keep, name)
    return b.ff.reduce_sum(x, axes, keep, name=name)


def _attention(b, node, ins, f):
    q, k, v = (b.tensor(node, t, f"input {i}") for i, t in enumerate(ins[:3]))
    embed_dim, num_heads, kdim, vdim, dropout, bias = f[:6]
    batch_first = flag(node, node.kw("batch_first", True), "batch_first")
    if not batch_first:   # [L, N, E] -> [N, L, E] and back
        q, k, v = (b.ff.transpose(t, [1, 0, 2], name=f"{node.name}.{p}_t") for t, p in zip((q, k, v), "qkv"))
    out = b.ff.multihead_attention(q, k, v, embed_dim, num_heads, kdim, vdim, dropout,
                                   flag(node, bias, "bias (the sixth field)"), name=node.name,
                                   causal=flag(node, node.kw("causal", False), "causal"))
    if not batch_first:
        out = b.ff.transpose(out, [1, 0, 2], name=f"{node.name}.out_t")
    return (out, None)


def _attribute(b, node, ins, f):
    raise node_error(node, "reads an attribute of the module (a buffer: a constant array), whose values FlexFlow's "
                           "text format does not hold; build the model from the module (torch_to_ff) instead")


HANDLERS: dict[str, Callable] = {
    "LINEAR": _linear, "CONV2D": _conv2d, "POOL2D": _pool2d, "BATCH_NORM": _batch_norm, "LAYER_NORM": _layer_norm,
    "EMBEDDING": _embedding, "SOFTMAX": _softmax, "DROPOUT": _dropout, "FLAT": _flat, "CONCAT": _concat,
    "SPLIT": _split, "UNBIND": _unbind, "MOD": _binary, "ROLL": _roll, "ADDITIVE_MASK": _additive_mask,
    "CEIL": _unary, "FLOOR": _unary, "GETITEM": _getitem, "BATCH_MATMUL": _batch_matmul, "GETATTR": _getattr,
    "TRANSPOSE": _transpose, "PERMUTE": _permute, "REPEAT": _repeat, "PIXEL_SHUFFLE": _pixel_shuffle, "RESHAPE": _reshape, "VIEW": _reshape, "UNSQUEEZE": _unsqueeze,
    "SQUEEZE": _squeeze, "EXPAND": _expand, "TO": _convert, "FLOAT": _convert, "TYPE_AS": _convert,
    "CONTIGUOUS": _pass, "POW": _pow, "MEAN": _reduce, "REDUCE_SUM": _reduce, "REDUCE_MAX": _reduce,
    "MULTIHEAD_ATTENTION": _attention, "ATTRIBUTE": _attribute, "ARANGE": _arange, "PARAMETER": _parameter,
    "STACK": _stack,
    "CONSTANT": _constant, **COMPOSITES, **RECURRENT, **WINDOWS, **VALUES,
    **{op: _unary for op in _UNARY}, **{op: _composite for op in _COMPOSITE}, **{op: _binary for op in _BINARY},
    **{op: _binary for op in _SCALAR},
    "FLOOR_DIVIDE": _binary,
}
_SCALAR["FLOOR_DIVIDE"] = "FLOORDIV"


_READS_ARRAYS = frozenset({"GETITEM", "FROZEN_BATCH_NORM", "VIEW", "RESHAPE", *_BINARY, *_SCALAR, "MOD", "FLOOR_DIVIDE",
                           "POW", "TO", "FLOAT", *_UNARY}) | READS_ARRAYS | WINDOW_READS_ARRAYS   # a view of a buffer folds


def apply_op(ffmodel, op: str, tensors: Sequence[Any], fields=(), keywords=(), name: str = "op"):
    """One operator of the IR (a composed one: INTERPOLATE, PAD, CONV_TRANSPOSE2D ...) on ``tensors``,
    its layers named ``{name}...``: for front ends that build FFModel layers directly (Keras)."""
    names = [f"{name}.input{i}" for i in range(len(tensors))]
    nodes = [IRNode(n, (), (), "INPUT") for n in names] + [
        IRNode(name, tuple(names), (), op, tuple(fields), tuple(keywords)), IRNode("output", (name,), (), "OUTPUT")]
    return build(ffmodel, nodes, list(tensors))[0]   # handlers given array constants as values


def build(ffmodel, nodes: Sequence[IRNode], input_tensors: Sequence[Any]) -> list:
    """Add the layers of ``nodes`` to ``ffmodel``; the INPUT nodes take ``input_tensors`` in order;
    returns the values the OUTPUT node lists."""
    b = _Builder(ffmodel, input_tensors)
    n_inputs = sum(1 for n in nodes if n.op == "INPUT")
    if n_inputs != len(b.inputs):
        raise ConfigError(f"the model takes {n_inputs} input(s) "
                          f"({', '.join(n.name for n in nodes if n.op == 'INPUT')}), got {len(b.inputs)} "
                          f"input tensor(s)")
    for node in nodes:
        if node.op == "INPUT":
            b.values[node.name] = b.inputs[b.next_input]
            b.next_input += 1
            continue
        if node.op == "OUTPUT":
            b.outputs.extend(b.constant(b.value(node, n), node) for n in node.inputs)
            continue
        handler = HANDLERS.get(node.op)
        if handler is None:
            raise node_error(node, f"operator {node.op} has no FFModel mapping; supported: "
                                   f"{', '.join(sorted(HANDLERS))}")
        ins, fields = b.args(node, arrays=node.op in _READS_ARRAYS)
        try:
            b.values[node.name] = handler(b, node, ins, fields)
        except FlexrtError as e:
            if str(e).startswith(f"node '{node.name}'"):
                raise
            raise node_error(node, str(e), type(e)) from None
        except (TypeError, ValueError, IndexError, KeyError, OverflowError, ZeroDivisionError) as e:
            raise node_error(node, f"invalid fields {fields} or inputs ({e})") from None
    return b.outputs
