"""torch.fx graph -> ``IRNode``s (FlexFlow's text format, ``flexrt.torch._ir``). Imports torch.

Modules with an FFModel layer stay leaves of the trace (``Linear``, ``Conv2d``, ...) and map to one
node; ``TransformerEncoderLayer`` and ``TransformerEncoder`` (whose own forward cannot be traced)
map to the nodes of their computation (attention, residual adds, norms, feed-forward); every other
module is traced through. Functions and methods map by target (``operator.add``, ``torch.cat``,
``Tensor.view``, ``F.relu`` ...). Anything else raises ``ConfigError`` naming the fx node, its
target and the source line of the module's forward.

Entry points: ``_Ctx`` (the conversion's state), ``attribute``, ``MODULES`` (tracing: ``flexrt.torch._trace``).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch.nn import functional as F

from flexrt.errors import ConfigError, FrontendWarning, warn_caller
from flexrt.ir.enums import ActiMode, PoolType
from flexrt.torch._ir import IRNode, Ref
from flexrt.torch._trace import _attr
from flexrt.torch._windows import dilated_weight_kind

_NONE = ActiMode.AC_MODE_NONE.value
FILL_LIMIT = -1e9   # a masked value at most this (or -inf) zeroes the probability in float32 and float64


@dataclass(frozen=True)
class WeightSource:
    """The torch module whose parameters fill FFModel layer ``layer`` (``kind``: ``ff_layout``'s)."""

    layer: str
    kind: str
    module: nn.Module


def origin(node: fx.Node) -> str:
    """The target and the innermost source line of ``node`` (from fx's recorded stack trace)."""
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__qualname__", node.target)
    mod = getattr(node.target, "__module__", None)
    where = f"{node.op} {mod + '.' if mod and not isinstance(node.target, str) else ''}{target}"
    lines = [ln.strip() for ln in (node.stack_trace or "").strip().splitlines()]
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    files = [i for i, ln in enumerate(lines) if ln.startswith("File ") and "/torch/fx/" not in ln
             and "/torch/nn/modules/module.py" not in ln and torch_dir not in ln]
    if files:
        i = files[-1]
        loc = lines[i].replace("File ", "", 1).replace('", line ', ":").replace('"', "").split(",")[0]
        code = lines[i + 1] if i + 1 < len(lines) else ""
        where += f", {loc}" + (f": {code}" if code else "")
    return where


class _Ctx:
    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.nodes: list[IRNode] = []
        self.weights: list[WeightSource] = []
        self.first_layer: dict[int, str] = {}     # id(module) -> the layer that owns its weights
        self.param_owner: dict[int, str] = {}     # id(parameter) -> the module (qualified name) that has it
        self.tables: set[int] = set()             # id(parameter) of those read as embedding tables
        # causal masks (no IR node): fx node -> "keep" (True where a query sees a key: tril) or "hide"
        self.masks: dict[str, str] = {}
        # masked_fill of scores by a causal mask (no IR node): fx node -> the scores' IR name
        self.masked: dict[str, str] = {}
        # causal masks an attention may take as attn_mask (tgt_mask, src_mask): "bool" (True where a key
        # is hidden) or "additive" (-inf or <= -1e9 where hidden, 0 elsewhere)
        self.attn_masks: dict[str, str] = {}
        # torch.full / zeros / ones made in forward (no IR node until read: triu of one is a mask)
        self.fulls: dict[str, tuple] = {}
        self.ignored: set[str] = set()            # values no layer reads (x.device)
        self.held: set[str] = set()               # fx's checks of arguments held at their defaults: skipped
        # named tuples made in forward (GoogLeNet's outputs in training mode): fx node -> its items
        self.packs: dict[str, tuple] = {}
        self.fields: dict[str, tuple] = {}        # their field names
        # parameters read directly (get_attr; no IR node): fx node -> (qualified name, the parameter);
        # F.layer_norm maps them when they are one module's weight and bias
        self.params: dict[str, tuple[str, Any]] = {}
        self.consts: dict[str, Any] = {}          # values known when tracing (a parameter's shape)
        self.aliases: dict[str, str] = {}         # a tensor written in place -> the IR node of its last write
        self.live: set[str] | None = None         # the fx nodes the outputs need (None: all)
        # an attention built of its parts: (id(module), 0 | 1 | 2) -> its query / key / value projection's
        # weight source (one per module, so a second call shares the dense layers)
        self.projections: dict[tuple, Any] = {}

    def error(self, node: fx.Node, message: str) -> ConfigError:
        return ConfigError(f"torch node '{node.name}' ({origin(node)}): {message}")

    def add(self, node: fx.Node, op: str, inputs, fields=(), keywords=(), name: str | None = None,
            users: tuple | None = None) -> str:
        name = name or node.name
        outs = users if users is not None else tuple(u.name for u in node.users)
        if self.aliases:      # a tensor written in place (x[i] = v, x.masked_fill_): later reads see the write
            inputs = [self.aliases.get(i, i) for i in inputs]
            fields, keywords = [self.current(f) for f in fields], [(k, self.current(v)) for k, v in keywords]
        self.nodes.append(IRNode(name, tuple(inputs), outs, op, tuple(fields), tuple(keywords), origin(node)))
        return name

    def current(self, v: Any) -> Any:
        """``v`` (a field: a Ref, or a tuple or slice of them) with each tensor written in place read
        as the node that wrote it last."""
        if isinstance(v, Ref):
            return Ref(self.aliases.get(v.name, v.name))
        if isinstance(v, tuple):
            return tuple(self.current(x) for x in v)
        if isinstance(v, slice):
            return slice(self.current(v.start), self.current(v.stop), self.current(v.step))
        return v

    def layer(self, node: fx.Node, op: str, module: nn.Module, kind: str, inputs, fields=(), keywords=(),
              name: str | None = None, users: tuple | None = None) -> str:
        """A node with weights: the first use of ``module`` owns them, later uses share them."""
        name = name or node.name
        owner = self.first_layer.get(id(module))
        if owner is None:
            self.first_layer[id(module)] = name
            self.weights.append(WeightSource(name, kind, module))
            self._tied(node, module)
        else:
            keywords = tuple(keywords) + (("shares", owner),)
        return self.add(node, op, inputs, fields, keywords, name, users)


    def _tied(self, node: fx.Node, module: nn.Module) -> None:
        """Warn when ``module`` holds a parameter another module holds too (tied weights, as a GPT's
        output layer and token embedding): FFModel gives each layer its own weights."""
        where = node.target if isinstance(node.target, str) else node.name
        for pname, p in module.named_parameters(recurse=False):
            other = self.param_owner.setdefault(id(p), f"{where}.{pname}")
            if other != f"{where}.{pname}":
                warn_caller(f"torch node '{node.name}' ({origin(node)}): parameter '{where}.{pname}' is "
                            f"'{other}' too (tied weights); FFModel gives each layer its own weights, so the two "
                            f"train apart and the model has {p.numel()} parameters more than torch counts",
                            FrontendWarning)

    def check_inputs(self, node: fx.Node, device_ok: bool = False, masks_ok: bool = False,
                     packs_ok: bool = False) -> None:
        """Check what ``node`` reads that has no IR value of its own: a causal mask or masked scores
        (refused outside their supported use; ``masks_ok``: an attention module checks its masks
        itself), a tensor's device (refused unless ``device_ok``: arange's ``device=``), a
        parameter's shape (refused), a parameter (made a PARAMETER here), a tensor made in forward
        (made a FULL here); a named tuple made in forward only where ``packs_ok`` (the output)."""
        self.emit_fulls(node)
        for arg in node.all_input_nodes:
            if (arg.name in self.masks or arg.name in self.masked) and not (masks_ok and arg.name in self.masks):
                raise self.error(node, f"reads '{arg.name}', a causal mask (or scores masked by one); flexrt maps "
                                       f"a mask only as scores.masked_fill(mask == 0, float('-inf')) followed by "
                                       f"softmax(dim=-1), from a buffer holding torch.tril(torch.ones(T, T))")
            if arg.name in self.packs and not packs_ok:
                raise self.error(node, f"reads '{arg.name}', a named tuple made in forward; flexrt maps one as "
                                       f"the model's outputs, or read by an index or a field name")
            if arg.name in self.ignored and not device_ok:
                raise self.error(node, f"reads '{arg.name}' (a tensor's device), which no FFModel layer computes")
            if arg.name in self.params:
                self.free_parameter(arg)
            elif arg.name in self.consts:
                raise self.error(node, f"reads '{arg.name}', a parameter's shape, which flexrt maps only as "
                                       f"F.layer_norm's normalized_shape")


    def emit_fulls(self, node: fx.Node) -> None:
        """Make the FULL nodes of the tensors made in forward that ``node`` reads (deferred until read:
        triu of one may be a causal mask instead)."""
        for arg in node.all_input_nodes:
            if arg.name in self.fulls:
                sizes, fill, kws = self.fulls.pop(arg.name)
                self.add(arg, "FULL", [], [sizes, fill], kws)

    def affine_parameters(self, node: fx.Node, m: nn.Module) -> list[str]:
        """PARAMETER nodes of a normalization module's ``weight`` and ``bias``, read by ``node``."""
        return [self.parameter(node, p, f"{node.name}.{k}", (node.name,), f"{node.target}.{k}")
                for k, p in (("weight", m.weight), ("bias", m.bias))]

    def constant(self, node: fx.Node, name: str, value, users: tuple) -> str:
        """A CONSTANT node ``name`` of the tensor ``value`` (a buffer: its values, not trained)."""
        self.nodes.append(IRNode(name, (), users, "CONSTANT", (value.detach().to("cpu").numpy().copy(),), (),
                                 origin(node)))
        return name

    def free_parameter(self, node: fx.Node) -> None:
        """A parameter read directly (ViT's class token and position embedding, ConvNeXt's layer
        scale): a PARAMETER node, made where it is first read (``parameter``)."""
        target, param = self.params.pop(node.name)
        self.parameter(node, param, node.name, tuple(u.name for u in node.users), target)

    def parameter(self, node: fx.Node, param, name: str, users: tuple, target: str) -> str:
        """A PARAMETER node ``name`` of ``param`` (FFModel: a bias-free dense layer of the constant 1,
        its kernel the parameter's values, reshaped); a later node of the same parameter shares its
        kernel. Also a module's own parameters an operator built of several layers reads (a
        GroupNorm's scale and shift)."""
        owner = self.first_layer.get(id(param))
        if id(param) in self.tables:
            raise self.error(node, f"reads '{target}' whole, and an earlier node reads its rows by an index; "
                                   f"flexrt maps a parameter read one way only")
        keywords = [("dtype", str(param.dtype))] + ([("shares", owner)] if owner else [])
        if owner is None:
            self.first_layer[id(param)] = name
            self.weights.append(WeightSource(name, "parameter", _Holder(param)))
            self.param_owner.setdefault(id(param), target)
        shape = tuple(param.shape) or (1,)       # a 0-d parameter (CLIP's logit scale): one element
        self.nodes.append(IRNode(name, (), users, "PARAMETER", shape, tuple(keywords), origin(node)))
        return name

    def parameter_rows(self, node: fx.Node, table: fx.Node, index: fx.Node) -> str:
        """``table[index]``: a 2-D parameter read at integer indices (a relative position bias table
        at a buffer of positions, MaxViT's and Swin's) is an embedding whose table is the parameter
        (its rows' gradients add up, as torch's index backward does); a later read shares it."""
        param = _attr(self.gm, table.target)
        owner = self.first_layer.get(id(param))
        if owner is not None and id(param) not in self.tables or \
                any(u.target not in (operator.getitem, torch.nn.functional.embedding) and
                    not (u.target is getattr and u.args[1:] == ("device",)) for u in table.users):
            raise self.error(node, f"reads rows of '{table.target}' by an index, and another node reads it whole; "
                                   f"flexrt maps a parameter read one way only")
        if owner is None:
            self.first_layer[id(param)] = node.name
            self.tables.add(id(param))
            self.weights.append(WeightSource(node.name, "embedding", _Holder(param)))
            self.param_owner.setdefault(id(param), table.target)
        return self.add(node, "EMBEDDING", [index.name], [int(param.shape[0]), int(param.shape[1])],
                        [("shares", owner)] if owner else [])


class _Holder:
    """A free parameter as a weight source: ``weight`` is the parameter (``_params`` reads it)."""

    def __init__(self, param) -> None:
        self.weight, self.bias = param, None


def causal_kind(value: Any):
    """"keep" when ``value`` is [1, ..., 1, T, T] holding torch.tril(torch.ones(T, T)) (a query sees
    the keys where it is nonzero), "hide" for torch.triu(torch.ones(T, T), diagonal=1) (the keys a
    query must not see), else None; numbers or bools."""
    if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.shape[-1] != value.shape[-2] or \
            any(d != 1 for d in value.shape[:-2]) or value.is_complex():
        return None
    t = value.detach().reshape(value.shape[-2], value.shape[-1]).to("cpu") != 0
    keep = torch.ones_like(t, dtype=torch.bool).tril()
    return "keep" if torch.equal(t, keep) else "hide" if torch.equal(t, ~keep) else None


def attribute(ctx: _Ctx, node: fx.Node) -> None:
    """A get_attr node: a parameter is deferred to its reader (F.layer_norm's weight, else a
    PARAMETER); a causal mask buffer becomes a mask (no IR node); any other tensor buffer (RoPE's
    cos/sin, position ids) a constant of the model; anything else is refused."""
    value = ctx.gm
    for atom in node.target.split("."):
        value = getattr(value, atom, None)
    if isinstance(value, nn.Parameter):    # read later by F.layer_norm, or refused by its reader
        ctx.params[node.name] = (node.target, value)
        return
    kind = causal_kind(value)
    attn = None
    if kind == "hide":
        hidden = value.detach().reshape(value.shape[-2:]).to("cpu").triu(1)
        if value.dtype == torch.bool:
            attn = "bool"
        elif value.is_floating_point() and bool((hidden[hidden != 0] <= FILL_LIMIT).all()):
            attn = "additive"
    # a buffer an attention reads as its mask is causal only where it hides the future keys; else its values
    as_values = attn is None and any(u.op == "call_module" or u.target is F.scaled_dot_product_attention
                                     for u in node.users)
    if kind is not None and not as_values:
        ctx.masks[node.name] = kind
        if attn is not None:
            ctx.attn_masks[node.name] = attn
        return
    if isinstance(value, torch.Tensor) and not value.is_complex():   # a buffer (RoPE's cos/sin, position ids)
        ctx.constant(node, node.name, value, tuple(u.name for u in node.users))
        return
    raise ctx.error(node, f"reads the module's attribute '{node.target}' ({type(value).__name__}), which is not "
                          f"a parameter or a tensor buffer")


def _ref(v: Any) -> Any:
    if isinstance(v, fx.Node):
        return Ref(v.name)
    if isinstance(v, slice):   # x[..., : x.shape[-1] // 2]: bounds resolved when built
        return slice(_ref(v.start), _ref(v.stop), _ref(v.step))
    if isinstance(v, (tuple, list)):
        return tuple(_ref(x) for x in v)
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, torch.device):
        return None
    return v


