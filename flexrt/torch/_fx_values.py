"""torch.fx nodes whose values are masks, comparisons and constants rather than layers (see
``flexrt.torch._fx``).

- Causal masks (a buffer holding ``torch.tril(torch.ones(T, T))``, ``triu`` of a ``torch.full``,
  ``mask == 0``, ``~mask``) hold no IR node: ``scores.masked_fill(mask, -inf)`` read by
  ``softmax(dim=-1)`` is a causal softmax, and an attention takes them as ``attn_mask``.
- Any other comparison is a ``COMPARE`` node: of sizes, a Python bool when built; of tensors (``==``
  and ``!=``; a padding mask made from an input, ``mask == 0``), boolean tensors; ``~x`` of those a
  ``LOGICAL_NOT``, and ``x.masked_fill(mask, value)`` by them a ``MASKED_FILL`` (HuggingFace's
  ``_prepare_4d_attention_mask``: ``(1 - mask).masked_fill(..., torch.finfo(dtype).min)``).
- ``torch.tensor(data)`` is a ``TENSOR`` node (a number when 0-d, else an array constant);
  ``torch.finfo`` / ``torch.iinfo`` of a dtype (traced or not) an ``FINFO`` / ``IINFO`` node whose
  ``min``, ``max``, ``eps`` ... the builder reads; ``torch.full`` / ``zeros`` / ``ones`` (and their
  ``_like`` forms) a ``FULL`` made where first read (``triu`` of one may be a causal mask instead),
  ``torch.arange`` an ``ARANGE``.
- ``F.scaled_dot_product_attention`` with its mask: causal, additive (any floating tensor, such as
  the padding mask above or a relative position bias) or none.

Entry points: the converters ``FUNCTIONS`` and ``METHODS`` of ``flexrt.torch._fx_functions`` take.
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F
from torch import fx

from flexrt.errors import FrontendWarning, warn_caller
from flexrt.torch._fx import FILL_LIMIT, _attr, _bind, _Ctx, _ref
from flexrt.torch._ir import Ref
from flexrt.torch._values import MIRRORED

_COMPARISONS = {operator.eq: "EQ", torch.eq: "EQ", "eq": "EQ", operator.ne: "NE", torch.ne: "NE", "ne": "NE",
                torch.not_equal: "NE", operator.lt: "LT", torch.lt: "LT", "lt": "LT", operator.le: "LE",
                torch.le: "LE", "le": "LE", operator.gt: "GT", torch.gt: "GT", "gt": "GT", operator.ge: "GE",
                torch.ge: "GE", "ge": "GE"}


def _tensor_arg(ctx: _Ctx, node: fx.Node, v, what: str = "its input") -> str:
    if not isinstance(v, fx.Node):
        raise ctx.error(node, f"{what} must be a traced value, got {type(v).__name__} {v!r}")
    return v.name


# ---- causal masks (flexrt.torch._fx.attribute makes the first) ----------------------------------------


def _mask_getitem(ctx, node) -> None:
    """mask[:, :, :T, :T]: a top-left square of a causal mask is causal."""
    x, index = node.args
    index = index if isinstance(index, tuple) else (index,)
    full = slice(None, None, None)
    tail = index[-2:]

    def from_zero(s) -> bool:
        return isinstance(s, slice) and s.start in (None, 0) and s.step in (None, 1)

    square = len(tail) == 2 and all(from_zero(s) for s in tail) and (
        tail[0].stop is tail[1].stop or tail[0].stop == tail[1].stop)
    if not square or any(s != full for s in index[:-2]):
        raise ctx.error(node, f"indexes a causal mask with {index}; valid: mask[:, :, :T, :T] (a top-left square)")
    ctx.masks[node.name] = ctx.masks[x.name]
    if x.name in ctx.attn_masks:
        ctx.attn_masks[node.name] = ctx.attn_masks[x.name]


def _triangle(upper: bool):
    """torch.triu(full, diagonal=1) / torch.tril(full) of a square tensor made in forward by
    torch.full / ones (nn.Transformer.generate_square_subsequent_mask: triu of -inf): a causal mask;
    any other triu / tril a TRIU / TRIL node (of a constant: folded)."""
    def convert(ctx, node):
        a = _bind(ctx, node, ["input", "diagonal"], {"diagonal": 0})
        x = a["input"]
        made = ctx.fulls.get(x.name) if isinstance(x, fx.Node) else None
        sizes, fill, kws = made if made is not None else ((), 0, ())
        square = len(sizes) == 2 and sizes[0] == sizes[1]
        bool_fill = dict(kws).get("dtype") == "torch.bool" or isinstance(fill, bool)   # a traced dtype: a Ref
        attn = None if isinstance(fill, Ref) or not upper else "bool" if bool_fill else \
            "additive" if fill <= FILL_LIMIT else None
        attended = any(u.op == "call_module" or u.target is F.scaled_dot_product_attention for u in node.users)
        if not square or isinstance(fill, Ref) or fill == 0 or a["diagonal"] != (1 if upper else 0) or \
                not all(_reads_masks(u) for u in node.users) or attended and attn is None:
            ctx.check_inputs(node)    # any other: the triangle's values (a constant's folded)
            ctx.add(node, "TRIU" if upper else "TRIL", [_tensor_arg(ctx, node, x)], [_ref(a["diagonal"])])
            return
        ctx.masks[node.name] = "hide" if upper else "keep"
        if attn is not None:
            ctx.attn_masks[node.name] = attn
    return convert


_TRIU, _TRIL = _triangle(True), _triangle(False)
# what reads a causal mask as one (the others read its values: BART's causal *= positions > ...)
_MASK_READERS = frozenset({F.scaled_dot_product_attention, torch.masked_fill, "masked_fill", operator.getitem,
                           operator.add, operator.iadd, torch.add, "add", torch.logical_not, "logical_not",
                           operator.invert, *_COMPARISONS})


def _reads_masks(user: fx.Node) -> bool:
    return user.op == "call_module" or user.op in ("call_function", "call_method") and user.target in _MASK_READERS


def _mask_flip(ctx, node, x, other=None) -> None:
    """mask == 0, mask == 1, ~mask, mask.logical_not()."""
    if other is None:
        ctx.masks[node.name] = "hide" if ctx.masks[x.name] == "keep" else "keep"
    elif isinstance(other, (bool, int, float)) and other in (0, 1):
        same = bool(other)
        ctx.masks[node.name] = ctx.masks[x.name] if same else ("hide" if ctx.masks[x.name] == "keep" else "keep")
    else:
        raise ctx.error(node, f"compares a causal mask with {other!r}; valid: 0 or 1")


def _compare(ctx, node):
    """x == y, !=, <, <=, >, >= (operators, torch functions and methods): on a causal mask, its
    flip (``mask == 0``); a shape check read only by ``torch._assert``, nothing; else a COMPARE node
    (sizes: a bool; tensors: a boolean tensor, ``==`` and ``!=`` only, checked when built)."""
    a = _bind(ctx, node, ["input", "other"], {})
    x, y = a["input"], a["other"]
    op = _COMPARISONS[node.target]
    if node.users and all(u.target is torch._assert for u in node.users):   # a shape check (ViT): no layer
        ctx.ignored.add(node.name)
        return
    for m, o in ((x, y), (y, x)):
        if isinstance(m, fx.Node) and m.name in ctx.masks:
            if op not in ("EQ", "NE"):
                raise ctx.error(node, f"compares a causal mask with {op.lower()}; valid: == or != 0 or 1")
            return _mask_flip(ctx, node, m, o if op == "EQ" or not isinstance(o, (bool, int, float)) else 1 - o)
    ctx.check_inputs(node)
    if isinstance(x, fx.Node) and isinstance(y, fx.Node):
        ctx.add(node, "COMPARE", [x.name, y.name], [op])
    elif isinstance(x, fx.Node) or isinstance(y, fx.Node):
        t, c = (x, y) if isinstance(x, fx.Node) else (y, x)
        if not isinstance(c, (bool, int, float, torch.dtype, str)):
            raise ctx.error(node, f"compares with {c!r}; valid: a traced value, a number or a dtype")
        ctx.add(node, "COMPARE", [t.name], [op if t is x else MIRRORED[op], _ref(c)])
    else:
        raise ctx.error(node, f"compares {x!r} with {y!r}; valid: traced values or numbers")


def _logical_not(ctx, node):
    """~x, x.logical_not(): a causal mask's flip, else a LOGICAL_NOT node (sizes or a boolean tensor)."""
    x = node.args[0]
    if isinstance(x, fx.Node) and x.name in ctx.masks:
        return _mask_flip(ctx, node, x)
    ctx.check_inputs(node)
    ctx.add(node, "LOGICAL_NOT", [_tensor_arg(ctx, node, x)])


