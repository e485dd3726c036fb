"""OperatorLayout: where each piece of an operator runs and which region of each tensor it touches."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.ir.parallel_axes import axis_coordinates, plan_region, plan_regions, region_plan
from flexrt.ir.registry import op_def
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.strategy import ConfigStrategy, is_compute, random_config
from flexrt.strategy.layout import Layouts, operator_layout

MACHINE = load_machine("flexflow_p100", nodes=2)


@pytest.fixture(scope="module", params=["lenet", "alexnet"])
def base(request):
    return load_model(request.param, ["-b", "64"]).model.pcg


def _random(base, seed):
    rng = random.Random(seed)
    return ConfigStrategy(base, {n.id: random_config(base, n, MACHINE, rng) for n in base.nodes if is_compute(n)})


def _coverage(regions, shape):
    """How often each element of ``shape`` is covered, per (sum index, copy index)."""
    out = {}
    for r in regions:
        grid = out.setdefault((r.sum_index, r.copy_index), np.zeros(shape.dims, dtype=np.int64))
        grid[tuple(slice(max(a, 0), min(b, n)) for (a, b), n in zip(r.ranges, shape.dims))] += 1
    return out


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_outputs_are_tiled_once_per_partial_sum_and_replica(base, seed):
    """Each output's pieces of one (sum index, replica) cover the tensor exactly once; there are as
    many pieces as the product of the degrees, each on its own device."""
    s = _random(base, seed)
    lays = Layouts(MACHINE, s.wiring())
    for name in s.wiring().ops:
        lay = lays.get(name, s.shapes(name), s.view(name))
        assert lay.num_pieces == np.prod([d for _, d in s.shapes(name).degree])
        assert len(set(lay.devices)) == lay.num_pieces
        for regions, shape in zip(lay.output_regions, lay.output_shapes):
            grids = _coverage(regions, shape)
            assert all((g == 1).all() for g in grids.values()), name
            assert len(grids) == s.shapes(name).outputs[0].sum_degree * s.shapes(name).outputs[0].discard_copy_degree


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_regions_of_all_pieces_equal_the_per_piece_reference(base, seed):
    """``plan_regions`` (per dimension, all pieces at once) gives ``plan_region``'s region for every
    piece, halos included, and piece shapes are the regions' sizes."""
    s = _random(base, seed)
    w = s.wiring()
    for name in w.ops:
        node, shapes = w.nodes[name], s.shapes(name)
        lay = operator_layout(MACHINE, w, name, shapes, s.view(name))
        opdef = op_def(node.op_type)
        full, outs = list(w.operand_full[name]), list(w.output_full[name])
        data = full[:len(full) - opdef.num_weights(node.attrs)]
        coords = axis_coordinates(shapes.axes, shapes.degree_map)
        for i, shape in enumerate(full):
            plan = region_plan(shapes.axes, i, shape.rank, False)
            ref = [plan_region(plan, i, shapes.degree_map, c, shape, opdef, node.attrs, data, outs[0]) for c in coords]
            assert lay.operand_regions[i] == ref
            assert [p[i].dims for p in lay.piece_ins] == [tuple(b - a for a, b in r.ranges) for r in ref]
        for k, shape in enumerate(outs):
            plan = region_plan(shapes.axes, k, shape.rank, True)
            names = [a.name for a in shapes.axes]
            assert plan_regions(plan, k, names, shapes.degree_map, shape) == \
                [plan_region(plan, k, shapes.degree_map, c, shape) for c in coords]


def test_piece_classes_name_each_pieces_attributes_and_shapes(base):
    s = _random(base, 7)
    w = s.wiring()
    for name in w.ops:
        lay = operator_layout(MACHINE, w, name, s.shapes(name), s.view(name))
        for p in range(lay.num_pieces):
            attrs, ins, outs = lay.classes[lay.piece_class[p]]
            assert (attrs, ins, outs) == (lay.piece_attrs[p][0], lay.piece_ins[p], lay.piece_outs[p])
        assert len(lay.classes) == len({(a[0], i, o) for a, i, o in zip(lay.piece_attrs, lay.piece_ins,
                                                                         lay.piece_outs)})


def test_layouts_are_computed_once_per_configuration(base):
    s = _random(base, 1)
    w = s.wiring()
    lays = Layouts(MACHINE, w, limit=4)
    name = w.ops[0]
    a = lays.get(name, s.shapes(name), s.view(name))
    assert lays.get(name, s.shapes(name), s.view(name)) is a
    for other in w.ops[1:6]:
        lays.get(other, s.shapes(other), s.view(other))
    assert len(lays) <= 4  # bounded: a long search does not keep every layout it saw


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_piece_calls_read_only_the_axes_they_declare(base, seed):
    """An operator declaring ``piece_call_axes`` gives equal piece calls to pieces whose coordinates
    agree on those axes, so the layout may call it once per such group."""
    s = _random(base, seed)
    w = s.wiring()
    for name in w.ops:
        node, shapes = w.nodes[name], s.shapes(name)
        opdef = op_def(node.op_type)
        if opdef.piece_call is None or opdef.piece_call_axes is None:
            continue
        groups = {}
        for c in axis_coordinates(shapes.axes, shapes.degree_map):
            key = tuple(c.get(a, 0) for a in opdef.piece_call_axes)
            groups.setdefault(key, set()).add(opdef.piece_call(node.attrs, c, shapes.degree_map))
        assert all(len(g) == 1 for g in groups.values()), name
        lay = operator_layout(MACHINE, w, name, shapes, s.view(name))
        assert lay.piece_attrs == [opdef.piece_call(node.attrs, c, shapes.degree_map)
                                   for c in axis_coordinates(shapes.axes, shapes.degree_map)]


def test_plain_flags_say_whether_any_piece_is_a_partial_sum_or_replica(base):
    for seed in range(5):
        s = _random(base, seed)
        w = s.wiring()
        for name in w.ops:
            lay = operator_layout(MACHINE, w, name, s.shapes(name), s.view(name))
            for regions, plain in zip(lay.operand_regions + lay.output_regions, lay.operand_plain + lay.output_plain):
                assert plain == all(r.sum_index == 0 and r.copy_index == 0 for r in regions)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_cached_layouts_equal_fresh_ones(base, seed):
    """What ``Layouts`` hands out (shared tensor cuts, an equal operator's layout reused with its own
    node) equals a layout computed afresh, field by field."""
    s = _random(base, seed)
    w = s.wiring()
    lays = Layouts(MACHINE, w)
    for name in w.ops:
        got = lays.get(name, s.shapes(name), s.view(name))
        fresh = operator_layout(MACHINE, w, name, s.shapes(name), s.view(name))
        assert got.node is w.nodes[name]
        assert vars(got) == vars(fresh), name
