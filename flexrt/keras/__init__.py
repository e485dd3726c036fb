"""FlexFlow's ``flexflow.keras`` namespace, as far as flexrt provides it.

FlexFlow's example scripts import their data from here (``from flexflow.keras.datasets import
mnist``); renaming ``flexflow`` to ``flexrt`` makes them find the same loaders. Only the dataset
modules exist so far: the Keras-style model API is ``flexrt.core``'s ``FFModel``.

Entry point: ``flexrt.keras.datasets``.
"""

from flexrt.keras import datasets

__all__ = ["datasets"]