def _masked_fill(ctx, node):
    """x.masked_fill(mask, value): by a causal mask, scores read by a causal softmax; by any other
    (boolean) tensor, a MASKED_FILL node (its value a number or a traced one: torch.finfo(t).min)."""
    a = _bind(ctx, node, ["input", "mask", "value"], {})
    x, mask, value = a["input"], a["mask"], a["value"]
    if not (isinstance(mask, fx.Node) and mask.name in ctx.masks):   # a mask computed from the inputs
        ctx.check_inputs(node)
        ctx.add(node, "MASKED_FILL", [_tensor_arg(ctx, node, x), _tensor_arg(ctx, node, mask, "the mask")],
                [_ref(value)])
        return
    if ctx.masks[mask.name] != "hide":
        raise ctx.error(node, "masked_fill by a causal mask maps only where the mask hides the future keys "
                              "(mask == 0 of a buffer holding torch.tril(torch.ones(T, T)))")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value > FILL_LIMIT:
        raise ctx.error(node, f"masked_fill with {value!r}; valid: float('-inf') or a number <= {FILL_LIMIT:g} "
                              f"(the masked probabilities are then 0)")
    _mask_scores(ctx, node, x)


def _mask_scores(ctx, node, scores) -> None:
    """``node`` is ``scores`` masked causally: softmax(dim=-1) alone may read it (a causal softmax)."""
    for user in node.users:
        dim = user.kwargs.get("dim", user.args[1] if len(user.args) > 1 else None)
        if user.target not in (F.softmax, torch.softmax, "softmax") or dim != -1:
            raise ctx.error(node, f"the masked scores are read by '{user.name}' ({user.target}); flexrt maps a "
                                  f"causal mask only when softmax(dim=-1) alone reads the scores")
    ctx.masked[node.name] = _tensor_arg(ctx, node, scores)



