"""``Layer``: the base of every Keras layer: calls on tensors, shape inference, weights.

A layer is a description until a model using it is compiled. Calling it on tensors records a
*node* (one call: its input and output tensors) and infers the output's shape and type by building
the layer into a scratch one-sample ``FFModel``: the shape rules are the operators' own, and a call
on incompatible tensors fails at once with the operator's ``ShapeError`` naming the layer. At
``compile`` each node becomes FFModel layers (``lower``); a layer called more than once in one
model shares its weights across those calls (Keras' shared layers; FFModel's ``shared_op``).

Names follow FlexFlow's Keras: a layer's default name is its kind (``dense``, ``conv2d``, ``flat``,
``maxpool2d``, the activation's name, ...), not numbered; ``Model.get_layer(name=...)`` returns the
first layer of that name. In the FFModel, a name used twice is numbered (``dense``, ``dense_1``).

FlexFlow-style weight access: ``get_weights(ffmodel)`` returns the weights (kernel, bias) of the
layer in that compiled model; ``set_weights(ffmodel, kernel, bias)`` writes them. The Keras forms
(``get_weights()``, ``set_weights([kernel, bias])``) use the model compiled last.

Entry point: ``Layer``.
"""

from __future__ import annotations

import numbers

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from flexrt.errors import ConfigError, FlexrtError, NotYetAvailableError, ShapeError
from flexrt.keras._tensor import Tensor, check_tensor, dtype_name, optional_name, shape_text
from flexrt.model import FFConfig, FFModel

_PROBE_CONFIG = FFConfig([])


@dataclass(frozen=True, eq=False)
class Node:
    """One call of ``layer``: the tensors it read and the tensors it made."""

    layer: Any
    inputs: tuple
    outputs: tuple


def custom_layer(layer) -> str:
    """The message refusing a user's subclass of Layer."""
    return (f"{type(layer).__name__}: custom layers (a subclass of Layer computing in its own call()) are not "
            f"available: flexrt builds FFModel operators from its own layers; compose the computation from them "
            f"(Dense, Conv2D, Activation, the merges Add and Multiply, ...)")


class AlwaysTrainable:
    """``trainable`` (Keras' freezing: ``trainable=False``, ``layer.trainable = False``, a pretrained
    base's ``model.trainable = False``) is always True: every weight trains, and freezing is refused."""

    @property
    def trainable(self) -> bool:
        return True

    @trainable.setter
    def trainable(self, value) -> None:
        if value is not True:
            raise NotYetAvailableError(f"{self._what()}: trainable={value!r}: frozen layers are not available (every "
                                       f"weight is trained); leave it trainable, or build the model without it and "
                                       f"feed its outputs as data")

    def _what(self) -> str:
        raise NotImplementedError


