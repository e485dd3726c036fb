"""Exact JSON encoding of operator attributes and shapes (enums by name, tuples as lists).

Attributes are decoded by their dataclass's type hints, so every attrs class round-trips without
per-operator code. Entry points: ``attrs_to_json``, ``attrs_from_json``, ``pshape_to_json``,
``pshape_from_json``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any

from flexrt.errors import FlexrtError, GraphError
from flexrt.ir.datatype import DataType
from flexrt.ir.op_type import OpType
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.ir.registry import op_def
from flexrt.ir.tensor_shape import TensorShape


def _encode(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, TensorShape):
        return {"dims": list(v.dims), "dtype": v.dtype.name}
    if isinstance(v, tuple):
        return [_encode(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise GraphError(f"cannot encode attribute value {v!r} of type {type(v).__name__}")


def _decode(hint: Any, v: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if v is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _decode(inner, v, where)
    if origin is tuple:
        (inner, *_) = typing.get_args(hint)
        if not isinstance(v, list):
            raise GraphError(f"{where}: expected a list, got {v!r}")
        return tuple(_decode(inner, x, where) for x in v)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint[v]
        except KeyError:
            raise GraphError(f"{where}: {v!r} is not a {hint.__name__}; valid: "
                             f"{', '.join(m.name for m in hint)}") from None
    if hint is TensorShape:
        return TensorShape(tuple(v["dims"]), DataType[v["dtype"]])
    if hint is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if hint in (int, float, bool, str) and not isinstance(v, hint) or (hint is int and isinstance(v, bool)):
        raise GraphError(f"{where}: expected {hint.__name__}, got {v!r}")
    return v


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


OMIT_DEFAULT = {"omit_default": True}   # field metadata: left out of files (and hashes) at its default


def attrs_to_json(attrs) -> dict:
    """The attributes as JSON; a field marked ``OMIT_DEFAULT`` (one a strategy sets, added after files
    were written without it) only where it differs from its default, so older files and the PCG
    hashes they carry stay valid."""
    return {f.name: _encode(v) for f in dataclasses.fields(attrs) for v in [getattr(attrs, f.name)]
            if not (f.metadata.get("omit_default") and v == f.default)}


def attrs_from_json(op: str, data: dict, where: str = "attrs"):
    try:
        op_type = OpType(op)
    except ValueError:
        raise GraphError(f"{where}: unknown operator {op!r}; valid: {', '.join(t.value for t in OpType)}") from None
    cls = op_def(op_type).attrs_type
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise GraphError(f"{where}: unknown field(s) {sorted(unknown)} for {op}; valid: {sorted(names)}")
    kwargs = {k: _decode(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except FlexrtError as e:   # the attributes' own checks (a folded weight's parts, a concat's axis)
        raise type(e)(f"{where}: {e}") from None


def pshape_to_json(s: ParallelTensorShape) -> dict:
    return {"dims": [[d.size, d.degree] for d in s.dims], "sum_degree": s.sum_degree,
            "discard_copy_degree": s.discard_copy_degree, "dtype": s.dtype.name}


def pshape_from_json(d: dict) -> ParallelTensorShape:
    return ParallelTensorShape.of([s for s, _ in d["dims"]], [g for _, g in d["dims"]], d["sum_degree"],
                                  d["discard_copy_degree"], DataType[d["dtype"]])