def _tensor(ctx, node):
    """torch.tensor(data, dtype=None): a TENSOR node of the data (numbers, lists of them, traced
    sizes); a 0-d one is a number when built, as torch's scalar tensors take part in arithmetic."""
    a = _bind(ctx, node, ["data"], {"dtype": None, "device": None, "requires_grad": False, "pin_memory": False})
    if a["requires_grad"]:
        raise ctx.error(node, "torch.tensor(..., requires_grad=True) made in forward is not a parameter of the "
                              "module; declare it as an nn.Parameter")
    dtype = a["dtype"]
    ctx.add(node, "TENSOR", [], [_ref(a["data"])], [("dtype", _ref(dtype))] if dtype is not None else [])


def _type_info(op: str):
    """torch.finfo(dtype) / torch.iinfo(dtype): a node whose attributes (min, max, eps ...) the
    builder reads; the dtype may be traced (x.dtype)."""
    def convert(ctx, node):
        a = _bind(ctx, node, ["type"], {"type": None})
        dtype = a["type"]
        if dtype is None and op == "IINFO":
            raise ctx.error(node, "torch.iinfo needs an integer dtype")
        ctx.add(node, op, [], [_ref(dtype) if dtype is not None else "torch.float32"])
    return convert


# ---- attention with a mask; tensors made in forward --------------------------------------------------


