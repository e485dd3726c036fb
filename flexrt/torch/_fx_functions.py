"""torch.fx ``call_function`` / ``call_method`` nodes -> ``IRNode``s (see ``flexrt.torch._fx``).

One converter per target family; a target not in ``FUNCTIONS`` / ``METHODS`` raises ``ConfigError``
naming the node, its target and its source line. Imports torch.

Entry points: ``FUNCTIONS``, ``METHODS``, ``convert_call``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import fx

from flexrt.ir.enums import PoolType
from flexrt.torch._fx import _bind, _Ctx, _pool_fields, _ref

_NUMBER = (int, float)


def _tensor_arg(ctx: _Ctx, node: fx.Node, v, what: str = "its input") -> str:
    if not isinstance(v, fx.Node):
        raise ctx.error(node, f"{what} must be a traced value, got {type(v).__name__} {v!r}")
    return v.name


def _binary(op: str, scalar_op: str, commutes: bool):
    """x op y for two traced values (the builder computes sizes in Python and tensors as layers),
    or a traced value and a number (a scalar layer; ``reverse`` when the number comes first)."""
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", "other", "alpha", "rounding_mode"], {"alpha": 1, "rounding_mode": None})
        x, y = a["input"], a["other"]
        if a["alpha"] != 1 or a["rounding_mode"] is not None:
            raise ctx.error(node, f"alpha={a['alpha']}, rounding_mode={a['rounding_mode']!r} are not supported")
        if isinstance(x, fx.Node) and isinstance(y, fx.Node):
            ctx.add(node, op, [x.name, y.name])
        elif isinstance(x, fx.Node) and isinstance(y, _NUMBER):
            ctx.add(node, scalar_op, [x.name], [y])
        elif isinstance(y, fx.Node) and isinstance(x, _NUMBER):
            ctx.add(node, scalar_op, [y.name], [x], [] if commutes else [("reverse", True)])
        else:
            raise ctx.error(node, f"operands must be traced values or numbers, got {x!r} and {y!r}")
    return convert


def _neg(ctx, node):
    ctx.add(node, "SCALAR_MULTIPLY", [_tensor_arg(ctx, node, node.args[0])], [-1.0])


def _unary(op: str, extra: tuple = ()):
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", *extra], {"inplace": False, "approximate": "none", "alpha": 1.0})
        if a["approximate"] != "none" or a["alpha"] != 1.0:
            raise ctx.error(node, f"approximate={a['approximate']!r}, alpha={a['alpha']} are not supported "
                                  f"(FFModel's gelu is exact, its elu has alpha 1)")
        ctx.add(node, op, [_tensor_arg(ctx, node, a["input"])])
    return convert


def _softmax(ctx, node):
    a = _bind(ctx, node, ["input", "dim", "_stacklevel", "dtype"], {"dim": None, "dtype": None})
    if a["dtype"] is not None:
        raise ctx.error(node, "softmax(dtype=...) is not supported; cast the input first")
    ctx.add(node, "SOFTMAX", [_tensor_arg(ctx, node, a["input"])], [],
            [("dim", a["dim"])] if a["dim"] is not None else [])


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


def _cat(ctx, node):
    a = _bind(ctx, node, ["tensors", "dim"], {"dim": 0})
    ts = a["tensors"]
    if not isinstance(ts, (list, tuple)) or not ts:
        raise ctx.error(node, f"tensors must be a non-empty list of traced tensors, got {ts!r}")
    ctx.add(node, "CONCAT", [_tensor_arg(ctx, node, t, f"tensor {i}") for i, t in enumerate(ts)], [a["dim"]])


def _split(ctx, node):
    a = _bind(ctx, node, ["tensor", "split_size_or_sections", "dim"], {"dim": 0, "split_size": None})
    s = a.get("split_size_or_sections", a["split_size"])
    kw = ("split_size", s) if isinstance(s, int) else ("sections", tuple(s))
    ctx.add(node, "SPLIT", [_tensor_arg(ctx, node, a["tensor"])], [a["dim"]], [kw])


def _chunk(ctx, node):
    a = _bind(ctx, node, ["input", "chunks", "dim"], {"dim": 0})
    ctx.add(node, "SPLIT", [_tensor_arg(ctx, node, a["input"])], [a["dim"]], [("chunks", a["chunks"])])


def _getitem(ctx, node):
    x, index = node.args
    ctx.add(node, "GETITEM", [_tensor_arg(ctx, node, x)], list(_ref(index)) if isinstance(index, tuple)
            else [_ref(index)])


def _getattr(ctx, node):
    x, attr = node.args
    ctx.add(node, "GETATTR", [_tensor_arg(ctx, node, x)], [attr])


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


def _transpose(ctx, node):
    a = _bind(ctx, node, ["input", "dim0", "dim1"], {})
    ctx.add(node, "TRANSPOSE", [_tensor_arg(ctx, node, a["input"])], [a["dim0"], a["dim1"]])


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


def _to(ctx, node):
    x = _tensor_arg(ctx, node, node.args[0])
    rest = [a for a in node.args[1:] if isinstance(a, torch.dtype)]
    if "dtype" in node.kwargs:
        rest = [node.kwargs["dtype"]]
    others = [a for a in node.args[1:] if isinstance(a, fx.Node)]
    if others:
        ctx.add(node, "TYPE_AS", [x, others[0].name])
    else:
        ctx.add(node, "TO", [x], [str(rest[0])] if rest else [])


def _pass(op: str):
    def convert(ctx, node):
        ctx.add(node, op, [_tensor_arg(ctx, node, node.args[0])])
    return convert


def _pow(ctx, node):
    a = _bind(ctx, node, ["input", "exponent"], {})
    if isinstance(a["exponent"], fx.Node):
        raise ctx.error(node, "pow with a traced exponent is not supported; valid: a number")
    ctx.add(node, "POW", [_tensor_arg(ctx, node, a["input"])], [a["exponent"]])


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
        a = _bind(ctx, node, ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode",
                              "count_include_pad", "divisor_override", "return_indices"],
                  {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False, "count_include_pad": True,
                   "divisor_override": None, "return_indices": False})
        if not a["count_include_pad"] or a["divisor_override"] is not None or a["return_indices"]:
            raise ctx.error(node, "count_include_pad=False, divisor_override and return_indices are not supported")
        fields, kws = _pool_fields(ctx, node, a["kernel_size"], a["stride"], a["padding"], a["dilation"],
                                   a["ceil_mode"], pool)
        ctx.add(node, "POOL2D", [_tensor_arg(ctx, node, a["input"])], fields, kws)
    return convert


def _adaptive_fn(pool: PoolType):
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", "output_size", "return_indices"], {"return_indices": False})
        out = a["output_size"]
        ctx.add(node, "POOL2D", [_tensor_arg(ctx, node, a["input"])], [3, 1, 0, pool.value, 10],
                [("output_size", (out, out) if isinstance(out, int) else tuple(out))])
    return convert


def _layer_norm_fn(ctx, node):
    a = _bind(ctx, node, ["input", "normalized_shape", "weight", "bias", "eps"],
              {"weight": None, "bias": None, "eps": 1e-5})
    if a["weight"] is not None or a["bias"] is not None:
        raise ctx.error(node, "F.layer_norm with weight/bias tensors: use nn.LayerNorm (FFModel has no "
                              "free-standing weight)")
    shape = a["normalized_shape"]
    ctx.add(node, "LAYER_NORM", [_tensor_arg(ctx, node, a["input"])], [],
            [("shape", tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)), ("eps", a["eps"]),
             ("affine", False)])


_ADD = _binary("ADD", "SCALAR_ADD", True)
_SUB = _binary("SUBTRACT", "SCALAR_SUB", False)
_MUL = _binary("MULTIPLY", "SCALAR_MULTIPLY", True)
_DIV = _binary("DIVIDE", "SCALAR_TRUEDIV", False)
_FLOORDIV = _binary("FLOOR_DIVIDE", "SCALAR_FLOORDIV", False)

FUNCTIONS: dict[Callable, Callable] = {
    operator.add: _ADD, operator.iadd: _ADD, torch.add: _ADD, operator.sub: _SUB, operator.isub: _SUB,
    torch.sub: _SUB, torch.subtract: _SUB, operator.mul: _MUL, operator.imul: _MUL, torch.mul: _MUL,
    torch.multiply: _MUL, operator.truediv: _DIV, operator.itruediv: _DIV, torch.div: _DIV, torch.true_divide: _DIV,
    operator.floordiv: _FLOORDIV, operator.neg: _neg, torch.neg: _neg,
    torch.maximum: _binary("MAX", "", True), torch.minimum: _binary("MIN", "", True),
    F.relu: _unary("RELU"), torch.relu: _unary("RELU"), F.gelu: _unary("GELU"), torch.sigmoid: _unary("SIGMOID"),
    F.silu: _unary("SILU"), F.relu6: _unary("RELU6"), F.hardsigmoid: _unary("HARDSIGMOID"),
    F.hardswish: _unary("HARDSWISH"),
    F.sigmoid: _unary("SIGMOID"), torch.tanh: _unary("TANH"), F.tanh: _unary("TANH"), F.elu: _unary("ELU"),
    torch.exp: _unary("EXP"), torch.sin: _unary("SIN"), torch.cos: _unary("COS"), torch.rsqrt: _unary("RSQRT"),
    F.softmax: _softmax, torch.softmax: _softmax, F.dropout: _dropout, torch.flatten: _flatten, torch.cat: _cat,
    torch.concat: _cat, torch.split: _split, torch.chunk: _chunk, operator.getitem: _getitem, getattr: _getattr,
    operator.matmul: _matmul, torch.matmul: _matmul, torch.bmm: _matmul, torch.reshape: _dims_op("RESHAPE"),
    torch.permute: _dims_op("PERMUTE"), torch.transpose: _transpose, torch.unsqueeze: _unsqueeze("UNSQUEEZE"),
    torch.squeeze: _unsqueeze("SQUEEZE"), torch.pow: _pow, operator.pow: _pow, torch.mean: _reduce("MEAN"),
    torch.sum: _reduce("REDUCE_SUM"), F.max_pool2d: _pool_fn(PoolType.POOL_MAX),
    F.avg_pool2d: _pool_fn(PoolType.POOL_AVG), F.adaptive_avg_pool2d: _adaptive_fn(PoolType.POOL_AVG),
    F.adaptive_max_pool2d: _adaptive_fn(PoolType.POOL_MAX), F.layer_norm: _layer_norm_fn,
}

METHODS: dict[str, Callable] = {
    "add": _ADD, "add_": _ADD, "sub": _SUB, "mul": _MUL, "div": _DIV, "relu": _unary("RELU"), "relu_": _unary("RELU"),
    "sigmoid": _unary("SIGMOID"), "tanh": _unary("TANH"), "exp": _unary("EXP"), "rsqrt": _unary("RSQRT"),
    "softmax": _softmax, "flatten": _flatten, "split": _split, "chunk": _chunk, "size": _size,
    "matmul": _matmul, "bmm": _matmul, "view": _dims_op("VIEW"), "reshape": _dims_op("RESHAPE"),
    "permute": _dims_op("PERMUTE"), "expand": _dims_op("EXPAND"), "transpose": _transpose,
    "unsqueeze": _unsqueeze("UNSQUEEZE"), "squeeze": _unsqueeze("SQUEEZE"), "view_as": _as, "reshape_as": _as,
    "type_as": _as, "expand_as": _expand_as, "to": _to, "float": _pass("FLOAT"), "contiguous": _pass("CONTIGUOUS"),
    "pow": _pow, "mean": _reduce("MEAN"), "sum": _reduce("REDUCE_SUM"),
}


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


# functions of optional packages, by their qualified name (flexrt does not import those packages)
BY_NAME: dict[str, Callable] = {"torchvision.ops.stochastic_depth.stochastic_depth": _stochastic_depth}


def convert_call(ctx: _Ctx, node: fx.Node) -> None:
    table = FUNCTIONS if node.op == "call_function" else METHODS
    convert = table.get(node.target)
    if convert is None and node.op == "call_function":
        target = node.target
        convert = BY_NAME.get(f"{getattr(target, '__module__', '')}.{getattr(target, '__name__', '')}")
    if convert is None:
        what = "method" if node.op == "call_method" else "function"
        raise ctx.error(node, f"the {what} has no FFModel mapping; supported {what}s: "
                              f"{', '.join(sorted(_label(t) for t in table))}")
    convert(ctx, node)


def _label(t) -> str:
    if isinstance(t, str):
        return t
    mod = getattr(t, "__module__", None) or "torch"
    return f"{mod}.{getattr(t, '__name__', t)}"
