"""torch.fx ``call_function`` / ``call_method`` nodes -> ``IRNode``s (see ``flexrt.torch._fx``).

One converter per target family; a target not in ``FUNCTIONS`` / ``METHODS`` raises ``ConfigError``
naming the node, its target and its source line. Imports torch.

Entry points: ``FUNCTIONS``, ``METHODS``, ``convert_call``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import fx, nn

from flexrt.ir.enums import PoolType
from flexrt.torch._fx import (_NONE, _bind, _Ctx, _divisor_keywords, _pool_fields, _ref, check_softplus_threshold,
                              interpolation)
from flexrt.torch._fx import _attr
from flexrt.torch._fx_values import (_COMPARISONS, _TRIL, _TRIU, _arange, _compare, _embedding_fn, _full, _full_like,
                                     _logical_not, _mask_getitem, _mask_scores, _masked_fill, _masked_fill_, _new_full,
                                     _sdpa, _setitem, _tensor, _tensor_arg, _to, _type_info, CASTS)
from flexrt.torch._windows import dilated_weight_kind

_NUMBER = (int, float)


def _binary(op: str, scalar_op: str, commutes: bool):
    """x op y for two traced values (the builder computes sizes in Python and tensors as layers),
    or a traced value and a number (a scalar layer; ``reverse`` when the number comes first)."""
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", "other", "alpha", "rounding_mode"], {"alpha": 1, "rounding_mode": None})
        x, y = a["input"], a["other"]
        o, s = op, scalar_op
        if op == "DIVIDE" and a["rounding_mode"] == "floor":     # torch.div(x, y, rounding_mode='floor'): //
            o, s, a["rounding_mode"] = "FLOOR_DIVIDE", "SCALAR_FLOORDIV", None
        if a["alpha"] != 1 or a["rounding_mode"] is not None:
            raise ctx.error(node, f"alpha={a['alpha']}, rounding_mode={a['rounding_mode']!r} are not supported; valid: "
                                  f"alpha 1, rounding_mode None or 'floor' (a division)")
        if isinstance(x, fx.Node) and isinstance(y, fx.Node):
            ctx.add(node, o, [x.name, y.name])
        elif isinstance(x, fx.Node) and isinstance(y, _NUMBER):
            ctx.add(node, s, [x.name], [y])
        elif isinstance(y, fx.Node) and isinstance(x, _NUMBER):
            ctx.add(node, s, [y.name], [x], [] if commutes else [("reverse", True)])
        elif o == "ADD" and isinstance(x, fx.Node) and isinstance(y, tuple):   # x.size()[:-1] + (h, d)
            ctx.add(node, s, [x.name], [_ref(y)])
        elif o == "ADD" and isinstance(y, fx.Node) and isinstance(x, tuple):
            ctx.add(node, s, [y.name], [_ref(x)], [("reverse", True)])
        else:
            raise ctx.error(node, f"operands must be traced values or numbers, got {x!r} and {y!r}")
    return convert


def _leaky_relu(ctx, node):
    a = _bind(ctx, node, ["input", "negative_slope", "inplace"], {"negative_slope": 0.01, "inplace": False})
    ctx.add(node, "LEAKY_RELU", [_tensor_arg(ctx, node, a["input"])], [a["negative_slope"]])


def _neg(ctx, node):
    ctx.add(node, "SCALAR_MULTIPLY", [_tensor_arg(ctx, node, node.args[0])], [-1.0])


def _unary(op: str, extra: tuple = ()):
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", *extra], {"inplace": False, "approximate": "none", "alpha": 1.0})
        if a["approximate"] not in ("none", "tanh"):
            raise ctx.error(node, f"approximate={a['approximate']!r}; valid: 'none', 'tanh'")
        fields = [float(a["alpha"])] if op in ("ELU", "CELU") else []   # built of element-wise layers unless 1
        ctx.add(node, "GELU_TANH" if a["approximate"] == "tanh" else op, [_tensor_arg(ctx, node, a["input"])], fields)
    return convert


def _hardtanh(ctx, node):
    a = _bind(ctx, node, ["input", "min_val", "max_val", "inplace"], {"min_val": -1.0, "max_val": 1.0,
                                                                      "inplace": False})
    ctx.add(node, "CLAMP", [_tensor_arg(ctx, node, a["input"])], [float(a["min_val"]), float(a["max_val"])])


def _pixel_shuffle(ctx, node):
    a = _bind(ctx, node, ["input", "upscale_factor"], {})
    ctx.add(node, "PIXEL_SHUFFLE", [_tensor_arg(ctx, node, a["input"])], [a["upscale_factor"]])


def _glu(ctx, node):
    a = _bind(ctx, node, ["input", "dim"], {"dim": -1})
    ctx.add(node, "GLU", [_tensor_arg(ctx, node, a["input"])], [a["dim"]])


def _softmax(ctx, node):
    a = _bind(ctx, node, ["input", "dim", "_stacklevel", "dtype"], {"dim": None, "dtype": None})
    x = a["input"]
    if a["dtype"] is not None:   # softmax(x, dtype=...): the input cast first, as torch does
        cast = f"{node.name}.cast"
        ctx.add(node, "TO", [_tensor_arg(ctx, node, x)], [_ref(a["dtype"])], name=cast, users=(node.name,))
        ctx.add(node, "SOFTMAX", [cast], [], [("dim", _ref(a["dim"]) if a["dim"] is not None else "implicit")])
        return
    if isinstance(x, fx.Node) and x.name in ctx.masked:   # scores masked causally: a causal softmax
        ctx.add(node, "SOFTMAX", [ctx.masked[x.name]], [], [("dim", -1), ("causal", True)])
        return
    ctx.check_inputs(node)
    # no dim: torch's implicit one (dim 0 for inputs of rank 0, 1 or 3, else 1), resolved when built
    ctx.add(node, "SOFTMAX", [_tensor_arg(ctx, node, x)], [],
            [("dim", _ref(a["dim"]) if a["dim"] is not None else "implicit")])


def _log_softmax(ctx, node):
    a = _bind(ctx, node, ["input", "dim", "_stacklevel", "dtype"], {"dim": None, "dtype": None})
    x = _tensor_arg(ctx, node, a["input"])
    if a["dtype"] is not None:
        cast = f"{node.name}.cast"
        x = ctx.add(node, "TO", [x], [_ref(a["dtype"])], name=cast, users=(node.name,))
    ctx.add(node, "LOG_SOFTMAX", [x], [], [("dim", _ref(a["dim"]) if a["dim"] is not None else "implicit")])


def _logsumexp(ctx, node):
    a = _bind(ctx, node, ["input", "dim", "keepdim"], {"keepdim": False})
    dim = a["dim"]
    dims = list(dim) if isinstance(dim, (tuple, list)) else [dim]
    ctx.add(node, "LOGSUMEXP", [_tensor_arg(ctx, node, a["input"])], dims, [("keepdim", bool(a["keepdim"]))])


def _pad(ctx, node):
    a = _bind(ctx, node, ["input", "pad", "mode", "value"], {"mode": "constant", "value": None})
    kws = [("mode", a["mode"])] + ([("value", a["value"])] if a["value"] else [])
    ctx.add(node, "PAD", [_tensor_arg(ctx, node, a["input"])], [_ref(tuple(a["pad"]))], kws)


def _einsum(ctx, node):
    """torch.einsum(equation, a, b) or (equation, [a, b])."""
    eq, *ops = node.args
    if len(ops) == 1 and isinstance(ops[0], (tuple, list)):
        ops = list(ops[0])
    ctx.add(node, "EINSUM", [_tensor_arg(ctx, node, o, f"operand {i}") for i, o in enumerate(ops)], [eq])


def _norm(ctx, node):
    """Tensor.norm / torch.norm / torch.linalg.vector_norm with p=2 (or 'fro'): the L2 norm over dim."""
    a = _bind(ctx, node, ["input", "p", "dim", "keepdim", "dtype"], {"p": 2, "dim": None, "keepdim": False,
                                                                    "dtype": None, "ord": None, "out": None})
    p = a["ord"] if a["ord"] is not None else a["p"]
    if p not in (2, 2.0, "fro") or a["dtype"] is not None or a["out"] is not None:
        raise ctx.error(node, f"norm with p={p!r}, dtype={a['dtype']!r}: only the 2-norm maps")
    dim = a["dim"]
    dims = [] if dim is None else list(dim) if isinstance(dim, (tuple, list)) else [dim]
    ctx.add(node, "REDUCE_L2", [_tensor_arg(ctx, node, a["input"])], dims, [("keepdim", bool(a["keepdim"]))])


def _softplus(ctx, node):
    a = _bind(ctx, node, ["input", "beta", "threshold"], {"beta": 1.0, "threshold": 20.0})
    check_softplus_threshold(ctx, node, a["threshold"])
    ctx.add(node, "SOFTPLUS", [_tensor_arg(ctx, node, a["input"])], [a["beta"]])


def _add(ctx, node):
    """x + y; scores + an additive causal mask (-inf above the diagonal) read by softmax(dim=-1) is
    the causal softmax of the scores."""
    x, y = (list(node.args) + [node.kwargs.get("other")])[:2]
    for mask, scores in ((x, y), (y, x)):
        if isinstance(mask, fx.Node) and ctx.attn_masks.get(mask.name) == "additive":
            return _mask_scores(ctx, node, scores)
    ctx.check_inputs(node)
    _ADD(ctx, node)


def _dropout(ctx, node):
    a = _bind(ctx, node, ["input", "p", "training", "inplace"], {"p": 0.5, "training": True, "inplace": False})
    x = _tensor_arg(ctx, node, a["input"])
    if a["training"] is False:
        ctx.add(node, "IDENTITY", [x])
    elif isinstance(a["training"], fx.Node):
        raise ctx.error(node, "dropout(training=<traced value>) is not supported; pass a bool")
    else:
        ctx.add(node, "DROPOUT", [x], [float(a["p"])])


def _flatten(ctx, node):
    a = _bind(ctx, node, ["input", "start_dim", "end_dim"], {"start_dim": 0, "end_dim": -1})
    kws = [("start_dim", a["start_dim"])] + ([("end_dim", a["end_dim"])] if a["end_dim"] != -1 else [])
    ctx.add(node, "FLAT", [_tensor_arg(ctx, node, a["input"])], [], kws)


def _t(ctx, node):
    """x.t(): the transpose of a 2-D tensor (of a 1-D one: itself)."""
    ctx.add(node, "TRANSPOSE", [_tensor_arg(ctx, node, node.args[0])], [0, -1])


def _addmm(ctx, node):
    """torch.addmm(input, mat1, mat2) = input + mat1 @ mat2 (GPT-2's Conv1D), beta = alpha = 1."""
    a = _bind(ctx, node, ["input", "mat1", "mat2", "beta", "alpha"], {"beta": 1, "alpha": 1})
    if a["beta"] != 1 or a["alpha"] != 1:
        raise ctx.error(node, f"addmm with beta={a['beta']!r}, alpha={a['alpha']!r}; valid: 1 and 1")
    prod = f"{node.name}.mm"
    mats = [_tensor_arg(ctx, node, a[k], k) for k in ("mat1", "mat2")]
    ctx.add(node, "BATCH_MATMUL", mats, name=prod, users=(node.name,))
    ctx.add(node, "ADD", [_tensor_arg(ctx, node, a["input"]), prod])


def _tensors_along(op: str):
    """torch.cat (CONCAT) and torch.stack (STACK): a list of tensors and a dimension."""
    def convert(ctx, node):
        a = _bind(ctx, node, ["tensors", "dim"], {"dim": 0})
        ts = a["tensors"]
        if not isinstance(ts, (list, tuple)) or not ts:
            raise ctx.error(node, f"tensors must be a non-empty list of traced tensors, got {ts!r}")
        ctx.add(node, op, [_tensor_arg(ctx, node, t, f"tensor {i}") for i, t in enumerate(ts)], [a["dim"]])
    return convert


_cat, _stack = _tensors_along("CONCAT"), _tensors_along("STACK")


def _split(ctx, node):
    a = _bind(ctx, node, ["tensor", "split_size_or_sections", "dim"], {"dim": 0, "split_size": None})
    s = a.get("split_size_or_sections", a["split_size"])
    kw = ("split_size", _ref(s)) if isinstance(s, (int, fx.Node)) else ("sections", tuple(_ref(v) for v in s))
    ctx.add(node, "SPLIT", [_tensor_arg(ctx, node, a["tensor"])], [a["dim"]], [kw])


def _chunk(ctx, node):
    a = _bind(ctx, node, ["input", "chunks", "dim"], {"dim": 0})
    ctx.add(node, "SPLIT", [_tensor_arg(ctx, node, a["input"])], [a["dim"]], [("chunks", a["chunks"])])


def _unbind(ctx, node):
    """torch.unbind / x.unbind(dim) (timm's ``q, k, v = qkv.unbind(0)``): pieces of size 1 along
    ``dim``, each without it."""
    a = _bind(ctx, node, ["input", "dim"], {"dim": 0})
    ctx.add(node, "UNBIND", [_tensor_arg(ctx, node, a["input"])], [a["dim"]])


def _addcmul(ctx, node):
    """torch.addcmul(input, t1, t2, value=1) = input + value * t1 * t2 (timm's ResMLP affine)."""
    a = _bind(ctx, node, ["input", "tensor1", "tensor2", "value"], {"value": 1})
    ins = [_tensor_arg(ctx, node, a[k], k) for k in ("input", "tensor1", "tensor2")]
    prod = ctx.add(node, "MULTIPLY", ins[1:], name=f"{node.name}.prod", users=(node.name,))
    if a["value"] != 1:
        prod = ctx.add(node, "SCALAR_MULTIPLY", [prod], [a["value"]], name=f"{node.name}.scaled", users=(node.name,))
    ctx.add(node, "ADD", [ins[0], prod])


def _owner(ctx, node, what: str, tensors: dict):
    """The module whose own attributes ``tensors`` (keyword -> fx node or None) are, named by
    their get_attr targets (``bn.weight``, ``bn.running_mean``), as timm's BatchNormAct2d, GroupNorm,
    Linear and Conv2dSame pass them to F.batch_norm, F.group_norm, F.linear and F.conv2d; a
    ConfigError otherwise."""
    owners = set()
    for key, v in tensors.items():
        target = v.target if isinstance(v, fx.Node) and v.op == "get_attr" else None
        owner, _, attr = (target or "").rpartition(".")
        if v is not None and (target is None or attr != key or owner not in ctx.modules):
            owners.add(None)
        elif v is not None:
            owners.add(owner)
    if len(owners) != 1 or None in owners:
        given = ", ".join(f"{k}={getattr(v, 'target', v)!r}" for k, v in tensors.items())
        raise ctx.error(node, f"{what} with {given}; valid: one module's own {', '.join(tensors)} (or None where "
                              f"torch allows), as the module holds them")
    return ctx.modules[owners.pop()]


def _batch_norm_fn(ctx, node):
    """F.batch_norm with one module's own buffers and parameters (timm's BatchNormAct2d): in
    training a batch norm of that module's weights, else the frozen one of its running statistics."""
    a = _bind(ctx, node, ["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"],
              {"weight": None, "bias": None, "training": False, "momentum": 0.1, "eps": 1e-5})
    if not isinstance(a["training"], bool):
        raise ctx.error(node, f"F.batch_norm's training must be known when tracing, got {a['training']!r}")
    tensors = {k: a[k] for k in ("weight", "bias", "running_mean", "running_var")}
    m = _owner(ctx, node, "F.batch_norm", tensors)
    x = _tensor_arg(ctx, node, a["input"])
    affine = a["weight"] is not None and a["bias"] is not None
    if a["weight"] is not None and not affine:
        raise ctx.error(node, "F.batch_norm with a weight and no bias (or a bias and no weight); valid: both or neither")
    eps = [("eps", a["eps"])]
    if not a["training"]:
        if a["running_mean"] is None or a["running_var"] is None:
            raise ctx.error(node, "F.batch_norm outside training needs running_mean and running_var")
        ins = [x, a["running_mean"].name, a["running_var"].name] + (ctx.affine_parameters(node, m) if affine else [])
        ctx.add(node, "FROZEN_BATCH_NORM", ins, [], eps)
    elif not affine:
        raise ctx.error(node, "F.batch_norm in training without weight and bias: FFModel.batch_norm always learns a "
                              "scale and a bias")
    else:
        ctx.layer(node, "BATCH_NORM", m, "batch_norm", [x], [], eps if a["eps"] != 1e-5 else [])


def _linear_fn(ctx, node):
    """F.linear with one module's own ``weight`` (and ``bias``, or None when it has none), as
    timm's Linear calls it: that module's dense layer."""
    a = _bind(ctx, node, ["input", "weight", "bias"], {"bias": None})
    bias = a["bias"]
    # a bias computed in forward (BEiT's and EVA's cat of q_bias, zeros and v_bias): added after
    computed = isinstance(bias, fx.Node) and not (bias.op == "get_attr" and bias.name in ctx.params)
    m = _owner(ctx, node, "F.linear", {"weight": a["weight"], "bias": None if computed else bias})
    has_bias = bias is not None and not computed
    if not has_bias and getattr(m, "bias", None) is not None:
        raise ctx.error(node, "F.linear without the bias its module holds; valid: the module's weight and bias, "
                              "or its weight alone when it has no bias (and any bias tensor computed in forward)")
    w = m.weight
    if w.dim() != 2:
        raise ctx.error(node, f"F.linear's weight must be 2-D [out, in], got {list(w.shape)}")
    fields, kws = [int(w.shape[0]), _NONE, int(has_bias)], [("in_features", int(w.shape[1]))]
    x = _tensor_arg(ctx, node, a["input"])
    if not computed:
        ctx.layer(node, "LINEAR", m, "dense", [x], fields, kws)
        return
    ctx.layer(node, "LINEAR", m, "dense", [x], fields, kws, name=f"{node.name}.product", users=(node.name,))
    ctx.add(node, "ADD", [f"{node.name}.product", bias.name])


def _conv2d_fn(ctx, node):
    """F.conv2d with one module's own ``weight`` (and ``bias``, or None when it has none), as timm's
    Conv2dSame calls it after padding: that module's convolution with the call's stride, padding
    and groups."""
    a = _bind(ctx, node, ["input", "weight", "bias", "stride", "padding", "dilation", "groups"],
              {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1})
    m = _owner(ctx, node, "F.conv2d", {"weight": a["weight"], "bias": a["bias"]})
    if a["bias"] is None and getattr(m, "bias", None) is not None:
        raise ctx.error(node, "F.conv2d without the bias its module holds; valid: the module's weight and bias, "
                              "or its weight alone when it has no bias")
    pair = [tuple(v) if isinstance(v, (tuple, list)) else (v, v) for v in (a["stride"], a["dilation"])]
    kind = dilated_weight_kind(a["groups"], m.weight.shape[1] * a["groups"], m.weight.shape[0], a["bias"] is not None)
    if pair[1] != (1, 1) and kind is None or isinstance(a["padding"], str) or m.weight.dim() != 4:
        raise ctx.error(node, f"F.conv2d with dilation={a['dilation']}, groups={a['groups']}, padding="
                              f"{a['padding']!r} and a weight of {list(m.weight.shape)}; valid: numeric padding, a "
                              f"4-D weight, and groups=1 (or depthwise without a bias) where dilated")
    ph, pw = tuple(a["padding"]) if isinstance(a["padding"], (tuple, list)) else (a["padding"],) * 2
    out, cin_g, kh, kw = (int(d) for d in m.weight.shape)
    fields = [out, kh, kw, *pair[0], ph, pw, _NONE, a["groups"], int(a["bias"] is not None)]
    kws = [("in_channels", cin_g * a["groups"])]
    x = _tensor_arg(ctx, node, a["input"])
    if pair[1] != (1, 1):
        ctx.layer(node, "CONV2D_DILATED", m, kind, [x], fields, kws + [("dilation", pair[1])])
    else:
        ctx.layer(node, "CONV2D", m, "conv2d", [x], fields, kws)


def _unfold_fn(ctx, node):
    """F.unfold(input, kernel_size, dilation=1, padding=0, stride=1): as nn.Unfold."""
    a = _bind(ctx, node, ["input", "kernel_size", "dilation", "padding", "stride"],
              {"dilation": 1, "padding": 0, "stride": 1})
    pairs = [tuple(v) if isinstance(v, (tuple, list)) else (v, v)
             for v in (a["kernel_size"], a["dilation"], a["padding"], a["stride"])]
    ctx.add(node, "UNFOLD", [_tensor_arg(ctx, node, a["input"])], [_ref(p) for p in pairs])


def _cumsum(ctx, node):
    """torch.cumsum(input, dim, dtype=None) and x.cumsum(dim): a triangular matrix along dim."""
    a = _bind(ctx, node, ["input", "dim", "dtype"], {"dtype": None, "out": None})
    if a["out"] is not None:
        raise ctx.error(node, f"cumsum with out={a['out']!r}; valid: None")
    x = _tensor_arg(ctx, node, a["input"])
    if a["dtype"] is not None:   # the input cast first, as torch does
        x = ctx.add(node, "TO", [x], [_ref(a["dtype"])], name=f"{node.name}.cast", users=(node.name,))
    ctx.add(node, "CUMSUM", [x], [a["dim"]])


def _roll(ctx, node):
    """torch.roll(x, shifts, dims) (Swin's shifted windows): each dimension's two parts swapped."""
    a = _bind(ctx, node, ["input", "shifts", "dims"], {"dims": None})
    shifts, dims = a["shifts"], a["dims"]
    if dims is None:
        raise ctx.error(node, "torch.roll without dims rolls the flattened tensor; valid: dims given")
    shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims):
        raise ctx.error(node, f"torch.roll with {len(shifts)} shift(s) for {len(dims)} dim(s)")
    ctx.add(node, "ROLL", [_tensor_arg(ctx, node, a["input"])], [_ref(shifts), dims])


