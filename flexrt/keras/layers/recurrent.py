"""Keras' recurrent layers over (N, steps, features) sequences, unrolled into FFModel layers
(``flexrt.model.recurrent``): ``LSTM``, ``GRU`` and ``SimpleRNN``, and the ``Bidirectional``
wrapper over them.

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

Entry points: ``LSTM``, ``GRU``, ``SimpleRNN``, ``Bidirectional``.
"""

from __future__ import annotations

import numbers

import numpy as np

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
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

    def _zeros(self, ffmodel, x):
        return ffmodel.create_constant([x.dims[0], self.units], 0.0, x.data_type)

    def _cells(self, ffmodel, steps: list, x, name: str, shared) -> list:
        """The recurrence over ``steps`` (T tensors [N, features]): each step's output [N, units]."""
        raise NotImplementedError

    def lower(self, ffmodel, inputs, name, shared):
        return self.lower_direction(ffmodel, inputs[0], name, shared, self.go_backwards)

    def lower_direction(self, ffmodel, x, name: str, shared, backwards: bool, realign: bool = False):
        """The layer over ``x`` read last step first where ``backwards``; its sequence of outputs in reading
        order, or with ``realign`` (Bidirectional's backward half) in the steps' order."""
        if x.num_dims != 3:
            raise ShapeError(f"{self.layer_type} '{self.name}': takes a sequence batch (N, steps, features), got shape "
                             f"{list(x.dims)}")
        steps = recurrent.time_steps(ffmodel, x, 1, name)
        outs = self._cells(ffmodel, steps[::-1] if backwards else steps, x, name, shared)
        if not self.return_sequences:
            return outs[-1]
        return recurrent.gathered(ffmodel, outs[::-1] if backwards and realign else outs, 1, f"{name}.sequence")


class LSTM(_Recurrent):
    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True, unit_forget_bias=True,
                 return_sequences=False, go_backwards=False, **kwargs) -> None:
        super().__init__("lstm", "LSTM", units, return_sequences, go_backwards, kwargs,
                         activation=(activation, "tanh"), recurrent_activation=(recurrent_activation, "sigmoid"),
                         use_bias=(use_bias, True), unit_forget_bias=(unit_forget_bias, True))

    def _cells(self, ffmodel, steps, x, name, shared):
        zeros = self._zeros(ffmodel, x)
        return recurrent.lstm_layer(ffmodel, steps, zeros, zeros, self.units, name, shared)[0]


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

    def _cells(self, ffmodel, steps, x, name, shared):
        H = self.units
        h, outs = self._zeros(ffmodel, x), []
        for t, xt in enumerate(steps):
            tag = "" if t == 0 else f".t{t}"
            ih = ffmodel.dense(xt, 3 * H, shared_op=shared if t == 0 else name, name=f"{name}{tag}")
            hh = ffmodel.dense(h, 3 * H, shared_op=(f"{shared}.hh" if shared else None) if t == 0 else f"{name}.hh",
                               name=f"{name}.hh{tag}")
            (iz, ir, i_n), (hz, hr, hn) = (ffmodel.split(g, [H] * 3, 1, name=f"{name}.{p}_gates{tag}")
                                          for g, p in ((ih, "ih"), (hh, "hh")))
            z = ffmodel.sigmoid(ffmodel.add(iz, hz, name=f"{name}.z_in{tag}"), name=f"{name}.z{tag}")
            r = ffmodel.sigmoid(ffmodel.add(ir, hr, name=f"{name}.r_in{tag}"), name=f"{name}.r{tag}")
            gated = ffmodel.multiply(r, hn, name=f"{name}.rh{tag}")
            n = ffmodel.tanh(ffmodel.add(i_n, gated, name=f"{name}.n_in{tag}"), name=f"{name}.n{tag}")
            h = ffmodel.add(n, ffmodel.multiply(z, ffmodel.subtract(h, n, name=f"{name}.diff{tag}"),
                                                name=f"{name}.zd{tag}"), name=f"{name}.h{tag}")
            outs.append(h)
        return outs

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

    def _cells(self, ffmodel, steps, x, name, shared):
        h, outs = self._zeros(ffmodel, x), []
        for t, xt in enumerate(steps):
            tag = "" if t == 0 else f".t{t}"
            xh = ffmodel.concat([xt, h], 1, name=f"{name}.xh{tag}")
            owner = shared if t == 0 else name
            h = lower_fused(ffmodel, self.activation,
                            lambda mode, xh=xh, tag=tag, owner=owner: ffmodel.dense(
                                xh, self.units, mode, True, shared_op=owner, name=f"{name}{tag}"), f"{name}{tag}")
            outs.append(h)
        return outs

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


