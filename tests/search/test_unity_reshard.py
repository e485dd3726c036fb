"""Unity's cost tables computed fast equal their definitions: the compiled edge-cost kernels against
their pure-Python references, ``edge_matrix`` against ``edge_cost`` pair by pair, the memo against a
dict, and the configurations, node costs and greedy fallback against straightforward re-statements
of the rules they implement."""

from __future__ import annotations

import numpy as np
import pytest
from flexrt.search.api import SearchSpace
from flexrt.search.unity import Block, LocalCosts, MappingDP
from flexrt.search.unity import _reshard
from flexrt.search.unity.reshard import Memo, missing_and_holders_py, partial_sum_costs_py, seq_sum
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import OpConfig, all_axes, is_compute
from flexrt.strategy.space import apply_single
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import ShapeError, StrategyError
from flexrt.ir.parallel_axes import axis_coordinates
from flexrt.ir.parallel_tensor import divisors
from flexrt.ir.registry import AxisKind, SlotKind, op_def
from flexrt.ir.tensor_shape import TensorShape
from flexrt.machine import load_machine
from flexrt.machine.views import view_from_device_ids

COST = AnalyticCostModel()
FULL = SearchSpace.full()


@pytest.fixture(scope="module")
def summit2():
    return load_machine("summit", nodes=2)


def small_cnn(batch=12):
    """Convolutions with halos (3x3, padded), a grouped convolution, pooling, a residual add, and
    dense layers whose reduction axis makes partial sums."""
    m = FFModel(FFConfig(["-b", str(batch)]))
    x = m.create_tensor([batch, 6, 12, 12], DataType.DT_FLOAT)
    a = m.conv2d(x, 12, 3, 3, 1, 1, 1, 1, name="conv1")
    a = m.batch_norm(a, name="bn1")
    b = m.conv2d(a, 12, 3, 3, 1, 1, 1, 1, groups=3, name="conv2")
    b = m.relu(b, name="relu2")
    s = m.add(a, b, name="residual")
    p = m.pool2d(s, 2, 2, 2, 2, 0, 0, name="pool")
    f = m.flat(p, name="flat")
    d = m.dense(f, 24, ActiMode.AC_MODE_RELU, name="fc1")
    d = m.dense(d, 12, name="fc2")
    m.softmax(d, name="softmax")
    return m.pcg


def _edges(pcg):
    compute = {n.id for n in pcg.nodes if is_compute(n)}
    for v in pcg.nodes:
        if v.id in compute:
            for i, ref in enumerate(v.inputs):
                if ref.node in compute:
                    yield pcg.node(ref.node), ref.index, v, i


# ---- edge_matrix == edge_cost --------------------------------------------------------------------

BLOCK_PAIRS = [(Block(0, 12), Block(0, 12)), (Block(0, 6), Block(0, 12)), (Block(0, 12), Block(6, 6)),
               (Block(2, 4), Block(0, 5)), (Block(0, 1), Block(3, 3))]


@pytest.mark.parametrize("bu,bv", BLOCK_PAIRS)
def test_edge_matrix_equals_edge_cost_pair_by_pair(summit2, bu, bv):
    pcg = small_cnn()
    fast = LocalCosts(summit2, COST, FULL.kinds)
    ref = LocalCosts(summit2, COST, FULL.kinds)
    partial = finite = 0
    for u, k, v, i in _edges(pcg):
        M = fast.edge_matrix(pcg, u, k, v, i, bu, bv)
        cus, cvs = ref.configs(pcg, u, bu), ref.configs(pcg, v, bv)
        R = np.array([[ref.edge_cost(pcg, u, k, v, i, a, b) for b in cvs] for a in cus]).reshape(len(cus), len(cvs))
        assert np.array_equal(M, R), f"{u.name} -> {v.name} on {bu} -> {bv}"  # bit for bit, inf included
        for a in cus:
            for b in cvs:
                r = ref.sum_ratio(ref.layout(pcg, u, a).part.out_shapes[k], ref.layout(pcg, v, b).part.target_shapes[i])
                partial += r > 1
                finite += r > 0
    assert finite and (partial or bu.count == 1)  # both kernels ran (no partial sums on one device)