def _group_norm_fn(ctx, node):
    """F.group_norm with no weights or one module's own ``weight`` and ``bias`` (timm's GroupNorm)."""
    a = _bind(ctx, node, ["input", "num_groups", "weight", "bias", "eps"], {"weight": None, "bias": None, "eps": 1e-5})
    x = _tensor_arg(ctx, node, a["input"])
    ins = [x]
    if a["weight"] is not None or a["bias"] is not None:
        m = _owner(ctx, node, "F.group_norm", {"weight": a["weight"], "bias": a["bias"]})
        if a["weight"] is None or a["bias"] is None:
            raise ctx.error(node, "F.group_norm with a weight and no bias (or a bias and no weight); valid: both or "
                                  "neither")
        ins += ctx.affine_parameters(node, m)
    ctx.add(node, "GROUP_NORM", ins, [a["num_groups"]], [("eps", a["eps"])])


def _one_of_list(item):
    """x[:, [k]] keeps the dimension with the one position k: the slice k:k+1."""
    if isinstance(item, list) and len(item) == 1 and isinstance(item[0], int) and not isinstance(item[0], bool):
        k = item[0]
        return slice(k, k + 1 if k != -1 else None, None)
    return item


def _getitem(ctx, node):
    x, index = node.args
    if isinstance(x, fx.Node) and x.name in ctx.packs:
        return _unpack(ctx, node, x, index)
    if isinstance(x, fx.Node) and x.name in ctx.masks:
        return _mask_getitem(ctx, node)
    if isinstance(x, fx.Node) and isinstance(index, fx.Node) and _table(ctx, x) and _index_tensor(ctx, index):
        return ctx.parameter_rows(node, x, index)    # table[positions]: an embedding of the table
    if isinstance(x, fx.Node) and x.name in ctx.params:
        ctx.free_parameter(x)
    index = tuple(_one_of_list(i) for i in index) if isinstance(index, tuple) else _one_of_list(index)
    ctx.add(node, "GETITEM", [_tensor_arg(ctx, node, x)], list(_ref(index)) if isinstance(index, tuple)
            else [_ref(index)])


