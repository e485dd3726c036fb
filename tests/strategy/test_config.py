"""The strategy layer: the two strategy types, one-operator proposals and what lowering reads."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import ShapeError, StrategyError
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.strategy import (ConfigStrategy, GraphStrategy, OpConfig, data_parallel, is_compute, node_axes,
                             random_config, wiring_of)

MACHINE = load_machine("flexflow_p100", nodes=2)


@pytest.fixture(scope="module")
def lenet():
    return load_model("lenet", ["-b", "64"]).model.pcg


def test_config_strategy_shapes_match_its_parallel_pcg(lenet):
    """What lowering reads of a ConfigStrategy (degrees and parallel shapes, no PCG built) equals what
    the parallel PCG that apply_configs builds says, operator by operator."""
    rng = random.Random(3)
    for _ in range(5):
        s = ConfigStrategy(lenet, {n.id: random_config(lenet, n, MACHINE, rng) for n in lenet.nodes if is_compute(n)})
        for name in s.wiring().ops:
            node = s.pcg.node_by_name(name)
            axes, degree = node_axes(s.pcg, node)
            shapes = s.shapes(name)
            assert shapes.degree == tuple((a.name, degree[a.name]) for a in axes)
            assert shapes.operands == tuple(s.pcg.shape(r) for r in node.inputs)
            assert shapes.outputs == tuple(s.pcg.output_shapes(node.id))


def test_config_strategy_builds_no_parallel_pcg_until_asked(lenet):
    s = data_parallel(lenet, MACHINE)
    assert s._pcg is None
    Simulator(MACHINE, AnalyticCostModel(), detail=False).full(s)
    assert s._pcg is None
    assert s.pcg is s.pcg and len(s.views) == len(s.wiring().ops)


def test_config_strategy_refuses_a_missing_operator(lenet):
    s = data_parallel(lenet, MACHINE)
    configs = dict(s.configs)
    configs.pop(next(iter(configs)))
    with pytest.raises(StrategyError, match="no configuration for operator"):
        ConfigStrategy(lenet, configs)


def test_with_config_refuses_what_a_fresh_strategy_refuses(lenet):
    """A configuration of too high a degree is refused by both paths, naming the operator."""
    s = data_parallel(lenet, MACHINE)
    node = next(n for n in lenet.nodes if is_compute(n))
    sample = node_axes(s.pcg, s.pcg.node_by_name(node.name))[0][0].name
    bad = OpConfig(((sample, 128),), s.configs[node.id].view)
    with pytest.raises((ShapeError, StrategyError)) as fresh:
        ConfigStrategy(lenet, {**s.configs, node.id: bad})
    with pytest.raises(type(fresh.value)):
        s.with_config(node.id, bad)


@settings(max_examples=15)
@given(st.integers(0, 10_000))
def test_with_configs_equals_a_fresh_strategy_and_simulates_alike(seed):
    """A chain of one-operator proposals gives the strategy built from scratch from the same
    configurations: equal, and bit-identical timelines by delta (synced engine) and full simulation."""
    base = load_model("lenet", ["-b", "64"]).model.pcg
    rng = random.Random(seed)
    ops = [n for n in base.nodes if is_compute(n)]
    s = data_parallel(base, MACHINE)
    sim = Simulator(MACHINE, AnalyticCostModel(), detail=False)
    sim.full(s)
    for _ in range(4):
        n = rng.choice(ops)
        s = s.with_config(n.id, random_config(base, n, MACHINE, rng))
        delta = sim.delta(s, {n.name})
    fresh = ConfigStrategy(base, s.configs)
    assert fresh == s
    full = Simulator(MACHINE, AnalyticCostModel(), detail=False).full(fresh)
    assert timelines_equal(delta, full)


def test_graph_strategy_simulates_like_its_config_strategy(lenet):
    """A whole parallel PCG with views is the same strategy as the configurations it came from."""
    s = ConfigStrategy(lenet, {n.id: random_config(lenet, n, MACHINE, random.Random(7))
                               for n in lenet.nodes if is_compute(n)})
    g = GraphStrategy(s.pcg, s.views)
    a = Simulator(MACHINE, AnalyticCostModel()).full(s)
    b = Simulator(MACHINE, AnalyticCostModel()).full(g)
    assert timelines_equal(a, b)


def test_wiring_is_shared_by_every_strategy_of_a_model(lenet):
    a = data_parallel(lenet, MACHINE)
    n = next(n for n in lenet.nodes if is_compute(n))
    b = a.with_config(n.id, random_config(lenet, n, MACHINE, random.Random(0)))
    assert a.wiring() is b.wiring() is wiring_of(lenet)
    w = wiring_of(lenet)
    assert w.sinks == [w.ops[-1]]  # LeNet ends in its softmax, the operator the loss scores


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), preset=st.sampled_from(["summit", "dgx_a100", "flexflow_p100"]),
       nodes=st.integers(1, 4))
def test_config_at_is_the_asked_valid_configuration_on_the_most_compact_view_at_its_start(lenet, seed, preset,
                                                                                         nodes):
    """``config_at``: the first asked alternative that ``valid_configs`` lists (else unsplit), on a view
    starting at the asked device where one does, of the smallest device span among those."""
    from flexrt.machine.views import enumerate_views, view_devices
    from flexrt.strategy.space import all_axes, config_at, valid_configs
    machine = load_machine(preset, nodes=nodes)
    rng = random.Random(seed)
    node = rng.choice([n for n in lenet.nodes if is_compute(n)])
    names = [a.name for a in all_axes(lenet, node)]
    valid = [{k: v for k, v in c.items() if v > 1} for c in valid_configs(lenet, node, machine)]
    asked = [{k: rng.choice([1, 2, 3, 4, 8]) for k in rng.sample(names, rng.randint(0, len(names)))}
             for _ in range(3)]
    device = rng.randrange(machine.num_devices)
    cfg = config_at(lenet, node, machine, asked, device)
    want = next((a for a in ({k: v for k, v in a.items() if v > 1} for a in asked) if a and a in valid), {})
    assert dict(cfg.degrees) == want
    degrees = tuple(want.get(n, 1) for n in names)
    views = enumerate_views(machine, degrees)
    here = [v for v in views if v.start == device] or views[:1]
    span = lambda v: max(view_devices(machine, v, degrees)) - min(view_devices(machine, v, degrees))  # noqa: E731
    assert cfg.view in here and span(cfg.view) == min(span(v) for v in here)
