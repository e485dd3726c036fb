"""DisCo's fused-operator training samples (``simulator/fused_samples.py``, DisCo §5.2): random groups
grown from an operator through its predecessors are valid, deterministic per seed, and labelled by
measurements that a second collection reads back from the profile cache."""

from __future__ import annotations

import random

import pytest
from flexrt.core import DataType, FFConfig, FFModel
from flexrt.errors import ConfigError
from flexrt.machine import local_machine
from flexrt.simulator.cost_model import AnalyticCostModel, FusedMember, ProfiledCostModel
from flexrt.simulator.fused_model import FusedSample
from flexrt.simulator.fused_samples import collect, group_members, random_groups
from flexrt.simulator.lowering import Lowering
from flexrt.strategy import data_parallel
from flexrt.strategy.fusion import FusionPlan, check_fusion


def small_cnn(b=8):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([b, 3, 16, 16], DataType.DT_FLOAT)
    t = m.conv2d(x, 8, 3, 3, 1, 1, 1, 1, name="conv1")
    r = m.relu(t, name="r1")
    t = m.conv2d(r, 8, 3, 3, 1, 1, 1, 1, name="conv2")
    t = m.add(t, r, name="add")
    t = m.relu(t, name="r2")
    t = m.flat(t, name="flat")
    t = m.dense(t, 16, name="fc")
    m.softmax(t, name="softmax")
    return m.pcg


@pytest.fixture(scope="module")
def setup():
    machine = local_machine(4)
    return data_parallel(small_cnn(), machine, 4), machine


def test_groups_are_valid_and_grown_from_predecessors(setup):
    strategy, machine = setup
    wiring = strategy.wiring()
    groups = random_groups(strategy, machine, random.Random(0), 15, 4)
    assert groups and len(groups) <= 15
    for g in groups:
        assert 2 <= len(g.ops) <= 4 and g.phase == "forward"
        check_fusion(strategy, FusionPlan((g,)), machine)
        members = set(g.ops)
        # every member but the last in model order (the root) feeds another member
        for o in sorted(g.ops, key=wiring.position.__getitem__)[:-1]:
            assert any(c in members for c, _ in wiring.consumers.get(o, ()))
    assert len({(g.ops, g.duplicate) for g in groups}) == len(groups)


def test_groups_are_deterministic_per_seed(setup):
    strategy, machine = setup
    a = random_groups(strategy, machine, random.Random(3), 10, 5)
    assert a == random_groups(strategy, machine, random.Random(3), 10, 5)
    assert a != random_groups(strategy, machine, random.Random(4), 10, 5)


def test_bad_arguments(setup):
    strategy, machine = setup
    with pytest.raises(ConfigError, match="max_size"):
        random_groups(strategy, machine, random.Random(0), 3, 1)
    with pytest.raises(ConfigError, match="count"):
        random_groups(strategy, machine, random.Random(0), -1)


def test_group_members_match_the_layouts(setup):
    strategy, machine = setup
    low = Lowering(machine, AnalyticCostModel(), detail=False, incremental=False)
    low.build(strategy)
    g = next(g for g in random_groups(strategy, machine, random.Random(1), 20, 3) if "r1" in g.ops and "conv1" in g.ops)
    members = group_members(low, g)
    order = sorted(g.ops, key=strategy.wiring().position.__getitem__)
    assert all(isinstance(m, FusedMember) for m in members) and len(members) == len(g.ops)
    r1 = members[order.index("r1")]
    assert r1.internal == (0,) and r1.sources == (order.index("conv1"),)
    assert r1.inputs[0].dims[0] == 2          # batch 8 over 4 devices: pieces of 2
    with pytest.raises(ConfigError, match="piece 9"):
        group_members(low, g, piece=9)


def test_collect_labels_come_from_the_profile_cache(setup, tmp_path):
    strategy, machine = setup
    spec = machine.devices[0].spec
    cost = ProfiledCostModel(cache_path=tmp_path / "profile.json", repeats=2)
    samples = collect(strategy, machine, cost, spec, 8, 0, "cnn")
    assert samples and all(isinstance(s, FusedSample) for s in samples)
    assert all(s.time_s > 0 and len(s.members) >= 2 and s.model == "cnn" for s in samples)
    assert all(len(s.member_times) == len(s.members) and min(s.member_times) > 0 for s in samples)
    assert cost.measurements > 0
    cost.flush()
    again = ProfiledCostModel(cache_path=tmp_path / "profile.json", repeats=2)
    same = collect(strategy, machine, again, spec, 8, 0, "cnn")
    assert again.measurements == 0
    assert [(s.members, s.time_s, s.member_times) for s in same] == \
        [(s.members, s.time_s, s.member_times) for s in samples]


def test_paired_collection_times_members_and_fused_task_back_to_back(setup, tmp_path, monkeypatch):
    """``paired``: every label comes from ``profiling.time_group`` (members alone, then the fused
    task, in rounds), none from the profile cache; the same groups as an unpaired collection."""
    from flexrt.simulator import profiling
    strategy, machine = setup
    spec = machine.devices[0].spec
    calls = []
    real = profiling.time_group

    def spy(be, members, repeats, warmup):
        calls.append(len(members))
        return real(be, members, repeats, warmup)
    monkeypatch.setattr(profiling, "time_group", spy)
    cost = ProfiledCostModel(cache_path=tmp_path / "profile.json", repeats=2)
    paired = collect(strategy, machine, cost, spec, 6, 0, "cnn", paired=True)
    assert calls == [len(s.members) for s in paired] and cost.measurements == 0
    assert all(s.time_s > 0 and min(s.member_times) > 0 for s in paired)
    plain = collect(strategy, machine, AnalyticCostModel(), spec, 6, 0, "cnn", paired=True)   # nothing to profile
    assert [s.members for s in plain] == [s.members for s in paired]


def test_time_group_times_every_member_and_the_fused_task():
    from flexrt.simulator import profiling
    from flexrt.simulator.lowering import Lowering
    machine = local_machine(1)
    strategy = data_parallel(small_cnn(), machine, 1)
    low = Lowering(machine, AnalyticCostModel(), detail=False, incremental=False)
    low.build(strategy)
    g = next(g for g in random_groups(strategy, machine, random.Random(2), 20, 3) if len(g.ops) >= 2)
    members = group_members(low, g)
    alone, fused = profiling.time_group(profiling.backend("numpy"), members, 3, 1)
    assert len(alone) == len(members) and all(t > 0 for t in alone) and fused > 0
