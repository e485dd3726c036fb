"""``BatchNormalization`` over the channels of ``(N, C)``, ``(N, steps, C)`` sequence (``axis=1``:
``(N, C, steps)``) or channels-first ``(N, C, H, W)`` tensors.

Training-mode statistics of the batch, a scale (gamma, starting at ones) and a shift (beta, at
zeros) per channel, as Keras. ``axis``: the channel axis, 1; Keras' default -1 is taken as that
channel axis too (FlexFlow's data are channels first; FlexFlow ignores ``axis``), unless the
backend's image data format is channels-last, or the image batch comes from a layer given
``data_format='channels_last'`` (through activations, dropout and merges): -1 (and 3) is then the
last axis of an image batch, transposed to channels-first around the operator. ``epsilon`` and
``momentum`` are honoured (Keras' momentum m keeps m of the running statistics). Unlike FlexFlow's
Keras, no ReLU follows. Options the operator cannot honour (no scale or shift, other initializers,
regularizers, constraints) raise ``NotYetAvailableError``.

Entry point: ``BatchNormalization``.
"""

from __future__ import annotations

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
from flexrt.ir.ops import BatchNormAttrs
from flexrt.model import _check
from flexrt.keras.layers._common import (check_regularizer, image_data_format, image_layout, lower_image, one_of,
                                        refuse)
from flexrt.keras.layers.base_layer import Layer


class BatchNormalization(Layer):
    shares_weights = False   # FFModel.batch_norm has no shared_op

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None,
                 **kwargs) -> None:
        super().__init__("batch_normalization", "BatchNormalization", **kwargs)
        where = f"BatchNormalization '{self.name}'"
        if not one_of(axis, (1, -1, 3)) or isinstance(axis, bool):
            raise ShapeError(f"{where}: axis={axis!r}; valid: 1 (FlexFlow's channels-first data), -1 (Keras' "
                             f"default: 1 under channels-first image_data_format, else the last axis) or 3 "
                             f"(channels-last images)")
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
        # -1 means 1 under FlexFlow's channels-first default; the last axis when the backend's image
        # data format is channels-last (an image batch is then transposed around FFModel's batch_norm)
        self.data_format = ("channels_last" if axis == 3 or (axis == -1 and image_data_format() == "channels_last")
                            else "channels_first")
        # Keras' -1 under the channels-first default: the last axis of an image batch a channels-last layer
        # made (Conv2D(data_format='channels_last') before it), else FlexFlow's channels (decided per call)
        self._axis_from_input = axis == -1 and self.data_format == "channels_first"
        self.momentum = _check.number(where, "momentum", momentum, low=0.0, high=1.0)
        self.epsilon = _check.number(where, "epsilon", epsilon, low=0.0, low_open=True)

    def __call__(self, inputs):
        if self._axis_from_input:
            t = inputs[0] if isinstance(inputs, (list, tuple)) and inputs else inputs
            fmt = image_layout(t) if getattr(t, "num_dims", 0) == 4 else None
            self.data_format = "channels_last" if fmt == "channels_last" else "channels_first"
        return super().__call__(inputs)

    def lower(self, ffmodel, inputs, name, shared):
        # FFModel.batch_norm takes only relu; eps and momentum are the operator's own attributes.
        attrs = BatchNormAttrs(relu=False, eps=self.epsilon, momentum=1.0 - self.momentum)
        x = inputs[0]
        if x.num_dims == 4 and self.data_format == "channels_last":
            return lower_image(f"BatchNormalization '{self.name}'", ffmodel, x, "channels_last", name,
                               lambda t: ffmodel._add_layer("batch_norm", attrs, [t], name).outputs[0])
        if x.num_dims == 3:   # a sequence batch: axis -1 (or 2) its channels last (Keras'), 1 channels first
            from flexrt.keras.layers.convolutional1d import lower_sequence
            if self.axis == 3:
                raise ShapeError(f"BatchNormalization '{self.name}': axis=3 of a rank-3 sequence batch; valid: -1 "
                                 f"(the last axis) or 1")
            return lower_sequence(f"BatchNormalization '{self.name}'", ffmodel, x,
                                  "channels_first" if self.axis == 1 else "channels_last", name,
                                  lambda t: ffmodel._add_layer("batch_norm", attrs, [t], name).outputs[0])
        if self.axis == 3:
            raise ShapeError(f"axis=3 is the channels of a channels-last image batch; got shape {x.dims}")
        return ffmodel._add_layer("batch_norm", attrs, [x], name).outputs[0]


class LayerNormalization(Layer):
    """Keras' LayerNormalization over ``axis`` (an int or a list; -1: the last): FFModel's layer_norm,
    with a scale (``scale``) and a shift (``center``) of the normalized dimensions' shape."""

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                 gamma_constraint=None, **kwargs) -> None:
        super().__init__("layer_normalization", "LayerNormalization", **kwargs)
        where = f"LayerNormalization '{self.name}'"
        axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
        if not axes or any(isinstance(a, bool) or not isinstance(a, int) for a in axes):
            raise ConfigError(f"{where}: axis must be an int or a list of ints, got {axis!r}")
        self.axes = axes
        self.epsilon = _check.number(where, "epsilon", epsilon, low=0.0, low_open=True)
        for arg, value in (("center", center), ("scale", scale)):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: {arg} must be True or False, got {value!r}")
        if center and not scale:
            raise NotYetAvailableError(f"{where}: center=True with scale=False: FFModel's layer_norm has a shift only "
                                       f"with a scale")
        self.center, self.scale = center, scale
        refuse(where, beta_initializer=(beta_initializer, "zeros"), gamma_initializer=(gamma_initializer, "ones"),
               beta_constraint=(beta_constraint, None), gamma_constraint=(gamma_constraint, None))
        check_regularizer(where, "beta_regularizer", beta_regularizer)
        check_regularizer(where, "gamma_regularizer", gamma_regularizer)

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        where = f"LayerNormalization '{self.name}'"
        axes = sorted({a % x.num_dims if -x.num_dims <= a < x.num_dims else -1 for a in self.axes})
        if axes[0] < 1 or axes != list(range(axes[0], x.num_dims)):
            raise ShapeError(f"{where}: axis {self.axes} of a rank-{x.num_dims} tensor; valid: trailing axes after "
                             f"the batch")
        return ffmodel.layer_norm(x, axes, self.scale, self.epsilon, self.center, name=name)
