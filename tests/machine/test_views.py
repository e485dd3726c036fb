"""Machine views (Unity §3.2): devices of a view, enumeration (distinct, in range, linear in the
devices), data parallel views, FlexFlow's ParallelConfig -> view."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.errors import StrategyError
from flexrt.machine import (MachineShape, MachineView, Projection, data_parallel_view, enumerate_views, load_machine,
                            view_devices, view_from_device_ids)

INTRA, INTER = Projection.INTRA, Projection.INTER


def test_view_devices_row_major_intra_and_inter():
    m = load_machine("summit", nodes=2)
    assert view_devices(m, MachineView(0, (1,), (INTRA,)), (3,)) == (0, 1, 2)
    assert view_devices(m, MachineView(0, (3,), (INTRA,)), (2,)) == (0, 3)  # one GPU per triad
    assert view_devices(m, MachineView(1, (1, 1), (INTER, INTRA)), (2, 3)) == (1, 2, 3, 7, 8, 9)
    # Unity Fig. 7d: model parallel in a triad, reduction across triads, data parallel across nodes.
    assert view_devices(m, MachineView(0, (1, 3, 1), (INTRA, INTRA, INTER)), (3, 2, 2)) == (
        0, 6, 3, 9, 1, 7, 4, 10, 2, 8, 5, 11)
    assert view_devices(m.shape, MachineView(5, (), ()), ()) == (5,)


def test_view_devices_errors():
    m = load_machine("dgx_a100")
    with pytest.raises(StrategyError, match=r"places task \(1, 0\) on device 8 but the machine has devices 0..7"):
        view_devices(m, MachineView(6, (2, 1), (INTRA, INTRA)), (2, 2))
    with pytest.raises(StrategyError, match="has 1 dimensions but the degrees"):
        view_devices(m, MachineView(0, (1,), (INTRA,)), (2, 2))
    with pytest.raises(StrategyError, match="strides must be integers >= 1"):
        MachineView(0, (0,), (INTRA,))


def test_data_parallel_view_spans_nodes_contiguously():
    m = load_machine("dgx_a100", nodes=4)
    assert data_parallel_view(m, 8) == MachineView(0, (1,), (INTRA,))
    assert view_devices(m, data_parallel_view(m, 20), (20,)) == tuple(range(20))
    assert data_parallel_view(m, 1) == MachineView(0, (1,), (INTRA,))
    assert data_parallel_view(MachineShape(4, 1), 4) == MachineView(0, (1,), (INTER,))
    with pytest.raises(StrategyError, match=r"valid: 1..32"):
        data_parallel_view(m, 33)


def test_piece_count_one_is_one_view_per_device():
    m = load_machine("summit", nodes=2)
    for degrees in [(1,), (1, 1, 1), ()]:
        views = enumerate_views(m, degrees)
        assert [view_devices(m, v, degrees) for v in views] == [(d,) for d in range(12)]


def test_enumerate_views_includes_unity_mappings():
    m = load_machine("summit", nodes=2)
    views = set(enumerate_views(m, (3, 2, 2)))
    assert MachineView(0, (1, 3, 1), (INTRA, INTRA, INTER)) in views
    assert MachineView(0, (1,), (INTRA,)) in set(enumerate_views(m, (12,)))
    assert enumerate_views(m, (13,)) == []


@pytest.mark.parametrize("name", ["dgx_a100", "summit"])
@pytest.mark.parametrize("degrees", [(2,), (4,), (3,), (2, 2), (1, 2, 1, 2), (2, 3)])
def test_enumerate_views_count_is_linear_in_devices(name, degrees):
    counts = [len(enumerate_views(load_machine(name, nodes=n), degrees)) for n in range(1, 9)]
    span = math.prod(degrees)  # the most nodes a view of these degrees spans
    tail = counts[span - 1:]
    assert len(tail) >= 3 and len({b - a for a, b in zip(tail, tail[1:])}) == 1, counts  # affine
    per_node = load_machine(name).devices_per_node
    assert counts[-1] <= counts[span - 1] * 8 / span + 64 * per_node, counts


def test_views_are_canonical_and_sorted():
    m = load_machine("dgx1_v100", nodes=2)
    views = enumerate_views(m, (2, 4))
    assert len(views) == len(set(views))
    assert views == sorted(views, key=lambda v: (v.start, v.strides, tuple(p.value for p in v.projections)))
    assert len({view_devices(m, v, (2, 4)) for v in views}) == len(views)


@st.composite
def machine_and_degrees(draw):
    name = draw(st.sampled_from(["summit", "dgx_a100", "local", "flexflow_p100"]))
    m = load_machine(name, nodes=draw(st.integers(1, 3)))
    degrees = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    return m, degrees


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machine_and_degrees())
def test_every_enumerated_view_gives_distinct_in_range_devices_and_inverts(case):
    m, degrees = case
    views = enumerate_views(m, degrees)
    if math.prod(degrees) <= m.num_devices:
        assert views, "some view fits whenever the tasks fit"
    for view in views:
        devices = view_devices(m, view, degrees)
        assert len(devices) == math.prod(degrees) == len(set(devices))
        assert all(0 <= d < m.num_devices for d in devices)
        assert view_from_device_ids(m, degrees, devices) == view


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3), st.lists(st.integers(1, 3), min_size=1, max_size=3), st.data())
def test_view_from_device_ids_reproduces_any_valid_view(nodes, degrees, data):
    m = load_machine("dgx1_v100", nodes=nodes)
    degrees = tuple(degrees)
    view = MachineView(data.draw(st.integers(0, m.num_devices - 1)),
                       tuple(data.draw(st.integers(1, 8)) for _ in degrees),
                       tuple(data.draw(st.sampled_from([INTRA, INTER])) for _ in degrees))
    try:
        devices = view_devices(m, view, degrees)
    except StrategyError:
        return
    found = view_from_device_ids(m, degrees, devices)
    assert found is not None and view_devices(m, found, degrees) == devices


def test_view_from_device_ids_none_for_irregular_placements():
    m = load_machine("summit", nodes=2)
    assert view_from_device_ids(m, (2, 3), [0, 1, 2, 6, 7, 8]) == MachineView(0, (1, 1), (INTER, INTRA))
    assert view_from_device_ids(m, (3,), [0, 1, 3]) is None
    assert view_from_device_ids(m, (2,), [3, 0]) is None
    with pytest.raises(StrategyError, match="3 device ids for degrees"):
        view_from_device_ids(m, (2, 2), [0, 1, 2])
    with pytest.raises(StrategyError, match="device id 12 is not on the machine"):
        view_from_device_ids(m, (2,), [0, 12])


def test_views_accept_numpy_integers():
    import numpy as np

    m = load_machine("summit", nodes=2)
    view = MachineView(np.int64(0), (np.int64(3),), (INTRA,))
    assert view == MachineView(0, (3,), (INTRA,)) and type(view.start) is int
    assert view_devices(m, view, (np.int64(2),)) == (0, 3)
    assert view_from_device_ids(m, np.array([2]), np.array([0, 3])) == view
    assert data_parallel_view(m, np.int64(12)) == MachineView(0, (1,), (INTRA,))