def test_edge_matrix_equals_edge_cost_with_sample_axes_only(summit2):
    pcg = small_cnn()
    fast, ref = (LocalCosts(summit2, COST, SearchSpace().kinds, min_degree=2) for _ in range(2))
    for u, k, v, i in _edges(pcg):
        M = fast.edge_matrix(pcg, u, k, v, i, Block(0, 12), Block(0, 12))
        R = [[ref.edge_cost(pcg, u, k, v, i, a, b) for b in ref.configs(pcg, v, Block(0, 12))]
             for a in ref.configs(pcg, u, Block(0, 12))]
        assert np.array_equal(M, np.array(R))


# ---- the kernels against their pure-Python references -------------------------------------------

def _random_pieces(rng, count, rank, num_devices, sums, copies_on_device=False):
    """Boxes on a 12^rank tensor with random cuts (some empty), sum indices and devices."""
    lo = rng.integers(-1, 12, size=(count, rank))
    hi = lo + rng.integers(0, 8, size=(count, rank))
    box = np.stack([np.clip(lo, 0, 12), np.clip(hi, 0, 12)], axis=2).astype(np.int64)
    if copies_on_device:
        dev = rng.integers(0, num_devices, size=count)
    else:
        dev = rng.permutation(num_devices)[:count]
    return box, rng.integers(0, sums, size=count).astype(np.int64), dev.astype(np.int64)


def _producer_arrays(rng, layouts, rank, num_devices, sums):
    boxes, psum, pdev, off, held_ptr, held = [], [], [], [0], [0], []
    for _ in range(layouts):
        count = int(rng.integers(1, num_devices + 1))
        b, s, d = _random_pieces(rng, count, rank, num_devices, sums, copies_on_device=True)
        if rng.random() < 0.5:  # repeat a box on its device: held once
            b[-1], s[-1], d[-1] = b[0], s[0], d[0]
        base = off[-1]
        for dev in range(num_devices):
            seen = []
            for j in range(count):
                if d[j] == dev and (b[j].tolist(), s[j]) not in seen:
                    seen.append((b[j].tolist(), s[j]))
                    held.append(base + j)
            held_ptr.append(len(held))
        boxes.append(b)
        psum.append(s)
        pdev.append(d)
        off.append(base + count)
    i64 = lambda x: np.array(x, dtype=np.int64)  # noqa: E731
    return (np.concatenate(boxes), np.concatenate(psum), np.concatenate(pdev), i64(off), i64(held_ptr), i64(held))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), rank=st.integers(1, 4), sums=st.integers(1, 3))
def test_missing_and_holders_matches_reference(seed, rank, sums):
    rng = np.random.default_rng(seed)
    n = 8
    P = _producer_arrays(rng, 4, rank, n, sums)
    qbox, qsum, qdev = _random_pieces(rng, 6, rank, n, sums)
    rows = np.array([3, 0, 2], dtype=np.int64)
    got = _reshard.missing_and_holders(*P, rows, qbox, qsum, qdev, n)
    want = missing_and_holders_py(*P, rows, qbox, qsum, qdev, n)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), rank=st.integers(1, 3), ratio=st.integers(1, 3))
def test_partial_sum_costs_matches_reference(seed, rank, ratio):
    rng = np.random.default_rng(seed)
    n = 8
    pbox, psum, pdev, off, _, _ = _producer_arrays(rng, 3, rank, n, 2 * ratio)
    G = 7
    gbox, gsum, _ = _random_pieces(rng, G, rank, n, 2, copies_on_device=True)
    goff = np.array([0, 3, 3, G], dtype=np.int64)  # the second consumer layout has no groups
    devs, dev_ptr = [], [0]
    for _ in range(G):
        devs += sorted(rng.choice(n, size=int(rng.integers(1, 4)), replace=False).tolist())
        dev_ptr.append(len(devs))
    rows = rng.random((4, n))
    row = rng.integers(0, 4, size=G).astype(np.int64)
    back, ring = rng.random(G), rng.random(G)
    pa = np.array([0, 1, 2, 2, 0], dtype=np.int64)
    pb = np.array([0, 1, 2, 0, 2], dtype=np.int64)
    pk = np.full(5, ratio, dtype=np.int64)
    args = (pbox, psum, pdev, off, gbox, gsum, goff, np.array(dev_ptr, dtype=np.int64), np.array(devs, dtype=np.int64),
            row, rows, back, ring, pa, pb, pk, n)
    assert np.array_equal(_reshard.partial_sum_costs(*args), partial_sum_costs_py(*args))


