"""ReshardPlan: how an operand is assembled from its producer's pieces, by region overlap."""

import random
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.strategy import ConfigStrategy, is_compute, random_config
from flexrt.strategy.layout import Layouts, clip
from flexrt.strategy.reshard import Reshards, numel, overlap, reshard_plan, weight_plan

MACHINE = load_machine("flexflow_p100", nodes=2)


@pytest.fixture(scope="module", params=["lenet", "alexnet"])
def base(request):
    return load_model(request.param, ["-b", "64"]).model.pcg


def _edges(s):
    """(producer layout, output index, consumer layout, operand index, k) of every operator-to-operator edge."""
    w = s.wiring()
    lays = Layouts(MACHINE, w)
    for (c, i), pref in w.producer.items():
        if pref.op_type in (OpType.INPUT, OpType.WEIGHT):
            continue
        k = s.shapes(pref.name).outputs[pref.index].sum_degree // s.shapes(c).operands[i].sum_degree
        yield (lays.get(pref.name, s.shapes(pref.name), s.view(pref.name)), pref.index,
               lays.get(c, s.shapes(c), s.view(c)), i, k)


def _random(base, seed):
    rng = random.Random(seed)
    return ConfigStrategy(base, {n.id: random_config(base, n, MACHINE, rng) for n in base.nodes if is_compute(n)})


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_moves_assemble_each_consumer_piece_exactly(base, seed):
    """Without partial sums to reduce, each consumer piece receives disjoint boxes that together are
    exactly its region inside the tensor, each from a producer piece that holds the box, of the same
    partial-sum index, preferring a replica on the consumer's own device."""
    for P, ko, C, i, k in _edges(_random(base, seed)):
        plan = reshard_plan(P, ko, C, i, k)
        full = C.operand_shapes[i]
        if k > 1:
            assert not plan.moves
            continue
        got = defaultdict(list)
        for q, qdev, p, pdev, box in plan.moves:
            got[p].append(box)
            assert qdev == P.devices[q] and pdev == C.devices[p]
            src = P.output_regions[ko][q]
            assert overlap(src.ranges, box) == box
            assert src.sum_index == C.operand_regions[i][p].sum_index
            holders = [qq for qq, r in enumerate(P.output_regions[ko]) if r.sum_index == src.sum_index
                       and overlap(r.ranges, box) == box]
            if any(P.devices[qq] == pdev for qq in holders):
                assert qdev == pdev
        for p, region in enumerate(C.operand_regions[i]):
            want = clip(region, full)
            grid = np.zeros(full.dims, dtype=np.int64)
            for box in got[p]:
                grid[tuple(slice(a, b) for a, b in box)] += 1
            inside = tuple(slice(a, b) for a, b in want)
            assert (grid[inside] == 1).all() and grid.sum() == numel(want)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_reductions_sum_k_partials_of_distinct_sum_indices(base, seed):
    for P, ko, C, i, k in _edges(_random(base, seed)):
        plan = reshard_plan(P, ko, C, i, k)
        for box, partials, consumers in plan.reductions:
            assert len(partials) == k
            sums = {P.output_regions[ko][q].sum_index for q, _ in partials}
            assert len(sums) == k
            for q, d in partials:
                assert d == P.devices[q] and overlap(P.output_regions[ko][q].ranges, box) == box
            for p in consumers:
                assert overlap(clip(C.operand_regions[i][p], C.operand_shapes[i]), box) == box


def test_plans_are_cached_by_layout_identity(base):
    s = _random(base, 5)
    cache = Reshards()
    for P, ko, C, i, k in _edges(s):
        plan = cache.get(P, ko, C, i, k)
        assert cache.get(P, ko, C, i, k) is plan
        assert plan == reshard_plan(P, ko, C, i, k)


def _weights(s):
    """(weight name, [(layout, operand index)] of its users, first user first) of every weight."""
    w = s.wiring()
    lays = Layouts(MACHINE, w)
    for name in w.weights:
        users = sorted(w.consumers.get(name, []), key=lambda u: w.position[u[0]])
        if users:
            yield name, [(lays.get(c, s.shapes(c), s.view(c)), i) for c, i in users]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_weight_plans_give_every_user_piece_its_part_once(base, seed):
    """Every piece of every user gets exactly its region of the weight: read from an instance on its
    own device, or copied from an instance that holds the box; the instances are the first user's
    pieces, in copy order."""
    for name, users in _weights(_random(base, seed)):
        plan = weight_plan(users)
        L0, i0 = users[0]
        held = {(ranges, d) for ranges, reps in plan.instances for _, d in reps}
        assert len(held) == L0.num_pieces
        for ranges, reps in plan.instances:
            assert list(reps) == sorted(reps)
        got = defaultdict(list)
        for u, p, ranges, dev in plan.reads:
            assert (ranges, dev) in held and dev == users[u][0].devices[p]
            got[(u, p)].append(overlap(users[u][0].operand_regions[users[u][1]][p].ranges, ranges))
        for u, p, ranges, src, dev, box in plan.copies:
            assert (ranges, src) in held and src != dev and dev == users[u][0].devices[p]
            assert overlap(ranges, box) == box
            got[(u, p)].append(box)
        for u, (L, i) in enumerate(users):
            shape = L.operand_shapes[i]
            for p, region in enumerate(L.operand_regions[i]):
                grid = np.zeros(shape.dims, dtype=np.int64)
                for box in got[(u, p)]:
                    grid[tuple(slice(a, b) for a, b in box)] += 1
                want = tuple(slice(a, b) for a, b in region.ranges)
                assert (grid[want] == 1).all() and grid.sum() == numel(region.ranges), (name, u, p)
