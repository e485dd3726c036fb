"""Costs that share another's caches (``LocalCosts(like=...)``: the finalists' DPs and the pipeline
stages' start from the search's caches):

- whatever either costed first, a sharing instance gives the numbers a fresh one gives: the
  configurations, node costs, edge tables, link loads and the DP's mapping, for every combination of
  ring model (``overlap``), space, minimum degree and pruning ratio;
- what does not depend on those is one cache; what does is shared only where they agree;
- costs of another machine, cost model or optimizer are refused with our error.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import ConfigError
from flexrt.search.unity import Block, LocalCosts, MappingDP
from flexrt.simulator.cost_model import AnalyticCostModel

from .test_unity_mapping import COST, FULL, MACHINES, SAMPLE, blocks_st, build, compute_nodes

settings_st = st.fixed_dictionaries({"kinds": st.sampled_from([FULL, SAMPLE]), "overlap": st.booleans(),
                                     "min_degree": st.sampled_from([1, 2]), "config_ratio": st.sampled_from([0, 4])})


def _numbers(costs: LocalCosts, pcg, block: Block) -> list:
    """Everything the DP asks of ``costs`` on ``block``, in one list."""
    out = []
    nodes = compute_nodes(pcg)
    for node in nodes:
        cfgs = costs.configs(pcg, node, block)
        out += [cfgs, [costs.node_parts(pcg, node, c) for c in cfgs], costs.node_loads(pcg, node, block).tolist()]
    for v in nodes:
        for i, r in enumerate(v.inputs):
            u = pcg.node(r.node)
            if u in nodes:
                out += [costs.edge_matrix(pcg, u, r.index, v, i, block, block).tolist(),
                        costs.edge_bound(pcg, u, r.index, v, i, block, block).tolist()]
    return out


@settings(max_examples=25, deadline=None)
@given(blocks=blocks_st, machine_name=st.sampled_from(sorted(MACHINES)), first=settings_st, second=settings_st)
def test_a_sharing_instance_gives_a_fresh_ones_numbers_and_mapping(blocks, machine_name, first, second):
    machine = MACHINES[machine_name]()
    pcg = build(blocks)
    n = min(4, machine.num_devices)
    base = LocalCosts(machine, COST, **first)
    MappingDP(machine, base, devices=n).solve(pcg)            # fill its caches
    shared = LocalCosts(machine, COST, like=base, **second)
    fresh = LocalCosts(machine, COST, **second)
    for block in (Block(0, n), Block(1, 2)):
        assert _numbers(shared, pcg, block) == _numbers(fresh, pcg, block)
    got, want = (MappingDP(machine, c, devices=n).solve(pcg) for c in (shared, fresh))
    assert got.cost_s == want.cost_s and got.configs == want.configs
    assert shared._layouts is base._layouts and shared._times is base._times
    assert (shared._node is base._node) == (first["overlap"] == second["overlap"])
    same_space = first["kinds"] == second["kinds"] and first["min_degree"] == second["min_degree"]
    assert (shared._degrees is base._degrees) == same_space
    assert shared._configs is not base._configs and shared._matrices is not base._matrices


def test_costs_of_another_machine_cost_model_or_optimizer_are_refused():
    machine = MACHINES["dgx1"]()
    base = LocalCosts(machine, COST, FULL)
    for kwargs in ({"machine": MACHINES["dgx1"](), "cost_model": COST},
                   {"machine": machine, "cost_model": AnalyticCostModel()},
                   {"machine": machine, "cost_model": COST, "optimizer": "adam"}):
        with pytest.raises(ConfigError, match="one machine, cost model and optimizer"):
            LocalCosts(kinds=FULL, like=base, **kwargs)
    assert np.isfinite(LocalCosts(machine, COST, SAMPLE, like=base).transfer(0, 1, 1 << 20))
