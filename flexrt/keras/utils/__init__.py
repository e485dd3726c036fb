"""Keras' ``utils``: ``np_utils.to_categorical`` and ``normalize``.

Entry points: ``to_categorical``, ``normalize``, the module ``np_utils``.
"""

from flexrt.keras.utils import np_utils
from flexrt.keras.utils.np_utils import normalize, to_categorical

__all__ = ["normalize", "np_utils", "to_categorical"]
