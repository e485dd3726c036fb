"""``BatchNormalization`` over the channels of ``(N, C)`` or channels-first ``(N, C, H, W)`` tensors.

Training-mode statistics of the batch, a scale (gamma, starting at ones) and a shift (beta, at
zeros) per channel, as Keras. ``axis``: the channel axis, 1; Keras' default -1 is taken as that
channel axis too (FlexFlow's data are channels first; FlexFlow ignores ``axis``). ``epsilon`` and
``momentum`` are honoured (Keras' momentum m keeps m of the running statistics). Unlike FlexFlow's
Keras, no ReLU follows. Options the operator cannot honour (no scale or shift, other initializers,
regularizers, constraints) raise ``NotYetAvailableError``.

Entry point: ``BatchNormalization``.
"""

from __future__ import annotations

from flexrt.errors import ConfigError, ShapeError
from flexrt.ir.ops import BatchNormAttrs
from flexrt.model import _check
from flexrt.keras.layers._common import check_regularizer, one_of, refuse
from flexrt.keras.layers.base_layer import Layer


class BatchNormalization(Layer):
    shares_weights = False   # FFModel.batch_norm has no shared_op

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 **kwargs) -> None:
        super().__init__("batch_normalization", "BatchNormalization", **kwargs)
        where = f"BatchNormalization '{self.name}'"
        if not one_of(axis, (1, -1)) or isinstance(axis, bool):
            raise ShapeError(f"{where}: axis={axis!r}; the channel axis of FlexFlow's channels-first data is 1 "
                             f"(-1, Keras' default, is taken as it)")
        for arg, value, low, high in (("momentum", momentum, 0.0, 1.0), ("epsilon", epsilon, 0.0, None)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or \
                    (high is not None and value > high) or (arg == "epsilon" and value == 0):
                raise ConfigError(f"{where}: {arg} must be a number in {'[0, 1]' if high else '(0, inf)'}, got {value!r}")
        refuse(where, center=(center, True), scale=(scale, True), beta_initializer=(beta_initializer, "zeros"),
               gamma_initializer=(gamma_initializer, "ones"),
               moving_mean_initializer=(moving_mean_initializer, "zeros"),
               moving_variance_initializer=(moving_variance_initializer, "ones"),
               beta_constraint=(beta_constraint, None), gamma_constraint=(gamma_constraint, None))
        check_regularizer(where, "beta_regularizer", beta_regularizer)
        check_regularizer(where, "gamma_regularizer", gamma_regularizer)
        self.axis = axis
        self.momentum = _check.number(where, "momentum", momentum, low=0.0, high=1.0)
        self.epsilon = _check.number(where, "epsilon", epsilon, low=0.0, low_open=True)

    def lower(self, ffmodel, inputs, name, shared):
        # FFModel.batch_norm takes only relu; eps and momentum are the operator's own attributes.
        attrs = BatchNormAttrs(relu=False, eps=self.epsilon, momentum=1.0 - self.momentum)
        return ffmodel._add_layer("batch_norm", attrs, [inputs[0]], name).outputs[0]
