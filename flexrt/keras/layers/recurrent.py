"""Keras' recurrent layers over (N, steps, features) sequences, unrolled into FFModel layers
(``flexrt.model.recurrent``): ``LSTM`` and ``SimpleRNN``.

- ``LSTM(units)``: FFModel's LSTM cell per step, the steps reading the first's weights: kernel
  [features, 4 units], recurrent kernel [units, 4 units], bias [4 units], gates i, f, c, o: Keras'
  layout and parameter count.
- ``SimpleRNN(units, activation='tanh')``: h' = activation([x, h] @ W + b), one Dense over the
  concatenation per step, W [features + units, units] being Keras' kernel over its recurrent kernel:
  ``get_weights`` / ``set_weights`` give and take Keras' three arrays (kernel, recurrent kernel, bias).

Both start from zero states and return the last state, or every step's with
``return_sequences=True``; ``go_backwards=True`` reads the steps last to first (the sequence
returned in that order, as Keras'). What they cannot honour is refused naming it: other
activations of the LSTM, dropout, ``return_state`` (one output per layer), ``stateful``,
``time_major``, initializers other than the defaults, regularizers and constraints.

Entry points: ``LSTM``, ``SimpleRNN``.
"""

from __future__ import annotations

import numbers

import numpy as np

from flexrt.errors import ConfigError, ShapeError
from flexrt.keras.layers._common import activation_of, check_regularizer, lower_fused, refuse
from flexrt.keras.layers.base_layer import Layer
from flexrt.model import FFModel, recurrent


class _Recurrent(Layer):
    def __init__(self, default_name, layer_type, units, return_sequences, go_backwards, kwargs, **given) -> None:
        options = {k: kwargs.pop(k) for k in ("dropout", "recurrent_dropout", "return_state", "stateful", "unroll",
                                              "time_major", "kernel_initializer", "recurrent_initializer",
                                              "bias_initializer", "kernel_constraint", "recurrent_constraint",
                                              "bias_constraint", "kernel_regularizer", "recurrent_regularizer",
                                              "bias_regularizer", "activity_regularizer") if k in kwargs}
        super().__init__(default_name, layer_type, **kwargs)
        where = f"{layer_type} '{self.name}'"
        if isinstance(units, bool) or not isinstance(units, numbers.Integral) or units < 1:
            raise ConfigError(f"{where}: units must be a positive integer, got {units!r}")
        for arg, value in (("return_sequences", return_sequences), ("go_backwards", go_backwards)):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: {arg} must be True or False, got {value!r}")
        for arg in ("kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer"):
            check_regularizer(where, arg, options.pop(arg, None))
        defaults = {"dropout": 0.0, "recurrent_dropout": 0.0, "return_state": False, "stateful": False,
                    "unroll": options.get("unroll", False), "time_major": False,
                    "kernel_initializer": "glorot_uniform", "recurrent_initializer": "orthogonal",
                    "bias_initializer": "zeros", "kernel_constraint": None, "recurrent_constraint": None,
                    "bias_constraint": None}
        refuse(where, **{k: (v, defaults[k]) for k, v in options.items()}, **given)
        self.units, self.return_sequences, self.go_backwards = int(units), return_sequences, go_backwards

    def _steps(self, ffmodel, x, name):
        if x.num_dims != 3:
            raise ShapeError(f"{self.layer_type} '{self.name}': takes a sequence batch (N, steps, features), got shape "
                             f"{list(x.dims)}")
        steps = recurrent.time_steps(ffmodel, x, 1, name)
        return steps[::-1] if self.go_backwards else steps

    def _zeros(self, ffmodel, x):
        return ffmodel.create_constant([x.dims[0], self.units], 0.0, x.data_type)

    def _result(self, ffmodel, outs, name):
        return recurrent.gathered(ffmodel, outs, 1, f"{name}.sequence") if self.return_sequences else outs[-1]


class LSTM(_Recurrent):
    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True, unit_forget_bias=True,
                 return_sequences=False, go_backwards=False, **kwargs) -> None:
        super().__init__("lstm", "LSTM", units, return_sequences, go_backwards, kwargs,
                         activation=(activation, "tanh"), recurrent_activation=(recurrent_activation, "sigmoid"),
                         use_bias=(use_bias, True), unit_forget_bias=(unit_forget_bias, True))

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        zeros = self._zeros(ffmodel, x)
        outs, _, _ = recurrent.lstm_layer(ffmodel, self._steps(ffmodel, x, name), zeros, zeros, self.units, name,
                                          shared)
        return self._result(ffmodel, outs, name)


class SimpleRNN(_Recurrent):
    def __init__(self, units, activation="tanh", use_bias=True, return_sequences=False, go_backwards=False,
                 **kwargs) -> None:
        super().__init__("simple_rnn", "SimpleRNN", units, return_sequences, go_backwards, kwargs,
                         use_bias=(use_bias, True))
        self.activation = activation_of(f"SimpleRNN '{self.name}'", activation)

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        h, outs = self._zeros(ffmodel, x), []
        for t, xt in enumerate(self._steps(ffmodel, x, name)):
            tag = "" if t == 0 else f".t{t}"
            xh = ffmodel.concat([xt, h], 1, name=f"{name}.xh{tag}")
            owner = shared if t == 0 else name
            h = lower_fused(ffmodel, self.activation,
                            lambda mode, xh=xh, tag=tag, owner=owner: ffmodel.dense(
                                xh, self.units, mode, True, shared_op=owner, name=f"{name}{tag}"), f"{name}{tag}")
            outs.append(h)
        return self._result(ffmodel, outs, name)

    def weight_shapes(self) -> tuple:
        """Keras' (kernel, recurrent kernel, bias): the Dense's kernel cut after the features."""
        shapes = super().weight_shapes()
        if len(shapes) != 2:
            return shapes
        (rows, h), bias = shapes
        return ((rows - h, h), (h, h), bias)

    def get_weights(self, ffmodel=None) -> tuple:
        kernel, bias = super().get_weights(ffmodel)
        return (kernel[:-self.units], kernel[-self.units:], bias)

    def set_weights(self, ffmodel, *arrays) -> None:
        """Keras' three arrays (kernel, recurrent kernel, bias), as ``Layer.set_weights`` takes weights."""
        if not isinstance(ffmodel, FFModel):
            if arrays:
                raise ConfigError("set_weights: give set_weights(ffmodel, kernel, recurrent_kernel, bias) or "
                                  "set_weights([kernel, recurrent_kernel, bias])")
            ffmodel, arrays = None, tuple(ffmodel)
        if len(arrays) != 3:
            raise ConfigError(f"set_weights: SimpleRNN '{self.name}' takes Keras' 3 arrays (kernel, recurrent_kernel, "
                              f"bias), got {len(arrays)}")
        kernel, recurrent_kernel, bias = (np.asarray(a) for a in arrays)
        if kernel.ndim != 2 or recurrent_kernel.shape != (self.units, self.units) or \
                kernel.shape[1:] != (self.units,):
            raise ShapeError(f"set_weights: SimpleRNN '{self.name}': kernel must be (features, {self.units}) and "
                             f"recurrent_kernel ({self.units}, {self.units}), got {kernel.shape} and "
                             f"{recurrent_kernel.shape}")
        joined = np.concatenate([kernel, recurrent_kernel], 0)
        if ffmodel is None:
            super().set_weights([joined, bias])
        else:
            super().set_weights(ffmodel, joined, bias)
