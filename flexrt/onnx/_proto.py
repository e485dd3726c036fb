"""Checks of an ONNX protobuf before ``ONNXModel`` reads it: its text fields are UTF-8 (protobuf
hands a damaged one over as ``bytes``), and a tensor's data (an initializer, a Constant's value) has
the element type and the number of values its dims say.

Entry points: :func:`check_text`, :func:`tensor_array`.
"""

from __future__ import annotations

import math

import numpy as np

from flexrt.errors import ConfigError
from flexrt.inputs import listing, short

_PACKED_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2, "FLOAT6E2M3": 6, "FLOAT6E3M2": 6}
_TWO_PER_VALUE = ("COMPLEX64", "COMPLEX128")   # real and imaginary parts, one field value each


def check_text(message, source: str, path: str = "model") -> None:
    """ConfigError naming ``source`` and the field's path (``graph.node[2].attribute[0].name``) when
    a text field of ``message`` (an ``onnx.ModelProto``) is not valid UTF-8."""
    for field, value in message.ListFields():
        items = value if field.is_repeated else (value,)
        if field.type == field.TYPE_MESSAGE:
            for i, item in enumerate(items):
                check_text(item, source, f"{path}.{field.name}" + (f"[{i}]" if field.is_repeated else ""))
        elif field.type == field.TYPE_STRING:
            for i, item in enumerate(items):
                if isinstance(item, bytes):
                    at = f"{path}.{field.name}" + (f"[{i}]" if field.is_repeated else "")
                    raise ConfigError(f"ONNXModel: {source}: {at} is not valid UTF-8 text ({short(item)}); ONNX's "
                                      f"names and text fields are UTF-8: the file is damaged")


def tensor_array(onnx, t, where: str) -> np.ndarray:
    """The values of TensorProto ``t``; ConfigError naming ``where`` when its element type is unknown,
    a dimension is negative, or its data holds another number of values than its dims make."""
    if t.HasField("segment"):
        raise ConfigError(f"{where}: a tensor stored in segments is not supported; save the model whole")
    names = onnx.TensorProto.DataType
    if t.data_type not in names.values() or t.data_type == onnx.TensorProto.UNDEFINED:
        raise ConfigError(f"{where}: element type {t.data_type} is not an ONNX tensor type; valid: "
                          f"{listing((f'{v} ({k})' for k, v in names.items() if v), 120)}")
    dims = list(t.dims)
    if any(d < 0 for d in dims):
        raise ConfigError(f"{where}: dims {short(dims)} has a negative size; valid: sizes >= 0")
    kind = names.Name(t.data_type)
    count = math.prod(dims)
    if t.HasField("raw_data") and kind != "STRING":
        bits = _PACKED_BITS.get(kind) or 8 * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        want, have, unit = (count * bits + 7) // 8, len(t.raw_data), "bytes of raw_data"
    elif kind not in _PACKED_BITS and not onnx.external_data_helper.uses_external_data(t):
        field = onnx.helper.tensor_dtype_to_field(t.data_type)
        want, have, unit = count * (2 if kind in _TWO_PER_VALUE else 1), len(getattr(t, field)), f"values in {field}"
    else:
        want = have = unit = None
    if want != have:
        raise ConfigError(f"{where}: dims {short(dims)} of {kind} make {short(want)} {unit}, but the file holds "
                          f"{have}; the file is damaged or was cut short")
    return onnx.numpy_helper.to_array(t)
