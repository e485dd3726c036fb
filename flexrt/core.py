"""FlexFlow's ``flexflow.core`` names, so a FlexFlow script runs after changing
``from flexflow.core import *`` to ``from flexrt.core import *``: the API (``FFConfig``, ``FFModel``,
layers, optimizers, initializers, enums) and FlexFlow's start-up names (``init_flexflow_runtime``,
``flexflow_python_binding``, ``get_configs``, ``NetConfig``, ``DLRMConfig``), all from ``flexrt.model``."""

from flexrt.model import *  # noqa: F401,F403
from flexrt.model import __all__ as _model_all

__all__ = list(_model_all)
