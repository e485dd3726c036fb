"""Unity's DP with gradient synchronization overlapping the backward pass (``LocalCosts(overlap=True)``).

A chain's backward is a two-machine flow shop: each operator's backward on its devices, then its
gradient AllReduce on the links, queued behind the ones before it. ``_Parts.then`` composes that
exactly; the DP's rings cost what the simulator's rings take (every step's latency, the members'
sums on the devices); and the DP's estimate of its own mapping of chains lands near the simulation,
where summing every ring (the default costs) is far above it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, FFConfig, FFModel
from flexrt.machine import load_machine
from flexrt.search.unity.costs import LocalCosts
from flexrt.search.unity.mapping import MappingDP, _Parts
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import SearchSpace, Strategy, data_parallel

COST = AnalyticCostModel()
job = st.tuples(*(st.floats(0, 10, allow_nan=False) for _ in range(3)))


@settings(max_examples=200, deadline=None)
@given(jobs=st.lists(job, min_size=1, max_size=7))
def test_then_is_the_two_machine_flow_shop(jobs):
    """Operators in forward order, each (forward, backward, sync): all forwards, then the backwards in
    reverse order, each sync after its own backward and after the syncs before it. The makespan is
    the forwards plus max over i of (backwards up to i) + (syncs from i on), in backward order."""
    parts = [_Parts(*(np.array(x) for x in (f, b, s)), np.array(f + b + s)) for f, b, s in jobs]
    total = parts[0]
    for p in parts[1:]:
        total = total.then(p)
    back = list(reversed(jobs))
    want = sum(f for f, _, _ in jobs) + max(sum(b for _, b, _ in back[:i + 1]) + sum(s for _, _, s in back[i:])
                                            for i in range(len(back)))
    assert float(total.M) == pytest.approx(want, rel=1e-12, abs=1e-12)
    # no faster than the compute alone, nor slower than everything one after the other
    assert sum(f + b for f, b, _ in jobs) - 1e-9 <= float(total.M) <= sum(map(sum, jobs)) + 1e-9


def _chain(batch: int, width: int, layers: int):
    m = FFModel(FFConfig([]))
    t = m.create_tensor([batch, width])
    for i in range(layers):
        t = m.dense(t, width, ActiMode.AC_MODE_RELU, name=f"fc{i}")
    return m.pcg


@pytest.mark.parametrize("nodes", [1, 2, 8])
@pytest.mark.parametrize("width", [256, 2048])
def test_a_data_parallel_layer_costs_what_the_simulator_says(nodes, width):
    """One layer, data parallel over every summit GPU: nothing to overlap, so the DP's forward +
    backward + ring (2(n-1) step latencies, the members' sums, the update) is the simulated iteration.
    At 48 GPUs a 256 KiB ring is nearly all latency: 0.49 ms, where one latency would say 26 us.
    Measured: within 0.1-6.9% (the most on 2 nodes, where the channels' busiest link is counted)."""
    machine = load_machine("summit", nodes=nodes)
    pcg = _chain(48 * 4, width, 1)
    s = data_parallel(pcg, machine)
    costs = LocalCosts(machine, COST, SearchSpace().kinds, overlap=True)
    ((nid, cfg),) = s.configs.items()
    est = sum(costs.node_parts(pcg, pcg.node(nid), cfg))
    sim = Simulator(machine, COST).full(s).iteration_time_s
    assert est == pytest.approx(sim, rel=0.08)


@pytest.mark.parametrize("nodes, width, layers", [(1, 1024, 8), (1, 256, 12), (2, 1024, 8), (2, 4096, 6),
                                                  (2, 256, 12)])
def test_the_estimate_of_a_chain_is_near_its_simulation(nodes, width, layers):
    """Chains of dense layers on summit: the DP's estimate of its own mapping within 15% of the full
    simulation with the overlap model (measured 0.88-1.06); summing the rings instead overestimates
    the 1024-wide chain on 12 GPUs by half (measured 1.49x)."""
    machine = load_machine("summit", nodes=nodes)
    pcg = _chain(64 * 6 * nodes, width, layers)
    ratio = {}
    for overlap in (True, False):
        got = MappingDP(machine, LocalCosts(machine, COST, SearchSpace().kinds, overlap=overlap)).solve(pcg)
        sim = Simulator(machine, COST).full(Strategy.from_configs(pcg, got.configs)).iteration_time_s
        ratio[overlap] = got.cost_s / sim
    assert 0.85 <= ratio[True] <= 1.15, ratio
    if (nodes, width) == (2, 1024):
        assert ratio[False] > 1.4, ratio


@settings(max_examples=150, deadline=None)
@given(preset=st.sampled_from([("summit", 2), ("dgx1_v100", 2), ("dgx_a100", 2)]), overlap=st.booleans(),
       seed=st.integers(0, 10**6), num_bytes=st.integers(1, 1 << 28))
def test_ring_is_its_definition_over_every_neighbour_pair(preset, overlap, seed, num_bytes):
    """``LocalCosts.ring`` (one term per kind of pair and link, ``_ring_plan``) equals the maximum over
    every neighbour pair of every channel, and over every link with every channel's share on it."""
    machine = load_machine(preset[0], nodes=preset[1])
    costs = LocalCosts(machine, COST, SearchSpace.full().kinds, overlap=overlap)
    rng = np.random.default_rng(seed)
    devices = sorted(rng.choice(machine.num_devices, int(rng.integers(2, machine.num_devices + 1)), replace=False))
    devices = [int(d) for d in devices]
    n, orders = len(devices), machine.ring_channels(devices)
    share = max(1, 2 * (n - 1) * (num_bytes // len(orders)) // n)
    paid = costs.ring_latency(orders[0], num_bytes // len(orders)) if overlap else 0.0
    pairs = [(c, a, b) for c, ring in enumerate(orders) for a, b in zip(ring, ring[1:] + ring[:1])]
    pair_term = lambda a, b, first: costs.transfer(a, b, share) + (     # noqa: E731
        max(0.0, paid - costs._route(a, b)[1]) if first else 0.0)
    want = max(pair_term(a, b, c == 0) for c, a, b in pairs)
    on: dict = {}
    for _, a, b in pairs:
        for l in machine.route(a, b):
            on[l] = on.get(l, 0) + share
    busiest = max(COST.transfer_time(machine.links[l], x) for l, x in on.items())
    _, kinds, loaded = costs._ring_plan(tuple(devices))      # each term, dominant or not
    assert max(pair_term(*k) for k in kinds) == want
    assert (max(COST.transfer_time(link, k * share) for link, k in loaded) == busiest) if len(orders) > 1 \
        else not loaded
    assert costs.ring(devices, num_bytes) == (max(want, busiest) if len(orders) > 1 else want)


@settings(max_examples=60, deadline=None)
@given(preset=st.sampled_from([("summit", 2), ("dgx1_v100", 2), ("dgx_a100", 2)]), seed=st.integers(0, 10**6))
def test_transfers_by_kind_of_route_are_each_transfer(preset, seed):
    """``LocalCosts.transfers`` (one time per kind of route and size) is ``transfer`` of each, exactly;
    routes of one kind cross links of the same types, bandwidths and latencies."""
    machine = load_machine(preset[0], nodes=preset[1])
    costs = LocalCosts(machine, COST, SearchSpace.full().kinds)
    rng = np.random.default_rng(seed)
    n = machine.num_devices
    src, dst = rng.integers(0, n, (3, 40)), rng.integers(0, n, (3, 40))
    sizes = rng.choice([0, 1, 4096, 1 << 20, 12345678], (3, 40))
    got = costs.transfers(src, dst, sizes)
    fresh = LocalCosts(machine, COST, SearchSpace.full().kinds)
    assert got.shape == (3, 40) and got.tolist() == [[fresh.transfer(int(a), int(b), int(c)) for a, b, c in zip(*row)]
                                                     for row in zip(src, dst, sizes)]
    K, reps = costs.route_kinds()
    links = lambda a, b: [(machine.links[l].type, machine.links[l].bandwidth, machine.links[l].latency_s)  # noqa: E731
                          for l in machine.route(a, b)]
    for a, b in zip(src.ravel().tolist(), dst.ravel().tolist()):
        assert (K[a, b] == 0) == (a == b)
        if a != b:
            assert links(a, b) == links(*reps[K[a, b]])
