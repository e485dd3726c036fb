"""Merge layers, each called on a list of tensors: ``Concatenate``, ``Add``, ``Subtract``,
``Multiply``, ``Maximum``, ``Minimum``, ``Average``, and the functions ``concatenate``, ``add``,
``subtract``, ``multiply``, ``maximum``, ``minimum``, ``average``.

The element-wise ones broadcast (as FlexFlow's Keras does: ``(N, 10, 1) * (N, 1, 2)`` is
``(N, 10, 2)``). ``Add``, ``Multiply``, ``Maximum`` and ``Minimum`` take two or more tensors (a
chain of binary FFModel layers ``{name}.1``, ... ending in ``{name}``); ``Subtract`` takes two.
``Concatenate(axis=-1)`` defaults to the last dimension (Keras); the function ``concatenate``
to the channels of image batches (FlexFlow's ``_axis=1`` for channels-first ones, -1 for
channels-last ones) and to the last dimension of other tensors. The batch (dimension 0) cannot be
an axis.

Entry points: the classes and functions above.
"""

from __future__ import annotations

import numbers

from flexrt.errors import ConfigError, ShapeError
from flexrt.keras.layers._common import image_data_format, image_layout
from flexrt.keras.layers.base_layer import Layer


class _Merge(Layer):
    multi_input = True
    shares_weights = False
    method = ""            # the FFModel binary method
    max_inputs = None      # None: any number >= 2

    def __init__(self, default_name: str, layer_type: str, **kwargs) -> None:
        super().__init__(default_name, layer_type, **kwargs)

    def _call_inputs(self, inputs):
        tensors = super()._call_inputs(inputs)
        where = f"{self.layer_type} '{self.name}'"
        if len(tensors) < 2 or (self.max_inputs is not None and len(tensors) > self.max_inputs):
            valid = "exactly 2" if self.max_inputs == 2 else "2 or more"
            raise ConfigError(f"{where}: takes {valid} tensors, got {len(tensors)}")
        return tensors

    def lower(self, ffmodel, inputs, name, shared):
        out = inputs[0]
        last = len(inputs) - 1
        for i, t in enumerate(inputs[1:], start=1):
            out = getattr(ffmodel, self.method)(out, t, name=name if i == last else f"{name}.{i}")
        return out


class Add(_Merge):
    method = "add"

    def __init__(self, **kwargs) -> None:
        super().__init__("add", "Add", **kwargs)


class Subtract(_Merge):
    method = "subtract"
    max_inputs = 2

    def __init__(self, **kwargs) -> None:
        super().__init__("subtract", "Subtract", **kwargs)


class Multiply(_Merge):
    method = "multiply"

    def __init__(self, **kwargs) -> None:
        super().__init__("multiply", "Multiply", **kwargs)


class Maximum(_Merge):
    method = "max"

    def __init__(self, **kwargs) -> None:
        super().__init__("maximum", "Maximum", **kwargs)


class Minimum(_Merge):
    method = "min"

    def __init__(self, **kwargs) -> None:
        super().__init__("minimum", "Minimum", **kwargs)


class Average(_Merge):
    """The element-wise mean: the sum's chain of adds ``{name}.sum.1``, ..., then 1/n of it."""
    method = "add"

    def __init__(self, **kwargs) -> None:
        super().__init__("average", "Average", **kwargs)

    def lower(self, ffmodel, inputs, name, shared):
        total = super().lower(ffmodel, inputs, f"{name}.sum", shared)
        return ffmodel.scalar_multiply(total, 1.0 / len(inputs), name=name)


class Concatenate(_Merge):
    """Join tensors along ``axis`` (every other dimension equal)."""

    def __init__(self, axis=-1, **kwargs) -> None:
        super().__init__("concatenate", "Concatenate", **kwargs)
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise ConfigError(f"Concatenate '{self.name}': axis must be an integer, got {axis!r}")
        self.axis = int(axis)

    def _call_inputs(self, inputs):
        tensors = Layer._call_inputs(self, inputs)
        rank = tensors[0].num_dims
        if not -rank <= self.axis < rank or self.axis % rank == 0:
            raise ShapeError(f"Concatenate '{self.name}': axis {self.axis} of rank-{rank} tensors; valid: 1..{rank - 1} "
                             f"or -{rank - 1}..-1 (the batch, dimension 0, cannot be joined)")
        return tensors

    def lower(self, ffmodel, inputs, name, shared):
        return ffmodel.concat(inputs, self.axis % inputs[0].num_dims, name=name)


def concatenate(input_tensors, _axis=None, axis=None, **kwargs):
    """``Concatenate(axis)(input_tensors)``. Without an axis: the channels of image batches (1, FlexFlow's
    default, for channels-first ones; -1 for those a channels-last layer made, or under a channels-last
    image data format), else the last axis (Keras' -1, FlexFlow's 1 for (N, C) tensors)."""
    if axis is None:
        axis = _axis
    if axis is None:
        first = input_tensors[0] if isinstance(input_tensors, (list, tuple)) and input_tensors else None
        image = getattr(first, "num_dims", 0) == 4
        last = image_data_format() == "channels_last" or image_layout(first) == "channels_last"
        axis = 1 if image and not last else -1
    return Concatenate(axis=axis, **kwargs)(input_tensors)


def average(input_tensors, **kwargs):
    return Average(**kwargs)(input_tensors)


def add(input_tensors, **kwargs):
    return Add(**kwargs)(input_tensors)


def subtract(input_tensors, **kwargs):
    return Subtract(**kwargs)(input_tensors)


def multiply(input_tensors, **kwargs):
    return Multiply(**kwargs)(input_tensors)


def maximum(input_tensors, **kwargs):
    return Maximum(**kwargs)(input_tensors)


def minimum(input_tensors, **kwargs):
    return Minimum(**kwargs)(input_tensors)