def _table(ctx, node: fx.Node) -> bool:
    """Whether ``node`` reads a 2-D parameter of the module (whether or not it was read before)."""
    if node.op != "get_attr":
        return False
    value = _attr(ctx.gm, node.target)
    return isinstance(value, nn.Parameter) and value.dim() == 2


def _index_tensor(ctx, node: fx.Node) -> bool:
    """Whether ``node`` is a tensor of indices: an input of the model, a tensor buffer, or a view,
    reshape, flatten or ``long()`` of one (MaxViT's ``relative_position_index.view(-1)``)."""
    if node.op == "placeholder":
        return True
    if node.op == "get_attr":
        return node.name not in ctx.params and node.name not in ctx.masks
    return node.op == "call_method" and node.target in ("view", "reshape", "flatten", "long", "contiguous") and \
        isinstance(node.args[0], fx.Node) and _index_tensor(ctx, node.args[0])


def _pack(ctx, node):
    """A named tuple made in forward (torchvision's GoogLeNetOutputs, InceptionOutputs): its items,
    in field order; no layer (the output lists them; an index or field name reads one)."""
    fields = node.target._fields
    values = list(node.args) + [node.kwargs[f] for f in fields[len(node.args):] if f in node.kwargs]
    ctx.packs[node.name] = tuple(values)
    ctx.fields[node.name] = tuple(fields)


