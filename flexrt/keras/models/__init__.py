"""FlexFlow's ``flexflow.keras.models``: ``Sequential``, the functional ``Model``, ``BaseModel`` and
the symbolic ``Tensor``.

Entry points: ``Sequential``, ``Model``.
"""

from flexrt.keras._tensor import Tensor
from flexrt.keras.models.base_model import BaseModel
from flexrt.keras.models.model import Model
from flexrt.keras.models.sequential import Sequential

__all__ = ["BaseModel", "Model", "Sequential", "Tensor"]