def _bind(ctx: _Ctx, node: fx.Node, names: list[str], defaults: dict, skip: int = 0) -> dict:
    """The call's arguments by name (positional first, ``skip`` leading ones dropped)."""
    out = dict(defaults)
    args = node.args[skip:]
    if len(args) > len(names):
        raise ctx.error(node, f"takes at most {len(names)} argument(s) after the tensor, got {len(args)}")
    out.update(zip(names, args))
    for k, v in node.kwargs.items():
        if k not in names and k not in defaults:
            raise ctx.error(node, f"keyword argument {k}={v!r} is not supported; supported: {', '.join(names)}")
        out[k] = v
    return out


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


# ---- modules -------------------------------------------------------------------------------------
def _m_linear(ctx, node, m: nn.Linear):
    ctx.layer(node, "LINEAR", m, "dense", [node.args[0].name], [m.out_features, _NONE, int(m.bias is not None)],
              [("in_features", m.in_features)])


def _m_conv2d(ctx, node, m: nn.Conv2d):
    dilation = _pair(m.dilation)
    kind = dilated_weight_kind(m.groups, m.in_channels, m.out_channels, m.bias is not None)
    if dilation != (1, 1) and (kind is None or m.padding_mode != "zeros"):
        raise ctx.error(node, f"Conv2d with dilation={m.dilation}, groups={m.groups}, padding_mode="
                              f"{m.padding_mode!r}: a dilated convolution maps with groups=1, or depthwise without a "
                              f"bias, and zero padding")
    kh, kw = _pair(m.kernel_size)
    if m.padding == "same":
        span_h, span_w = dilation[0] * (kh - 1), dilation[1] * (kw - 1)
        if span_h % 2 or span_w % 2:
            raise ctx.error(node, f"padding='same' with an even kernel {kh}x{kw} pads unevenly; FFModel.conv2d pads "
                                  f"both sides equally")
        ph, pw = span_h // 2, span_w // 2
    else:
        ph, pw = (0, 0) if m.padding == "valid" else _pair(m.padding)
    sh, sw = _pair(m.stride)
    x = node.args[0].name
    if m.padding_mode != "zeros":    # reflect / replicate / circular: padded first, then a convolution without
        x = ctx.add(node, "PAD", [x], [(pw, pw, ph, ph)], [("mode", m.padding_mode)], name=f"{node.name}.pad",
                    users=(node.name,))
        ph = pw = 0
    fields = [m.out_channels, kh, kw, sh, sw, ph, pw, _NONE, m.groups, int(m.bias is not None)]
    if dilation != (1, 1):    # windows and a dense layer (flexrt.torch._windows)
        ctx.layer(node, "CONV2D_DILATED", m, kind, [x], fields, [("in_channels", m.in_channels), ("dilation", dilation)])
        return
    ctx.layer(node, "CONV2D", m, "conv2d", [x], fields, [("in_channels", m.in_channels)])