def _unpack(ctx, node, x, key) -> None:
    """An item of a named tuple made in forward, read by index or field name: an identity of it."""
    items = ctx.packs[x.name]
    i = ctx.fields[x.name].index(key) if isinstance(key, str) and key in ctx.fields[x.name] else key
    if not isinstance(i, int) or isinstance(i, bool) or not -len(items) <= i < len(items) or \
            not isinstance(items[i], fx.Node):
        raise ctx.error(node, f"reads item {key!r} of a named tuple of fields {', '.join(ctx.fields[x.name])}")
    ctx.add(node, "IDENTITY", [items[i].name])


def _getattr(ctx, node):
    x, attr = node.args
    if isinstance(x, fx.Node) and x.name in ctx.packs:
        return _unpack(ctx, node, x, attr)
    if isinstance(x, fx.Node) and x.name in ctx.params and attr == "shape":   # F.layer_norm's normalized_shape
        ctx.consts[node.name] = tuple(ctx.params[x.name][1].shape)
        return
    if attr == "device":   # read by arange(..., device=x.device) only: no layer computes it (a parameter's either)
        ctx.ignored.add(node.name)
        return
    ctx.check_inputs(node)
    ctx.add(node, "GETATTR", [_tensor_arg(ctx, node, x)], [attr])


