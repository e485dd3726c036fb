"""Strategies as values (DESIGN.md): what a strategy is and what it implies.

- ``config``: ``OpConfig``, the two strategy types (``ConfigStrategy``, ``GraphStrategy``) behind the
  ``Strategy`` protocol, ``apply_configs`` (the parallel PCG of per-operator configurations),
  ``op_shapes`` and the ``Wiring`` lowering reads;
- ``layout``: ``OperatorLayout``, where each piece of an operator lives and what it touches;
- ``space``: the SOAP search space of one operator (valid and random configurations, data
  parallelism);
- ``choices``: ``SearchSpace`` (which axes a search may split) and ``OpChoices`` (the
  configurations of every operator of a model in a space);
- ``io`` and ``text``: strategy files, JSON and FlexFlow's text format.

This layer sits above ``flexrt.machine`` and below the kernels, the simulator and the search.
"""

from flexrt.strategy.config import (SOAP_KINDS, ConfigStrategy, GraphStrategy, OpConfig, OpShapes, Producer,
                                    Strategy, Wiring, apply_configs, axis_degrees, is_compute, node_axes,
                                    op_shapes, resharding_steps, wiring_of)
from flexrt.strategy.choices import OpChoices, SearchSpace
from flexrt.strategy.io import export_strategy, load_strategy, save_strategy, strategy_from_json, strategy_to_json
from flexrt.strategy.space import (all_axes, apply_single, data_parallel, data_parallel_degree, embed_view,
                                   random_config, random_strategy, soap_axes, valid_configs)
from flexrt.strategy.text import load_text_strategy, save_text_strategy, strategy_from_text, strategy_to_text

__all__ = ["SOAP_KINDS", "ConfigStrategy", "GraphStrategy", "OpConfig", "OpShapes", "Producer", "Strategy", "Wiring",
           "apply_configs", "axis_degrees", "is_compute", "node_axes", "op_shapes", "resharding_steps", "wiring_of",
           "export_strategy", "load_strategy", "save_strategy", "strategy_from_json", "strategy_to_json", "all_axes", "apply_single",
           "data_parallel", "data_parallel_degree", "embed_view", "random_config", "random_strategy", "soap_axes", "valid_configs",
           "load_text_strategy", "save_text_strategy", "strategy_from_text", "strategy_to_text", "OpChoices",
           "SearchSpace"]