def _one(v) -> int:
    return v[0] if isinstance(v, (tuple, list)) else v


def _m_conv1d(ctx, node, m: nn.Conv1d):
    if _one(m.dilation) != 1:
        raise ctx.error(node, f"Conv1d with dilation={m.dilation}: FFModel's convolutions have dilation 1 only")
    k, s = _one(m.kernel_size), _one(m.stride)
    if m.padding == "same":
        if k % 2 == 0:
            raise ctx.error(node, f"padding='same' with an even kernel {k} pads unevenly")
        p = k // 2
    else:
        p = 0 if m.padding == "valid" else _one(m.padding)
    x = node.args[0].name
    if m.padding_mode != "zeros":
        x = ctx.add(node, "PAD", [x], [(p, p)], [("mode", m.padding_mode)], name=f"{node.name}.pad",
                    users=(node.name,))
        p = 0
    ctx.layer(node, "CONV1D", m, "conv1d", [x], [m.out_channels, k, s, p, _NONE, m.groups, int(m.bias is not None)],
              [("in_channels", m.in_channels)])


def _m_pool1d(pool: PoolType):
    def convert(ctx, node, m):
        if getattr(m, "ceil_mode", False) or _one(getattr(m, "dilation", 1)) != 1 or getattr(m, "return_indices", False) \
                or pool is PoolType.POOL_AVG and not m.count_include_pad and _one(m.padding):
            raise ctx.error(node, f"{type(m).__name__} with ceil_mode, dilation, return_indices or "
                                  f"count_include_pad=False: FFModel's pool2d has none of them")
        k = _one(m.kernel_size)
        ctx.add(node, "POOL1D", [node.args[0].name], [k, _one(m.stride) if m.stride else k, _one(m.padding),
                                                       pool.value])
    return convert


