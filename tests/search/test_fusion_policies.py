"""Fusion policies (search/fusion_policies.py): every named policy gives a plan ``check_fusion``
accepts on an MLP, a CNN and a transformer under data parallelism and hybrid strategies; bucket
sizes follow each framework's thresholds; DisCo's FO bound is below every simulated time."""

from __future__ import annotations

from functools import cache

import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import ConfigError
from flexrt.machine import load_machine
from flexrt.search.baselines import megatron
from flexrt.search.fusion_policies import (DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, FUSION_POLICIES,
                                           HOROVOD_CYCLE_S, HOROVOD_FUSION_BYTES, MiB, XLA_COMBINE_BYTES,
                                           FusionContext, fully_overlapped, fusion_policy, gradient_ready_times)
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.fusion import check_fusion, gradient_order
from tests.search.conftest import tiny_mlp

COST = AnalyticCostModel()


@cache
def machine():
    return load_machine("flexflow_p100", nodes=1)


def mlp():
    m = FFModel(FFConfig(["-b", "16"]))
    t = m.create_tensor([16, 64], DataType.DT_FLOAT)
    for i in range(3):
        t = m.dense(t, 256, name=f"fc{i}")
        t = m.relu(t, name=f"relu{i}")
    m.softmax(m.dense(t, 10, name="out"), name="softmax")
    return m.pcg


def cnn():
    m = FFModel(FFConfig(["-b", "16"]))
    x = m.create_tensor([16, 3, 16, 16], DataType.DT_FLOAT)
    t = m.relu(m.batch_norm(m.conv2d(x, 8, 3, 3, 1, 1, 1, 1, name="c1"), relu=False, name="bn1"), name="r1")
    u = m.relu(m.batch_norm(m.conv2d(t, 8, 3, 3, 1, 1, 1, 1, name="c2"), relu=False, name="bn2"), name="r2")
    t = m.add(t, u, name="res")
    t = m.flat(m.pool2d(t, 2, 2, 2, 2, 0, 0, name="pool"), name="flat")
    m.softmax(m.dense(t, 10, name="fc"), name="softmax")
    return m.pcg


def transformer():
    m = FFModel(FFConfig(["-b", "8"]))
    x = m.create_tensor([8, 6, 16], DataType.DT_FLOAT)
    a = m.dropout(m.multihead_attention(x, x, x, 16, 2, name="attn"), 0.1, 0, name="drop")
    t = m.layer_norm(m.add(x, a, name="res1"), [2], name="ln1")
    f = m.dense(m.dense(t, 32, ActiMode.AC_MODE_RELU, name="ffn1"), 16, name="ffn2")
    t = m.layer_norm(m.add(t, f, name="res2"), [2], name="ln2")
    m.dense(t, 16, name="head")
    return m.pcg


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer}


@cache
def strategy(model: str, kind: str):
    pcg = MODELS[model]()
    if kind == "dp":
        return data_parallel(pcg, machine())
    if kind == "megatron":
        return megatron(pcg, machine())
    return random_strategy(pcg, machine(), 3)