def test_kernels_reject_out_of_range_input():
    box = np.zeros((1, 1, 2), dtype=np.int64)
    one, zero = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    off = np.array([0, 1], dtype=np.int64)
    held_ptr = np.array([0, 1, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="qdev"):
        _reshard.missing_and_holders(box, zero, zero, off, held_ptr, zero, zero, box, zero, one * 5, 2)
    with pytest.raises(ValueError, match="rows"):
        _reshard.missing_and_holders(box, zero, zero, off, held_ptr, zero, one, box, zero, zero, 2)


@settings(max_examples=25, deadline=None)
@given(keys=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 10 ** 12)), max_size=300))
def test_memo_agrees_with_a_dict(keys):
    memo, twin = Memo(capacity=4), {}
    a, b, c = (np.array([k[j] for k in keys], dtype=np.int64) for j in range(3))
    first = memo.claim(a, b, c)
    assert sorted(set(keys)) == sorted(keys[j] for j in first.tolist())  # each new key listed once
    assert np.isnan(memo.get(a, b, c)).all()
    values = np.arange(len(keys), dtype=np.float64)
    memo.put(a, b, c, values)
    for key, v in zip(keys, values):
        twin[key] = v  # the last value put for a key wins, as in a dict
    got = memo.get(a, b, c)
    assert got.tolist() == [twin[k] for k in keys]
    assert memo.count == len(twin)
    assert np.isnan(memo.get(np.array([51]), np.array([0]), np.array([0]))).all()


def test_seq_sum_adds_left_to_right():
    xs = [1e16, 1.0, -1e16, 1.0]
    t = 0.0
    for x in xs:
        t += x
    assert seq_sum(xs) == t == 1.0


# ---- configurations, node costs and the greedy fallback against their rules ---------------------

def _reference_configs(costs: LocalCosts, pcg, node, block: Block) -> list[OpConfig]:
    """Every degree assignment (module doc of costs.py), checked with ``apply_single`` alone."""
    every = all_axes(pcg, node)
    names = [a.name for a in every]
    allowed = [a for a in every if not any(s.kind is SlotKind.SUM for _, s in a.operands)
               and (a.kind in costs.kinds or a.kind is AxisKind.REPLICA)]
    out = []

    def rec(i, acc, total):
        if i == len(allowed):
            split = [a for a in allowed if acc[a.name] > 1]
            if total < min(costs.min_degree, block.count) or block.count % total or len(split) > costs.max_axes \
                    or (len(split) > 1 and any(a.kind is AxisKind.REPLICA for a in split)):
                return
            try:
                apply_single(pcg, node, acc)
            except (ShapeError, StrategyError):
                return
            view = view_from_device_ids(costs.machine, tuple(acc.get(n, 1) for n in names),
                                        list(range(block.start, block.start + total)))
            if view is not None:
                out.append(OpConfig(tuple((k, v) for k, v in acc.items() if v > 1), view))
            return
        for d in divisors(block.count):
            if total * d > block.count:
                break
            acc[allowed[i].name] = d
            rec(i + 1, acc, total * d)
        del acc[allowed[i].name]

    rec(0, {}, 1)
    return out or [OpConfig((), view_from_device_ids(costs.machine, tuple(1 for _ in names), [block.start]))]


