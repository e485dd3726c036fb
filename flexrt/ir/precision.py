"""Mixed-precision training as a model transformation (Micikevicius et al. 2018; Megatron-LM's
``--fp16`` / ``--bf16``).

``with_precision(pcg, "fp16")`` is the same model with every floating-point tensor in half precision:
floating inputs, weights and every operator attribute that names a floating type (an embedding's
table, a cast's target), so every operator computes and stores its activations in 16 bits. The
simulator then times kernels at the devices' 16-bit (tensor-core) peaks and counts 2-byte
activations, weights and gradients. What makes it *mixed* precision lives with the optimizer: a
16-bit weight has a float32 master copy that the update applies to (and its optimizer state is
float32), both in the simulator's memory and in the runtime, and the loss is scaled so that small
gradients survive float16 (``flexrt.kernels.optimizers.LossScaler``). Integer tensors (token ids,
indices) keep their types.

Entry points: ``Precision``, ``with_precision``, ``is_half``, ``is_bfloat16``.
"""

from __future__ import annotations

import dataclasses
import enum

from flexrt.errors import ConfigError
from flexrt.inputs import parse_enum
from flexrt.ir.datatype import DataType
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.ir.tensor_shape import TensorShape


class Precision(enum.Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"

    @classmethod
    def parse(cls, value) -> "Precision":
        return parse_enum(cls, value, "precision", ConfigError)

    @property
    def dtype(self) -> DataType:
        return {Precision.FP32: DataType.DT_FLOAT, Precision.FP16: DataType.DT_HALF,
                Precision.BF16: DataType.DT_BFLOAT16}[self]


def is_half(dtype: DataType) -> bool:
    """A 16-bit floating type: trained with float32 master weights."""
    return dtype in (DataType.DT_HALF, DataType.DT_BFLOAT16)


def is_bfloat16(dtype: DataType) -> bool:
    """bfloat16: the NumPy runtime holds it in float32 arrays of bfloat16 values
    (``flexrt.kernels.bfloat16``), so its weights' masters are not told by their arrays' item size."""
    return dtype is DataType.DT_BFLOAT16


def _converted(value, dtype: DataType):
    if isinstance(value, DataType):
        return dtype if value.is_floating else value
    if isinstance(value, TensorShape):
        return TensorShape(value.dims, dtype) if value.dtype.is_floating and value.dtype is not dtype else value
    return value


def _attrs_in(attrs, dtype: DataType):
    if not dataclasses.is_dataclass(attrs):
        return attrs
    changes = {}
    for f in dataclasses.fields(attrs):
        old = getattr(attrs, f.name)
        new = _converted(old, dtype)
        if new is not old:
            changes[f.name] = new
    return dataclasses.replace(attrs, **changes) if changes else attrs


def with_precision(pcg: PCG, precision) -> PCG:
    """The model with its floating-point tensors in ``precision``'s type (module doc); fp32 returns
    ``pcg`` itself when it is already float32 throughout."""
    dtype = Precision.parse(precision).dtype
    out, ids = PCG(), {}
    changed = False
    for nid in pcg.topological_order():
        node = pcg.node(nid)
        attrs = _attrs_in(node.attrs, dtype)
        changed |= attrs is not node.attrs
        ids[nid] = out.add_node(attrs, [TensorRef(ids[r.node], r.index) for r in node.inputs], name=node.name)
    return out if changed else pcg