def _sdpa(ctx, node):
    """F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal, scale):
    softmax(q k^T * scale) v as FFModel layers (batch matmuls and a softmax, causal or not)."""
    a = _bind(ctx, node, ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"],
              {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False})
    mask = a["attn_mask"]
    causal_mask = isinstance(mask, fx.Node) and mask.name in ctx.attn_masks
    # any other tensor mask is added to the scores (a relative position bias, MaxViT's); it must be
    # floating, which the builder checks (ADDITIVE_MASK)
    bias = mask if isinstance(mask, fx.Node) and not causal_mask and mask.name not in ctx.masks else None
    if mask is not None and not causal_mask and bias is None or a["dropout_p"] != 0 or a["enable_gqa"] is not False:
        raise ctx.error(node, f"scaled_dot_product_attention with attn_mask={mask!r}, dropout_p="
                              f"{a['dropout_p']!r}, enable_gqa={a['enable_gqa']!r}; valid: no mask, a causal one "
                              f"(is_causal for GPT's) or a floating tensor added to the scores, dropout_p=0 (eval "
                              f"mode) and no grouped queries")
    if bias is not None and a["is_causal"]:
        raise ctx.error(node, "scaled_dot_product_attention with both attn_mask and is_causal=True (torch refuses it)")
    if not isinstance(a["is_causal"], bool):
        raise ctx.error(node, f"is_causal must be True or False, got {a['is_causal']!r}")
    ctx.check_inputs(node, masks_ok=True)
    a["is_causal"] = a["is_causal"] or causal_mask
    q, k, v = (_tensor_arg(ctx, node, a[n], n) for n in ("query", "key", "value"))
    attention_nodes(ctx, node, q, k, v, node.name, _tensor_arg(ctx, node, bias, "attn_mask") if bias is not None
                    else None, a["is_causal"], a["scale"], node.name)


def attention_nodes(ctx, node, q: str, k: str, v: str, prefix: str, bias: str | None = None, causal: bool = False,
                    scale: float | None = None, out: str | None = None) -> str:
    """The IR nodes of softmax(q k^T scale + bias) v for [..., T, E] queries and [..., S, E] keys and
    values (``bias``: an IR value added to the scores; ``scale`` None: 1 / sqrt(E)), named
    ``{prefix}.{part}``, the result ``out`` (default ``{prefix}.attention``); returns its name."""
    n, out = prefix, out or f"{prefix}.attention"
    ctx.add(node, "TRANSPOSE", [k], [-2, -1], name=f"{n}.key_t", users=(f"{n}.scores",))
    ctx.add(node, "BATCH_MATMUL", [q, f"{n}.key_t"], name=f"{n}.scores", users=(f"{n}.scaled",))
    after = (f"{n}.masked" if bias is not None else f"{n}.probs",)
    if scale is None:   # 1 / sqrt(E), E the queries' last dimension
        ctx.add(node, "GETATTR", [q], ["size", -1], name=f"{n}.width", users=(f"{n}.scale",))
        ctx.add(node, "RSQRT", [f"{n}.width"], name=f"{n}.scale", users=(f"{n}.scaled",))
        ctx.add(node, "MULTIPLY", [f"{n}.scores", f"{n}.scale"], name=f"{n}.scaled", users=after)
    else:
        ctx.add(node, "SCALAR_MULTIPLY", [f"{n}.scores"], [float(scale)], name=f"{n}.scaled", users=after)
    scores = f"{n}.scaled"
    if bias is not None:
        scores = ctx.add(node, "ADDITIVE_MASK", [scores, bias], name=f"{n}.masked", users=(f"{n}.probs",))
    ctx.add(node, "SOFTMAX", [scores], [], [("dim", -1)] + ([("causal", True)] if causal else []),
            name=f"{n}.probs", users=(out,))
    return ctx.add(node, "BATCH_MATMUL", [f"{n}.probs", v], name=out, users=() if out != node.name else None)


def _arange(ctx, node):
    """torch.arange(end) / (start, end) / (start, end, step): the numbers may be traced sizes."""
    args = list(node.args)
    kw = {k: v for k, v in node.kwargs.items() if k not in ("device", "requires_grad", "layout", "pin_memory")}
    for k in ("start", "end", "step"):
        if k in kw:
            raise ctx.error(node, f"arange({k}=...) by keyword is not supported; give the bounds by position")
    dtype = kw.pop("dtype", None)
    if kw or not 1 <= len(args) <= 3:
        raise ctx.error(node, f"arange takes (end), (start, end) or (start, end, step), got {len(args)} argument(s)"
                              + (f" and {', '.join(kw)}" if kw else ""))
    start, end, step = ([0] + args + [1])[:3] if len(args) == 1 else (args + [1])[:3]
    ctx.add(node, "ARANGE", [], [_ref(start), _ref(end), _ref(step)], [("dtype", str(dtype))] if dtype else [])


