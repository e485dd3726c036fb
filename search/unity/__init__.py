"""flexrt.search.unity: Unity's hierarchical search (OSDI 2022 §5).

``unity`` (registered as the "unity" algorithm) jointly searches algebraic substitutions (§5.1)
and machine mappings (the DP of §5.2), splitting large graphs (§5.3); ``sequential`` is the
"TASO then FlexFlow" baseline (registered as "sequential").

Entry points: ``unity``, ``sequential``, ``MappingDP``, ``LocalCosts``, ``segments``.
"""

from flexrt.search.unity.costs import Block, LocalCosts
from flexrt.search.unity.mapping import PEEL_ORDERS, Mapping, MappingDP, series_split_nodes
from flexrt.search.unity.search import DEFAULT_ALPHA, DEFAULT_CONFIG_RATIO, DEFAULT_SPLIT_SIZE, algebraic_rules, segments, sequential, unity

__all__ = ["DEFAULT_ALPHA", "DEFAULT_CONFIG_RATIO", "DEFAULT_SPLIT_SIZE", "Block", "LocalCosts", "Mapping", "MappingDP", "PEEL_ORDERS", "algebraic_rules", "segments", "sequential",
           "series_split_nodes", "unity"]
