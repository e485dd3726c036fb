"""Configurations pruned by their cost lower bound (``LocalCosts(config_ratio=r)``, the unity search's
default ``DEFAULT_CONFIG_RATIO``), and the reachability they use (``search/unity/reach.py``):

- ``closure`` is reachability; a node's parallel width is the size of a maximal antichain through
  it (no two members reach each other, every other node reaches or is reached by one);
- the configurations kept are exactly those whose own cost is within r x (width, at most the
  block's devices) x the cheapest's, in enumeration order; the cheapest is always kept, and r = 0
  keeps every one;
- the DP stays exact over the configurations kept (the minimum over every assignment of them), and
  pruning never makes it cheaper than the unpruned DP;
- bad ratios are refused with our error, in the API and on the command line.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import ConfigError
from flexrt.search.unity import Block, LocalCosts, MappingDP
from flexrt.search.unity.reach import antichain, closure, parallel_widths

from .test_unity_mapping import (BLOCKS, COST, FULL, MACHINES, assignment_cost, blocks_st, build, compute_nodes,
                                 exhaustive, reachability)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 24), density=st.floats(0.0, 0.6), seed=st.integers(0, 10_000))
def test_closure_is_reachability(n, density, seed):
    rng = random.Random(seed)
    edges = {(u, v) for v in range(n) for u in range(v) if rng.random() < density}
    pred, succ = [0] * n, [0] * n
    for u, v in edges:
        pred[v] |= 1 << u
        succ[u] |= 1 << v
    anc, desc = closure(pred, succ)

    def reach(a):
        seen, stack = set(), [a]
        while stack:
            x = stack.pop()
            for u, v in edges:
                if u == x and v not in seen:
                    seen.add(v)
                    stack.append(v)
        return seen

    for a in range(n):
        assert {v for v in range(n) if desc[a] >> v & 1} == reach(a)
        assert {u for u in range(n) if anc[a] >> u & 1} == {u for u in range(n) if a in reach(u)}


@settings(max_examples=40, deadline=None)
@given(blocks=blocks_st, two_inputs=st.booleans())
def test_parallel_width_is_a_maximal_antichain_through_the_operator(blocks, two_inputs):
    pcg = build(blocks, two_inputs=two_inputs)
    ids = [n.id for n in compute_nodes(pcg)]
    succ, reach = reachability(pcg)
    related = lambda a, b: a == b or b in reach[a] or a in reach[b]   # noqa: E731
    pos = {i: k for k, i in enumerate(ids)}
    pred, nxt = [0] * len(ids), [0] * len(ids)
    for a in ids:
        for b in succ[a]:
            pred[pos[b]] |= 1 << pos[a]
            nxt[pos[a]] |= 1 << pos[b]
    anc, desc = closure(pred, nxt)
    widths = parallel_widths(pcg)
    for v in ids:
        members = [ids[k] for k in range(len(ids)) if antichain(anc, desc, pos[v]) >> k & 1]
        assert v in members and widths[v] == len(members)
        assert not any(related(a, b) for a in members for b in members if a != b)      # an antichain
        assert all(any(related(x, a) for a in members) for x in ids)                    # maximal
    if "branch" in blocks:       # a branch block's two sides
        assert max(widths.values()) >= 2


@settings(max_examples=30, deadline=None)
@given(blocks=blocks_st, two_inputs=st.booleans(), machine_name=st.sampled_from(sorted(MACHINES)),
       ratio=st.sampled_from([1.0, 1.5, 4.0]))
def test_the_configurations_kept_are_those_within_the_bound(blocks, two_inputs, machine_name, ratio):
    machine = MACHINES[machine_name]()
    pcg = build(blocks, two_inputs=two_inputs)
    exact = LocalCosts(machine, COST, FULL)
    pruned = LocalCosts(machine, COST, FULL, config_ratio=ratio)
    widths = parallel_widths(pcg)
    dropped = 0
    for block in (Block(0, machine.num_devices), Block(0, 2), Block(1, 1)):
        for node in compute_nodes(pcg):
            every = exact.configs(pcg, node, block)
            cost = [exact.node_cost(pcg, node, c) for c in every]
            allowance = min(1 << (widths[node.id] - 1).bit_length(), block.count)
            want = [c for c, x in zip(every, cost) if x <= ratio * allowance * min(cost)]
            got = pruned.configs(pcg, node, block)
            assert got == want
            assert every[cost.index(min(cost))] in got
            assert LocalCosts(machine, COST, FULL, config_ratio=0).configs(pcg, node, block) == every
            dropped += len(every) - len(got)
    if ratio == 1.0:
        assert dropped > 0       # the bound prunes something on every graph here


@settings(max_examples=30, deadline=None)
@given(blocks=blocks_st, devices=st.sampled_from([2, 4]), ratio=st.sampled_from([1.0, 2.0, 4.0]))
def test_the_dp_is_exact_over_the_configurations_kept_and_never_below_the_unpruned(blocks, devices, ratio):
    machine = MACHINES["dgx1"]()
    if devices == 4 and sum(BLOCKS[b] for b in blocks) > 3:
        devices = 2   # keep the enumeration small
    pcg = build(blocks)
    pruned = LocalCosts(machine, COST, FULL, max_axes=1, config_ratio=ratio)
    got = MappingDP(machine, pruned, parallel_splits=False, devices=devices, packing=False).solve(pcg)
    assert got.cost_s == pytest.approx(exhaustive(pcg, pruned, Block(0, devices)), rel=1e-12)
    assert assignment_cost(pcg, pruned, got.configs) == pytest.approx(got.cost_s, rel=1e-12)
    exact = LocalCosts(machine, COST, FULL, max_axes=1)
    unpruned = MappingDP(machine, exact, parallel_splits=False, devices=devices, packing=False).solve(pcg)
    assert got.cost_s >= unpruned.cost_s * (1 - 1e-12)
    both = [MappingDP(machine, c, devices=devices).solve(pcg).cost_s for c in (exact, pruned)]
    assert both[1] >= both[0] * (1 - 1e-12)


@pytest.mark.parametrize("bad", [0.5, -1, math.inf, math.nan, True, "4", None])
def test_a_bad_ratio_is_refused_with_our_error(bad):
    with pytest.raises(ConfigError, match="configuration ratio"):
        LocalCosts(MACHINES["dgx1"](), COST, FULL, config_ratio=bad)


@settings(max_examples=30, deadline=None)
@given(blocks=blocks_st, two_inputs=st.booleans())
def test_signature_ids_separate_widths_only_where_configurations_depend_on_them(blocks, two_inputs):
    """With pruning, nodes share ``sig_id`` exactly when they share signature and width bucket (their
    configurations), and ``base_id`` exactly when they share signature (their layouts and costs)."""
    pcg = build(blocks, two_inputs=two_inputs)
    costs = LocalCosts(MACHINES["dgx1"](), COST, FULL, config_ratio=4)
    plain = LocalCosts(MACHINES["dgx1"](), COST, FULL)
    widths = parallel_widths(pcg)
    nodes = compute_nodes(pcg)
    for a in nodes:
        for b in nodes:
            same = LocalCosts.signature(pcg, a) == LocalCosts.signature(pcg, b)
            bucket = (widths[a.id] - 1).bit_length() == (widths[b.id] - 1).bit_length()
            assert (costs.base_id(pcg, a) == costs.base_id(pcg, b)) == same
            assert (costs.sig_id(pcg, a) == costs.sig_id(pcg, b)) == (same and bucket)
            assert (plain.sig_id(pcg, a) == plain.sig_id(pcg, b)) == same