_MERGES = ("concat", "sum", "mul", "ave")


class Bidirectional(Layer):
    """Keras' Bidirectional over an LSTM, GRU or SimpleRNN: the layer read forwards (its weights in
    ``{name}``'s layers) and backwards (``{name}.backward``'s), the backward half's sequence put back
    in the steps' order, merged by ``merge_mode`` ('concat' on the last axis, 'sum', 'mul', 'ave').
    Weights as Keras': the forward layer's arrays, then the backward one's."""

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs) -> None:
        super().__init__("bidirectional", "Bidirectional", **kwargs)
        where = f"Bidirectional '{self.name}'"
        if not isinstance(layer, _Recurrent):
            raise ConfigError(f"{where}: wraps an LSTM, GRU or SimpleRNN layer, got {layer!r:.80}")
        if merge_mode not in _MERGES:
            raise (NotYetAvailableError if merge_mode is None else ConfigError)(
                f"{where}: merge_mode={merge_mode!r}; valid: {', '.join(map(repr, _MERGES))} (None, two outputs, is "
                f"not available: a layer has one output here)")
        refuse(where, weights=(weights, None), backward_layer=(backward_layer, None))
        self.layer, self.merge_mode = layer, merge_mode

    def lower(self, ffmodel, inputs, name, shared):
        x, inner = inputs[0], self.layer
        fwd = inner.lower_direction(ffmodel, x, name, shared, inner.go_backwards)
        bwd = inner.lower_direction(ffmodel, x, f"{name}.backward", f"{shared}.backward" if shared else None,
                                    not inner.go_backwards, realign=True)
        if self.merge_mode == "concat":
            return ffmodel.concat([fwd, bwd], fwd.num_dims - 1, name=f"{name}.merge")
        if self.merge_mode == "mul":
            return ffmodel.multiply(fwd, bwd, name=f"{name}.merge")
        total = ffmodel.add(fwd, bwd, name=f"{name}.merge" if self.merge_mode == "sum" else f"{name}.sum")
        return total if self.merge_mode == "sum" else ffmodel.scalar_multiply(total, 0.5, name=f"{name}.merge")

    def _weight_layers(self, ffmodel, first) -> list:
        backward = ffmodel.get_layer_by_name(f"{first.name}.backward")
        return self.layer._weight_layers(ffmodel, first) + self.layer._weight_layers(ffmodel, backward)

    def _keras_shapes(self, shapes: tuple) -> tuple:
        half = len(shapes) // 2
        return self.layer._keras_shapes(shapes[:half]) + self.layer._keras_shapes(shapes[half:])

    def _keras_arrays(self, arrays: tuple) -> tuple:
        half = len(arrays) // 2
        return self.layer._keras_arrays(arrays[:half]) + self.layer._keras_arrays(arrays[half:])

    def _ff_arrays(self, arrays: tuple) -> tuple:
        if len(arrays) % 2:
            raise ConfigError(f"set_weights: Bidirectional '{self.name}' takes the forward layer's arrays, then the "
                              f"backward one's (as many), got {len(arrays)}")
        half = len(arrays) // 2
        return self.layer._ff_arrays(tuple(arrays[:half])) + self.layer._ff_arrays(tuple(arrays[half:]))
