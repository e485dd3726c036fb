"""flexrt.search: every search algorithm behind one entry (DESIGN.md "Search").

``search(name, SearchRequest(pcg, machine, cost_model, budget=, seed=, ...))`` runs a registered
algorithm and returns a ``SearchResult`` (strategy, simulated cost, log). Importing this package
registers every algorithm: FlexFlow's "mcmc", "exhaustive", Unity's "unity" and its "sequential"
baseline, DisCo's fusion search "disco" (its fusion policies: ``flexrt.search.fusion_policies``),
and the fixed baselines ("data-parallel", "model-parallel", "expert", ...; see
``flexrt.search.baselines``). ``algorithms()`` lists them; ``algorithm(name)`` says which options
one takes. The search space (``SearchSpace``, ``OpChoices``) is in ``flexrt.strategy``.

Entry points: ``search``, ``SearchRequest``, ``SearchResult``, ``SearchLog``, ``mcmc``, ``exhaustive``.

Example:
    >>> from flexrt.search import SearchRequest, search                         # doctest: +SKIP
    >>> search("mcmc", SearchRequest(pcg, machine, AnalyticCostModel(), budget=100)).cost_s  # doctest: +SKIP
"""

from flexrt.search.api import (Algorithm, SearchLog, SearchRequest, SearchResult, algorithm, algorithms, describe,
                               fixed_result, register_algorithm, search)
# Every algorithm module registers its algorithms when imported: import them all, so that every name
# is known (a module executed again re-registers the same definitions, which is allowed).
from flexrt.search import baselines, disco as _disco, unity
from flexrt.search.exhaustive import exhaustive
from flexrt.search.mcmc import accept, mcmc

__all__ = ["Algorithm", "SearchLog", "SearchRequest", "SearchResult", "accept", "algorithm", "algorithms",
           "baselines", "describe", "exhaustive", "fixed_result", "mcmc", "register_algorithm", "search", "unity"]