def _m_adaptive1d(pool: PoolType):
    def convert(ctx, node, m):
        ctx.add(node, "POOL1D", [node.args[0].name], [0, 0, 0, pool.value], [("output_size", _one(m.output_size))])
    return convert


def _traced(v) -> bool:
    return isinstance(v, fx.Node) or isinstance(v, (tuple, list)) and any(isinstance(x, fx.Node) for x in v)


def _pool_fields(ctx, node, kernel, stride, padding, dilation, ceil, pool: PoolType):
    if _pair(dilation) != (1, 1):
        raise ctx.error(node, f"pooling with dilation={dilation}: FFModel.pool2d has dilation 1 only")
    if any(_traced(v) for v in (kernel, stride, padding)):   # sizes read from the tensor: resolved when built
        kws = [("kernel", _ref(kernel)), ("padding", _ref(padding))]
        kws += [("stride", _ref(stride))] if stride not in (None, ()) else []
        return [0, 0, 0, pool.value, _NONE], kws + ([("ceil_mode", True)] if ceil else [])
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride if stride not in (None, ()) else kernel)
    ph, pw = _pair(padding)
    kws = [(k, v) for k, v, h in (("kernel_w", kw, kh), ("stride_w", sw, sh), ("padding_w", pw, ph)) if v != h]
    if ceil:
        kws.append(("ceil_mode", True))
    return [kh, sh, ph, pool.value, _NONE], kws


