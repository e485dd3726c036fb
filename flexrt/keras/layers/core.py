"""Core Keras layers: ``Dense``, ``Flatten``, ``Activation``, ``Dropout``, ``Reshape``, ``Permute``,
``Embedding``; each lowers to FFModel's layer of the same meaning.

Where FlexFlow's Keras and Keras differ, these follow Keras and say so: ``Dense`` takes any input
of rank >= 2 (FlexFlow's, rank 2); ``Embedding`` returns ``(batch, input_length, output_dim)``
(FlexFlow's sums over the sequence); ``activation`` may be any name in ``ACTIVATIONS`` (FlexFlow's
Dense: relu and sigmoid). ``Permute`` takes FlexFlow's ``perm`` (every dimension, batch included,
0-based) or Keras' ``dims`` (1-based, without the batch).

Entry points: the layer classes.
"""

from __future__ import annotations

import numbers

from typing import Optional

from flexrt.errors import ConfigError, ShapeError
from flexrt.ir.datatype import DataType
from flexrt.keras.layers._common import (apply_activation, activation_of, check_regularizer, data_format_of,
                                         initializer_handle, lower_fused, refuse)
from flexrt.keras.layers.base_layer import Layer
from flexrt.keras._tensor import dtype_of
from flexrt.model import AggrMode


def _positive(where: str, arg: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"{where}: {arg} must be a positive integer, got {value!r}")
    return int(value)


class Dense(Layer):
    """``activation(x @ kernel + bias)`` over the last dimension; kernel ``(in, units)``, bias ``(units,)``."""

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, input_shape=None, **kwargs) -> None:
        # Keras' positional order (units, activation, use_bias, ...); FlexFlow's positional
        # (units, input_shape) is read too: a shape is a tuple, an activation a name or a function
        if input_shape is None and isinstance(activation, (list, tuple)):
            input_shape, activation = activation, None
        super().__init__("dense", "Dense", input_shape=input_shape, **kwargs)
        where = f"Dense '{self.name}'"
        self.units = self.out_channels = _positive(where, "units", units)
        self.activation = activation_of(where, activation)
        if not isinstance(use_bias, bool):
            raise ConfigError(f"{where}: use_bias must be True or False, got {use_bias!r}")
        self.use_bias = use_bias
        self.kernel_initializer = initializer_handle(where, "kernel_initializer", kernel_initializer)
        self.bias_initializer = initializer_handle(where, "bias_initializer", bias_initializer)
        self.kernel_regularizer = check_regularizer(where, "kernel_regularizer", kernel_regularizer, applied=True)
        check_regularizer(where, "bias_regularizer", bias_regularizer)
        check_regularizer(where, "activity_regularizer", activity_regularizer)
        refuse(where, kernel_constraint=(kernel_constraint, None), bias_constraint=(bias_constraint, None))

    def lower(self, ffmodel, inputs, name, shared):
        def build(mode):
            return ffmodel.dense(inputs[0], self.units, mode, self.use_bias, shared_op=shared,
                                 kernel_initializer=self.kernel_initializer,
                                 bias_initializer=self.bias_initializer, kernel_regularizer=self.kernel_regularizer,
                                 name=name)
        return lower_fused(ffmodel, self.activation, build, name)


class Flatten(Layer):
    """Every dimension but the batch into one: ``(N, C, H, W) -> (N, C*H*W)``."""

    shares_weights = False

    def __init__(self, data_format=None, **kwargs) -> None:
        super().__init__("flat", "Flatten", **kwargs)
        data_format_of(f"Flatten '{self.name}'", data_format)   # either: the dimensions flatten as stored

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        if x.num_dims == 4:
            return ffmodel.flat(x, name=name)
        size = 1
        for d in x.dims[1:]:
            size *= d
        return ffmodel.reshape(x, (x.dims[0], size), name=name)


class Activation(Layer):
    """``activation(x)`` element-wise (softmax: over the last dimension)."""

    shares_weights = False

    def __init__(self, activation=None, **kwargs) -> None:
        act = activation_of("Activation", activation)
        super().__init__(act, "Activation", **kwargs)
        self.activation = act

    def lower(self, ffmodel, inputs, name, shared):
        if self.activation == "linear":
            return ffmodel.identity(inputs[0], name=name)
        return apply_activation(ffmodel, inputs[0], self.activation, name)


class Dropout(Layer):
    """Zero each element with probability ``rate`` (scaling the rest by 1 / (1 - rate)); ``seed``
    (None: 0, as FlexFlow) makes the masks reproducible."""

    shares_weights = False

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs) -> None:
        super().__init__("dropout", "Dropout", **kwargs)
        where = f"Dropout '{self.name}'"
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
            raise ConfigError(f"{where}: rate must be a number in [0, 1), got {rate!r}")
        refuse(where, noise_shape=(noise_shape, None))
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise ConfigError(f"{where}: seed must be an integer or None, got {seed!r}")
        self.rate, self.seed = float(rate), 0 if seed is None else int(seed)

    def lower(self, ffmodel, inputs, name, shared):
        return ffmodel.dropout(inputs[0], self.rate, self.seed, name=name)