def _dim(ctx, node):
    ctx.add(node, "GETATTR", [_tensor_arg(ctx, node, node.args[0])], ["ndim"])


def _size(ctx, node):
    a = _bind(ctx, node, ["dim"], {"dim": None}, skip=1)
    ctx.add(node, "GETATTR", [_tensor_arg(ctx, node, node.args[0])], ["size", _ref(a["dim"])])


def _matmul(ctx, node):
    a = _bind(ctx, node, ["input", "other"], {})
    ctx.add(node, "BATCH_MATMUL", [_tensor_arg(ctx, node, a["input"]), _tensor_arg(ctx, node, a["other"], "other")])


def _dims_op(op: str):
    """view / reshape / permute / expand: the sizes as fields (each a number or a traced size)."""
    def convert(ctx, node):
        x = _tensor_arg(ctx, node, node.args[0])
        rest = list(node.args[1:])
        for k in ("shape", "size", "dims"):
            if k in node.kwargs:
                rest = [node.kwargs[k]]
        if len(rest) == 1 and isinstance(rest[0], (tuple, list)):
            rest = list(rest[0])
        ctx.add(node, op, [x], [_ref(v) for v in rest])
    return convert


def _transpose(ctx, node, names=("dim0", "dim1")):
    """transpose, swapdims (dim0, dim1) and swapaxes (axis0, axis1): one TRANSPOSE of two axes."""
    a = _bind(ctx, node, ["input", *names], {})
    ctx.add(node, "TRANSPOSE", [_tensor_arg(ctx, node, a["input"])], [a[names[0]], a[names[1]]])


def _swapaxes(ctx, node):
    _transpose(ctx, node, ("axis0", "axis1"))


def _unsqueeze(op: str):
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", "dim"], {"dim": None})
        dims = a["dim"]
        fields = [] if dims is None else list(dims) if isinstance(dims, (tuple, list)) else [dims]
        ctx.add(node, op, [_tensor_arg(ctx, node, a["input"])], fields)
    return convert


def _as(ctx, node):
    ctx.add(node, "TYPE_AS" if node.target == "type_as" else "RESHAPE",
            [_tensor_arg(ctx, node, node.args[0]), _tensor_arg(ctx, node, node.args[1], "other")])


def _expand_as(ctx, node):
    ctx.add(node, "EXPAND", [_tensor_arg(ctx, node, node.args[0]), _tensor_arg(ctx, node, node.args[1], "other")])


def _pass(op: str):
    def convert(ctx, node):
        ctx.add(node, op, [_tensor_arg(ctx, node, node.args[0])])
    return convert


def _pow(ctx, node):
    """x ** number; number ** x (XCiT's temperature ** positions: a field ``base``)."""
    a = _bind(ctx, node, ["input", "exponent"], {})
    x, e = a["input"], a["exponent"]
    if isinstance(x, _NUMBER) and isinstance(e, fx.Node):
        ctx.add(node, "POW", [e.name], [x], [("base", True)])
        return
    if isinstance(e, fx.Node):
        raise ctx.error(node, "pow of a traced value to a traced exponent is not supported; valid: a number as the "
                              "base or the exponent")
    ctx.add(node, "POW", [_tensor_arg(ctx, node, x)], [e])