def _reference_node_cost(costs: LocalCosts, pcg, node, cfg) -> tuple:
    """(forward, backward + updates, AllReduces): the slowest piece's forward and backward, and per
    weight the slowest group's update and AllReduce."""
    lay = costs.layout(pcg, node, cfg)
    part, opdef = lay.part, op_def(node.op_type)
    coords = axis_coordinates(part.shapes.axes, part.degree)
    fwd = bwd = -1.0
    for p, dev in enumerate(lay.devices):
        ins = [TensorShape.piece(tuple(b - a for a, b in r[p].ranges), s.dtype)   # 0 where a piece reads nothing
               for r, s in zip(part.operand_regions, part.operand_shapes)]
        outs = [TensorShape(tuple(b - a for a, b in r[p].ranges), s.dtype)
                for r, s in zip(part.output_regions, part.out_shapes)]
        attrs = opdef.piece_call(node.attrs, coords[p], part.degree)[0] if opdef.piece_call else node.attrs
        t = COST.op_times(attrs, ins, outs, costs.machine.devices[dev].spec)
        if t.forward_s + t.backward_s > fwd + bwd:
            fwd, bwd = t.forward_s, t.backward_s
    sync = update = 0.0
    nw = opdef.num_weights(node.attrs)
    for i in range(len(part.operand_shapes) - nw, len(part.operand_shapes)):
        groups: dict = {}
        for p, r in enumerate(part.operand_regions[i]):
            groups.setdefault(r.ranges, []).append(lay.devices[p])
        worst = (0.0, 0.0)
        for ranges, devs in groups.items():
            piece = TensorShape(tuple(b - a for a, b in ranges), part.operand_shapes[i].dtype)
            t = (costs.ring(sorted(set(devs)), piece.size_bytes),
                 COST.update_time(piece, costs.machine.devices[devs[0]].spec, costs.optimizer))
            if sum(t) > sum(worst):
                worst = t
        sync += worst[0]
        update += worst[1]
    return max(0.0, fwd), max(0.0, bwd) + update, sync


@pytest.mark.parametrize("min_degree,max_axes,kinds", [(1, 2, "full"), (4, 2, "full"), (1, 1, "sample"),
                                                       (2, 3, "full")])
def test_configs_and_node_costs_follow_their_rules(summit2, min_degree, max_axes, kinds):
    pcg = small_cnn()
    space = FULL if kinds == "full" else SearchSpace()
    costs = LocalCosts(summit2, COST, space.kinds, min_degree=min_degree, max_axes=max_axes)
    for node in (n for n in pcg.nodes if is_compute(n)):
        for block in (Block(0, 12), Block(6, 6), Block(1, 5), Block(4, 8)):
            cfgs = costs.configs(pcg, node, block)
            assert cfgs == _reference_configs(costs, pcg, node, block), (node.name, block)
            want = [_reference_node_cost(costs, pcg, node, c) for c in cfgs]
            got = costs.node_part_vectors(pcg, node, block)
            assert [tuple(v) for v in zip(*(x.tolist() for x in got))] == want, (node.name, block)
            assert costs.node_vector(pcg, node, block).tolist() == [f + b + s for f, b, s in want]


def crossed():
    """x -> a -> (b, c), b -> c, b -> d, c -> d: b and c form neither a series nor a parallel split."""
    m = FFModel(FFConfig(["-b", "12"]))
    x = m.create_tensor([12, 24], DataType.DT_FLOAT)
    a = m.dense(x, 24, ActiMode.AC_MODE_RELU, name="a")
    b = m.dense(a, 24, name="b")
    c = m.add(a, b, name="c")
    d = m.add(b, c, name="d")
    m.dense(d, 6, name="head")
    return m.pcg