_CREATION_KWARGS = ("device", "requires_grad", "layout", "pin_memory", "memory_format")


def _full(value):
    """torch.full(size, fill_value), torch.zeros(*size), torch.ones(*size): a constant of the model
    (the sizes may be traced); ``value`` None: full's own fill value."""
    def convert(ctx, node):
        args = list(node.args)
        kw = {k: v for k, v in node.kwargs.items() if k not in _CREATION_KWARGS}
        dtype = kw.pop("dtype", None)
        fill = value
        if value is None:
            fill = kw.pop("fill_value", args.pop() if len(args) == 2 else None)
        sizes = kw.pop("size", args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args))
        if kw or fill is None:
            raise ctx.error(node, f"{getattr(node.target, '__name__', node.target)} takes sizes and a number to fill "
                                  f"with; got {node.args}, {dict(node.kwargs)}")
        fill = _ref(fill)     # a traced number (torch.finfo(dtype).min) resolves when built
        # made when first read (check_inputs); triu / tril of it may be a causal mask instead
        ctx.fulls[node.name] = (_ref(tuple(sizes)), fill, (("dtype", _ref(dtype)),) if dtype else ())
    return convert


def _full_like(value):
    """torch.zeros_like / ones_like / full_like(x, fill): a constant of x's sizes (a parameter's
    known ones, or a traced tensor's read when built), made where it is first read, as torch.full."""
    def convert(ctx, node):
        a = _bind(ctx, node, ["input"] + (["fill_value"] if value is None else []),
                  {k: None for k in _CREATION_KWARGS} | {"dtype": None})
        x, fill = a["input"], a.get("fill_value", value)
        if not isinstance(x, fx.Node) or fill is None or isinstance(fill, fx.Node):
            raise ctx.error(node, f"{node.target.__name__} takes a tensor and a number to fill with; got "
                                  f"{node.args}, {dict(node.kwargs)}")
        if x.name in ctx.params:
            sizes = tuple(ctx.params[x.name][1].shape)
        else:
            ctx.check_inputs(node)
            sizes = Ref(ctx.add(node, "GETATTR", [x.name], ["shape"], name=f"{node.name}.sizes", users=(node.name,)))
        dtype = a["dtype"]
        ctx.fulls[node.name] = (sizes, fill, (("dtype", _ref(dtype)),) if dtype else ())
    return convert


# ---- writes in place: x[index] = value, x.masked_fill_(mask, value) ----------------------------------


def _setitem(ctx, node):
    """``x[index] = value`` (operator.setitem): a SETITEM node of x and the value (a traced tensor, or
    a number as a field); x's later reads read it (``_Ctx.aliases``)."""
    x, index, value = node.args
    ctx.check_inputs(node)
    target = _tensor_arg(ctx, node, x, "the tensor written")
    if isinstance(value, fx.Node):
        ctx.add(node, "SETITEM", [target, value.name], [_ref(index)])
    elif isinstance(value, (bool, int, float)):
        ctx.add(node, "SETITEM", [target], [_ref(index), value])
    else:
        raise ctx.error(node, f"writes {value!r} into a tensor; valid: a traced tensor or a number")
    ctx.aliases[x.name] = node.name


def _masked_fill_(ctx, node):
    """x.masked_fill_(mask, value): the selection (``_masked_fill``), which x's later reads read."""
    x, mask = node.args[0], node.args[1] if len(node.args) > 1 else node.kwargs.get("mask")
    if isinstance(mask, fx.Node) and mask.name in ctx.masks:
        raise ctx.error(node, "masked_fill_ (in place) by a causal mask: write scores = scores.masked_fill(mask, "
                              "value), which flexrt maps to a causal softmax")
    _masked_fill(ctx, node)
    ctx.aliases[_tensor_arg(ctx, node, x)] = node.name


