"""Keras' recurrent layers over (N, steps, features) sequences, unrolled into FFModel layers
(``flexrt.model.recurrent``): ``LSTM``, ``GRU`` and ``SimpleRNN``.

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

Entry points: ``LSTM``, ``GRU``, ``SimpleRNN``.
"""

from __future__ import annotations

import numbers

import numpy as np

from flexrt.errors import ConfigError, ShapeError
from flexrt.keras.layers._common import activation_of, check_regularizer, lower_fused, refuse
from flexrt.keras.layers.base_layer import Layer
from flexrt.model import recurrent


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


class GRU(_Recurrent):
    """Keras' GRU (``reset_after=True``, its default): per step ih = x W + b_in, hh = h U + b_rec
    (two Dense layers, ``{name}`` and ``{name}.hh``, the steps reading the first step's), gates z, r
    and the candidate in Keras' order: z = sigmoid(ih_z + hh_z), r = sigmoid(ih_r + hh_r),
    n = tanh(ih_n + r * hh_n), h' = n + z (h - n). Weights as Keras': kernel [features, 3 units],
    recurrent kernel [units, 3 units], bias [2, 3 units] (input's, recurrent's)."""

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True, reset_after=True,
                 return_sequences=False, go_backwards=False, **kwargs) -> None:
        super().__init__("gru", "GRU", units, return_sequences, go_backwards, kwargs,
                         activation=(activation, "tanh"), recurrent_activation=(recurrent_activation, "sigmoid"),
                         use_bias=(use_bias, True), reset_after=(reset_after, True))

    def lower(self, ffmodel, inputs, name, shared):
        x, H = inputs[0], self.units
        h, outs = self._zeros(ffmodel, x), []
        for t, xt in enumerate(self._steps(ffmodel, x, name)):
            tag = "" if t == 0 else f".t{t}"
            ih = ffmodel.dense(xt, 3 * H, shared_op=shared if t == 0 else name, name=f"{name}{tag}")
            hh = ffmodel.dense(h, 3 * H, shared_op=(f"{shared}.hh" if shared else None) if t == 0 else f"{name}.hh",
                               name=f"{name}.hh{tag}")
            (iz, ir, i_n), (hz, hr, hn) = (ffmodel.split(g, [H] * 3, 1, name=f"{name}.{p}_gates{tag}")
                                          for g, p in ((ih, "ih"), (hh, "hh")))
            z = ffmodel.sigmoid(ffmodel.add(iz, hz, name=f"{name}.z_in{tag}"), name=f"{name}.z{tag}")
            r = ffmodel.sigmoid(ffmodel.add(ir, hr, name=f"{name}.r_in{tag}"), name=f"{name}.r{tag}")
            n = ffmodel.tanh(ffmodel.add(i_n, ffmodel.multiply(r, hn, name=f"{name}.rh{tag}"), name=f"{name}.n_in{tag}"),
                             name=f"{name}.n{tag}")
            h = ffmodel.add(n, ffmodel.multiply(z, ffmodel.subtract(h, n, name=f"{name}.diff{tag}"),
                                                name=f"{name}.zd{tag}"), name=f"{name}.h{tag}")
            outs.append(h)
        return self._result(ffmodel, outs, name)

    def _weight_layers(self, ffmodel, first) -> list:
        return [first, ffmodel.get_layer_by_name(f"{first.name}.hh")]

    def _keras_shapes(self, shapes: tuple) -> tuple:
        if len(shapes) != 4:
            return shapes
        kernel, (three,), recurrent, _ = shapes
        return (kernel, recurrent, (2, three))

    def _keras_arrays(self, arrays: tuple) -> tuple:
        kernel, b_in, recurrent, b_rec = arrays
        return (kernel, recurrent, np.stack([b_in, b_rec]))

    def _ff_arrays(self, arrays: tuple) -> tuple:
        if len(arrays) != 3 or np.shape(arrays[2]) != (2, 3 * self.units):
            raise ConfigError(f"set_weights: GRU '{self.name}' takes Keras' 3 arrays (kernel, recurrent_kernel, and a "
                              f"bias of shape (2, {3 * self.units}): the input's and the recurrent one's)")
        kernel, recurrent, bias = arrays
        return (kernel, np.asarray(bias)[0], recurrent, np.asarray(bias)[1])


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

    def _keras_shapes(self, shapes: tuple) -> tuple:
        """Keras' (kernel, recurrent kernel, bias): the Dense's kernel cut after the features."""
        if len(shapes) != 2:
            return shapes
        (rows, h), bias = shapes
        return ((rows - h, h), (h, h), bias)

    def _keras_arrays(self, arrays: tuple) -> tuple:
        kernel, bias = arrays
        return (kernel[:-self.units], kernel[-self.units:], bias)

    def _ff_arrays(self, arrays: tuple) -> tuple:
        if len(arrays) != 3:
            raise ConfigError(f"set_weights: SimpleRNN '{self.name}' takes Keras' 3 arrays (kernel, recurrent_kernel, "
                              f"bias), got {len(arrays)}")
        kernel, recurrent_kernel, bias = (np.asarray(a) for a in arrays)
        if kernel.ndim != 2 or recurrent_kernel.shape != (self.units, self.units) or kernel.shape[1:] != (self.units,):
            raise ShapeError(f"set_weights: SimpleRNN '{self.name}': kernel must be (features, {self.units}) and "
                             f"recurrent_kernel ({self.units}, {self.units}), got {kernel.shape} and "
                             f"{recurrent_kernel.shape}")
        return (np.concatenate([kernel, recurrent_kernel], 0), bias)
