"""FlexFlow's ``flexflow.keras.backend``: tensor functions that add layers (``batch_dot``, ``sin``,
``cos``, ``exp``, ``pow``, ``sum``, ``rsqrt``, ``gather``), ``backend()`` (``'flexflow'``, as
FlexFlow's: scripts print it) and Keras' ``image_data_format()`` / ``set_image_data_format(f)``:
'channels_first' by default (FlexFlow's Keras reads images so; Keras' own default is
'channels_last'), the default ``data_format`` of image layers made after the call.

Entry points: the functions above; ``internal`` holds their layers.
"""

from flexrt.keras.backend import internal
from flexrt.keras.layers._common import image_data_format, set_image_data_format
from flexrt.keras.backend.internal import BatchMatmul, Cos, Exp, Gather, Pow, ReduceSum, Rsqrt, Sin, gather, rsqrt

_BACKEND = "flexflow"


def backend() -> str:
    """The backend's name, as FlexFlow reports it."""
    return _BACKEND


def batch_dot(x, y):
    return BatchMatmul()([x, y])


def sin(x):
    return Sin()(x)


def cos(x):
    return Cos()(x)


def exp(x):
    return Exp()(x)


def pow(x, a):  # noqa: A001 (FlexFlow's name)
    return Pow(a)(x)


def sum(x, axis=None, keepdims=False):  # noqa: A001 (FlexFlow's name)
    return ReduceSum(axis, keepdims)(x)


__all__ = ["backend", "batch_dot", "cos", "exp", "gather", "image_data_format", "internal", "pow", "rsqrt",
           "set_image_data_format", "sin", "sum"]