def _reduce(op: str):
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", "dim", "keepdim", "dtype"], {"dim": None, "keepdim": False, "dtype": None})
        if a["dtype"] is not None:
            raise ctx.error(node, f"{node.target}(dtype=...) is not supported")
        dim = a["dim"]
        dims = [] if dim is None else list(dim) if isinstance(dim, (tuple, list)) else [dim]
        ctx.add(node, op, [_tensor_arg(ctx, node, a["input"])], dims, [("keepdim", bool(a["keepdim"]))])
    return convert


def _pool_fn(pool: PoolType):
    def convert(ctx, node):
        # positional arguments as torch's signatures order them: F.max_pool2d(input, kernel_size,
        # stride, padding, dilation, ceil_mode, return_indices), F.avg_pool2d(input, kernel_size,
        # stride, padding, ceil_mode, count_include_pad, divisor_override)
        names = ["input", "kernel_size", "stride", "padding"] + (
            ["dilation", "ceil_mode", "return_indices"] if pool is PoolType.POOL_MAX else
            ["ceil_mode", "count_include_pad", "divisor_override"])
        a = _bind(ctx, node, names, {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                                     "count_include_pad": True, "divisor_override": None, "return_indices": False})
        if a["return_indices"]:
            raise ctx.error(node, "return_indices is not supported (FFModel.pool2d returns no indices)")
        fields, kws = _pool_fields(ctx, node, a["kernel_size"], a["stride"], a["padding"], a["dilation"],
                                   a["ceil_mode"], pool)
        if pool is PoolType.POOL_AVG:
            kws += _divisor_keywords(a["count_include_pad"], a["divisor_override"])
        ctx.add(node, "POOL2D", [_tensor_arg(ctx, node, a["input"])], fields, kws)
    return convert


def _adaptive_fn(pool: PoolType):
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", "output_size", "return_indices"], {"return_indices": False})
        out = a["output_size"]
        size = (out, out) if isinstance(out, (int, fx.Node)) and not isinstance(out, bool) else tuple(out)
        ctx.add(node, "POOL2D", [_tensor_arg(ctx, node, a["input"])], [3, 1, 0, pool.value, 10],
                [("output_size", _ref(size))])
    return convert


def _layer_norm_fn(ctx, node):
    """F.layer_norm, without weights or with a module's own ``weight`` (and ``bias`` or None), as
    nanoGPT's LayerNorm calls it: that module's layer norm."""
    a = _bind(ctx, node, ["input", "normalized_shape", "weight", "bias", "eps"],
              {"weight": None, "bias": None, "eps": 1e-5})
    shape = a["normalized_shape"]
    if isinstance(shape, fx.Node) and shape.name in ctx.consts:
        shape = ctx.consts[shape.name]
    elif isinstance(shape, fx.Node):
        raise ctx.error(node, "F.layer_norm's normalized_shape must be known when tracing (numbers, or a "
                              "parameter's .shape)")
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    x = _tensor_arg(ctx, node, a["input"])
    for arg in node.all_input_nodes:
        if arg is not a["input"] and arg.name not in ctx.consts and arg not in (a["weight"], a["bias"]):
            ctx.check_inputs(node)
    kws = [("shape", shape), ("eps", a["eps"])]
    w, b = a["weight"], a["bias"]
    if w is None and b is None:
        ctx.add(node, "LAYER_NORM", [x], [], kws + [("affine", False)])
        return
    names = [ctx.params[v.name][0] if isinstance(v, fx.Node) and v.name in ctx.params else None for v in (w, b)]
    owner = names[0].rpartition(".")[0] if names[0] else None
    if names[0] != f"{owner}.weight" or (b is not None and names[1] != f"{owner}.bias") or owner not in ctx.modules:
        raise ctx.error(node, f"F.layer_norm with weight {names[0] or w!r} and bias {names[1] or b!r}; valid: no "
                              f"weights, or one module's own .weight and .bias (or None), as nn.LayerNorm holds them")
    ctx.layer(node, "LAYER_NORM", ctx.modules[owner], "layer_norm", [x], [],
              kws + ([] if b is not None else [("bias", False)]))


def _interpolate(ctx, node):
    a = _bind(ctx, node, ["input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor",
                          "antialias"], {"size": None, "scale_factor": None, "mode": "nearest", "align_corners": None,
                                         "recompute_scale_factor": None, "antialias": False})
    interpolation(ctx, node, _tensor_arg(ctx, node, a["input"]), a["size"], a["scale_factor"], a["mode"],
                  a["align_corners"], a["recompute_scale_factor"], a["antialias"])


def _var(std: bool):
    """torch.var / std and the methods: (dim, unbiased, keepdim), (unbiased) or correction=."""
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", "dim", "unbiased", "keepdim"],
                  {"dim": None, "unbiased": None, "keepdim": False, "correction": None})
        dim, unbiased = a["dim"], a["unbiased"]
        if isinstance(dim, bool):        # var(x, unbiased)
            dim, unbiased = None, dim
        if a["correction"] is not None and unbiased is not None:
            raise ctx.error(node, "give unbiased or correction, not both")
        correction = a["correction"] if a["correction"] is not None else 0 if unbiased is False else 1
        dims = [] if dim is None else list(dim) if isinstance(dim, (tuple, list)) else [dim]
        ctx.add(node, "VAR", [_tensor_arg(ctx, node, a["input"])], dims,
                [("keepdim", bool(a["keepdim"])), ("correction", correction)] + ([("std", True)] if std else []))
    return convert


def _normalize(ctx, node):
    a = _bind(ctx, node, ["input", "p", "dim", "eps", "out"], {"p": 2.0, "dim": 1, "eps": 1e-12, "out": None})
    if a["out"] is not None:
        raise ctx.error(node, "F.normalize(out=...) is not supported")
    ctx.add(node, "NORMALIZE", [_tensor_arg(ctx, node, a["input"])], [a["p"], a["dim"], a["eps"]])