def _divisor_keywords(count_include_pad: bool, divisor) -> list:
    """Average pooling's divisor when it is not the whole window: the positions inside the input
    (count_include_pad=False) or a given number (divisor_override); the builder rescales."""
    return ([("exclude_pad", True)] if not count_include_pad else []) + \
        ([("divisor", divisor)] if divisor is not None else [])


def _m_pool(pool: PoolType):
    def convert(ctx, node, m):
        if pool is PoolType.POOL_MAX and m.return_indices:
            raise ctx.error(node, "MaxPool2d(return_indices=True): FFModel.pool2d returns no indices")
        fields, kws = _pool_fields(ctx, node, m.kernel_size, m.stride, m.padding, getattr(m, "dilation", 1),
                                   m.ceil_mode, pool)
        if pool is PoolType.POOL_AVG:
            kws += _divisor_keywords(m.count_include_pad, m.divisor_override)
        ctx.add(node, "POOL2D", [node.args[0].name], fields, kws)
    return convert


def _m_adaptive(pool: PoolType):
    def convert(ctx, node, m):
        ctx.add(node, "POOL2D", [node.args[0].name], [3, 1, 0, pool.value, _NONE],
                [("output_size", _pair(m.output_size))])
    return convert


def _m_conv_transpose2d(ctx, node, m: nn.ConvTranspose2d):
    a = _bind(ctx, node, ["input", "output_size"], {"output_size": None})
    if a["output_size"] is not None:
        raise ctx.error(node, "ConvTranspose2d with output_size= is not supported; give the module its "
                              "output_padding instead")
    if _pair(m.dilation) != (1, 1) or m.padding_mode != "zeros":
        raise ctx.error(node, f"ConvTranspose2d with dilation={m.dilation}, padding_mode={m.padding_mode!r}: only "
                              f"dilation 1 and zero padding map")
    (kh, kw), (sh, sw), (ph, pw) = _pair(m.kernel_size), _pair(m.stride), _pair(m.padding)
    ctx.layer(node, "CONV_TRANSPOSE2D", m, "conv_transpose2d", [a["input"].name],
              [m.out_channels, kh, kw, sh, sw, ph, pw, _NONE, m.groups, int(m.bias is not None)],
              [("output_padding", _pair(m.output_padding)), ("in_channels", m.in_channels)])


# torch's interpolation modes -> (mode, coordinate transformation, rounding) of the builder's INTERPOLATE
_INTERPOLATION = {"nearest": ("nearest", "asymmetric", "floor"),
                  "nearest-exact": ("nearest", "half_pixel", "round_prefer_ceil"),
                  "linear": ("linear", "half_pixel", "floor"), "bilinear": ("linear", "half_pixel", "floor"),
                  "bicubic": ("cubic", "half_pixel", "floor")}


