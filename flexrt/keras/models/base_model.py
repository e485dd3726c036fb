"""``BaseModel``: what ``Model`` and ``Sequential`` share: compile, fit, evaluate, predict, summary,
layers, and calling a model as a layer.

``compile`` builds a real ``FFModel`` from the model's graph with the config's batch (``-b``) and
compiles it: the strategy (``-ll:gpu N`` data parallelism, ``--import FILE``, ``--budget`` search,
...), the simulator and the runtime session are FFModel's. ``fit`` trains through FFModel's loop
(data loaders, ``forward``, ``zero_gradients``, ``backward``, ``update``), so every strategy trains
as one device would.

The config: FlexFlow's Keras models read ``sys.argv`` (``FFConfig()``) when they are made; flexrt's
models take ``ffconfig=FFConfig([...])`` as well (tests, notebooks).

Semantics, as FlexFlow's Keras (where Keras differs, said here):

- the batch size is the config's (``-b``) unless ``fit``, ``evaluate`` or ``predict`` is given another
  ``batch_size`` (Keras): the FFModel is then rebuilt for that batch (its strategy chosen as at
  compile) with the current weights; a stateful optimizer's state starts over, with a warning;
- an epoch is ``num_samples // batch`` iterations (a last partial batch is not trained);
- ``fit`` shuffles each epoch (Keras' ``shuffle=True``; FlexFlow ignores it and never shuffles) with
  a seeded permutation (reproducible); ``shuffle=False`` keeps the order;
- ``summary()`` returns the table as a string (FlexFlow's scripts print it);
- ``evaluate`` returns ``[loss, *metrics]`` (Keras; FlexFlow returns None); its callbacks see one
  epoch, without batch hooks;
- ``evaluate``, ``predict`` and ``fit``'s validation run the inference forward (Keras; FlexFlow's
  run the training one): Dropout passes its input through. BatchNormalization still normalizes
  with the batch's statistics (FFModel keeps no running statistics).

Entry point: ``BaseModel`` (subclassed by ``Model`` and ``Sequential``).
"""

from __future__ import annotations

import numbers

from typing import Any, Optional

import numpy as np

from flexrt.errors import ConfigError, FlexrtError, NotYetAvailableError, ShapeError, warn_caller
from flexrt.inputs import short
from flexrt.keras import callbacks as kcallbacks
from flexrt.keras import losses as klosses
from flexrt.keras import metrics as kmetrics
from flexrt.keras import optimizers as koptimizers
from flexrt.keras._tensor import shape_text
from flexrt.keras.layers.base_layer import AlwaysTrainable
from flexrt.keras.models import _graph, _saving
from flexrt.model import CompMode, FFConfig, FFModel, SGDOptimizer


def _not_default(where: str, **given) -> None:
    for arg, (value, default) in given.items():
        if value is default or (value is not None and not isinstance(value, np.ndarray) and value == default):
            continue
        raise NotYetAvailableError(f"{where}: {arg}={value!r:.60} is not available (only {default!r})")


