"""The mapping DP's peel orders (``search.unity.mapping``, module doc): a parallel split of k > 2
independent branches peels one and recurses on the rest, so the order decides which groupings of
branches onto devices it reaches. Laws: by work, the order and so the estimate do not depend on how
the graph numbers its branches; trying several orders returns the cheapest of them; a graph
without a parallel split gets the same solution under every order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import ConfigError
from flexrt.machine import load_machine
from flexrt.search.unity import PEEL_ORDERS, LocalCosts, MappingDP
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import SearchSpace, Strategy

BATCH = 64
COST = AnalyticCostModel()


@pytest.fixture(scope="module")
def summit2():
    return load_machine("summit", nodes=2)


@pytest.fixture(scope="module")
def costs(summit2):
    return LocalCosts(summit2, COST, SearchSpace.full().kinds)


def fan(widths, depth=2, join=True):
    """One tower of ``depth`` dense layers per width, built in the order given (their own inputs),
    joined by a concat (``join``) or left independent."""
    m = FFModel(FFConfig(["-b", str(BATCH)]))
    outs = []
    for w in widths:
        t = m.create_tensor([BATCH, w], DataType.DT_FLOAT)
        for d in range(depth):
            t = m.dense(t, w, ActiMode.AC_MODE_RELU, name=f"t{w}_{d}")
        outs.append(t)
    if join:
        m.concat(outs, 1, name="cat")
    return m.pcg


def chain(width=256, depth=3):
    m = FFModel(FFConfig(["-b", str(BATCH)]))
    t = m.create_tensor([BATCH, width], DataType.DT_FLOAT)
    for d in range(depth):
        t = m.dense(t, width, ActiMode.AC_MODE_RELU, name=f"fc{d}")
    return m.pcg


def solve(machine, costs, pcg, peel):
    return MappingDP(machine, costs, peel=peel).solve(pcg)


widths_st = st.lists(st.sampled_from([32, 64, 128, 256, 512, 1024, 2048]), min_size=3, max_size=5, unique=True)


@settings(max_examples=8, deadline=None)
@given(widths=widths_st, data=st.data())
def test_peeling_by_work_does_not_depend_on_how_the_branches_are_numbered(summit2, costs, widths, data):
    other = data.draw(st.permutations(widths))
    for order in ("cheapest", "costliest"):
        a, b = solve(summit2, costs, fan(widths), (order,)), solve(summit2, costs, fan(other), (order,))
        assert a.cost_s == pytest.approx(b.cost_s, rel=1e-12)


@settings(max_examples=8, deadline=None)
@given(widths=widths_st, join=st.booleans())
def test_every_order_tried_returns_the_cheapest_of_them(summit2, costs, widths, join):
    pcg = fan(widths, join=join)
    each = {o: solve(summit2, costs, pcg, (o,)).cost_s for o in PEEL_ORDERS}
    got = MappingDP(summit2, costs).solve(pcg)          # every order, sharing one memo
    assert got.cost_s == pytest.approx(min(each.values()), rel=1e-9)
    Strategy.from_configs(pcg, got.configs)             # a valid strategy whichever order won


def test_the_graph_order_is_not_always_best_nor_any_other(summit2, costs):
    """Measured here (summit, 2 nodes, the analytic costs): no order dominates, so the DP tries them
    all. Four towers as built: 675 us peeled in graph order, 606 us costliest first; five others:
    254 us in graph order, 290 and 311 by work."""
    for widths, best in (([1024, 64, 256, 4096], "costliest"), ([2048, 128, 512, 1024, 32], "graph")):
        pcg = fan(widths)
        each = {o: solve(summit2, costs, pcg, (o,)).cost_s for o in PEEL_ORDERS}
        assert min(each, key=each.get) == best
        assert sorted(each.values())[1] > each[best] * 1.05
        assert MappingDP(summit2, costs).solve(pcg).cost_s == pytest.approx(each[best], rel=1e-9)


def test_without_a_parallel_split_every_order_gives_one_solution(summit2, costs):
    """A chain is solved once whatever the orders asked (no second solve, no other mappings); a fan
    of towers once per order."""
    pcg = chain()
    got = {o: solve(summit2, costs, pcg, (o,)) for o in PEEL_ORDERS}
    assert len({g.cost_s for g in got.values()}) == 1
    assert len({tuple(sorted((k, repr(v)) for k, v in g.configs.items())) for g in got.values()}) == 1
    misses = {}
    for peel in (("graph",), PEEL_ORDERS):
        for name, graph in (("chain", chain()), ("fan", fan([1024, 64, 256, 4096]))):
            dp = MappingDP(summit2, costs, peel=peel)
            mapping = dp.solve(graph)
            misses[name, len(peel)] = dp.misses, dp.hits
            if name == "chain":
                assert mapping.others == {}
    assert misses["chain", 3] == misses["chain", 1]
    assert misses["fan", 3][0] > misses["fan", 1][0]


@pytest.mark.parametrize("peel", [(), "graph", ("graph", "graph"), ("sideways",)])
def test_a_bad_peel_is_our_error(summit2, costs, peel):
    with pytest.raises(ConfigError, match="peel"):
        MappingDP(summit2, costs, peel=peel)