def interpolation(ctx, node, x: str, size, scale, mode: str, align_corners, recompute, antialias=False) -> None:
    """An INTERPOLATE node of F.interpolate's arguments (nn.Upsample's attributes)."""
    if mode not in _INTERPOLATION:
        raise ctx.error(node, f"interpolation mode {mode!r} is not supported; valid: {', '.join(_INTERPOLATION)}")
    if antialias:
        raise ctx.error(node, "interpolation with antialias=True is not supported")
    kind, coords, rounding = _INTERPOLATION[mode]
    if kind in ("linear", "cubic") and align_corners:
        coords = "align_corners"
    if (size is None) == (scale is None):
        raise ctx.error(node, "give exactly one of size and scale_factor")
    kws = [("mode", kind), ("coords", coords), ("rounding", rounding)]
    if mode in ("bilinear", "bicubic"):    # torch takes these of [N, C, H, W] only
        kws.append(("spatial", 2))
    if size is not None:
        kws.append(("size", _ref(size)))
    else:
        scale = tuple(float(v) for v in scale) if isinstance(scale, (tuple, list)) else float(scale)
        kws.append(("scale", scale))
        if recompute:      # the step is in/out of the rounded size, as torch computes it then
            kws.append(("recompute", True))
    ctx.add(node, "INTERPOLATE", [x], [], kws)


def _m_upsample(ctx, node, m: nn.Upsample):
    interpolation(ctx, node, node.args[0].name, m.size, m.scale_factor, m.mode, m.align_corners,
                  getattr(m, "recompute_scale_factor", None))


def _m_group_norm(ctx, node, m: nn.GroupNorm):
    ins = [node.args[0].name]
    if m.affine:
        ins += ctx.affine_parameters(node, m)
    ctx.add(node, "GROUP_NORM", ins, [m.num_groups], [("eps", m.eps)])


def _m_instance_norm(ctx, node, m):
    if not m.training and m.track_running_stats:   # eval mode with running statistics: a frozen batch norm
        return _m_batch_norm(ctx, node, m)
    ins = [node.args[0].name]
    if m.affine:
        ins += ctx.affine_parameters(node, m)
    rank = 3 if isinstance(m, nn.InstanceNorm1d) else 4
    ctx.add(node, "GROUP_NORM", ins, [None], [("eps", m.eps), ("rank", rank)])


def _m_embedding_bag(ctx, node, m: nn.EmbeddingBag):
    a = _bind(ctx, node, ["input", "offsets", "per_sample_weights"], {"offsets": None, "per_sample_weights": None})
    problems = [f"{k}={v!r}" for k, v, ok in (
        ("mode", m.mode, m.mode in ("sum", "mean")), ("offsets", "given", a["offsets"] is None),
        ("per_sample_weights", "given", a["per_sample_weights"] is None), ("padding_idx", m.padding_idx,
         m.padding_idx is None), ("max_norm", m.max_norm, m.max_norm is None),
        ("scale_grad_by_freq", m.scale_grad_by_freq, not m.scale_grad_by_freq)) if not ok]
    if problems:
        raise ctx.error(node, f"EmbeddingBag with {', '.join(problems)}: FFModel.embedding sums or averages bags "
                              f"of equal length, given as a 2-D index tensor [batch, bag] (mode 'sum' or 'mean', no "
                              f"offsets, per-sample weights, padding_idx, max_norm or scale_grad_by_freq)")
    ctx.layer(node, "EMBEDDING", m, "embedding", [a["input"].name], [m.num_embeddings, m.embedding_dim],
              [("aggr", "sum" if m.mode == "sum" else "avg")])


def _m_unflatten(ctx, node, m: nn.Unflatten):
    ctx.add(node, "UNFLATTEN", [node.args[0].name], [m.dim, tuple(m.unflattened_size)])


def _m_batch_norm(ctx, node, m):
    if not m.training and m.track_running_stats:   # eval mode: torch normalizes with the running statistics
        ins = [node.args[0].name]
        ins += [ctx.constant(node, f"{node.name}.{k}", getattr(m, k), (node.name,))
                for k in ("running_mean", "running_var")]
        if m.affine:
            ins += ctx.affine_parameters(node, m)
        ctx.add(node, "FROZEN_BATCH_NORM", ins, [], [("eps", m.eps)])
        return
    if not m.affine:
        raise ctx.error(node, f"{type(m).__name__}(affine=False) in train mode: FFModel.batch_norm always learns a "
                              f"scale and a bias; valid: affine=True (or the module in eval mode)")
    ctx.layer(node, "BATCH_NORM", m, "batch_norm", [node.args[0].name], [], [("eps", m.eps)] if m.eps != 1e-5 else [])


