"""What the IR builder's handlers share (``flexrt.torch._build`` and ``flexrt.torch._composites``):
the builder's state (``_Builder``: node values, inputs, outputs), errors naming a node, dtype names,
and the checks of axes, shapes and split sizes.

Entry points: ``_Builder``, ``DTYPES``, ``node_error``, ``norm_axis``, ``is_number``, ``describe``,
``shape_with_inferred``, ``split_sizes``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flexrt.errors import ConfigError, FlexrtError, ShapeError
from flexrt.inputs import short
from flexrt.ir.datatype import DataType
from flexrt.model.tensor import Tensor
from flexrt.torch._ir import IRNode, Ref

# torch / NumPy dtype names -> FFModel's
DTYPES = {"torch.float32": DataType.DT_FLOAT, "torch.float": DataType.DT_FLOAT, "float32": DataType.DT_FLOAT,
          "torch.float64": DataType.DT_DOUBLE, "torch.double": DataType.DT_DOUBLE, "float64": DataType.DT_DOUBLE,
          "torch.int32": DataType.DT_INT32, "torch.int": DataType.DT_INT32, "int32": DataType.DT_INT32,
          "torch.int64": DataType.DT_INT64, "torch.long": DataType.DT_INT64, "int64": DataType.DT_INT64,
          "torch.bool": DataType.DT_BOOLEAN, "bool": DataType.DT_BOOLEAN}
FLOATS = (DataType.DT_FLOAT, DataType.DT_DOUBLE, DataType.DT_HALF, DataType.DT_BFLOAT16)


def node_error(node: IRNode, message: str, kind: type = ConfigError) -> FlexrtError:
    where = f" at {node.origin}" if node.origin else ""
    return kind(f"node '{node.name}' ({node.op}){where}: {message}")


class _Builder:
    def __init__(self, ffmodel, inputs: Sequence[Any]) -> None:
        self.ff = ffmodel
        self.inputs = list(inputs)
        self.next_input = 0
        self.values: dict[str, Any] = {}
        self.outputs: list[Any] = []
        self._made: dict[int, tuple] = {}     # id(array) -> (array, its model constant)

    # ---- values ---------------------------------------------------------------------------
    def value(self, node: IRNode, name: str) -> Any:
        if name not in self.values:
            raise node_error(node, f"reads '{name}', which no earlier node defines; nodes must come in "
                                   f"topological order")
        return self.values[name]

    def resolve(self, node: IRNode, v: Any) -> Any:
        if isinstance(v, Ref):
            return self.value(node, v.name)
        if isinstance(v, tuple):
            return tuple(self.resolve(node, x) for x in v)
        if isinstance(v, slice):
            return slice(self.resolve(node, v.start), self.resolve(node, v.stop), self.resolve(node, v.step))
        return v

    def args(self, node: IRNode, arrays: bool = False) -> tuple[list, list]:
        """(input values, resolved positional fields); array constants as model constants unless
        ``arrays`` (a handler that reads their values: an index)."""
        ins = [self.value(node, n) for n in node.inputs]
        return [v if arrays else self.constant(v, node) for v in ins], [self.resolve(node, f) for f in node.fields]

    def constant(self, v: Any, node: IRNode) -> Any:
        """An array value (a CONSTANT node's: a buffer, an ONNX constant) as a constant of the model
        (FFModel.create_constant), made once per array, in its own type (other floating types as
        float32, other integers as int64); any other value as it is."""
        if not isinstance(v, np.ndarray):
            return v
        if id(v) not in self._made:
            check_size(node, v.size, "an array constant")
            dtype = DTYPES.get(v.dtype.name) or (DataType.DT_FLOAT if v.dtype.kind == "f" else DataType.DT_INT64)
            made = self.ff.create_constant(list(v.shape) or [1], v.reshape(v.shape or (1,)), dtype)
            self._made[id(v)] = (v, made)
        return self._made[id(v)][1]

    def tensor(self, node: IRNode, v: Any, what: str = "its input") -> Tensor:
        if not isinstance(v, Tensor):
            raise node_error(node, f"{what} must be a tensor, got {describe(v)}")
        return v


MAX_CONSTANT = 2 ** 27   # elements of one constant a handler makes (1 GiB of doubles): beyond, a bad size


def check_size(node: IRNode, count: int, what: str) -> None:
    """Refuse a constant of ``count`` elements past ``MAX_CONSTANT`` (an output size of 10**9) before
    it is allocated."""
    if count > MAX_CONSTANT:
        raise node_error(node, f"{what} would hold {count} values (more than {MAX_CONSTANT}): check the sizes",
                         ShapeError)


def describe(v: Any) -> str:
    if v is None:
        return "None (a value no FFModel layer computes, such as attention weights)"
    if isinstance(v, Tensor):
        return f"tensor {list(v.dims)}"
    return f"{type(v).__name__} {v!r}"


def norm_axis(node: IRNode, d: Any, rank: int) -> int:
    if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank:
        raise node_error(node, f"dimension {d!r} is out of range for rank {rank}; valid: {-rank}..{rank - 1}",
                         ShapeError)
    return d % rank


def shape_with_inferred(node: IRNode, numel: int, shape: Sequence[Any]) -> list[int]:
    """``shape`` (ints, at most one -1) with its -1 filled in for ``numel`` elements."""
    shape = list(shape)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = list(shape[0])
    if any(isinstance(s, bool) or not isinstance(s, int) for s in shape):
        raise node_error(node, f"shape {shape} must hold integers (sizes or -1)", ShapeError)
    known = math.prod(s for s in shape if s != -1)
    if shape.count(-1) > 1 or any(s < -1 or s == 0 for s in shape):
        raise node_error(node, f"shape {shape}: sizes must be >= 1 with at most one -1", ShapeError)
    if -1 in shape:
        if known == 0 or numel % known:
            raise node_error(node, f"shape {shape} is invalid for {numel} elements", ShapeError)
        shape[shape.index(-1)] = numel // known
    if math.prod(shape) != numel:
        raise node_error(node, f"shape {shape} is invalid for {numel} elements", ShapeError)
    return shape


def split_sizes(node: IRNode, size: int, *, split_size=None, sections=None, chunks=None, pieces=None) -> list[int]:
    """The piece sizes of torch.split (``split_size`` or ``sections``), torch.chunk (``chunks``) or
    FlexFlow's equal ``pieces`` of a dimension of ``size``."""
    if sections is not None:
        sections = list(sections)
        if sum(sections) != size or any(s < 1 for s in sections):
            raise node_error(node, f"sections {sections} must be >= 1 and sum to the dimension's size {size}",
                             ShapeError)
        return sections
    if chunks is not None:
        split_size = -(-size // chunks)
    if split_size is not None:
        if split_size < 1:
            raise node_error(node, f"split size {split_size} must be >= 1", ShapeError)
        return [min(split_size, size - lo) for lo in range(0, size, split_size)]
    if pieces is None or pieces < 1 or size % pieces:
        raise node_error(node, f"cannot split a dimension of size {size} into {pieces} equal pieces", ShapeError)
    return [size // pieces] * pieces


def flag(node: IRNode, v: Any, what: str) -> bool:
    """A yes/no field or keyword (``use_bias``, ``batch_first``): 0, 1, False or True, else refused."""
    if isinstance(v, (bool, int)) and v in (0, 1):
        return bool(v)
    raise node_error(node, f"{what} must be 0 or 1 (False or True), got {type(v).__name__} {short(v)}")


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
