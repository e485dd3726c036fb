"""FlexFlow's ``flexflow.keras.models.tensor``: the symbolic Keras ``Tensor`` (defined in
``flexrt.keras._tensor``, which the layers import without importing the models).

Entry point: ``Tensor``.
"""

from flexrt.keras._tensor import Tensor, dtype_of

__all__ = ["Tensor", "dtype_of"]
