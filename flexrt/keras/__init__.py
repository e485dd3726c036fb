"""FlexFlow's Keras API (``flexflow.keras``) on flexrt: build a model the Keras way and train it
with any strategy flexrt finds, simulates and runs.

The module layout is FlexFlow's, so a FlexFlow Keras script runs after renaming ``flexflow`` to
``flexrt`` in its imports (Keras' own top-level ``keras.Sequential``, ``keras.Model`` and
``keras.Input`` are here too): ``models`` (``Sequential``, ``Model``), ``layers`` (``Input``, ``Dense``,
``Conv2D``, ``MaxPooling2D``, ``AveragePooling2D``, ``Flatten``, ``Activation``, ``Dropout``,
``BatchNormalization``, ``Embedding``, ``Reshape``, ``Permute``, ``Concatenate``, ``Add``,
``Subtract``, ``Multiply``, ``Maximum``, ``Minimum``, ...), ``optimizers`` (``SGD``, ``Adam``),
``losses``, ``metrics``, ``callbacks``, ``initializers``, ``regularizers``, ``backend``,
``preprocessing``, ``utils`` and ``datasets`` (mnist, cifar10, reuters).

``compile`` builds a real ``flexrt.model.FFModel`` (so strategies, search, simulator and runtime
all apply) with the config FlexFlow's flags give (``-b``, ``-ll:gpu``, ``--import``, ``--budget``,
...: ``FFConfig()`` reads ``sys.argv``, or pass ``ffconfig=FFConfig([...])``); ``fit`` trains
through FFModel's runtime.

Example:
    >>> from flexrt.keras.models import Sequential
    >>> from flexrt.keras.layers import Dense, Activation
    >>> from flexrt.model import FFConfig
    >>> model = Sequential([Dense(64, input_shape=(20,), activation="relu"), Dense(3), Activation("softmax")],
    ...                    ffconfig=FFConfig(["-b", "16", "-ll:gpu", "2"]))
    >>> model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    >>> model.ffmodel.num_parameters()
    1539

Entry points: ``flexrt.keras.models``, ``flexrt.keras.layers``.
"""

from flexrt.keras import (backend, callbacks, datasets, initializers, layers, losses, metrics, models, optimizers,
                          preprocessing, regularizers, utils)
from flexrt.keras.layers import Input
from flexrt.keras.models import Model, Sequential

# keras.Sequential, keras.Model, keras.Input: the top-level names keras.io's examples use
__all__ = ["Input", "Model", "Sequential", "backend", "callbacks", "datasets", "initializers", "layers", "losses",
           "metrics", "models", "optimizers", "preprocessing", "regularizers", "utils"]
