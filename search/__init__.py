"""flexrt.search: every search algorithm behind one interface (DESIGN.md "Search").

``search(name, pcg, machine, cost_model, budget=, seed=)`` runs a registered algorithm ("mcmc",
"exhaustive") and returns a ``SearchResult`` (strategy, simulated cost, log). The baselines
(expert strategies, model parallelism) are in ``flexrt.search.baselines``.

Entry points: ``search``, ``mcmc``, ``exhaustive``, ``SearchSpace``, ``SearchResult``, ``SearchLog``.
"""

from flexrt.search.api import (SearchLog, SearchResult, SearchSpace, algorithms, describe, fixed_result,
                               register_algorithm, search)
from flexrt.search.exhaustive import exhaustive
from flexrt.search.mcmc import accept, mcmc

__all__ = ["SearchLog", "SearchResult", "SearchSpace", "accept", "algorithms", "describe", "exhaustive",
           "fixed_result", "mcmc", "register_algorithm", "search"]