def _clamp(ctx, node):
    """torch.clamp / clip (min, max), clamp_min, clamp_max: numbers as bounds."""
    name = node.target if isinstance(node.target, str) else node.target.__name__
    defaults = {"min": None, "max": None}
    a = _bind(ctx, node, ["input", "max"] if name == "clamp_max" else ["input", "min", "max"], defaults)
    if any(isinstance(a[k], fx.Node) for k in ("min", "max")):
        raise ctx.error(node, f"{name} with a traced bound is not supported; valid: numbers")
    ctx.add(node, "CLAMP", [_tensor_arg(ctx, node, a["input"])], [a["min"], a["max"]])


def _unflatten(ctx, node):
    a = _bind(ctx, node, ["input", "dim", "sizes"], {})
    ctx.add(node, "UNFLATTEN", [_tensor_arg(ctx, node, a["input"])], [a["dim"], _ref(tuple(a["sizes"]))])


_ADD = _binary("ADD", "SCALAR_ADD", True)
_SUB = _binary("SUBTRACT", "SCALAR_SUB", False)
_MUL = _binary("MULTIPLY", "SCALAR_MULTIPLY", True)
_DIV = _binary("DIVIDE", "SCALAR_TRUEDIV", False)
_FLOORDIV = _binary("FLOOR_DIVIDE", "SCALAR_FLOORDIV", False)
_MOD = _binary("MOD", "SCALAR_MOD", False)

FUNCTIONS: dict[Callable, Callable] = {
    operator.add: _add, operator.iadd: _add, torch.add: _add, operator.sub: _SUB, operator.isub: _SUB,
    torch.sub: _SUB, torch.subtract: _SUB, operator.mul: _MUL, operator.imul: _MUL, torch.mul: _MUL,
    torch.multiply: _MUL, operator.truediv: _DIV, operator.itruediv: _DIV, torch.div: _DIV, torch.true_divide: _DIV,
    operator.floordiv: _FLOORDIV, operator.mod: _MOD, operator.neg: _neg, torch.neg: _neg,
    torch.zeros_like: _full_like(0.0), torch.ones_like: _full_like(1.0), torch.full_like: _full_like(None),
    torch.unbind: _unbind, torch.addcmul: _addcmul, F.batch_norm: _batch_norm_fn, F.group_norm: _group_norm_fn,
    F.linear: _linear_fn, F.conv2d: _conv2d_fn, torch.roll: _roll, F.unfold: _unfold_fn, torch.cumsum: _cumsum,
    torch.maximum: _binary("MAX", "", True), torch.minimum: _binary("MIN", "", True),
    F.relu: _unary("RELU"), torch.relu: _unary("RELU"), F.gelu: _unary("GELU"), torch.sigmoid: _unary("SIGMOID"),
    F.silu: _unary("SILU"), F.relu6: _unary("RELU6"), F.leaky_relu: _leaky_relu,
    F.hardsigmoid: _unary("HARDSIGMOID"),
    F.hardswish: _unary("HARDSWISH"),
    F.sigmoid: _unary("SIGMOID"), torch.tanh: _unary("TANH"), F.tanh: _unary("TANH"), F.elu: _unary("ELU"),
    F.celu: _unary("CELU"), F.selu: _unary("SELU"), torch.selu: _unary("SELU"), F.softsign: _unary("SOFTSIGN"),
    torch.log1p: _unary("LOG1P"), F.hardtanh: _hardtanh, F.glu: _glu, F.pixel_shuffle: _pixel_shuffle,
    torch.exp: _unary("EXP"), torch.sin: _unary("SIN"), torch.cos: _unary("COS"), torch.rsqrt: _unary("RSQRT"),
    F.softmax: _softmax, torch.softmax: _softmax, F.dropout: _dropout, torch.flatten: _flatten, torch.cat: _cat,
    torch.concat: _cat, torch.stack: _stack, torch.addmm: _addmm, torch.split: _split, torch.chunk: _chunk,
    operator.getitem: _getitem, getattr: _getattr,
    operator.matmul: _matmul, torch.matmul: _matmul, torch.bmm: _matmul, torch.reshape: _dims_op("RESHAPE"),
    torch.permute: _dims_op("PERMUTE"), torch.transpose: _transpose, torch.swapdims: _transpose,
    torch.swapaxes: _swapaxes, torch.unsqueeze: _unsqueeze("UNSQUEEZE"),
    torch.squeeze: _unsqueeze("SQUEEZE"), torch.pow: _pow, operator.pow: _pow, torch.mean: _reduce("MEAN"),
    torch.sum: _reduce("REDUCE_SUM"), F.max_pool2d: _pool_fn(PoolType.POOL_MAX),
    math.sqrt: _unary("SQRT"), math.ceil: _unary("CEIL"), math.floor: _unary("FLOOR"), torch.sqrt: _unary("SQRT"),
    torch.amax: _reduce("REDUCE_MAX"), **{k: _compare for k in _COMPARISONS if not isinstance(k, str)},
    operator.invert: _logical_not, torch.logical_not: _logical_not, torch.masked_fill: _masked_fill,
    torch.tensor: _tensor, torch.finfo: _type_info("FINFO"), torch.iinfo: _type_info("IINFO"),
    operator.setitem: _setitem, F.embedding: _embedding_fn,
    F.scaled_dot_product_attention: _sdpa, torch.arange: _arange,
    F.avg_pool2d: _pool_fn(PoolType.POOL_AVG), F.adaptive_avg_pool2d: _adaptive_fn(PoolType.POOL_AVG),
    F.adaptive_max_pool2d: _adaptive_fn(PoolType.POOL_MAX), F.layer_norm: _layer_norm_fn,
    F.interpolate: _interpolate, F.upsample: _interpolate, torch.var: _var(False), torch.std: _var(True),
    F.normalize: _normalize, torch.full: _full(None), torch.zeros: _full(0.0), torch.ones: _full(1.0),
    torch.unflatten: _unflatten, torch.clamp: _clamp, torch.clip: _clamp, torch.clamp_min: _clamp,
    torch.clamp_max: _clamp, torch.triu: _TRIU, torch.tril: _TRIL, torch.log: _unary("LOG"),
    F.log_softmax: _log_softmax, torch.log_softmax: _log_softmax, torch.logsumexp: _logsumexp,
    F.softplus: _softplus, F.mish: _unary("MISH"), torch.norm: _norm, torch.linalg.vector_norm: _norm, F.pad: _pad, torch.einsum: _einsum, torch.abs: _unary("ABS"), torch.absolute: _unary("ABS"),
}

