"""Keras' ``preprocessing``: ``sequence.pad_sequences`` and ``text.Tokenizer``.

Entry points: the modules ``sequence`` and ``text``.
"""

from flexrt.keras.preprocessing import sequence, text

__all__ = ["sequence", "text"]