def _m_layer_norm(ctx, node, m: nn.LayerNorm):
    kws = [("shape", tuple(m.normalized_shape)), ("eps", m.eps)]
    if not m.elementwise_affine:
        kws.append(("affine", False))
    elif m.bias is None:
        kws.append(("bias", False))
    if m.elementwise_affine:
        ctx.layer(node, "LAYER_NORM", m, "layer_norm", [node.args[0].name], [], kws)
    else:
        ctx.add(node, "LAYER_NORM", [node.args[0].name], [], kws)


def _m_embedding(ctx, node, m: nn.Embedding):
    problems = [f"{k}={v!r}" for k, v, ok in (("max_norm", m.max_norm, m.max_norm is None), ("sparse", m.sparse,
                not m.sparse), ("scale_grad_by_freq", m.scale_grad_by_freq, not m.scale_grad_by_freq)) if not ok]
    if problems:
        raise ctx.error(node, f"Embedding with {', '.join(problems)}: FFModel.embedding has no such option (valid: "
                              f"max_norm=None, sparse=False, scale_grad_by_freq=False)")
    if m.padding_idx is not None:   # the forward is the table's rows; only training differs
        warn_caller(f"torch node '{node.name}' ({origin(node)}): Embedding(padding_idx={m.padding_idx}): FFModel's "
                    f"embedding trains that row too (torch gives it no gradient); the forward is the same",
                    FrontendWarning)
    ctx.layer(node, "EMBEDDING", m, "embedding", [node.args[0].name], [m.num_embeddings, m.embedding_dim])


def _m_softmax(ctx, node, m):
    # no dim: torch's implicit one (dim 0 for inputs of rank 0, 1 or 3, else 1), resolved when built
    ctx.add(node, "SOFTMAX", [node.args[0].name], [], [("dim", m.dim if m.dim is not None else "implicit")])


def _m_log_softmax(ctx, node, m):
    ctx.add(node, "LOG_SOFTMAX", [node.args[0].name], [], [("dim", m.dim if m.dim is not None else "implicit")])


SOFTPLUS_MIN_THRESHOLD = 15.0


def check_softplus_threshold(ctx, node, threshold) -> None:
    """FFModel's softplus is exact everywhere, where torch's returns x past ``threshold`` (of beta x);
    the two differ by log(1 + exp(-threshold)) / beta there, under float32's resolution only for a
    threshold of at least 15 (torch's default is 20)."""
    if not isinstance(threshold, (int, float)) or threshold < SOFTPLUS_MIN_THRESHOLD:
        raise ctx.error(node, f"softplus with threshold={threshold!r}: torch returns x itself past the threshold, "
                              f"flexrt's softplus is exact there; they agree only for a threshold of at least "
                              f"{SOFTPLUS_MIN_THRESHOLD:g} (torch's default: 20)")


def _m_softplus(ctx, node, m):
    check_softplus_threshold(ctx, node, m.threshold)
    ctx.add(node, "SOFTPLUS", [node.args[0].name], [float(m.beta)])


_PAD_MODULES = {nn.ZeroPad1d: "constant", nn.ZeroPad2d: "constant", nn.ConstantPad1d: "constant",
                nn.ConstantPad2d: "constant", nn.ReflectionPad1d: "reflect", nn.ReflectionPad2d: "reflect",
                nn.ReplicationPad1d: "replicate", nn.ReplicationPad2d: "replicate", nn.CircularPad1d: "circular",
                nn.CircularPad2d: "circular"}


def _m_pad(ctx, node, m):
    kws = [("mode", _PAD_MODULES[type(m)])] + ([("value", float(m.value))] if getattr(m, "value", 0) else [])
    ctx.add(node, "PAD", [node.args[0].name], [tuple(m.padding)], kws)


def _m_prelu(ctx, node, m: nn.PReLU):
    w = ctx.parameter(node, m.weight, f"{node.name}.weight", (node.name,), f"{node.target}.weight")
    ctx.add(node, "PRELU", [node.args[0].name, w])


def _m_dropout(ctx, node, m):
    # in eval mode a Dropout passes its input through, as F.dropout(training=False) does
    if m.training and m.p > 0:
        ctx.add(node, "DROPOUT", [node.args[0].name], [float(m.p)])
    else:
        ctx.add(node, "IDENTITY", [node.args[0].name])


def _m_flatten(ctx, node, m: nn.Flatten):
    kws = [(k, v) for k, v, d in (("start_dim", m.start_dim, 1), ("end_dim", m.end_dim, -1)) if v != d]
    ctx.add(node, "FLAT", [node.args[0].name], [], kws)


def _m_leaky_relu(ctx, node, m):
    ctx.add(node, "LEAKY_RELU", [node.args[0].name], [float(m.negative_slope)])


def _m_unary(op: str, check: Callable | None = None):
    def convert(ctx, node, m):
        if check is not None:
            problem = check(m)
            if problem:
                raise ctx.error(node, problem)
        ctx.add(node, op, [node.args[0].name])
    return convert


