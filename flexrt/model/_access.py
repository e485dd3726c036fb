"""Reading and writing whole tensors of a compiled model, whatever the strategy (FlexFlow's
``inline_map`` / ``get_array`` / ``set_tensor`` / ``set_weights`` family; ``Tensor`` delegates here).

What a tensor's value is, by kind:

- a model input (``create_tensor``) or ``label_tensor``: the batch the next forward pass (or update)
  uses; zeros until one is given. Writable, before ``compile`` too for inputs (FlexFlow's
  ``bert_proxy_native.py`` sets its input first). An array written with the tensor's exact dtype
  and shape is kept by reference, as FlexFlow's ``attach_numpy_array`` keeps it: later changes in
  place reach the next forward pass;
- a weight (a ``Parameter``): the full array, gathered from its pieces on whatever devices hold
  them (replicas agree); written into every piece, kept until overwritten (``init_layers`` restores
  the initial values);
- a layer's output: its value in the last forward pass, gathered from the pieces of the operator's
  layout (replica 0, partial sums added; across ranks under MPI); read-only (a mapped copy may be
  changed, and is dropped at ``inline_unmap``);
- a constant (``create_constant``): its value everywhere; read-only.

An array written must have the tensor's shape and dtype; integer ids of another width are converted
when every value fits (then the tensor holds a copy).

``inline_map`` takes a copy that ``get_array`` hands out (the same array each time, so changes in
place are what ``inline_unmap`` writes back); FlexFlow's older forms without the model
(``inline_map(ffconfig)``, ``get_array(ffconfig, DataType.DT_FLOAT)``,
``attach_numpy_array(ffconfig, array)``) are recognised by the types of their arguments.

Entry points: ``read``, ``write``, ``split_args``, ``tensor_kind``.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from flexrt.errors import ConfigError, FlexrtError, ShapeError
from flexrt.ir.datatype import DataType
from flexrt.model.dataloader import batch_dtype, ids_outside

LABEL = "label"


class Kind(enum.Enum):
    INPUT = "model input"
    LABEL = "label tensor"
    WEIGHT = "weight"
    OUTPUT = "layer output"
    CONSTANT = "constant"


WRITABLE = (Kind.INPUT, Kind.LABEL, Kind.WEIGHT)


def tensor_kind(model, t) -> Kind:
    from flexrt.model.tensor import Parameter
    if isinstance(t, Parameter):
        return Kind.WEIGHT
    if t.owner_layer == LABEL and t.ref.node == -1:
        return Kind.LABEL
    if t.owner_layer in model._constants:
        return Kind.CONSTANT
    if any(t == i for i in model.inputs):
        return Kind.INPUT
    return Kind.OUTPUT


def describe(t) -> str:
    from flexrt.model.tensor import Parameter
    if isinstance(t, Parameter):
        return f"weight '{t.name}' {list(t.dims)} {t.data_type.name}"
    return f"tensor {t.owner_layer}:{t.ref.index} {list(t.dims)} {t.data_type.name}"


def split_args(t, where: str, args, array: bool = False) -> tuple[Any, Any]:
    """(data type, array) from a call's positional arguments, FlexFlow's current or older form: the
    model (checked to be the tensor's), the config, a ``DataType`` and (with ``array``) the array are
    told apart by type."""
    from flexrt.model.config import FFConfig
    from flexrt.model.ffmodel import FFModel
    dtype = arr = None
    for a in args:
        if a is None:
            continue
        if isinstance(a, FFModel):
            if a is not t.model:
                raise ConfigError(f"{where}: {describe(t)} belongs to another FFModel than the one given")
        elif isinstance(a, FFConfig):
            continue
        elif isinstance(a, DataType):
            dtype = a
        elif array and arr is None:
            arr = a
        else:
            raise ConfigError(f"{where}: unexpected argument {a!r}; FlexFlow's form is {where}(ffmodel, ffconfig"
                              f"{', np_array' if array else ''})")
    if dtype is not None and dtype is not t.data_type:
        raise ShapeError(f"{where}: {describe(t)} holds {t.data_type.name}, not {dtype.name}")
    if array and arr is None:
        raise ConfigError(f"{where}: no array given; FlexFlow's form is {where}(ffmodel, ffconfig, np_array)")
    return dtype, arr


def read(model, t, where: str) -> np.ndarray:
    """The tensor's whole value (a new array, except an input's or label's batch kept by reference)."""
    kind = tensor_kind(model, t)
    want = batch_dtype(t.data_type)
    if kind in (Kind.INPUT, Kind.LABEL):
        if kind is Kind.LABEL and model.session is None:
            raise ConfigError(f"{where}: the label tensor exists after compile(...)")
        arr = model._batch.get(t.owner_layer)
        return np.zeros(t.dims, dtype=want) if arr is None else np.array(arr, dtype=want, copy=True)
    if kind is Kind.CONSTANT:
        return np.array(np.broadcast_to(np.asarray(model._constants[t.owner_layer], dtype=want), t.dims))
    session = model.session
    if session is None:
        raise ConfigError(f"{where}: {describe(t)} has no value before compile(...)")
    try:
        if kind is Kind.WEIGHT:
            return session.weight(t.name)
        return session.output(t.owner_layer, t.ref.index)
    except FlexrtError as e:
        if kind is Kind.OUTPUT and not session.executor._has_pass:
            raise ConfigError(f"{where}: {describe(t)} is read before a forward pass computed it; call "
                              f"ffmodel.forward() first (after giving every input a batch)") from None
        raise type(e)(f"{where}: {describe(t)}: {e}") from None


def check_array(t, where: str, arr) -> np.ndarray:
    """``arr`` as the tensor's value: its exact shape and dtype (FlexFlow asserts both)."""
    if not isinstance(arr, np.ndarray):
        raise ConfigError(f"{where}: {describe(t)} takes a NumPy array, got {type(arr).__name__}")
    want = batch_dtype(t.data_type)
    if tuple(arr.shape) != tuple(t.dims):
        raise ShapeError(f"{where}: {describe(t)} needs an array of shape {list(t.dims)}, got {list(arr.shape)}")
    if arr.dtype != want and arr.dtype.kind in "iu" and want.kind in "iu":
        outside = ids_outside(arr, want)
        if outside is None:
            return arr.astype(want)   # ids of another width (FlexFlow's demo_gather.py attaches int64 ids)
        info = np.iinfo(want)
        raise ShapeError(f"{where}: {describe(t)} holds {want} ids ({info.min}..{info.max}); the array's {arr.dtype} "
                         f"values {outside[0]}..{outside[1]} do not fit")
    if arr.dtype != want:
        raise ShapeError(f"{where}: {describe(t)} needs dtype {want}, got {arr.dtype}; convert it with "
                         f"array.astype(np.{want})")
    return arr


def write(model, t, arr, where: str) -> None:
    """Make ``arr`` the tensor's value (see the module doc for which tensors take one)."""
    kind = tensor_kind(model, t)
    if kind not in WRITABLE:
        raise ConfigError(f"{where}: {describe(t)} is a {kind.value}, computed by the model; only model inputs, "
                          f"ffmodel.label_tensor and weights can be written")
    arr = check_array(t, where, arr)
    if kind is Kind.WEIGHT:
        if model.session is None:
            raise ConfigError(f"{where}: {describe(t)} is placed by compile(...); write it after compile")
        model.session.set_weight(t.name, arr)
        model._dirty = True
        return
    if kind is Kind.LABEL and model.session is None:
        raise ConfigError(f"{where}: the label tensor exists after compile(...)")
    model._batch[t.owner_layer] = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