def test_greedy_fallback_matches_its_rule(summit2):
    """Per configuration of the boundary, each node takes the cheapest configuration given what is
    chosen (ties: the first), stated with ``edge_cost``."""
    pcg = crossed()
    costs = LocalCosts(summit2, COST, FULL.kinds)
    dp = MappingDP(summit2, costs, devices=12)
    got = dp.solve(pcg)
    nodes = {n.name: n for n in pcg.nodes if is_compute(n)}
    block = Block(0, 12)
    a, b, c, d = (nodes[x] for x in "abcd")
    assert got.configs[b.id] in costs.configs(pcg, b, block)
    ca, cd = got.configs[a.id], got.configs[d.id]
    chosen = {a.id: ca}
    for node in (b, c):
        cfgs = costs.configs(pcg, node, block)
        vec = costs.node_vector(pcg, node, block).copy()
        for i, ref in enumerate(node.inputs):
            if ref.node in chosen:
                vec += np.array([costs.edge_cost(pcg, pcg.node(ref.node), ref.index, node, i, chosen[ref.node], x)
                                 for x in cfgs])
        chosen[node.id] = cfgs[int(vec.argmin())]
    assert got.configs[b.id] == chosen[b.id] and got.configs[c.id] == chosen[c.id]
    again = sum(costs.node_cost(pcg, n, got.configs[n.id]) for n in nodes.values())
    for u, k, v, i in _edges(pcg):
        again += costs.edge_cost(pcg, u, k, v, i, got.configs[u.id], got.configs[v.id])
    assert again == pytest.approx(got.cost_s, rel=1e-12)
    assert cd in costs.configs(pcg, d, block)


def test_memo_transfers_reads_the_memo_per_moved_piece():
    memo = Memo()
    memo.put(np.array([1, 2]), np.array([0, 0]), np.array([8, 12]), np.array([0.5, 0.25]))
    missing = np.array([[2, 3, 5], [0, 3, 2]], dtype=np.int64)
    holder = np.array([[1, 2, -1], [-1, 1, 1]], dtype=np.int64)
    qdev = np.zeros(3, dtype=np.int64)
    T = _reshard.memo_transfers(memo.k0, memo.k1, memo.k2, memo.val, missing, holder, qdev, 4)
    assert T[0, :2].tolist() == [0.5, 0.25] and T[0, 2] == 0.0 and T[1, 0] == 0.0
    assert np.isnan(T[1, 1]) and T[1, 2] == 0.5  # (1, 0, 12) was never stored; (1, 0, 8) was


def test_partial_sums_sent_to_many_groups_pay_their_sources_sends_one_after_another(summit2):
    """A Linear cut along its inputs on 2 devices (partial sums) feeding a ReLU cut along the samples
    over 12: each of the 12 groups receives one box from each source, but each source sends 11 or
    12 boxes. The edge costs at least the busiest source's sends one after another (forward, and
    the gradient back), not the slowest group's two receives."""
    m = FFModel(FFConfig(["-b", "96"]))
    t = m.create_tensor([96, 512], DataType.DT_FLOAT)
    t = m.dense(t, 512, use_bias=False, name="fc")
    m.relu(t, name="act")
    pcg = m.pcg
    fc, act = (n for n in pcg.nodes if n.name in ("fc", "act"))
    costs = LocalCosts(summit2, COST, FULL.kinds)
    cu = next(c for c in costs.configs(pcg, fc, Block(0, 2)) if dict(c.degrees) == {"in": 2})
    cv = next(c for c in costs.configs(pcg, act, Block(0, 12)) if dict(c.degrees) == {"dim0": 12})
    box = 96 // 12 * 512 * 4
    sends = [seq_sum(costs.transfer(src, d, box) for d in range(12) if d != src) for src in (0, 1)]
    got = costs.edge_cost(pcg, fc, 0, act, 0, cu, cv)
    assert got >= 2 * max(sends) * (1 - 1e-12)
    groups = max(costs.transfer(0, d, box) + costs.transfer(1, d, box) for d in range(12))
    assert got > 2 * groups          # the groups alone would say much less
    (M,) = [costs.edge_matrix(pcg, fc, 0, act, 0, Block(0, 2), Block(0, 12))]
    cus, cvs = costs.configs(pcg, fc, Block(0, 2)), costs.configs(pcg, act, Block(0, 12))
    assert M[cus.index(cu), cvs.index(cv)] == got   # the compiled matrix agrees
