"""``flexrt.model``: FlexFlow's Python API (``FFConfig``, ``FFModel``, optimizers, initializers,
enums) building flexrt PCGs, and the loader of model definition scripts.

Entry points: ``FFConfig``, ``FFModel``, ``load_model``, ``zoo_models``.
"""

from flexrt.model.config import FFConfig
from flexrt.model.enums import (ActiMode, AggrMode, CompMode, DataType, LossType, MetricsType, PoolType,
                                RegularizerMode)
from flexrt.model.ffmodel import FFModel
from flexrt.model.initializers import (GlorotUniformInitializer, Initializer, NormInitializer, UniformInitializer,
                                       ZeroInitializer)
from flexrt.model.layer import Layer, Weight
from flexrt.model.loader import LoadedModel, ZooModel, load_model, zoo_models
from flexrt.model.optimizers import AdagradOptimizer, AdamOptimizer, Optimizer, RMSpropOptimizer, SGDOptimizer
from flexrt.model.runtime_init import (DLRMConfig, NetConfig, flexflow_already_initialized, flexflow_python_binding,
                                       get_configs, init_flexflow_runtime)
from flexrt.model.tensor import Tensor

__all__ = [
    "ActiMode", "AdagradOptimizer", "AdamOptimizer", "AggrMode", "CompMode", "DLRMConfig", "DataType", "FFConfig",
    "FFModel", "GlorotUniformInitializer", "Initializer", "Layer", "LoadedModel", "LossType", "MetricsType",
    "NetConfig", "NormInitializer", "Optimizer", "PoolType", "RMSpropOptimizer", "RegularizerMode", "SGDOptimizer",
    "Tensor", "UniformInitializer", "Weight", "ZeroInitializer", "ZooModel", "flexflow_already_initialized",
    "flexflow_python_binding", "get_configs", "init_flexflow_runtime", "load_model", "zoo_models",
]
