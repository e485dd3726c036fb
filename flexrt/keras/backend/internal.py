"""The layers behind FlexFlow's Keras backend functions: ``BatchMatmul``, ``Sin``, ``Cos``, ``Exp``,
``Pow``, ``ReduceSum``, ``Rsqrt``, ``Gather`` (and the functions ``rsqrt``, ``gather``).

Entry points: the layer classes, ``rsqrt``, ``gather``.
"""

from __future__ import annotations

import numbers

from flexrt.errors import ConfigError, ShapeError
from flexrt.keras.layers.base_layer import Layer


class _Unary(Layer):
    shares_weights = False
    method = ""

    def lower(self, ffmodel, inputs, name, shared):
        return getattr(ffmodel, self.method)(inputs[0], name=name)


class Sin(_Unary):
    method = "sin"

    def __init__(self, **kwargs) -> None:
        super().__init__("sin", "Sin", **kwargs)


class Cos(_Unary):
    method = "cos"

    def __init__(self, **kwargs) -> None:
        super().__init__("cos", "Cos", **kwargs)


class Exp(_Unary):
    method = "exp"

    def __init__(self, **kwargs) -> None:
        super().__init__("exp", "Exp", **kwargs)


class Rsqrt(_Unary):
    method = "rsqrt"

    def __init__(self, **kwargs) -> None:
        super().__init__("rsqrt", "Rsqrt", **kwargs)


class Pow(Layer):
    """``x ** a`` element-wise."""

    shares_weights = False

    def __init__(self, a, **kwargs) -> None:
        super().__init__("pow", "Pow", **kwargs)
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            raise ConfigError(f"Pow '{self.name}': the exponent must be a number, got {a!r}")
        self.a = float(a)

    def lower(self, ffmodel, inputs, name, shared):
        return ffmodel.pow(inputs[0], self.a, name=name)


class BatchMatmul(Layer):
    """``(N, m, k) @ (N, k, n) -> (N, m, n)`` (and higher ranks with equal leading dimensions)."""

    multi_input = True
    shares_weights = False

    def __init__(self, **kwargs) -> None:
        super().__init__("batch_matmul", "BatchMatmul", **kwargs)

    def _call_inputs(self, inputs):
        tensors = super()._call_inputs(inputs)
        if len(tensors) != 2:
            raise ConfigError(f"BatchMatmul '{self.name}': takes 2 tensors, got {len(tensors)}")
        return tensors

    def lower(self, ffmodel, inputs, name, shared):
        return ffmodel.batch_matmul(inputs[0], inputs[1], name=name)


class ReduceSum(Layer):
    """Sum over ``axis`` (an int, a list, or None: every dimension but the batch)."""

    shares_weights = False

    def __init__(self, axis=None, keepdims=False, **kwargs) -> None:
        super().__init__("reduce_sum", "ReduceSum", **kwargs)
        where = f"ReduceSum '{self.name}'"
        if isinstance(axis, numbers.Integral) and not isinstance(axis, bool):
            axis = [axis]
        if axis is not None and (not isinstance(axis, (list, tuple)) or not axis or
                                 any(isinstance(a, bool) or not isinstance(a, numbers.Integral) for a in axis)):
            raise ConfigError(f"{where}: axis must be an integer, a list of them or None, got {axis!r}")
        if not isinstance(keepdims, bool):
            raise ConfigError(f"{where}: keepdims must be True or False, got {keepdims!r}")
        self.axis = None if axis is None else tuple(int(a) for a in axis)
        self.keepdims = keepdims

    def lower(self, ffmodel, inputs, name, shared):
        rank = inputs[0].num_dims
        axes = tuple(range(1, rank)) if self.axis is None else self.axis
        for a in axes:
            if not -rank <= a < rank:
                raise ShapeError(f"axis {a} is out of range for a rank-{rank} input; valid: 1..{rank - 1}")
            if a % rank == 0:
                raise ShapeError(f"axis {a} is the batch; the sum keeps the sample dimension (valid: 1..{rank - 1})")
        return ffmodel.reduce_sum(inputs[0], tuple(sorted({a % rank for a in axes})), self.keepdims, name=name)


class Gather(Layer):
    """``out[n][i][j] = x[n][index[n][i][j]][j]`` along ``axis`` (torch.gather); ``[x, index]``."""

    multi_input = True
    shares_weights = False

    def __init__(self, axis=0, **kwargs) -> None:
        super().__init__("gather", "Gather", **kwargs)
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise ConfigError(f"Gather '{self.name}': axis must be an integer, got {axis!r}")
        self.axis = int(axis)

    def _call_inputs(self, inputs):
        tensors = super()._call_inputs(inputs)
        if len(tensors) != 2:
            raise ConfigError(f"Gather '{self.name}': takes [x, index], got {len(tensors)} tensors")
        return tensors

    def lower(self, ffmodel, inputs, name, shared):
        rank = inputs[0].num_dims
        if not -rank <= self.axis < rank or self.axis % rank == 0:
            raise ShapeError(f"axis {self.axis} of a rank-{rank} input; valid: 1..{rank - 1} (not the batch)")
        return ffmodel.gather(inputs[0], inputs[1], self.axis % rank, name=name)


def rsqrt(x):
    return Rsqrt()(x)


def gather(x, indices, axis):
    return Gather(axis)([x, indices])
