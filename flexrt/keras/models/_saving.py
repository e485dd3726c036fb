"""A Keras model's weights as one list (``get_weights`` / ``set_weights``) and in a file
(``save_weights`` / ``load_weights``).

The list holds each layer's weights (FlexFlow's layouts: a Dense kernel is ``(in, out)``, a Conv2D
kernel ``(filters, C / groups, kh, kw)``) layer after layer, in ``model.layers`` order, as Keras'
``Model.get_weights``. The file is NumPy's ``.npz``, one array per weight named
``"<k>/<layer>/<index>"``, ``k`` the layer's position among the layers with weights (FlexFlow's Keras
names layers by kind, so two Dense layers are both ``dense``): Keras' HDF5 formats (``.h5``, ``.weights.h5``, ``.keras``) need h5py, which
flexrt does not depend on, and are refused by name. Loading checks every layer's weights by name and
shape before writing any.

Entry points: ``model_weights``, ``set_model_weights``, ``save_weights``, ``load_weights``.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
from flexrt.inputs import listing, short, writable_file


def _weighted(model) -> list:
    return [layer for layer in model.layers if layer.count_params()]


def model_weights(model, ffmodel) -> list:
    """Every layer's weights in ``ffmodel``, layer after layer."""
    return [np.array(a) for layer in _weighted(model) for a in layer.get_weights(ffmodel)]


def _by_layer(model, arrays: list, where: str) -> list:
    """``arrays`` cut into each weighted layer's (layer, its arrays), shapes checked."""
    layers = _weighted(model)
    want = [(layer, [tuple(s) for s in layer.weight_shapes()]) for layer in layers]
    total = sum(len(shapes) for _, shapes in want)
    if len(arrays) != total:
        raise ConfigError(f"{where}: the model has {total} weight arrays ({len(layers)} layers with weights), got "
                          f"{len(arrays)}")
    out, k = [], 0
    for layer, shapes in want:
        mine = [np.asarray(a) for a in arrays[k:k + len(shapes)]]
        for i, (a, s) in enumerate(zip(mine, shapes)):
            if tuple(a.shape) != s:
                raise ShapeError(f"{where}: weight {k + i} (layer '{layer.name}', weight {i}) has shape {s}, got an "
                                 f"array of shape {tuple(a.shape)}")
        out.append((layer, mine))
        k += len(shapes)
    return out


def set_model_weights(model, ffmodel, arrays, where: str = "set_weights") -> None:
    """Write ``arrays`` (as ``model_weights`` lists them) into ``ffmodel``, all checked first."""
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, (list, tuple)):
        raise ConfigError(f"{where}: give a list of arrays (as get_weights returns), got {short(arrays)}")
    for layer, mine in _by_layer(model, list(arrays), where):
        layer.set_weights(ffmodel, *mine)


def _key(k: int, layer, i: int) -> str:
    return f"{k}/{layer.name}/{i}"


def _npz_path(filepath, where: str) -> str:
    path = os.fspath(filepath) if isinstance(filepath, (str, os.PathLike)) else None
    if not path:
        raise ConfigError(f"{where}: filepath must be a path ending in .npz, got {short(filepath)}")
    if path.endswith((".h5", ".hdf5", ".keras")):
        raise NotYetAvailableError(f"{where}: {path}: Keras' HDF5 formats need h5py, which flexrt does not depend on; "
                                   f"give a path ending in .npz (NumPy's format, one array per layer weight)")
    if not path.endswith(".npz"):
        raise ConfigError(f"{where}: {path}: give a path ending in .npz (NumPy's format, one array per layer weight)")
    return path


def save_weights(model, ffmodel, filepath, overwrite: bool = True) -> None:
    where = "save_weights"
    path = _npz_path(filepath, where)
    if not isinstance(overwrite, bool):
        raise ConfigError(f"{where}: overwrite must be True or False, got {short(overwrite)}")
    if not overwrite and os.path.exists(path):
        raise ConfigError(f"{where}: {path} exists and overwrite=False")
    writable_file(path, where)
    arrays = {_key(k, layer, i): np.array(a) for k, layer in enumerate(_weighted(model))
              for i, a in enumerate(layer.get_weights(ffmodel))}
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load_weights(model, ffmodel, filepath) -> None:
    """The weights ``save_weights`` wrote, by layer name and index; a ConfigError naming the file for
    a missing, corrupt or other model's file (nothing is written then)."""
    where = "load_weights"
    path = _npz_path(filepath, where)
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: {path} does not exist (or is not a file)")
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ConfigError(f"{where}: {path} is not a weights file save_weights wrote ({type(e).__name__}: "
                          f"{short(str(e))})") from None
    arrays, missing = [], []
    for k, layer in enumerate(_weighted(model)):
        for i in range(len(layer.weight_shapes())):
            key = _key(k, layer, i)
            if key in data:
                arrays.append(data.pop(key))
            else:
                missing.append(key)
    if missing or data:
        raise ConfigError(f"{where}: {path} does not hold this model's weights (missing: {listing(missing) or 'none'}; "
                          f"not in the model: {listing(sorted(data)) or 'none'})")
    set_model_weights(model, ffmodel, arrays, f"{where}: {path}")