class Layer(AlwaysTrainable):
    """Base of the Keras layers. Subclasses set ``multi_input`` and implement ``lower``."""

    multi_input = False        # takes a list of tensors (merge layers) rather than one tensor
    input_dtype = None         # the dtype of the Input a Sequential makes for it first (None: float32)
    shares_weights = True      # the FFModel method takes shared_op (a second call reuses the weights)

    def __init__(self, default_name: Optional[str] = None, layer_type: Optional[str] = None,
                 name: Optional[str] = None, input_shape=None, trainable: bool = True, **kwargs) -> None:
        if default_name is None or layer_type is None:
            raise NotYetAvailableError(custom_layer(self))
        input_shape = self._keras2_input_shape(layer_type, input_shape, kwargs)
        if kwargs:
            raise ConfigError(f"{layer_type}: unknown argument(s) {', '.join(sorted(kwargs))}; every layer takes "
                              f"name, input_shape and its own arguments (see help({layer_type}))")
        self._name = optional_name(layer_type, name) or default_name
        self._layer_type = layer_type
        self.trainable = trainable
        self.nodes: list[Node] = []
        self.layer_id = -1
        self._declared_input = self._input_shape_arg(input_shape)
        self._weight_shapes: tuple = ()
        self._built: dict = {}     # FFModel -> name of the FFModel layer holding this layer's weights
        self._last_model: Optional[FFModel] = None

    @staticmethod
    def _keras2_input_shape(layer_type: str, input_shape, kwargs: dict):
        """Keras 2's other spellings of a first layer's input: ``input_dim=d`` (``input_shape=(d,)``)
        and ``batch_input_shape=(None, ...)`` (its batch is the config's)."""
        input_dim, batch_shape = kwargs.pop("input_dim", None), kwargs.pop("batch_input_shape", None)
        given = [k for k, v in (("input_shape", input_shape), ("input_dim", input_dim),
                                ("batch_input_shape", batch_shape)) if v is not None]
        if len(given) > 1:
            raise ConfigError(f"{layer_type}: give one of {', '.join(given)}, not several")
        if input_dim is not None:
            return (input_dim,)
        if batch_shape is not None:
            if not isinstance(batch_shape, (list, tuple)) or len(batch_shape) < 2:
                raise ConfigError(f"{layer_type}: batch_input_shape must be (batch, ...) with at least one sample "
                                  f"dimension, got {batch_shape!r}")
            return tuple(batch_shape[1:])
        return input_shape

    # ---- identity ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    def _what(self) -> str:
        return f"{self._layer_type} '{self._name}'"

    @property
    def layer_type(self) -> str:
        return self._layer_type

    def __repr__(self) -> str:
        return f"<{self._layer_type} '{self._name}'>"

    def _input_shape_arg(self, input_shape) -> Optional[tuple]:
        """``input_shape`` without the batch (Keras' form), checked; None when not given."""
        if input_shape is None:
            return None
        if not isinstance(input_shape, (list, tuple)) or not input_shape or \
                any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1 for d in input_shape):
            raise ConfigError(f"{self._layer_type} '{self._name}': input_shape must be a tuple of positive "
                              f"integers without the batch dimension, e.g. (784,), got {input_shape!r}")
        return tuple(int(d) for d in input_shape)

    @property
    def input_shape(self) -> Optional[tuple]:
        """The input's shape with the batch as None (of the latest call, else as declared)."""
        if self.nodes:
            shapes = [t.batch_shape for t in self.nodes[-1].inputs]
            return shapes[0] if len(shapes) == 1 else shapes
        return None if self._declared_input is None else (None,) + self._declared_input

    @property
    def output_shape(self) -> Optional[tuple]:
        return self.nodes[-1].outputs[0].batch_shape if self.nodes else None

    # ---- FlexFlow's connection views (of the latest call) -----------------------------------
    @property
    def input_tensors(self) -> list:
        return list(self.nodes[-1].inputs) if self.nodes else []

    @property
    def output_tensors(self) -> list:
        return list(self.nodes[-1].outputs) if self.nodes else []

    @property
    def input(self):
        ts = self.input_tensors
        return ts[0] if len(ts) == 1 else ts

    @property
    def output(self):
        ts = self.output_tensors
        return ts[0] if len(ts) == 1 else ts

    @property
    def prev_layers(self) -> list:
        return [t.from_layer for t in self.input_tensors]

    @property
    def next_layers(self) -> list:
        return [layer for t in self.output_tensors for layer in t.to_layers]

    # ---- calls ------------------------------------------------------------------------------
    def __call__(self, inputs):
        if "_layer_type" not in self.__dict__:    # a subclass that never called Layer.__init__
            raise NotYetAvailableError(custom_layer(self))
        tensors = self._call_inputs(inputs)
        out_shape, out_dtype, weights = self._infer(tensors)
        node = Node(self, tuple(tensors), ())
        out = Tensor(out_shape, out_dtype, self, node)
        object.__setattr__(node, "outputs", (out,))
        self.nodes.append(node)
        for t in tensors:
            t.to_layers.append(self)
        self._weight_shapes = weights
        return out

    def _call_inputs(self, inputs) -> list:
        where = f"{self._layer_type} '{self._name}'"
        if self.multi_input:
            if not isinstance(inputs, (list, tuple)) or not inputs:
                raise ConfigError(f"{where}: takes a list of tensors, got {inputs!r:.80}")
            # the same tensor may come twice (x * x; FlexFlow's Keras refuses it, Keras does not): its
            # gradient sums both uses
            return [check_tensor(where, t, f"input {i}") for i, t in enumerate(inputs)]
        if isinstance(inputs, (list, tuple)) and len(inputs) == 1:
            inputs = inputs[0]
        tensor = check_tensor(where, inputs)
        if self._declared_input is not None and tensor.sample_shape() != self._declared_input:
            raise ShapeError(f"{where}: declared input_shape={self._declared_input} but called on a tensor of shape "
                             f"{shape_text(tensor.batch_shape)}; the sample shapes must agree")
        return [tensor]

    def _infer(self, tensors: Sequence[Tensor]) -> tuple:
        """(output shape with batch None, output dtype, weight shapes) by building a one-sample FFModel."""
        probe = FFModel(_PROBE_CONFIG)
        ins = [probe.create_tensor((1,) + t.sample_shape(), t.dtype) for t in tensors]
        try:
            out = self.lower(probe, ins, self._name, None)
        except FlexrtError as e:
            shapes = ", ".join(f"{shape_text(t.batch_shape)} {t.dtype_str}" for t in tensors)
            raise type(e)(f"{self._layer_type} '{self._name}' called on {shapes}: {e}") from None
        seen: dict = {}   # by PCG node: a layer unrolled over steps reads its first step's weights again
        for layer in probe.get_layers().values():
            for w in layer.weights:
                seen.setdefault(w.node, tuple(w.shape.dims))
        weights = tuple(seen.values())
        return (None,) + tuple(out.dims[1:]), out.data_type, weights

    def lower(self, ffmodel: FFModel, inputs: list, name: str, shared: Any):
        """Add this layer's operators to ``ffmodel`` reading ``inputs`` (FFModel tensors); the operator
        holding the weights is named ``name`` and reads ``shared``'s weights when given."""
        raise NotImplementedError(type(self).__name__)

    # ---- weights ----------------------------------------------------------------------------
    # A layer's weights are those of the FFModel layers holding them (``_weight_layers``: the one
    # named ``name`` unless a subclass holds more), in Keras' arrays where a subclass lays them out
    # otherwise (``_keras_shapes``, ``_keras_arrays``, ``_ff_arrays``: identities here).
    def weight_shapes(self) -> tuple:
        """The shapes of this layer's weights (as its latest call shapes them), in Keras' arrays."""
        return self._keras_shapes(tuple(tuple(int(d) for d in s) for s in self._weight_shapes))

    def _keras_shapes(self, shapes: tuple) -> tuple:
        return shapes

    def _keras_arrays(self, arrays: tuple) -> tuple:
        return arrays

    def _ff_arrays(self, arrays: tuple) -> tuple:
        return arrays

    def count_params(self) -> int:
        """Elements of this layer's weights (as its latest call shapes them)."""
        return int(sum(np.prod(s) for s in self._weight_shapes))

    def _ff_layer(self, ffmodel, where: str):
        if ffmodel is None:
            ffmodel = self._last_model
        if ffmodel is None or ffmodel not in self._built:
            raise ConfigError(f"{where}: layer '{self._name}' is not part of "
                              f"{'a compiled model' if ffmodel is None else 'that compiled model'}; "
                              f"compile a model that uses it first")
        return ffmodel, ffmodel.get_layer_by_name(self._built[ffmodel])

    def _weight_layers(self, ffmodel, first) -> list:
        """The FFModel layers holding this layer's weights, ``first`` (the one named ``name``) first."""
        return [first]

    def get_weights(self, ffmodel=None) -> tuple:
        """The weights' current arrays (kernel, bias) in ``ffmodel`` (default: the model compiled last)."""
        ffmodel, first = self._ff_layer(ffmodel, "get_weights")
        return self._keras_arrays(tuple(layer.get_parameter_by_id(i).get_weights(ffmodel)
                                        for layer in self._weight_layers(ffmodel, first)
                                        for i in range(len(layer.weights))))

    def set_weights(self, ffmodel, *arrays) -> None:
        """Write the weights: ``set_weights(ffmodel, kernel, bias)`` (FlexFlow's) or
        ``set_weights([kernel, bias])`` (Keras', into the model compiled last)."""
        if not isinstance(ffmodel, FFModel):
            if arrays:
                raise ConfigError("set_weights: give set_weights(ffmodel, kernel, bias) or set_weights([kernel, bias])")
            ffmodel, arrays = None, tuple(ffmodel)
        ffmodel, first = self._ff_layer(ffmodel, "set_weights")
        arrays = self._ff_arrays(tuple(arrays))
        held = [(layer, i, w) for layer in self._weight_layers(ffmodel, first) for i, w in enumerate(layer.weights)]
        if len(arrays) != len(held):
            raise ConfigError(f"set_weights: layer '{self._name}' has {len(held)} weight(s) "
                              f"({', '.join(f'{w.name} {w.shape.dims}' for _, _, w in held)}), got {len(arrays)} "
                              f"array(s)")
        for (layer, i, w), arr in zip(held, arrays):
            arr = np.asarray(arr)
            if arr.dtype.kind not in "iufb":
                raise ConfigError(f"set_weights: layer '{self._name}' weight {w.name} must hold real numbers, got "
                                  f"dtype {arr.dtype}")
            if tuple(arr.shape) != tuple(w.shape.dims):
                raise ShapeError(f"set_weights: layer '{self._name}' weight {w.name} has shape {w.shape.dims}, got an "
                                 f"array of shape {arr.shape}")
            layer.get_parameter_by_id(i).set_weights(ffmodel, arr.astype(dtype_name(w.shape.dtype), copy=False))

    # ---- summary ----------------------------------------------------------------------------
    def get_summary(self) -> str:
        """FlexFlow's summary row: name (type), output shape, input shape, the layers it reads."""
        prev = "".join(f"\t{layer.name}" for layer in self.prev_layers)
        return f"{self._name + ' (' + self._layer_type + ')':25}{self.output_shape}\t\t{self.input_shape}{prev}\n"


class InnerWeights:
    """A layer whose weights are those of the layer it wraps (``_inner()``: TimeDistributed's
    layer, Conv1D's Conv2D), read and written in that layer's arrays."""

    def _inner(self) -> Layer:
        raise NotImplementedError(type(self).__name__)

    def _weight_layers(self, ffmodel, first) -> list:
        return self._inner()._weight_layers(ffmodel, first)

    def _keras_shapes(self, shapes: tuple) -> tuple:
        return self._inner()._keras_shapes(shapes)

    def _keras_arrays(self, arrays: tuple) -> tuple:
        return self._inner()._keras_arrays(arrays)

    def _ff_arrays(self, arrays: tuple) -> tuple:
        return self._inner()._ff_arrays(arrays)