class BaseModel(AlwaysTrainable):
    """A Keras model: inputs, one output, the layers between (see the module docstring)."""

    def __init__(self, name: Optional[str] = None, ffconfig: Optional[FFConfig] = None) -> None:
        if ffconfig is not None and not isinstance(ffconfig, FFConfig):
            raise ConfigError(f"{type(self).__name__}: ffconfig must be an FFConfig, got {ffconfig!r}")
        self._ffconfig = ffconfig if ffconfig is not None else FFConfig()
        self._name = name or type(self).__name__.lower()
        self._input_tensors: list = []
        self._output_tensor = None
        self._ffmodel: Optional[FFModel] = None
        self._ffoptimizer = None
        self._loss = None
        self._metrics: list = []
        self.stop_training = False
        self.history: Optional[kcallbacks.History] = None
        self._optimizer_stepped = False

    # ---- views ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    def _what(self) -> str:
        return f"model '{self._name}'"

    @property
    def input(self) -> list:
        return list(self._input_tensors)

    inputs = input

    @property
    def output(self):
        return self._output_tensor

    @property
    def optimizer(self):
        return self._ffoptimizer

    @property
    def ffmodel(self) -> Optional[FFModel]:
        return self._ffmodel

    @property
    def ffconfig(self) -> FFConfig:
        return self._ffconfig

    @property
    def label_tensor(self):
        return self._need_compiled("label_tensor").label_tensor

    def _where(self) -> str:
        return f"{type(self).__name__} '{self._name}'"

    def _nodes(self) -> list:
        if self._output_tensor is None or not self._input_tensors:
            raise ConfigError(f"{self._where()}: the model has no layers yet")
        return _graph.collect(self._input_tensors, self._output_tensor, self._where())

    @property
    def layers(self) -> list:
        """The distinct layers (not the inputs), in FlexFlow's order."""
        return _graph.layers_of(self._nodes()) if self._output_tensor is not None else []

    def get_layer(self, name: Optional[str] = None, index: Optional[int] = None):
        """The layer at ``index`` (in ``layers``) or the first one called ``name``; ``dense_1`` (Keras'
        name of a model's second Dense, and the FFModel's) is the second layer named ``dense``."""
        layers = self.layers
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= index < len(layers):
                raise ConfigError(f"get_layer: no layer at index {index!r}; the model has {len(layers)} "
                                  f"(0..{len(layers) - 1})")
            return layers[index]
        if not name:
            raise ConfigError("get_layer: give a layer name or an index")
        for layer in layers:
            if layer.name == name:
                return layer
        base, _, k = str(name).rpartition("_")
        same = [layer for layer in layers if layer.name == base]
        if k.isdigit() and k[0] != "0" and int(k) < len(same):   # Keras' and the FFModel's numbering: dense_1 is the 2nd
            return same[int(k)]
        raise ConfigError(f"get_layer: no layer named {name!r}; layers: {', '.join(self._numbered_names())}")

    def _numbered_names(self) -> list[str]:
        """The layers' names, the k-th repeat of a name numbered name_k as the FFModel and Keras number them."""
        seen: dict = {}
        out = []
        for layer in self.layers:
            k = seen[layer.name] = seen.get(layer.name, -1) + 1
            out.append(layer.name if k == 0 else f"{layer.name}_{k}")
        return out

    def count_params(self) -> int:
        return sum(layer.count_params() for layer in self.layers)

    def summary(self, line_length=None, positions=None, print_fn=None) -> Optional[str]:
        """The layer table (name, type, output shape, parameters, the layers read) and the total."""
        _not_default("summary", line_length=(line_length, None), positions=(positions, None))
        rows = [("Layer (type)", "Output Shape", "Param #", "Connected to")]
        for t in self._input_tensors:
            rows.append((f"{t.name} (InputLayer)", shape_text(t.batch_shape), "0", ""))
        for node in self._nodes():
            layer = node.layer
            reads = ", ".join(t.from_layer.name for t in node.inputs)
            rows.append((f"{layer.name} ({layer.layer_type})", shape_text(node.outputs[0].batch_shape),
                         str(layer.count_params()), reads))
        widths = [max(len(r[i]) for r in rows) + 2 for i in range(4)]
        lines = ["".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        rule = "_" * max(len(line) for line in lines)
        text = "\n".join([f"Model: \"{self._name}\"", rule, lines[0], "=" * len(rule), *lines[1:], "=" * len(rule),
                          f"Total params: {self.count_params()}", rule])
        if print_fn is not None:
            print_fn(text)
            return None
        return text

    def __call__(self, inputs):
        """Apply the model to new tensors as a layer (its layers are called again on them)."""
        return _graph.replay(self._input_tensors, self._nodes(), self._output_tensor, inputs,
                             f"{self._where()} called")

    # ---- compile ----------------------------------------------------------------------------
    def compile(self, optimizer, loss=None, metrics=None, loss_weights=None, weighted_metrics=None, run_eagerly=None,
                comp_mode=None, **kwargs) -> None:
        """Build the FFModel (batch: ``-b``) and compile it with ``optimizer`` (an Optimizer or
        'sgd' / 'adam'), ``loss`` and ``metrics`` (objects or FlexFlow's names)."""
        where = "compile"
        _not_default(where, loss_weights=(loss_weights, None), weighted_metrics=(weighted_metrics, None),
                     run_eagerly=(run_eagerly, None))
        if kwargs:
            raise NotYetAvailableError(f"{where}: {', '.join(sorted(kwargs))} not available")
        if loss is None:
            raise ConfigError(f"{where}: loss is required, e.g. loss='sparse_categorical_crossentropy'")
        opt, loss = koptimizers.get(optimizer), klosses.get(loss)
        if metrics is None:
            metrics = []
        if not isinstance(metrics, (list, tuple)):
            raise ConfigError(f"{where}: metrics must be a list, e.g. ['accuracy'], got {metrics!r}")
        metric_objs = [kmetrics.get(m, f"{where}: metrics[{i}]") for i, m in enumerate(metrics)]
        comp_mode = CompMode.COMP_MODE_TRAINING if comp_mode is None else comp_mode
        self._ffmodel = self._build_ffmodel(self._ffconfig, opt, loss, metric_objs, comp_mode)
        self._ffoptimizer, self._loss, self._metrics = opt, loss, metric_objs
        self._optimizer_stepped = False     # whether the FFModel's optimizer holds state from fit

    def _build_ffmodel(self, config: FFConfig, opt, loss, metric_objs, comp_mode) -> FFModel:
        """The FFModel of the model's graph at ``config``'s batch, compiled (strategy and session)."""
        nodes = self._nodes()
        ffmodel = FFModel(config)
        owner = _graph.lower(ffmodel, self._input_tensors, nodes, config.batch_size)
        ffmodel.optimizer = opt.create_ffhandle(ffmodel)
        ffmodel.compile(loss_type=loss.type, metrics=[m.type for m in metric_objs], comp_mode=comp_mode)
        for layer in _graph.layers_of(nodes):
            layer._built[ffmodel] = owner[id(layer)]
            layer._last_model = ffmodel
        return ffmodel

    def _at_batch(self, where: str, batch_size) -> FFModel:
        """The compiled FFModel that runs batches of ``batch_size`` (fit's, evaluate's, predict's
        argument; None: the current one, ``-b`` at compile). Another size rebuilds the FFModel for it
        as compile built it (its strategy chosen the same way, for that batch) with the current
        weights; a stateful optimizer (momentum, Adam, RMSprop, Adagrad) starts its state over, with a warning, when
        the model being replaced has trained."""
        old = self._need_compiled(where)
        if batch_size is None or batch_size == self._ffconfig.batch_size:
            return old
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ConfigError(f"{where}: batch_size must be an integer >= 1, got {short(batch_size)}")
        config = self._ffconfig.with_values(batch_size=int(batch_size))
        try:
            new = self._build_ffmodel(config, self._ffoptimizer, self._loss, self._metrics, old.comp_mode)
        except FlexrtError as e:
            raise type(e)(f"{where}: rebuilding the model for batch_size={batch_size} (compiled for "
                          f"{self._ffconfig.batch_size}): {e}") from None
        new.session.load_weights(old.session.weights())
        stateful = not isinstance(old.optimizer, SGDOptimizer) or old.optimizer.momentum
        if self._optimizer_stepped and stateful:
            warn_caller(f"{where}: batch_size={batch_size} after training at {self._ffconfig.batch_size}: the model "
                        f"is rebuilt for the new batch with the trained weights; the optimizer's state (momentum, "
                        f"Adam's moments and step) starts over", UserWarning)
        self._optimizer_stepped = False
        self._ffmodel, self._ffconfig = new, config
        return new

    # ---- weights ----------------------------------------------------------------------------
    def get_weights(self) -> list:
        """Every layer's weights, layer after layer (``flexrt.keras.models._saving``)."""
        return _saving.model_weights(self, self._need_compiled("get_weights"))

    def set_weights(self, weights) -> None:
        """Write ``weights`` as ``get_weights`` lists them."""
        _saving.set_model_weights(self, self._need_compiled("set_weights"), weights)

    def save_weights(self, filepath, overwrite=True) -> None:
        """The weights to ``filepath`` (``.npz``)."""
        _saving.save_weights(self, self._need_compiled("save_weights"), filepath, overwrite)

    def load_weights(self, filepath, skip_mismatch=False) -> None:
        """The weights ``save_weights`` wrote to ``filepath``."""
        _not_default("load_weights", skip_mismatch=(skip_mismatch, False))
        _saving.load_weights(self, self._need_compiled("load_weights"), filepath)

    def _need_compiled(self, where: str) -> FFModel:
        if self._ffmodel is None:
            raise ConfigError(f"{where}: call compile(optimizer, loss, metrics) first")
        return self._ffmodel

    # ---- data -------------------------------------------------------------------------------
    def _arrays(self, where: str, x, y, batch_size) -> tuple[list, Any, int]:
        """(input arrays, label array, samples), checked against the model."""
        ffmodel = self._at_batch(where, batch_size)
        batch = self._ffconfig.batch_size
        if x is None:
            raise ConfigError(f"{where}: x is required (one array per model input)")
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        if len(xs) != len(self._input_tensors):
            raise ConfigError(f"{where}: x has {len(xs)} array(s); the model has {len(self._input_tensors)} input(s) "
                              f"({', '.join(f'{t.name} {shape_text(t.batch_shape)}' for t in self._input_tensors)})")
        arrays = []
        for i, (a, t) in enumerate(zip(xs, self._input_tensors)):
            a = np.asarray(a)
            if a.ndim != t.num_dims or a.shape[1:] != t.sample_shape():
                raise ShapeError(f"{where}: x[{i}] has shape {a.shape}; input '{t.name}' takes "
                                 f"{shape_text(t.batch_shape)}")
            arrays.append(a)
        n = arrays[0].shape[0]
        counts = [a.shape[0] for a in arrays]
        labels = None
        if y is not None:
            labels = np.asarray(y)
            counts.append(labels.shape[0] if labels.ndim else 0)
            dims = ffmodel.label_tensor.dims
            ok = labels.ndim == len(dims) and labels.shape[1:] == dims[1:] or \
                (labels.ndim == len(dims) - 1 and dims[-1] == 1 and labels.shape[1:] == dims[1:-1])
            if not ok:
                raise ShapeError(f"{where}: y has shape {labels.shape}; the loss {type(self._loss).__name__} on the "
                                 f"output {shape_text(self._output_tensor.batch_shape)} takes labels of shape "
                                 f"{shape_text((None,) + tuple(dims[1:]))}")
        if len(set(counts)) != 1:
            raise ConfigError(f"{where}: x and y hold different numbers of samples ("
                              f"{', '.join(f'x[{i}]: {c}' for i, c in enumerate(counts[:len(arrays)]))}"
                              f"{f', y: {counts[-1]}' if labels is not None else ''}); give one row per sample in each")
        if n < batch:
            raise ConfigError(f"{where}: {n} sample(s) is less than one batch of {batch} (-b)")
        return arrays, labels, n

    def _loaders(self, arrays, labels, order=None) -> list:
        ffmodel = self._ffmodel
        pick = (lambda a: a) if order is None else (lambda a: a[order])
        loaders = [ffmodel.create_data_loader(t.ffhandle, pick(a)) for t, a in zip(self._input_tensors, arrays)]
        if labels is not None:
            loaders.append(ffmodel.create_data_loader(ffmodel.label_tensor, pick(labels)))
        return loaders

    # ---- training ---------------------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose=1, callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1,
            max_queue_size=10, workers=1, use_multiprocessing=False):
        """Train ``epochs`` epochs on numpy arrays (one per input) and labels; returns a ``History``."""
        where = "fit"
        _not_default(where, class_weight=(class_weight, None), sample_weight=(sample_weight, None),
                     initial_epoch=(initial_epoch, 0), steps_per_epoch=(steps_per_epoch, None),
                     validation_steps=(validation_steps, None), validation_batch_size=(validation_batch_size, None),
                     validation_freq=(validation_freq, 1))
        if isinstance(epochs, bool) or not isinstance(epochs, numbers.Integral) or epochs < 1:
            raise ConfigError(f"{where}: epochs must be an integer >= 1, got {epochs!r}")
        if not isinstance(shuffle, bool):
            raise ConfigError(f"{where}: shuffle must be True or False, got {shuffle!r}")
        if y is None:
            raise ConfigError(f"{where}: y (the labels) is required")
        arrays, labels, n = self._arrays(where, x, y, batch_size)
        arrays, labels, n, validation = self._validation(where, arrays, labels, n, validation_split, validation_data)
        cbs = self._callbacks(callbacks, where)
        batch = self._ffconfig.batch_size
        if n % batch:   # Keras trains a last partial batch; the runtime's task graph runs whole batches
            k = n % batch
            warn_caller(f"fit: trains {n - k} of the {n} samples per epoch: {k} do not fill a batch of {batch} and "
                        f"are left out ({'different ones each epoch: shuffled' if shuffle else 'the last ones'}), as "
                        f"FlexFlow's data loader leaves them; give a multiple of the batch size to train them all",
                        UserWarning)
        from flexrt.keras.models._loop import train
        self._optimizer_stepped = True
        return train(self, arrays, labels, n, epochs, cbs, shuffle, verbose, validation)

    def _validation(self, where: str, arrays, labels, n: int, split, data):
        """(training arrays, labels, samples, the validation loaders or None): ``validation_data``
        ``(x, y)``, or Keras' ``validation_split``: the last fraction of the samples, before shuffling."""
        if data is not None and not (isinstance(split, numbers.Real) and split == 0):
            raise ConfigError(f"{where}: give validation_split or validation_data, not both")
        if data is not None:
            if not isinstance(data, (list, tuple)) or len(data) != 2:
                raise ConfigError(f"{where}: validation_data must be (x, y), got {type(data).__name__}"
                                  + (f" of {len(data)}" if isinstance(data, (list, tuple)) else ""))
            vx, vy, _ = self._arrays(f"{where} (validation_data)", data[0], data[1], None)
            return arrays, labels, n, self._loaders(vx, vy)
        if isinstance(split, bool) or not isinstance(split, numbers.Real) or not 0 <= split < 1:
            raise ConfigError(f"{where}: validation_split must be a fraction in [0, 1), got {split!r}")
        if split == 0:
            return arrays, labels, n, None
        keep = n - int(n * split)       # Keras: the last samples, before shuffling
        if n - keep < self._ffconfig.batch_size or keep < self._ffconfig.batch_size:
            raise ConfigError(f"{where}: validation_split={split} leaves {keep} training and {n - keep} validation "
                              f"samples; each needs at least one batch of {self._ffconfig.batch_size}")
        validation = self._loaders([a[keep:] for a in arrays], labels[keep:])
        return [a[:keep] for a in arrays], labels[:keep], keep, validation

    def _callbacks(self, callbacks, where: str) -> list:
        if callbacks is None:
            callbacks = []
        if not isinstance(callbacks, (list, tuple)) or \
                not all(isinstance(c, kcallbacks.Callback) for c in callbacks):
            raise ConfigError(f"{where}: callbacks must be a list of Callback objects, got {callbacks!r:.100}")
        self.history = kcallbacks.History()
        cbs = list(callbacks) + [self.history]
        for cb in cbs:
            cb.set_model(self)
        return cbs

    def evaluate(self, x=None, y=None, batch_size=None, verbose=1, sample_weight=None, steps=None, callbacks=None,
                 max_queue_size=10, workers=1, use_multiprocessing=False, return_dict=False):
        """The loss and metrics over ``x``, ``y`` with the current weights: ``[loss, *metrics]`` (or a dict)."""
        where = "evaluate"
        _not_default(where, sample_weight=(sample_weight, None), steps=(steps, None))
        if y is None:
            raise ConfigError(f"{where}: y (the labels) is required")
        arrays, labels, _ = self._arrays(where, x, y, batch_size)
        cbs = self._callbacks(callbacks, where)
        for cb in cbs:
            cb.on_train_begin()
            cb.on_epoch_begin(0)
        loaders = self._loaders(arrays, labels)
        n, batch = int(labels.shape[0]), self._ffconfig.batch_size
        if n % batch:   # Keras scores every sample; flexrt's runtime runs whole batches, as fit does
            warn_caller(f"evaluate: scores {n - n % batch} of the {n} samples; the last {n % batch} do not fill a "
                        f"batch of {batch} and are left out (give a multiple of the batch size to score them)",
                        UserWarning)
        perf = self._ffmodel.evaluate_quietly(x=loaders[:-1], y=loaders[-1], verbose=bool(verbose), training=False)
        logs = {"loss": perf.loss, **perf.result()}
        for cb in cbs:
            kcallbacks.call_epoch_end(cb, 0, logs)
            cb.on_train_end()
        return logs if return_dict else [logs["loss"], *[logs[m.type.short_name] for m in self._metrics]]

    def predict(self, x, batch_size=None, verbose=0, steps=None, callbacks=None, max_queue_size=10, workers=1,
                use_multiprocessing=False) -> np.ndarray:
        """The model's output for every sample of ``x`` (the strategy's forward pass, current weights)."""
        where = "predict"
        _not_default(where, steps=(steps, None), callbacks=(callbacks, None))
        ffmodel = self._at_batch(where, batch_size)
        batch = self._ffconfig.batch_size
        xs = _as_list(x)
        n = int(xs[0].shape[0]) if xs[0].ndim else 0
        if n == 0:
            raise ConfigError(f"{where}: x holds no samples")
        rows = np.arange(-(-n // batch) * batch) % n   # whole batches: the last one wraps around
        arrays, _, _ = self._arrays(where, [a[rows] if a.ndim and a.shape[0] == n else a for a in xs], None,
                                    batch_size)
        loaders = self._loaders(arrays, None)
        outs = []
        for _ in range(len(rows) // batch):
            for dl in loaders:
                dl.next_batch(ffmodel)
            ffmodel.forward(training=False)
            outs.append(self._output_tensor.ffhandle.get_tensor(ffmodel))
        return np.concatenate(outs)[:n]


def _as_list(x) -> list:
    return [np.asarray(a) for a in (x if isinstance(x, (list, tuple)) else [x])]
