"""Builder handlers of the values that are comparisons, boolean masks and constants made in forward
(``flexrt.torch._fx_values`` makes their nodes; the ONNX front end may too).

- ``COMPARE`` (fields: the operator, then a number when one operand is one): of numbers, a bool;
  of arrays (constants), a boolean array; of tensors, a boolean tensor (``DT_BOOLEAN``: a cast to
  it is ``!= 0``): ``x != y`` the cast of x - y, ``x > y`` of relu(x - y), ``x < y`` of relu(y - x),
  ``==``, ``<=`` and ``>=`` their complements; exact for finite values.
- ``LOGICAL_NOT``: of a bool, array or boolean tensor (``flexrt.model.composites.logical_not``).
- ``WHERE`` (inputs: the condition and two operands; ONNX Where) and ``MASKED_FILL`` (inputs: x and
  the mask; field: the value): a selection, by a boolean tensor (``composites.where``) or a constant
  boolean array (each operand times the constant of its places), exact; an infinite value is taken
  as the type's largest finite number, with a warning (a softmax of the filled scores is the same);
  of constants alone, folded.
- ``TENSOR`` (field: the data; keyword ``dtype``): ``torch.tensor``: a 0-d one is a Python number
  (torch's scalar tensors do not promote the tensors they meet), any other an array constant, in
  torch's default types (float32, int64, bool) unless ``dtype`` says.
- ``FINFO`` / ``IINFO`` (field: the dtype's name): ``torch.finfo`` / ``iinfo``, read by ``GETATTR``.
- ``SETITEM`` (inputs: x and a tensor value; fields: the index, a number value): ``x[index] = value``
  written along one axis, as parts of x and the value concatenated (``flexrt.torch._fx`` reads x
  as this node after it).
- ``TRIU`` / ``TRIL`` (field: the diagonal): of a constant, folded; of a tensor, times the triangle.
- ``ATTENTION_MASK`` (inputs: the mask, the queries' and keys' heads; field ``key_padding`` or ``attn``): a
  mask given to nn.MultiheadAttention as the addend of its scores; ``ATTENTION_OUTPUT``: its
  (output, None).

Entry points: ``HANDLERS`` and ``READS_ARRAYS`` (the builder's), ``TypeInfo``, ``ARRAY_TYPES``,
``finite``, ``MIRRORED``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from flexrt.errors import FrontendWarning, ShapeError, warn_caller
from flexrt.ir.datatype import DataType
from flexrt.model import composites
from flexrt.model.tensor import Tensor
from flexrt.torch._build_base import DTYPES, FLOATS, describe, is_number, node_error

# types whose values made in forward stay NumPy arrays (folded where read; a model constant where a layer reads them)
ARRAY_TYPES = frozenset({DataType.DT_FLOAT, DataType.DT_DOUBLE, DataType.DT_INT32, DataType.DT_INT64,
                         DataType.DT_BOOLEAN})
_OPS = {"EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le, "GT": operator.gt,
        "GE": operator.ge}
MIRRORED = {"EQ": "EQ", "NE": "NE", "LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}   # c op x as x op' c
# torch.finfo(torch.bfloat16), which NumPy lacks
_BFLOAT16 = {"bits": 16, "eps": 0.0078125, "max": 3.3895313892515355e38, "min": -3.3895313892515355e38,
             "tiny": 1.1754943508222875e-38, "smallest_normal": 1.1754943508222875e-38, "resolution": 0.01}


@dataclass(frozen=True)
class TypeInfo:
    """torch.finfo / iinfo of a dtype: its attributes by name (``GETATTR`` reads them)."""

    dtype: str
    values: tuple      # (name, value) pairs

    def get(self, attr: str):
        return dict(self.values).get(attr)

    @property
    def names(self) -> list[str]:
        return sorted(k for k, _ in self.values)


def _array_or_value(v):
    """An operand as a NumPy array or number when it is one (folded), else None."""
    if isinstance(v, np.ndarray) or (is_number(v) and not isinstance(v, Tensor)):
        return v
    return None


def _compare(b, node, ins, f):
    op = f[0] if f else None
    if op not in _OPS or len(ins) + len(f) != 3 or len(ins) not in (1, 2):
        raise node_error(node, f"COMPARE takes the operator ({', '.join(_OPS)}) and two operands, got inputs "
                               f"{[describe(v) for v in ins]} and fields {list(f)}")
    x, y = (ins[0], ins[1]) if len(ins) == 2 else (ins[0], f[1])
    if isinstance(x, str) and isinstance(y, str) and op in ("EQ", "NE"):    # x.dtype == torch.float16
        return _OPS[op](x, y)
    ax, ay = _array_or_value(x), _array_or_value(y)
    if ax is not None and ay is not None:     # sizes or constants: folded
        out = _OPS[op](np.asarray(ax) if isinstance(ay, np.ndarray) else ax, ay)
        return out if isinstance(out, np.ndarray) else bool(out)
    x, y = (b.constant(v, node) for v in (x, y))
    if not isinstance(x, Tensor):
        x, y, op = y, x, MIRRORED[op]
    if not isinstance(x, Tensor) or not (isinstance(y, Tensor) or is_number(y)):
        raise node_error(node, f"compares {describe(x)} with {describe(y)}; valid: tensors and numbers")
    positive = {"NE": "NE", "EQ": "NE", "GT": "GT", "LE": "GT", "LT": "LT", "GE": "LT"}[op]
    holds = _holds(b, node, positive, _difference(b, node, x, y), node.name if positive == op else f"{node.name}.not")
    return holds if positive == op else composites.logical_not(b.ff, holds, node.name)


def _difference(b, node, x: Tensor, y):
    """x - y for a comparison (x itself against 0); operands of other than one floating type first as
    float64 (integers exact to 2^53)."""
    ff = b.ff
    if isinstance(y, Tensor):
        if x.data_type is not y.data_type or x.data_type not in FLOATS:
            x, y = (ff.cast(t, DataType.DT_DOUBLE, name=f"{node.name}.{w}_float") if t.data_type is not
                    DataType.DT_DOUBLE else t for t, w in ((x, "x"), (y, "y")))
        return ff.subtract(x, y, name=f"{node.name}.minus")
    if y == 0:
        return x
    if x.data_type not in FLOATS:
        x = ff.cast(x, DataType.DT_DOUBLE, name=f"{node.name}.x_float")
    return ff.scalar_sub(x, float(y), name=f"{node.name}.minus")


def _holds(b, node, op: str, d: Tensor, name: str) -> Tensor:
    """Whether d != 0 (NE), d > 0 (GT: relu(d) != 0) or d < 0 (LT: relu(-d) != 0), as a boolean
    tensor named ``name`` (a cast to it is != 0): exact for finite values."""
    ff = b.ff
    if op != "NE":
        if d.data_type not in FLOATS:
            d = ff.cast(d, DataType.DT_DOUBLE, name=f"{node.name}.d_float")
        if op == "LT":
            d = ff.scalar_multiply(d, -1.0, name=f"{node.name}.negated")
        d = ff.relu(d, name=f"{node.name}.positive")
    return ff.cast(d, DataType.DT_BOOLEAN, name=name)


def _logical_not(b, node, ins, f):
    x = ins[0] if len(ins) == 1 else None
    if isinstance(x, (bool, np.bool_)):
        return not x
    if isinstance(x, np.ndarray) and x.dtype == np.bool_:
        return np.logical_not(x)
    if isinstance(x, Tensor) and x.data_type is DataType.DT_BOOLEAN:
        return composites.logical_not(b.ff, x, node.name)
    what = f"a {x.data_type.name} tensor {list(x.dims)}" if isinstance(x, Tensor) else describe(x)
    raise node_error(node, f"logical not of {what}; valid: a bool, or a boolean tensor (a comparison's: ~ "
                           f"of an integer tensor is bitwise in torch, which no FFModel layer computes)")


def _masked_fill(b, node, ins, f):
    """x.masked_fill(mask, value): x where the mask does not hold, else value (``_select``)."""
    if len(ins) != 2 or len(f) != 1:
        raise node_error(node, f"MASKED_FILL takes the input, the mask and one value, got {len(ins)} input(s) and "
                               f"fields {list(f)}")
    (x, mask), value = ins, f[0]
    if not is_number(value):
        raise node_error(node, f"masked_fill with {describe(value)}; valid: a number")
    if isinstance(x, Tensor):
        _check_broadcast(node, x, mask.dims if isinstance(mask, Tensor) else np.shape(mask))
    return _select(b, node, mask, value, x)


def _where(b, node, ins, f):
    """ONNX Where(cond, a, b) (torch.where): a where cond holds, else b (``_select``)."""
    if len(ins) != 3:
        raise node_error(node, f"WHERE takes the condition and two operands, got {len(ins)} input(s)")
    return _select(b, node, *ins)


def _select(b, node, cond, a, other):
    """``a`` where ``cond`` holds, else ``other``; each a tensor, an array constant or a number. Of
    constants alone, folded; by a constant condition, each operand times the constant (cond, or
    not cond) of its places, summed; by a computed (boolean) condition, ``composites.where``."""
    values = (cond, a, other)
    if not any(isinstance(v, Tensor) for v in values):
        if np.asarray(cond).dtype != np.bool_:
            raise node_error(node, f"the condition must be boolean, got {describe(cond)}")
        return np.where(cond, a, other)
    dtype = _select_type(node, a, other)
    work = dtype if dtype.is_floating else DataType.DT_DOUBLE   # integers and bools: exact in float64 to 2^53
    name = node.name if work is dtype else f"{node.name}.float64"
    a, other = (_operand(b, node, v, work) if not isinstance(v, Tensor) or v.data_type is work else
                b.ff.cast(v, work, name=f"{node.name}.{part}_float64") for v, part in ((a, "then"), (other, "else")))
    if isinstance(cond, Tensor):
        if cond.data_type is not DataType.DT_BOOLEAN:
            raise node_error(node, f"the condition is a {cond.data_type.name} tensor; valid: a boolean one (a "
                                   f"comparison, or x.to(torch.bool))")
        a, other = (b.constant(v, node) if isinstance(v, np.ndarray) else v for v in (a, other))
        out = composites.where(b.ff, cond, a, other, name, work)
    else:
        m = np.asarray(cond)
        if m.dtype != np.bool_:
            raise node_error(node, f"the condition is a {m.dtype} array; valid: a boolean one")
        parts = [b.ff.multiply(v, b.constant(where.astype(work.numpy_name), node), name=f"{node.name}.{part}")
                 if isinstance(v, Tensor) else b.constant(np.where(where, v, 0).astype(work.numpy_name), node)
                 for v, where, part in ((a, m, "then"), (other, ~m, "else"))]
        out = b.ff.add(parts[0], parts[1], name=name)
    return out if work is dtype else b.ff.cast(out, dtype, name=node.name)


def _select_type(node, a, other) -> DataType:
    """The type of a selection: its tensor operands' (one type), else its constants'."""
    types = {v.data_type for v in (a, other) if isinstance(v, Tensor)}
    if not types:
        name = np.result_type(*[np.asarray(v) for v in (a, other)]).name
        types = {DTYPES.get(name, DataType.DT_FLOAT)}
    if len(types) != 1:
        raise node_error(node, f"selects between {describe(a)} and {describe(other)}; valid: tensors of one type, "
                               f"arrays and numbers")
    return next(iter(types))


def _operand(b, node, v, dtype: DataType):
    """An operand of a selection: a tensor as it is; a number, or a 0-d array, as a finite number; an
    array as finite values of ``dtype`` (a model constant where a computed condition reads it)."""
    if isinstance(v, Tensor):
        return v
    arr = finite(node, np.asarray(v, dtype=dtype.numpy_name if dtype is not DataType.DT_BFLOAT16 else "float32"),
                  dtype)
    return float(arr) if arr.ndim == 0 else arr


def finite(node, value: np.ndarray, dtype: DataType) -> np.ndarray:
    """``value`` with an infinity as the type's largest finite number of its sign, with a warning:
    model constants hold no infinities (and 0 * inf is NaN), and a softmax of the filled scores,
    what such fills are for, is the same (exp underflows to 0 either way)."""
    if np.isfinite(value).all():
        return value
    if np.isnan(value).any():
        raise node_error(node, "selects NaN, which would poison the model")
    big = _largest(dtype)
    inf = float(value[~np.isfinite(value)].flat[0])
    warn_caller(f"node '{node.name}' ({node.op}){f' at {node.origin}' if node.origin else ''}: fills with {inf!r}, "
                f"taken as {math.copysign(big, inf):g} (the type's largest finite number); a softmax of the filled "
                f"scores is the same, other reads of the filled places see that number", FrontendWarning)
    return np.clip(value, -big, big)


def _broadcasts(shape, target) -> bool:
    """Whether ``shape`` broadcasts to ``target`` (and leaves it as it is)."""
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


def _largest(dtype: DataType) -> float:
    """The largest finite number of a floating type."""
    return float(np.finfo(dtype.numpy_name).max) if dtype is not DataType.DT_BFLOAT16 else _BFLOAT16["max"]


def _check_broadcast(node, x: Tensor, mask_shape) -> None:
    """torch's rule: the mask broadcasts to the input's shape (the output's)."""
    if not _broadcasts(mask_shape, x.dims):
        raise node_error(node, f"the mask {list(mask_shape)} does not broadcast to the input {list(x.dims)}",
                         ShapeError)


_TORCH_DEFAULT = {"f": DataType.DT_FLOAT, "i": DataType.DT_INT64, "u": DataType.DT_INT64, "b": DataType.DT_BOOLEAN}


def _tensor(b, node, ins, f):
    """torch.tensor(data, dtype): a number when 0-d, else an array constant."""
    dtype_name = b.resolve(node, node.kw("dtype"))
    if dtype_name is not None and dtype_name not in DTYPES:
        raise node_error(node, f"dtype {dtype_name!r} is not supported; valid: {', '.join(sorted(DTYPES))}")
    try:
        data = np.asarray(f[0] if f else None)
    except (TypeError, ValueError) as e:
        raise node_error(node, f"torch.tensor of {describe(f[0] if f else None)}: {e}") from None
    if data.dtype.kind not in _TORCH_DEFAULT:
        raise node_error(node, f"torch.tensor of {describe(f[0] if f else None)}; valid: numbers, bools or (nested) "
                               f"lists of them, sizes included")
    dtype = DTYPES[dtype_name] if dtype_name is not None else _TORCH_DEFAULT[data.dtype.kind]
    if data.ndim == 0:
        return data.astype(dtype.numpy_name).item() if dtype is not DataType.DT_BFLOAT16 else float(data)
    return data.astype(dtype.numpy_name) if dtype is not DataType.DT_BFLOAT16 else data.astype(np.float32)


def _type_info(b, node, ins, f):
    name = f[0] if f else None
    dtype = DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise node_error(node, f"torch.{node.op.lower()} of {describe(name)}; valid: {', '.join(sorted(DTYPES))}")
    if node.op == "FINFO":
        if dtype is DataType.DT_BFLOAT16:
            return TypeInfo(name, tuple(sorted(_BFLOAT16.items())))
        if not dtype.is_floating:
            raise node_error(node, f"torch.finfo of {name}, which is not a floating type (torch.iinfo is for integers)")
        fi = np.finfo(dtype.numpy_name)
        return TypeInfo(name, (("bits", int(fi.bits)), ("eps", float(fi.eps)), ("max", float(fi.max)),
                               ("min", float(fi.min)), ("resolution", float(fi.resolution)),
                               ("smallest_normal", float(fi.smallest_normal)), ("tiny", float(fi.tiny))))
    if dtype.is_floating or dtype is DataType.DT_BOOLEAN:
        raise node_error(node, f"torch.iinfo of {name}, which is not an integer type (torch.finfo is for floats)")
    ii = np.iinfo(dtype.numpy_name)
    return TypeInfo(name, (("bits", int(ii.bits)), ("max", int(ii.max)), ("min", int(ii.min))))


def _attention_mask(b, node, ins, f):
    """A mask given to nn.MultiheadAttention as the addend of its [N, H, L, S] scores, in the type of
    its queries (inputs: the mask, the queries' heads [N, H, L, E / H], the keys' [N, H, S, E / H]):
    field ``key_padding`` ([N, S] -> [N, 1, 1, S]) or
    ``attn`` ([L, S] -> [1, 1, L, S], or [N H, L, S] -> [N, H, L, S]); a boolean one is the type's
    lowest number where True (hidden) and 0 elsewhere (the cast to 0 / 1 times that number: exact),
    a floating one is added as it is."""
    kind = f[0] if f else None
    if len(ins) != 3 or kind not in ("key_padding", "attn"):
        raise node_error(node, f"ATTENTION_MASK takes the mask and the queries' and keys' heads, and the field "
                               f"key_padding or attn; got {len(ins)} input(s) and fields {list(f)}")
    mask = b.tensor(node, b.constant(ins[0], node), "the mask")
    like, keys = b.tensor(node, ins[1], "the queries"), b.tensor(node, ins[2], "the keys")
    n, h, length, s = like.dims[0], like.dims[1], like.dims[2], keys.dims[2]
    if kind == "key_padding":
        fits, shape, want = tuple(mask.dims) == (n, s), [n, 1, 1, s], f"[{n}, {s}]"
    else:
        fits = tuple(mask.dims) in ((length, s), (n * h, length, s))
        shape, want = [1, 1, length, s] if mask.num_dims == 2 else [n, h, length, s], \
            f"[{length}, {s}] or [{n * h}, {length}, {s}]"
    if not fits:
        raise node_error(node, f"the {kind}_mask {list(mask.dims)} does not fit the attention; valid: {want}", ShapeError)
    dtype, ff = like.data_type, b.ff
    if mask.data_type is DataType.DT_BOOLEAN:
        low = -_largest(dtype)
        add = ff.scalar_multiply(ff.cast(mask, dtype, name=f"{node.name}.float"), low, name=f"{node.name}.lowest")
    elif mask.data_type in FLOATS:
        add = mask if mask.data_type is dtype else ff.cast(mask, dtype, name=f"{node.name}.float")
    else:
        raise node_error(node, f"the {kind}_mask of {mask.data_type.name}; valid: boolean (True where a key is hidden) or "
                               f"floating (added to the scores), as torch's")
    return ff.reshape(add, shape, name=node.name)


def _attention_output(b, node, ins, f):
    """(the output, None): an attention's result as nn.MultiheadAttention returns it, its weights not
    computed (``describe`` says so where one reads them)."""
    return (b.tensor(node, ins[0] if ins else None), None)


def _setitem(b, node, ins, f):
    """x[index] = value (a tensor, or a number as the second field): x's parts before and after the
    written region along its one indexed axis, the value (cast to x's type, broadcast to the
    region) between, concatenated. The index: full slices but on one axis, where a slice of step 1
    or a position."""
    x = b.tensor(node, b.constant(ins[0], node) if ins else None, "the tensor written")
    if len(f) not in (1, 2) or len(ins) + len(f) != 3:
        raise node_error(node, f"SETITEM takes the tensor, the index and a value, got {len(ins)} input(s) and fields "
                               f"{list(f)}")
    axis, start, stop, drop = _written_region(node, x, f[0])
    region = [*x.dims[:axis], stop - start, *x.dims[axis + 1:]]
    ff, name = b.ff, node.name
    if len(ins) == 2:
        v = b.tensor(node, b.constant(ins[1], node), "the value")
        written = [*region[:axis], *region[axis + 1:]] if drop else region    # x[:, i]: without the axis
        if not _broadcasts(v.dims, written):
            raise node_error(node, f"the value {list(v.dims)} does not broadcast to the written region {written}",
                             ShapeError)
        if drop:                        # the axis back, where the value's trailing dimensions leave it
            after = x.num_dims - 1 - axis
            v = ff.reshape(v, [*v.dims[:v.num_dims - after], 1, *v.dims[v.num_dims - after:]], name=f"{name}.axis")
        if v.data_type is not x.data_type:
            v = ff.cast(v, x.data_type, name=f"{name}.cast")
        if tuple(v.dims) != tuple(region):
            v = ff.multiply(v, ff.create_constant(region, 1, x.data_type), name=f"{name}.broadcast")
    elif is_number(f[1]) or isinstance(f[1], bool):
        v = ff.create_constant(region, f[1], x.data_type)
    else:
        raise node_error(node, f"writes {describe(f[1])}; valid: a tensor or a number")
    sizes = [n for n in (start, stop - start, x.dims[axis] - stop) if n]
    parts = ff.split(x, sizes, axis, name=f"{name}.parts") if len(sizes) > 1 else [x]
    if start:
        parts = [parts[0], v] + ([parts[2]] if stop < x.dims[axis] else [])
    else:
        parts = [v] + ([parts[1]] if stop < x.dims[axis] else [])
    return parts[0] if len(parts) == 1 else ff.concat(parts, axis, name=name)


def _written_region(node, x: Tensor, index) -> tuple[int, int, int, bool]:
    """(axis, start, stop, whether a position removed the axis) of ``x[index] = ...``."""
    index = index if isinstance(index, tuple) else (index,)
    if sum(i is Ellipsis for i in index) > 1 or any(i is None for i in index):
        raise node_error(node, f"writes at {index}; valid: slices and one position, one Ellipsis at most, no None")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (x.num_dims - len(index) + 1) + index[at + 1:]
    index = index + (slice(None),) * (x.num_dims - len(index))
    cut = [(a, i) for a, i in enumerate(index) if i != slice(None)]
    if len(index) > x.num_dims or len(cut) != 1:
        raise node_error(node, f"writes at {index} of a tensor {list(x.dims)}; flexrt writes a region cut along one "
                               f"axis (full slices elsewhere)", ShapeError)
    axis, i = cut[0]
    n = x.dims[axis]
    if isinstance(i, int) and not isinstance(i, bool) and -n <= i < n:
        return axis, i % n, i % n + 1, True
    if isinstance(i, slice) and all(v is None or is_number(v) and isinstance(v, int) for v in (i.start, i.stop, i.step)):
        start, stop, step = i.indices(n)
        if step == 1 and stop > start:
            return axis, start, stop, False
    raise node_error(node, f"writes at {i!r} along axis {axis} of {n}; valid: a position in range, or a slice of step 1 "
                           f"that is not empty", ShapeError)


def _triangle(b, node, ins, f):
    """torch.triu / tril(x, diagonal) over the last two axes: of a constant, folded; of a tensor, x
    times the constant 0 / 1 triangle (exact for finite values)."""
    x, k = (ins[0] if ins else None), (f[0] if f else 0)
    if not isinstance(k, int) or isinstance(k, bool):
        raise node_error(node, f"the diagonal must be an int, got {describe(k)}")
    keep = np.triu if node.op == "TRIU" else np.tril
    if isinstance(x, np.ndarray):
        if x.ndim < 2:
            raise node_error(node, f"{node.op.lower()} needs at least 2 dimensions, got {list(x.shape)}", ShapeError)
        return keep(x, k)
    x = b.tensor(node, x)
    if x.num_dims < 2:
        raise node_error(node, f"{node.op.lower()} needs at least 2 dimensions, got {list(x.dims)}", ShapeError)
    ones = np.ones(tuple(x.dims[-2:]), dtype=x.data_type.numpy_name if x.data_type in ARRAY_TYPES else np.float32)
    return b.ff.multiply(x, b.constant(keep(ones, k), node), name=node.name)


HANDLERS = {"COMPARE": _compare, "LOGICAL_NOT": _logical_not, "MASKED_FILL": _masked_fill, "WHERE": _where,
            "TENSOR": _tensor,
            "FINFO": _type_info, "IINFO": _type_info, "ATTENTION_MASK": _attention_mask,
            "ATTENTION_OUTPUT": _attention_output, "SETITEM": _setitem, "TRIU": _triangle, "TRIL": _triangle}
# handlers that take array constants as arrays (they fold them)
READS_ARRAYS = frozenset({"COMPARE", "LOGICAL_NOT", "MASKED_FILL", "WHERE", "SETITEM", "TRIU", "TRIL"})