def _m_unfold(ctx, node, m: nn.Unfold):
    """nn.Unfold (im2col): FFModel's split, reshape and concat (``flexrt.torch._windows``)."""
    ctx.add(node, "UNFOLD", [node.args[0].name], [_pair(v) for v in (m.kernel_size, m.dilation, m.padding, m.stride)])


def _m_gelu(ctx, node, m: nn.GELU):
    """nn.GELU: FFModel's exact gelu, or (approximate='tanh') its tanh approximation built of
    element-wise layers (``flexrt.model.composites.gelu_tanh``)."""
    if m.approximate not in ("none", "tanh"):
        raise ctx.error(node, f"GELU(approximate={m.approximate!r}); valid: 'none', 'tanh'")
    ctx.add(node, "GELU_TANH" if m.approximate == "tanh" else "GELU", [node.args[0].name])


def _m_alpha(op: str):
    """ELU and CELU: the module's alpha a field (an ELU of alpha 1 is FFModel's elu)."""
    def convert(ctx, node, m):
        ctx.add(node, op, [node.args[0].name], [float(m.alpha)])
    return convert


def _m_hardtanh(ctx, node, m):
    ctx.add(node, "CLAMP", [node.args[0].name], [float(m.min_val), float(m.max_val)])


def _m_pixel_shuffle(ctx, node, m):
    ctx.add(node, "PIXEL_SHUFFLE", [node.args[0].name], [m.upscale_factor])


def _m_glu(ctx, node, m):
    ctx.add(node, "GLU", [node.args[0].name], [m.dim])


MODULES: dict[type, Callable] = {
    nn.Linear: _m_linear, nn.Conv2d: _m_conv2d, nn.MaxPool2d: _m_pool(PoolType.POOL_MAX),
    nn.AvgPool2d: _m_pool(PoolType.POOL_AVG), nn.AdaptiveAvgPool2d: _m_adaptive(PoolType.POOL_AVG),
    nn.AdaptiveMaxPool2d: _m_adaptive(PoolType.POOL_MAX), nn.BatchNorm2d: _m_batch_norm,
    nn.BatchNorm1d: _m_batch_norm, nn.LayerNorm: _m_layer_norm, nn.Embedding: _m_embedding,
    nn.Softmax: _m_softmax, nn.Dropout: _m_dropout, nn.Flatten: _m_flatten, nn.ReLU: _m_unary("RELU"),
    nn.GELU: _m_gelu, nn.Unfold: _m_unfold, nn.Sigmoid: _m_unary("SIGMOID"), nn.Tanh: _m_unary("TANH"),
    nn.ELU: _m_alpha("ELU"), nn.CELU: _m_alpha("CELU"), nn.SELU: _m_unary("SELU"), nn.Softsign: _m_unary("SOFTSIGN"),
    nn.Hardtanh: _m_hardtanh, nn.GLU: _m_glu, nn.PixelShuffle: _m_pixel_shuffle, nn.Identity: _m_unary("IDENTITY"), nn.SiLU: _m_unary("SILU"),
    nn.ReLU6: _m_unary("RELU6"), nn.LeakyReLU: _m_leaky_relu, nn.Hardsigmoid: _m_unary("HARDSIGMOID"),
    nn.Hardswish: _m_unary("HARDSWISH"),
    nn.ConvTranspose2d: _m_conv_transpose2d, nn.Upsample: _m_upsample,
    nn.UpsamplingNearest2d: _m_upsample, nn.UpsamplingBilinear2d: _m_upsample, nn.GroupNorm: _m_group_norm,
    nn.InstanceNorm1d: _m_instance_norm, nn.InstanceNorm2d: _m_instance_norm, nn.EmbeddingBag: _m_embedding_bag,
    nn.Unflatten: _m_unflatten, nn.LogSoftmax: _m_log_softmax, nn.Softplus: _m_softplus, nn.Mish: _m_unary("MISH"),
    nn.PReLU: _m_prelu, nn.Conv1d: _m_conv1d, nn.MaxPool1d: _m_pool1d(PoolType.POOL_MAX),
    nn.AvgPool1d: _m_pool1d(PoolType.POOL_AVG), nn.AdaptiveAvgPool1d: _m_adaptive1d(PoolType.POOL_AVG),
    nn.AdaptiveMaxPool1d: _m_adaptive1d(PoolType.POOL_MAX), **{t: _m_pad for t in _PAD_MODULES},
}

# the transformer modules' converters use this module's context; they join the table here
from flexrt.torch._fx_recurrent import RECURRENT_MODULES  # noqa: E402
from flexrt.torch._fx_transformer import TRANSFORMER_MODULES  # noqa: E402

MODULES.update(TRANSFORMER_MODULES)
MODULES.update(RECURRENT_MODULES)