@pytest.mark.parametrize("kind", ["dp", "random", "megatron"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_policy_gives_a_valid_plan_that_simulates_above_fo(model, kind):
    s = strategy(model, kind)
    for name, policy in FUSION_POLICIES.items():
        plan = policy(s, machine(), COST)
        check_fusion(s, plan, machine())
        assert plan.name == name
        sim = Simulator(machine(), COST, detail=False, incremental=False)
        t = sim.time_full(s.with_fusion(plan))
        assert 0 < fully_overlapped(sim) <= t * (1 + 1e-12)
        assert fully_overlapped(sim.graph) == fully_overlapped(sim)


def test_xla_fuses_elementwise_epilogues_forward_and_backward():
    s = strategy("cnn", "dp")
    plan = fusion_policy("xla")(s, machine())
    fwd = {g.ops for g in plan.groups if g.phase == "forward"}
    bwd = {g.ops for g in plan.groups if g.phase == "backward"}
    assert ("bn1", "r1") in fwd or any({"bn1", "r1"} <= set(g) for g in fwd)
    assert any({"bn2", "r2", "res"} <= set(g) for g in fwd)          # the residual add absorbs bn2 + relu
    dup = [g for g in plan.groups if g.duplicate]
    assert dup and all(g.phase == "forward" for g in dup)           # r1 has two consumers: duplicated
    assert bwd and all(any(set(b) <= set(f) for f in fwd) for b in bwd)
    assert not plan.buckets
    assert not any("c1" in g and "c2" in g for g in fwd)           # library calls take no fused inputs


def _sizes(ctx, buckets):
    return [sum(ctx.weights[w].nbytes for w in b) for b in buckets]


def _zoo_transformer():
    from flexrt.examples.transformer import build_model
    return build_model(FFConfig(["-b", "8"]), seq_length=4).pcg


@cache
def zoo_dp():
    return data_parallel(_zoo_transformer(), machine())


def test_combiner_packs_consecutive_gradients_up_to_30_mib():
    s = zoo_dp()
    ctx = FusionContext(s, machine())
    plan = fusion_policy("combiner")(s, machine())
    sizes = _sizes(ctx, plan.buckets)
    assert XLA_COMBINE_BYTES == 30 * MiB and sizes and max(sizes) <= 30 * MiB
    assert sum(len(b) for b in plan.buckets) > len(plan.buckets) * 2
    order = [w for w, _ in gradient_order(s.wiring())]
    for b in plan.buckets:   # consecutive, and the next gradient would not have fitted
        i, j = order.index(b[0]), order.index(b[-1])
        assert order[i:j + 1] == list(b)
        nxt = order[j + 1] if j + 1 < len(order) else None
        if nxt is not None and any(c[0] == nxt for c in plan.buckets):   # the next bucket starts there: full
            assert sum(ctx.weights[w].nbytes for w in b) + ctx.weights[nxt].nbytes > 30 * MiB


def _wide_mlp():
    m = FFModel(FFConfig(["-b", "16"]))
    t = m.create_tensor([16, 1024], DataType.DT_FLOAT)
    for i in range(4):
        t = m.dense(t, 1024, ActiMode.AC_MODE_RELU, name=f"fc{i}")   # 4 MiB kernels
    m.dense(t, 10, name="out")
    return m.pcg


def test_ddp_closes_buckets_once_full_first_at_1_mib():
    assert (DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_BYTES) == (1 * MiB, 25 * MiB)
    s = data_parallel(_wide_mlp(), machine())
    ctx = FusionContext(s, machine())
    plan = fusion_policy("ddp")(s, machine())
    # reverse definition order: out's bias, out's kernel, then fc3's; closed once at 1 MiB
    assert plan.buckets[0] == ("out.bias", "out.kernel", "fc3.bias", "fc3.kernel")
    assert plan.buckets[1:] == (("fc2.bias", "fc2.kernel", "fc1.bias", "fc1.kernel", "fc0.bias", "fc0.kernel"),)
    assert not plan.groups
    s = zoo_dp()   # the 62.5 MiB output projection alone is DDP's first bucket (no fusion): then 25 MiB ones
    ctx = FusionContext(s, machine())
    plan = fusion_policy("ddp")(s, machine())
    sizes = _sizes(ctx, plan.buckets)
    assert len(plan.buckets) >= 2
    for b, size in zip(plan.buckets[:-1], sizes[:-1]):
        assert size >= 25 * MiB and size - ctx.weights[b[-1]].nbytes < 25 * MiB
    assert sizes[-1] - ctx.weights[plan.buckets[-1][-1]].nbytes < 25 * MiB


def test_horovod_threshold_and_cycle():
    s = zoo_dp()
    ctx = FusionContext(s, machine())
    assert (HOROVOD_FUSION_BYTES, HOROVOD_CYCLE_S) == (64 * MiB, 5e-3)
    plain = fusion_policy("horovod")(s, machine())
    assert plain.buckets and max(_sizes(ctx, plain.buckets)) <= 64 * MiB
    timed = fusion_policy("horovod")(s, machine(), COST)
    ready = gradient_ready_times(s, machine(), COST)
    for b in timed.buckets:
        assert max(ready[w] for w in b) - ready[b[0]] <= HOROVOD_CYCLE_S
    check_fusion(s, timed, machine())


def test_jax_is_xla_then_combiner():
    s = strategy("transformer", "dp")
    jax, xla, comb = (fusion_policy(n)(s, machine()) for n in ("jax", "xla", "combiner"))
    assert jax.groups == xla.groups and jax.buckets == comb.buckets and jax.groups


def test_unknown_policy_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown fusion policy 'tvm'; valid: none, xla, combiner, horovod, ddp, jax"):
        fusion_policy("tvm")


def test_fo_of_a_sim_result_matches_the_graph():
    s = data_parallel(tiny_mlp(), machine())
    sim = Simulator(machine(), COST)
    r = sim.full(s)
    assert fully_overlapped(r) == pytest.approx(fully_overlapped(sim), rel=1e-12)
    assert fully_overlapped(sim) <= r.iteration_time_s * (1 + 1e-12)   # sums in another order: rounding
