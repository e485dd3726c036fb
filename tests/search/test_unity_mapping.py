"""Unity's machine-mapping DP (search/unity/mapping.py) against brute force, on values.

``test_unity.py`` checks the DP against enumeration on three fixed graphs and one side-by-side
case; here the laws run on random series-parallel graphs and machines:

- ``series_split_nodes`` is exactly the definition (every other node an ancestor or a descendant,
  no edge skipping the node), computed independently from the graph's edges;
- one after the other (no resource splits), the DP's cost is the minimum over every assignment of
  configurations, and the configurations it returns cost what it says;
- with resource splits it is never worse, and two independent towers cost the best of running them
  one after the other or side by side on every split of the devices (whole nodes across nodes);
  packing branches on a block's devices never costs more than one after the other;
- a graph that is not series-parallel falls back to the greedy assignment: it still reports what
  its configurations cost, never less than the optimum;
- every configuration is placed on distinct devices of its block, as a view the machine enumerates,
  and the mapping is a valid strategy;
- results are deterministic; a graph built again reuses every memoized subproblem; more devices
  never cost more (without splits); one device means every operator whole on device 0.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.machine import load_machine, local_machine
from flexrt.machine.views import enumerate_views, view_devices
from flexrt.model import load_model
from flexrt.search.unity import Block, LocalCosts, MappingDP, series_split_nodes
from flexrt.search.unity.mapping import Mapping
from flexrt.search.unity.search import _mapped
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import SearchSpace, Strategy, all_axes, is_compute

COST = AnalyticCostModel()
SAMPLE, FULL = SearchSpace().kinds, SearchSpace.full().kinds
BATCH = 16
MACHINES = {"dgx1": lambda: load_machine("dgx1_v100"),          # 8 devices in one node
            "summit2": lambda: load_machine("summit", nodes=2)}  # 2 nodes x 6 devices


@pytest.fixture(scope="module")
def dgx1():
    return MACHINES["dgx1"]()


# ---- graphs -------------------------------------------------------------------------------------

# A series-parallel graph is a chain of blocks; each block adds compute operators after the current
# tensor t (the second entry: how many).
BLOCKS = {"dense": 1, "relu": 1, "branch": 3, "residual": 2}


def build(blocks, width=32, two_inputs=False):
    """The graph of ``blocks`` applied in order to one input (``two_inputs``: a second input with its
    own dense layer, joined by a concat at the end)."""
    m = FFModel(FFConfig(["-b", str(BATCH)]))
    t = m.create_tensor([BATCH, width], DataType.DT_FLOAT)
    for j, b in enumerate(blocks):
        if b == "dense":
            t = m.dense(t, width, ActiMode.AC_MODE_RELU, name=f"fc{j}")
        elif b == "relu":
            t = m.relu(t, name=f"relu{j}")
        elif b == "branch":
            a = m.dense(t, width, name=f"left{j}")
            c = m.dense(t, width, ActiMode.AC_MODE_TANH, name=f"right{j}")
            t = m.add(a, c, name=f"join{j}")
        else:
            t = m.add(m.dense(t, width, name=f"inner{j}"), t, name=f"skip{j}")
    if two_inputs:
        y = m.create_tensor([BATCH, width], DataType.DT_FLOAT)
        t = m.concat([t, m.dense(y, width, name="other")], 1, name="cat")
    return m.pcg


def towers(width_a=32, width_b=64, depth_b=2):
    """Two independent chains, nothing in common: the whole graph splits in parallel."""
    m = FFModel(FFConfig(["-b", str(BATCH)]))
    x = m.create_tensor([BATCH, width_a], DataType.DT_FLOAT)
    y = m.create_tensor([BATCH, width_b], DataType.DT_FLOAT)
    m.dense(x, width_a, ActiMode.AC_MODE_RELU, name="a0")
    t = y
    for i in range(depth_b):
        t = m.dense(t, width_b, name=f"b{i}")
    return m.pcg


def n_shape(width=32):
    """A -> C, A -> D, B -> D: neither a sequence split nor a parallel one (not series-parallel)."""
    m = FFModel(FFConfig(["-b", str(BATCH)]))
    x = m.create_tensor([BATCH, width], DataType.DT_FLOAT)
    a = m.dense(x, width, name="A")
    b = m.dense(x, width, ActiMode.AC_MODE_RELU, name="B")
    m.dense(a, 8, name="C")
    m.add(a, b, name="D")
    return m.pcg


blocks_st = st.lists(st.sampled_from(sorted(BLOCKS)), min_size=1, max_size=4).filter(
    lambda bs: sum(BLOCKS[b] for b in bs) <= 5)


# ---- brute force --------------------------------------------------------------------------------

def compute_nodes(pcg):
    return [pcg.node(n) for n in pcg.topological_order() if is_compute(pcg.node(n))]


def assignment_cost(pcg, costs: LocalCosts, configs: dict) -> float:
    """Σ node costs + Σ edge costs of configurations (node id -> OpConfig) run one after the other."""
    total = sum(costs.node_cost(pcg, pcg.node(n), c) for n, c in configs.items())
    for n in configs:
        v = pcg.node(n)
        for i, ref in enumerate(v.inputs):
            if ref.node in configs:
                total += costs.edge_cost(pcg, pcg.node(ref.node), ref.index, v, i, configs[ref.node], configs[n])
    return total


def exhaustive(pcg, costs: LocalCosts, block: Block, nodes=None) -> float:
    nodes = nodes if nodes is not None else compute_nodes(pcg)
    options = [costs.configs(pcg, n, block) for n in nodes]
    return min(assignment_cost(pcg, costs, {n.id: c for n, c in zip(nodes, combo)})
               for combo in itertools.product(*options))


def reachability(pcg) -> tuple[dict, dict]:
    """Per compute node id, its direct successors and every node it reaches (compute nodes only, by
    search over the graph's edges)."""
    nodes = compute_nodes(pcg)
    succ = {n.id: set() for n in nodes}
    for v in nodes:
        for ref in v.inputs:
            if ref.node in succ:
                succ[ref.node].add(v.id)

    def reach(a):
        seen, todo = set(), [a]
        while todo:
            for s in succ[todo.pop()]:
                if s not in seen:
                    seen.add(s)
                    todo.append(s)
        return seen

    return succ, {n: reach(n) for n in succ}


def split_nodes_by_definition(pcg) -> list[int]:
    """Nodes n such that every other compute node is an ancestor or a descendant of n and no edge
    goes from an ancestor to a descendant (reachability by search over the graph's edges)."""
    nodes = compute_nodes(pcg)
    ids = {n.id for n in nodes}
    succ, down = reachability(pcg)
    out = []
    for n in nodes:
        desc = down[n.id]
        anc = {u for u in ids if n.id in down[u]}
        if anc | desc | {n.id} != ids:
            continue
        if any(succ[u] & desc for u in anc):
            continue
        out.append(n.id)
    return out


# ---- series splits -------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(blocks=blocks_st, two_inputs=st.booleans())
def test_series_split_nodes_are_the_definition(blocks, two_inputs):
    pcg = build(blocks, two_inputs=two_inputs)
    assert series_split_nodes(pcg) == split_nodes_by_definition(pcg)


def test_series_split_nodes_of_named_shapes():
    names = lambda pcg: [pcg.node(n).name for n in series_split_nodes(pcg)]  # noqa: E731
    assert names(build(["dense", "branch", "residual"])) == ["fc0", "join1", "skip2"]
    assert names(n_shape()) == []
    assert names(towers()) == []  # two components: no node is related to every other
    assert names(build(["dense"], two_inputs=True)) == ["cat"]


# ---- the DP against brute force -------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(blocks=blocks_st, devices=st.sampled_from([1, 2, 4]), full=st.booleans(), width=st.sampled_from([16, 32]))
def test_sequential_mapping_is_the_minimum_over_every_assignment(blocks, devices, full, width):
    machine = MACHINES["dgx1"]()
    if full and devices == 4 and sum(BLOCKS[b] for b in blocks) > 3:
        devices = 2  # keep the enumeration small
    pcg = build(blocks, width)
    costs = LocalCosts(machine, COST, FULL if full else SAMPLE, max_axes=1)
    got = MappingDP(machine, costs, parallel_splits=False, devices=devices, packing=False).solve(pcg)
    assert set(got.configs) == {n.id for n in compute_nodes(pcg)}
    assert got.cost_s == pytest.approx(exhaustive(pcg, costs, Block(0, devices)), rel=1e-12)
    assert assignment_cost(pcg, costs, got.configs) == pytest.approx(got.cost_s, rel=1e-12)
    # resource splits only add options
    split = MappingDP(machine, costs, parallel_splits=True, devices=devices).solve(pcg)
    assert split.cost_s <= got.cost_s * (1 + 1e-12)


@settings(max_examples=25, deadline=None)
@given(blocks=blocks_st, two_inputs=st.booleans(), machine_name=st.sampled_from(sorted(MACHINES)),
       devices=st.sampled_from([2, 4, "all"]))
def test_packing_branches_never_costs_more_than_one_after_the_other(blocks, two_inputs, machine_name, devices):
    """Packing (the default) takes the busiest device's time for two branches on one block only where
    that is less than running them one after the other, so without resource splits no estimate
    rises (with them it may: a side-by-side pair then also costs at least one side's forward plus
    the other's backward on their devices); its configurations are still a valid strategy."""
    machine = MACHINES[machine_name]()
    devices = machine.num_devices if devices == "all" else min(devices, machine.num_devices)
    pcg = build(blocks, two_inputs=two_inputs)
    costs = LocalCosts(machine, COST, FULL)
    packed = MappingDP(machine, costs, devices=devices, parallel_splits=False).solve(pcg)
    plain = MappingDP(machine, costs, devices=devices, parallel_splits=False, packing=False).solve(pcg)
    assert packed.cost_s <= plain.cost_s * (1 + 1e-9)
    Strategy.from_configs(pcg, packed.configs)


@pytest.mark.parametrize("machine_name, devices", [("dgx1", 2), ("dgx1", 4), ("summit2", 12)])
def test_independent_towers_cost_the_best_of_one_after_the_other_and_every_device_split(machine_name, devices):
    """No boundary operators: the sides run one after the other on every device (costs add) or side
    by side on devices 0..r-1 and r..n-1 (the slower side), for r within a node, or whole nodes when
    the block spans several."""
    machine = MACHINES[machine_name]()
    pcg = towers()
    costs = LocalCosts(machine, COST, SAMPLE, max_axes=1)
    nodes = compute_nodes(pcg)
    a = [n for n in nodes if n.name.startswith("a")]
    b = [n for n in nodes if n.name.startswith("b")]
    full = Block(0, devices)
    per = machine.devices_per_node
    splits = range(1, devices) if devices <= per else range(per, devices, per)
    options = [exhaustive(pcg, costs, full, a) + exhaustive(pcg, costs, full, b)]
    options += [max(exhaustive(pcg, costs, Block(0, r), a), exhaustive(pcg, costs, Block(r, devices - r), b))
                for r in splits]
    got = MappingDP(machine, costs, devices=devices).solve(pcg)
    assert got.cost_s == pytest.approx(min(options), rel=1e-12)
    assert min(options) < options[0], "side by side should win here, or the test shows nothing"
    # the returned configurations really sit side by side
    used = {n.name[0]: set() for n in nodes}
    for n in nodes:
        cfg = got.configs[n.id]
        used[n.name[0]] |= set(view_devices(machine, cfg.view, degrees_of(pcg, n, cfg)))
    assert not used["a"] & used["b"]


def test_greedy_fallback_reports_what_its_configurations_cost(dgx1):
    pcg = n_shape()
    for kinds, devices in [(SAMPLE, 2), (SAMPLE, 4), (FULL, 2)]:
        costs = LocalCosts(dgx1, COST, kinds, max_axes=1)
        got = MappingDP(dgx1, costs, devices=devices).solve(pcg)
        assert assignment_cost(pcg, costs, got.configs) == pytest.approx(got.cost_s, rel=1e-12)
        assert got.cost_s >= exhaustive(pcg, costs, Block(0, devices)) * (1 - 1e-12)


@pytest.mark.parametrize("devices", [4, 8])
def test_greedy_fallback_never_takes_a_layout_no_consumer_can_read(devices):
    """NMT's attention reads every encoder step (not series-parallel: the greedy part). With one
    sample per device, the cheapest configuration of a query's reshape copies its output to every
    device, which the score's batch matmul cannot read (copies only grow): the greedy took it, the
    whole mapping cost inf, and Unity's search died building it. Looking one step ahead, the
    mapping is finite and a valid strategy."""
    machine = load_machine("flexflow_k80", nodes=devices // 4)
    pcg = load_model("nmt", ["-b", str(devices), "--seq-length", "2"]).model.pcg
    costs = LocalCosts(machine, COST, FULL)
    got = MappingDP(machine, costs, devices=devices).solve(pcg)
    assert math.isfinite(got.cost_s)
    Strategy.from_configs(pcg, got.configs)     # raises where an edge has no resharding chain
    # every node and edge of the mapping has a finite cost
    assert math.isfinite(assignment_cost(pcg, costs, got.configs))
    # a mapping of infinite cost (an edge no chain makes) is never a finalist; the finite ones are
    got.others = {"cheapest": Mapping(math.inf, {})}
    assert [label for label, _ in _mapped("unity", pcg, pcg, got)] == ["unity"]


# ---- placement ----------------------------------------------------------------------------------

def degrees_of(pcg, node, cfg) -> tuple[int, ...]:
    return tuple(cfg.degree_map.get(a.name, 1) for a in all_axes(pcg, node))


@settings(max_examples=30, deadline=None)
@given(blocks=blocks_st, two_inputs=st.booleans(), machine_name=st.sampled_from(sorted(MACHINES)),
       devices=st.sampled_from(["all", 2, 4]))
def test_configurations_sit_on_distinct_devices_of_the_block_as_enumerated_views(blocks, two_inputs, machine_name,
                                                                                devices):
    machine = MACHINES[machine_name]()
    devices = machine.num_devices if devices == "all" else devices
    pcg = build(blocks, two_inputs=two_inputs)
    costs = LocalCosts(machine, COST, FULL)
    mapping = MappingDP(machine, costs, devices=devices).solve(pcg)
    assert math.isfinite(mapping.cost_s) and mapping.cost_s > 0
    for nid, cfg in mapping.configs.items():
        node = pcg.node(nid)
        degrees = degrees_of(pcg, node, cfg)
        placed = view_devices(machine, cfg.view, degrees)
        assert len(set(placed)) == len(placed) == cfg.total_degree
        assert set(placed) <= set(range(devices)), (node.name, placed, devices)
        assert cfg.view in enumerate_views(machine, degrees), (node.name, str(cfg.view))
    Strategy.from_configs(pcg, mapping.configs)  # a valid strategy (raises otherwise)


# ---- determinism, the cache, resources ------------------------------------------------------------

def test_mapping_is_deterministic_and_a_rebuilt_graph_hits_every_subproblem(dgx1):
    blocks = ["dense", "branch", "residual"]
    costs = LocalCosts(dgx1, COST, FULL)
    dp = MappingDP(dgx1, costs, devices=4)
    first = dp.solve(build(blocks))
    misses = dp.misses
    again = build(blocks)  # equal structure, new graph object and node ids
    second = dp.solve(again)
    assert dp.misses == misses and dp.hits > 0
    assert second.cost_s == first.cost_s
    by_name = lambda pcg, m: {pcg.node(n).name: c for n, c in m.configs.items()}  # noqa: E731
    assert by_name(again, second) == by_name(build(blocks), MappingDP(dgx1, LocalCosts(dgx1, COST, FULL),
                                                                      devices=4).solve(build(blocks)))
    # a graph sharing a prefix reuses it: fewer new subproblems than solving it afresh
    longer = build(blocks + ["dense"])
    before = dp.misses
    dp.solve(longer)
    fresh = MappingDP(dgx1, LocalCosts(dgx1, COST, FULL), devices=4)
    fresh.solve(longer)
    assert dp.misses - before < fresh.misses


@settings(max_examples=25, deadline=None)
@given(blocks=blocks_st)
def test_more_devices_never_cost_more_one_after_the_other(blocks):
    """The configurations on 2^k devices include those on 2^(k-1) (same views on the first
    devices), so without resource splits the optimum can only fall."""
    machine = MACHINES["dgx1"]()
    pcg = build(blocks)
    costs = LocalCosts(machine, COST, SAMPLE, max_axes=1)
    got = [MappingDP(machine, costs, parallel_splits=False, devices=d).solve(pcg).cost_s for d in (1, 2, 4, 8)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(got, got[1:])), got


@pytest.mark.parametrize("machine_name", ["one_device", "dgx1"])
def test_one_device_runs_every_operator_whole_on_device_0(machine_name):
    machine = local_machine(devices=1) if machine_name == "one_device" else MACHINES["dgx1"]()
    pcg = build(["dense", "branch", "relu"])
    costs = LocalCosts(machine, COST, FULL)
    got = MappingDP(machine, costs, devices=1).solve(pcg)
    whole = {n.id: costs.configs(pcg, n, Block(0, 1)) for n in compute_nodes(pcg)}
    assert all(len(cs) == 1 for cs in whole.values())
    assert got.configs == {nid: cs[0] for nid, cs in whole.items()}
    for nid, cfg in got.configs.items():
        assert cfg.total_degree == 1 and cfg.view.start == 0
    # nothing moves between devices: the cost is the operators' own
    assert got.cost_s == pytest.approx(sum(costs.node_cost(pcg, pcg.node(n), c) for n, c in got.configs.items()),
                                       rel=1e-12)