class Reshape(Layer):
    """The same elements in ``target_shape`` (without the batch; one entry may be -1)."""

    shares_weights = False

    def __init__(self, target_shape, input_shape=None, **kwargs) -> None:
        super().__init__("reshape", "Reshape", input_shape=input_shape, **kwargs)
        where = f"Reshape '{self.name}'"
        if isinstance(target_shape, int) and not isinstance(target_shape, bool):
            target_shape = (target_shape,)
        if not isinstance(target_shape, (list, tuple)) or not target_shape or \
                any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or (d < 1 and d != -1) for d in target_shape) or \
                list(target_shape).count(-1) > 1:
            raise ConfigError(f"{where}: target_shape must be a tuple of positive integers (at most one -1) without "
                              f"the batch dimension, e.g. (28, 28), got {target_shape!r}")
        self.target_shape = tuple(int(d) for d in target_shape)

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        return ffmodel.reshape(x, (x.dims[0],) + self.target_shape, name=name)


class Permute(Layer):
    """Reorders dimensions: FlexFlow's ``perm`` names every dimension, batch included (``perm[0]``
    must be 0: the batch stays first), Keras' ``dims`` the others, counted from 1."""

    shares_weights = False

    def __init__(self, perm=None, input_shape=None, dims=None, **kwargs) -> None:
        if dims is None and isinstance(perm, (list, tuple)) and 0 not in perm:
            perm, dims = None, perm     # tf.keras: Permute((2, 1)), dims without the batch (FlexFlow's perm has 0)
        super().__init__("permute", "Permute", input_shape=input_shape, **kwargs)
        where = f"Permute '{self.name}'"
        if (perm is None) == (dims is None):
            raise ConfigError(f"{where}: give perm (FlexFlow's, with the batch: (0, 2, 1)) or dims (Keras', "
                              f"without it: (2, 1)), exactly one")
        given = perm if perm is not None else dims
        if not isinstance(given, (list, tuple)) or \
                any(isinstance(d, bool) or not isinstance(d, numbers.Integral) for d in given):
            raise ConfigError(f"{where}: {'perm' if perm is not None else 'dims'} must be a tuple of integers, got "
                              f"{given!r}")
        self.perm = tuple(int(d) for d in perm) if perm is not None else (0,) + tuple(int(d) for d in dims)
        if sorted(self.perm) != list(range(len(self.perm))) or self.perm[0] != 0:
            raise ShapeError(f"{where}: {self.perm} (as perm, the batch first) is not a permutation of "
                             f"0..{len(self.perm) - 1} keeping the batch (dimension 0) first")

    def lower(self, ffmodel, inputs, name, shared):
        if len(self.perm) != inputs[0].num_dims:
            raise ShapeError(f"perm {self.perm} has {len(self.perm)} entries; the input has {inputs[0].num_dims} "
                             f"dimensions (the batch included)")
        return ffmodel.transpose(inputs[0], self.perm, name=name)


class Embedding(Layer):
    """Rows of an ``(input_dim, output_dim)`` table for integer ids: ``(N, L) -> (N, L, output_dim)``.
    As a Sequential's first layer (``input_shape=(L,)`` or Keras 2's ``input_length=L``) its input
    holds int32 ids."""

    input_dtype = "int32"     # the dtype of the Input a Sequential makes for it as its first layer

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", embeddings_regularizer=None,
                 activity_regularizer=None, embeddings_constraint=None, mask_zero=False, input_length=None,
                 dtype="float32", **kwargs) -> None:
        if kwargs.get("input_shape") is None and isinstance(input_length, numbers.Integral) and \
                not isinstance(input_length, bool) and input_length > 0:
            kwargs["input_shape"] = (int(input_length),)    # Keras 2: input_length gives a first layer its input
        super().__init__("embedding", "Embedding", **kwargs)
        where = f"Embedding '{self.name}'"
        self.input_dim = _positive(where, "input_dim", input_dim)
        self.output_dim = self.out_channels = _positive(where, "output_dim", output_dim)
        self.embeddings_initializer = initializer_handle(where, "embeddings_initializer", embeddings_initializer)
        check_regularizer(where, "embeddings_regularizer", embeddings_regularizer)
        check_regularizer(where, "activity_regularizer", activity_regularizer)
        refuse(where, embeddings_constraint=(embeddings_constraint, None), mask_zero=(mask_zero, False))
        self.input_length: Optional[int] = None if input_length is None else _positive(where, "input_length",
                                                                                        input_length)
        self.table_dtype = dtype_of(where, dtype)
        if not self.table_dtype.is_floating:
            raise ConfigError(f"{where}: dtype must be a floating type, got {dtype!r}")

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        if x.data_type not in (DataType.DT_INT32, DataType.DT_INT64):
            raise ShapeError(f"the input must hold integer ids (int32 or int64), got {x.data_type.name}")
        if self.input_length is not None and (x.num_dims != 2 or x.dims[1] != self.input_length):
            raise ShapeError(f"input_length={self.input_length}, but the input has shape {x.dims}")
        return ffmodel.embedding(x, self.input_dim, self.output_dim, AggrMode.AGGR_MODE_NONE, self.table_dtype,
                                 shared_op=shared, kernel_initializer=self.embeddings_initializer, name=name)