METHODS: dict[str, Callable] = {
    "add": _add, "add_": _add, "sub": _SUB, "mul": _MUL, "div": _DIV, "relu": _unary("RELU"), "relu_": _unary("RELU"),
    "sigmoid": _unary("SIGMOID"), "tanh": _unary("TANH"), "exp": _unary("EXP"), "rsqrt": _unary("RSQRT"),
    "softmax": _softmax, "flatten": _flatten, "split": _split, "chunk": _chunk, "size": _size,
    "matmul": _matmul, "bmm": _matmul, "view": _dims_op("VIEW"), "reshape": _dims_op("RESHAPE"),
    "permute": _dims_op("PERMUTE"), "expand": _dims_op("EXPAND"), "transpose": _transpose,
    "swapdims": _transpose, "swapaxes": _swapaxes,
    "unsqueeze": _unsqueeze("UNSQUEEZE"), "squeeze": _unsqueeze("SQUEEZE"), "view_as": _as, "reshape_as": _as,
    "type_as": _as, "expand_as": _expand_as, "to": _to, "float": _pass("FLOAT"), "contiguous": _pass("CONTIGUOUS"),
    "pow": _pow, "mean": _reduce("MEAN"), "sum": _reduce("REDUCE_SUM"), "amax": _reduce("REDUCE_MAX"),
    "sqrt": _unary("SQRT"), **{k: _compare for k in _COMPARISONS if isinstance(k, str)}, **CASTS,
    "logical_not": _logical_not, "masked_fill": _masked_fill, "masked_fill_": _masked_fill_, "clone": _pass("CONTIGUOUS"),
    "new_zeros": _new_full(0.0), "new_ones": _new_full(1.0), "new_full": _new_full(None), "dim": _dim, "t": _t, "var": _var(False),
    "std": _var(True), "unflatten": _unflatten, "clamp": _clamp, "clip": _clamp, "clamp_min": _clamp,
    "clamp_max": _clamp, "log": _unary("LOG"), "log_softmax": _log_softmax, "logsumexp": _logsumexp,
    "abs": _unary("ABS"), "sin": _unary("SIN"), "cos": _unary("COS"), "norm": _norm, "unbind": _unbind, "addcmul": _addcmul, "roll": _roll,
    "cumsum": _cumsum, "repeat": _dims_op("REPEAT"), "log1p": _unary("LOG1P"),
}
# converters that check what they read themselves (masks, named tuples, a module's own parameters)
_MASK_AWARE = (_pack, _batch_norm_fn, _group_norm_fn, _linear_fn, _conv2d_fn, _getitem, _compare, _logical_not, _masked_fill, _masked_fill_, _embedding_fn,
               _softmax, _layer_norm_fn, _getattr, _sdpa, _TRIU, _TRIL, _add)


def _stochastic_depth(ctx, node):
    """torchvision.ops.stochastic_depth (EfficientNet, ConvNeXt): the identity outside training or
    at p = 0; in training it drops whole samples or rows, which no FFModel layer does."""
    a = _bind(ctx, node, ["input", "p", "mode", "training"], {"training": True})
    if a["training"] is False or a["p"] == 0:
        ctx.add(node, "IDENTITY", [_tensor_arg(ctx, node, a["input"])])
    else:
        raise ctx.error(node, f"stochastic_depth(p={a['p']}, mode={a['mode']!r}) in training drops whole samples, "
                              f"which no FFModel layer does; convert the module in eval mode (module.eval(), with "
                              f"its BatchNorms in train mode) or with p=0")


def _guard(ctx, node):
    """torch.fx's check that an argument held at its default (``targets=None``) is it: no layer."""
    ctx.ignored.add(node.name)


# functions of optional packages, or private ones, by their qualified name (flexrt does not import
# those packages)
BY_NAME: dict[str, Callable] = {"torchvision.ops.stochastic_depth.stochastic_depth": _stochastic_depth,
                                "torch.fx._symbolic_trace._assert_is_none": _guard}
FUNCTIONS[torch._assert] = _guard   # a shape check (ViT's image size): no layer


def convert_call(ctx: _Ctx, node: fx.Node) -> None:
    table = FUNCTIONS if node.op == "call_function" else METHODS
    target = node.target
    while node.op == "call_function" and target not in table and hasattr(target, "__wrapped__"):
        target = target.__wrapped__   # a tracer's wrapper left in place (HuggingFace's, after a failed trace)
    convert = table.get(target)
    if node.op == "call_function" and isinstance(node.target, type) and issubclass(node.target, tuple) and \
            hasattr(node.target, "_fields"):
        convert = _pack
    if convert is None and node.op == "call_function":
        target = node.target
        convert = BY_NAME.get(f"{getattr(target, '__module__', '')}.{getattr(target, '__name__', '')}")
    if convert is None:
        what = "method" if node.op == "call_method" else "function"
        raise ctx.error(node, f"the {what} has no FFModel mapping; supported {what}s: "
                              f"{', '.join(sorted(_label(t) for t in table))}")
    if convert not in _MASK_AWARE and convert is not _guard:
        ctx.check_inputs(node, device_ok=convert in (_arange, _to, _tensor) or node.target in _MADE)
    elif convert not in (_TRIU, _TRIL):
        ctx.emit_fulls(node)
    convert(ctx, node)


_MADE = (torch.full, torch.zeros, torch.ones)   # tensors made in forward: device= is allowed


def _label(t) -> str:
    if isinstance(t, str):
        return t
    mod = getattr(t, "__module__", None) or "torch"
    return f"{mod}.{getattr(t, '__name__', t)}"