def _new_full(value):
    """x.new_zeros(size) / new_ones / new_full(size, fill): torch.full of x's dtype (unless given)."""
    def convert(ctx, node):
        x, args = node.args[0], list(node.args[1:])
        kw = {k: v for k, v in node.kwargs.items() if k not in _CREATION_KWARGS}
        fill = value if value is not None else kw.pop("fill_value", args.pop() if len(args) == 2 else None)
        sizes = kw.pop("size", args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, fx.Node)) else
                       tuple(args))
        dtype = kw.pop("dtype", None)
        if kw or fill is None or isinstance(fill, fx.Node):
            raise ctx.error(node, f"{node.target} takes sizes and a number to fill with (not a traced value); got "
                                  f"{node.args[1:]}, {dict(node.kwargs)}")
        ctx.check_inputs(node)
        if dtype is None:
            dtype = Ref(ctx.add(node, "GETATTR", [_tensor_arg(ctx, node, x)], ["dtype"], name=f"{node.name}.dtype",
                                users=(node.name,)))
        sizes = _ref(sizes if isinstance(sizes, (tuple, list)) else (sizes,))
        ctx.fulls[node.name] = (sizes, fill, (("dtype", dtype if isinstance(dtype, Ref) else _ref(dtype)),))
    return convert


def _embedding_fn(ctx, node):
    """F.embedding(input, weight) of a module's 2-D parameter (BART's scaled and positional
    embeddings, nn.Embedding subclasses traced through): an embedding of that table."""
    a = _bind(ctx, node, ["input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"],
              {"padding_idx": None, "max_norm": None, "norm_type": 2.0, "scale_grad_by_freq": False, "sparse": False})
    weight = a["weight"]
    table = _attr(ctx.gm, weight.target) if isinstance(weight, fx.Node) and weight.op == "get_attr" else None
    if not (isinstance(table, torch.nn.Parameter) and table.dim() == 2):
        raise ctx.error(node, "F.embedding maps where its weight is a 2-D parameter of the module (its table)")
    if a["max_norm"] is not None or a["scale_grad_by_freq"] or a["sparse"]:
        raise ctx.error(node, f"F.embedding with max_norm={a['max_norm']!r}, scale_grad_by_freq="
                              f"{a['scale_grad_by_freq']!r}, sparse={a['sparse']!r}; valid: None, False, False")
    if a["padding_idx"] is not None:
        warn_caller(f"torch node '{node.name}': F.embedding(padding_idx={a['padding_idx']}) builds as a plain "
                    f"embedding (the same forward; FFModel trains that row too)", FrontendWarning)
    _tensor_arg(ctx, node, a["input"], "the indices")
    ctx.params.pop(weight.name, None)
    ctx.parameter_rows(node, weight, a["input"])


# ---- casts ------------------------------------------------------------------------------------------


def _is_dtype_value(v) -> bool:
    """A traced ``x.dtype``."""
    return isinstance(v, fx.Node) and v.op == "call_function" and v.target is getattr and v.args[1:] == ("dtype",)


def _to(ctx, node):
    """x.to(dtype), x.to(other), x.to(y.dtype), x.to(dtype=y.dtype), x.to(device): a cast (to a traced
    dtype: resolved when built) or the values as they are."""
    x = _tensor_arg(ctx, node, node.args[0])
    rest = [a for a in node.args[1:] if isinstance(a, torch.dtype) or _is_dtype_value(a)]
    if "dtype" in node.kwargs:
        rest = [node.kwargs["dtype"]]
    others = [a for a in node.args[1:] if isinstance(a, fx.Node) and not _is_dtype_value(a)
              and a.name not in ctx.ignored]    # x.to(y.device): the device is no layer's
    if others:
        ctx.add(node, "TYPE_AS", [x, others[0].name])
    elif rest:
        ctx.add(node, "TO", [x], [_ref(rest[0]) if isinstance(rest[0], fx.Node) else str(rest[0])])
    else:
        ctx.add(node, "TO", [x], [])


def _cast_to(dtype: str):
    """x.bool() (x != 0), x.int(), x.long(), x.double(), x.half(), x.bfloat16(): a cast to ``dtype``."""
    def convert(ctx, node):
        ctx.add(node, "TO", [_tensor_arg(ctx, node, node.args[0])], [dtype])
    return convert


# x.bool() (x != 0), x.int(), ...: casts by method
CASTS = {"bool": _cast_to("torch.bool"), "int": _cast_to("torch.int32"), "long": _cast_to("torch.int64"),
         "double": _cast_to("torch.float64"), "half": _cast_to("torch.float16"), "bfloat16": _cast_to("torch.bfloat16")}
