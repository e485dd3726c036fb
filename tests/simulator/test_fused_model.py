"""The learned fused-operator cost model (``simulator/fused_model.py``, DisCo §4.3): hand-written
gradients against finite differences, training beats the summed-times baseline on synthetic fused
tasks, save/load and sample JSON round trips, the linear baseline, the cost-model wrapper inside the
simulator, and clear errors for bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flexrt.errors import ConfigError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import ElementBinaryAttrs, ElementUnaryAttrs, LinearAttrs
from flexrt.ir.tensor_shape import TensorShape
from flexrt.machine import load_machine
from flexrt.simulator import _fused_gat as gat
from flexrt.simulator.actions import Fused
from flexrt.simulator.cost_model import AnalyticCostModel, CostModelWrapper, FusedMember, OpTimes, has_linear_transfers
from flexrt.simulator.fused_model import (
    FORMAT_VERSION, NUMERIC_FEATURES, OP_VOCAB, FusedSample, LearnedCostModel, LearnedFusedModel, LinearFusedModel,
    aggregate_features, analytic_baseline, evaluate, load_samples, plot_cdf, sample_arrays, save_samples, sum_baseline)
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import data_parallel
from flexrt.strategy.fusion import FusionGroup, FusionPlan

COST = AnalyticCostModel()
ELEMENTWISE_SHARE = 0.2   # synthetic label: an element-wise member fed by the previous one costs 20 % of its own time


def _member(kind: str, b: int, h: int, feeds: bool) -> FusedMember:
    s = TensorShape((b, h))
    src = (0,) if feeds else ()
    if kind == "linear":
        return FusedMember(LinearAttrs(h, use_bias=False), (s, TensorShape((h, h))), (s,), src, False,
                           (-1, -1) if not feeds else (0, -1))
    if kind == "add":
        return FusedMember(ElementBinaryAttrs(OpType.EW_ADD), (s, s), (s,), src, False, (-1, -1) if not feeds else (0, -1))
    op = OpType.RELU if kind == "relu" else OpType.SIGMOID
    return FusedMember(ElementUnaryAttrs(op), (s,), (s,), src, False, (-1,) if not feeds else (0,))


def _chain_sources(member: FusedMember, k: int) -> FusedMember:
    """The member with its fed operand reading member ``k - 1``."""
    sources = tuple(k - 1 if s == 0 else s for s in member.sources)
    return FusedMember(member.attrs, member.inputs, member.outputs, member.internal, member.recomputed, sources)


def synthetic(n: int, seed: int) -> list[FusedSample]:
    """Chains of 1-5 members (linear, relu, sigmoid, add). Member times: a roofline-like function of
    the size with 10 % noise. Label: linears and the first member cost their own time, a later
    element-wise member ``ELEMENTWISE_SHARE`` of it (loop fusion), with 2 % noise."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b, h = int(rng.choice([16, 64, 256])), int(rng.choice([32, 128, 512]))
        members, times, label = [], [], 0.0
        for k in range(int(rng.integers(1, 6))):
            kind = str(rng.choice(["linear", "relu", "sigmoid", "add"]))
            m = _chain_sources(_member(kind, b, h, k > 0), k)
            base = (2 * b * h * h / 2e10 if kind == "linear" else 3 * b * h * 4 / 2e10) + 5e-6
            t = base * float(np.exp(rng.normal(0, 0.1)))
            members.append(m)
            times.append(t)
            label += t * (ELEMENTWISE_SHARE if k > 0 and kind != "linear" else 1.0)
        out.append(FusedSample(tuple(members), tuple(times), label * float(np.exp(rng.normal(0, 0.02))), "synthetic"))
    return out


# ---- the network ---------------------------------------------------------------------------------

def test_gat_backward_matches_finite_differences():
    rng = np.random.default_rng(0)
    B, M, F = 3, 4, 5
    X = rng.normal(size=(B, M, F))
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=np.float64)
    adj = np.broadcast_to(np.eye(M, dtype=bool), (B, M, M)).copy()
    for b in range(B):
        for i in range(1, int(mask[b].sum())):
            adj[b, i, i - 1] = adj[b, i - 1, i] = True
    params = gat.init_params(F, depth=2, heads=2, width=6, seed=1)
    for k in params:   # biases away from 0 so every path carries gradient
        params[k] = params[k] + rng.normal(scale=0.3, size=params[k].shape)
    y = rng.normal(size=B)

    def loss():
        out, cache = gat.forward(params, X, adj, mask)
        return 0.5 * float(((out - y) ** 2).sum()), out, cache

    _, out, cache = loss()
    grads = gat.backward(params, cache, out - y)
    assert set(grads) == set(params)
    eps = 1e-6
    for name, value in params.items():
        numeric = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            old = value[idx]
            value[idx] = old + eps
            up = loss()[0]
            value[idx] = old - eps
            down = loss()[0]
            value[idx] = old
            numeric[idx] = (up - down) / (2 * eps)
        scale = max(np.abs(numeric).max(), 1e-8)
        assert np.abs(numeric - grads[name]).max() / scale < 1e-5, name


def test_padding_does_not_change_a_graphs_output():
    params = gat.init_params(4, depth=2, heads=2, width=4, seed=3)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 2, 4))
    adj = np.ones((1, 2, 2), dtype=bool)
    alone, _ = gat.forward(params, x, adj, np.ones((1, 2)))
    padded_x = np.concatenate([x, rng.normal(size=(1, 3, 4))], axis=1)
    padded_adj = np.eye(5, dtype=bool)[None].copy()
    padded_adj[0, :2, :2] = True
    padded, _ = gat.forward(params, padded_x, padded_adj, np.array([[1, 1, 0, 0, 0.0]]))
    assert padded[0] == pytest.approx(alone[0], rel=1e-12)


# ---- features and samples -----------------------------------------------------------------------

def test_sample_arrays_one_hot_logs_and_edges_both_ways():
    s = synthetic(1, 0)[0]
    members = (_member("linear", 64, 128, False), _chain_sources(_member("relu", 64, 128, True), 1))
    X, A = sample_arrays(members, (3e-5, 2e-6))
    v = len(OP_VOCAB)
    assert X.shape == (2, v + len(NUMERIC_FEATURES)) and s.members
    assert X[0, OP_VOCAB.index("linear")] == 1 and X[1, OP_VOCAB.index("relu")] == 1 and X[:, :v].sum() == 2
    col = {n: v + i for i, n in enumerate(NUMERIC_FEATURES)}
    assert X[1, col["log_time_s"]] == pytest.approx(np.log(2e-6))
    assert X[0, col["log_flops"]] == pytest.approx(np.log1p(2 * 64 * 128 * 128), rel=0.01)
    assert (X[:, col["internal"]] == [0, 1]).all() and X[1, col["log_internal_bytes"]] == pytest.approx(np.log1p(64 * 128 * 4))
    assert (A == [[1, 1], [1, 1]]).all()
    X, _ = sample_arrays(members, (3e-5, 2e-6), vocab=("linear", "other"))
    assert (X[:, :2] == [[1, 0], [0, 1]]).all()     # relu falls in "other"


def test_samples_round_trip_through_json_lines(tmp_path):
    samples = synthetic(5, 1)
    path = tmp_path / "s.jsonl"
    save_samples(path, samples)
    assert load_samples(path) == samples
    assert FusedSample.from_json(json.loads(json.dumps(samples[0].to_json()))) == samples[0]
    path.write_text(path.read_text().splitlines()[0] + "\n{\"model\": 1}\n")
    with pytest.raises(ConfigError, match=r"s\.jsonl:2"):
        load_samples(path)
    with pytest.raises(ConfigError, match="no such samples file"):
        load_samples(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match="member times"):
        FusedSample(samples[0].members, (), 1e-5, "x")
    with pytest.raises(ConfigError, match="time_s"):
        FusedSample(samples[0].members, samples[0].member_times, 0.0, "x")


# ---- training and baselines ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained():
    train, test = synthetic(300, 10), synthetic(120, 11)
    model = LearnedFusedModel(depth=2, heads=2, width=16, seed=0)
    losses = model.fit(train, epochs=40, batch_size=32, lr=1e-2)
    return model, losses, train, test


def test_training_reduces_the_loss_and_beats_the_summed_times(trained):
    model, losses, _, test = trained
    assert losses[-1] < 0.2 * losses[0]
    learned, summed = evaluate(model.predict, test), evaluate(sum_baseline, test)
    assert learned["median_rel_error"] < 0.5 * summed["median_rel_error"]
    assert learned["share_within_14pct"] > summed["share_within_14pct"]
    assert learned["share_within_14pct"] > 0.9 and learned["median_rel_error"] < 0.05   # labels carry 2 % noise
    linear = evaluate(LinearFusedModel().fit(trained[2]).predict, test)
    assert learned["median_rel_error"] < linear["median_rel_error"]    # aggregates cannot see which members fuse
    assert len(learned["errors"]) == len(test)


def test_training_is_deterministic_for_a_seed():
    train = synthetic(40, 3)
    a, b = LearnedFusedModel(depth=1, heads=2, width=8, seed=5), LearnedFusedModel(depth=1, heads=2, width=8, seed=5)
    assert a.fit(train, epochs=3) == b.fit(train, epochs=3)
    assert (a.predict(train) == b.predict(train)).all()


def test_an_ensemble_predicts_the_mean_log_time_of_its_networks():
    train, test = synthetic(60, 4), synthetic(20, 5)
    both = LearnedFusedModel(depth=1, heads=2, width=8, seed=3, ensemble=2)
    both.fit(train, epochs=4)
    singles = []
    for seed in (3, 4):     # the ensemble's k-th network is the single network of seed + k, same normalization
        one = LearnedFusedModel(depth=1, heads=2, width=8, seed=seed)
        one.fit(train, epochs=4)
        one.feat_mean, one.feat_std = both.feat_mean, both.feat_std
        singles.append(one.predict_log(test))
    assert np.allclose(both.predict_log(test), np.mean(singles, axis=0), rtol=0, atol=1e-12)


def test_choose_keeps_the_predictor_best_on_held_out_samples_and_the_cost_model_uses_it(tmp_path):
    train, held = synthetic(60, 6), synthetic(30, 7)
    model = LearnedFusedModel(depth=1, heads=2, width=8, seed=0)
    model.fit(train, epochs=1)                  # barely trained: a baseline should win
    chosen = model.choose(train, held)
    scores = {n: evaluate(p, held) for n, p in model.predictors().items()}
    assert set(scores) == {"learned", "sum of members", "linear"}
    assert scores[chosen]["share_within_10pct"] == max(r["share_within_10pct"] for r in scores.values())
    assert chosen != "learned"
    assert np.array_equal(model.predict_chosen(held), model.predictors()[chosen](held))
    s = held[0]
    assert model.predict_members(s.members, s.member_times) == pytest.approx(
        float(model.predictors()[chosen]([s])[0]), rel=1e-12)
    model.save(tmp_path / "m.npz")
    again = LearnedFusedModel.load(tmp_path / "m.npz")
    assert again.chosen == chosen and again.held_out == model.held_out
    assert np.array_equal(again.predict_chosen(held), model.predict_chosen(held))


def test_save_and_load_give_identical_predictions(trained, tmp_path):
    model, _, _, test = trained
    path = tmp_path / "fused.npz"
    model.save(path)
    again = LearnedFusedModel.load(path)
    assert (again.predict(test) == model.predict(test)).all()
    assert again.vocab == model.vocab and again.host == model.host and again.trained
    assert (again.depth, again.heads, again.width) == (2, 2, 16)


def test_bad_model_files_raise_config_errors(trained, tmp_path):
    model = trained[0]
    with pytest.raises(ConfigError, match="no such learned fused model"):
        LearnedFusedModel.load(tmp_path / "missing.npz")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file")
    with pytest.raises(ConfigError, match="not a learned fused model file"):
        LearnedFusedModel.load(garbage)
    good = tmp_path / "good.npz"
    model.save(good)
    with np.load(good) as f:
        data = {k: f[k] for k in f.files}
    for name, edit, match in (("old", {"version": np.array(FORMAT_VERSION + 1)}, "format version"),
                              ("shape", {"param/0/dense0.W": np.zeros((3, 3))}, "weight param/0/dense0.W"),
                              ("norm", {"feat_mean": np.zeros(3)}, "feature normalization"),
                              # tampered files reached NumPy's own errors (exit 70) before
                              ("text", {"target": np.array("bogus")}, r"target is not numbers"),
                              ("three", {"target": np.array([0.0, 1.0, 2.0])}, "target holds 3 values; expected 2"),
                              ("inf", {"feat_std": np.full(data["feat_std"].shape, np.inf)}, "feat_std holds NaN, inf")):
        path = tmp_path / f"{name}.npz"
        with open(path, "wb") as f:
            np.savez(f, **{**data, **edit})
        with pytest.raises(ConfigError, match=match):
            LearnedFusedModel.load(path)
    path = tmp_path / "partial.npz"
    with open(path, "wb") as f:
        np.savez(f, **{k: v for k, v in data.items() if k != "host"})
    with pytest.raises(ConfigError, match="missing host"):
        LearnedFusedModel.load(path)


def test_linear_baseline_recovers_a_known_relation():
    samples = synthetic(60, 4)
    truth = np.array([0.3, 0.9, 0.02, 0.05, -0.1])
    exact = [FusedSample(s.members, s.member_times, float(np.exp(aggregate_features(s) @ truth)), s.model)
             for s in samples]
    lin = LinearFusedModel().fit(exact)
    assert lin.coef == pytest.approx(truth, abs=1e-8)
    assert evaluate(lin.predict, exact)["median_rel_error"] < 1e-9


def test_baselines_and_the_cdf_plot(trained, tmp_path):
    model, _, train, test = trained
    spec = load_machine("dgx1_v100").devices[0].spec
    analytic = analytic_baseline(spec)(test[:3])
    assert analytic == pytest.approx([COST.fused_time(s.members, "forward", spec) for s in test[:3]])
    assert sum_baseline(test[:2]) == pytest.approx([sum(s.member_times) for s in test[:2]])
    results = {"learned": evaluate(model.predict, test)["errors"], "sum": evaluate(sum_baseline, test)["errors"],
               "linear": evaluate(LinearFusedModel().fit(train).predict, test)["errors"]}
    path = tmp_path / "fig9.png"
    plot_cdf(results, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ConfigError, match="shape"):
        evaluate(lambda s: [1.0], test[:2])


# ---- as a cost model -----------------------------------------------------------------------------

def _fc1_r1_members(sim, machine):
    """The ``FusedMember``s of the group (fc1, r1) on piece 0 of the strategy ``sim`` lowered last,
    and the device spec they run on."""
    low = sim.lowering
    lay1, lay2 = low.layout("fc1"), low.layout("r1")
    a1, i1, o1 = lay1.classes[lay1.piece_class[0]]
    a2, i2, o2 = lay2.classes[lay2.piece_class[0]]
    return ([FusedMember(a1, tuple(i1), tuple(o1), (), False, (-1, -1, -1)),
             FusedMember(a2, tuple(i2), tuple(o2), (0,), False, (0,))], machine.devices[0].spec)


def test_learned_cost_model_times_fused_tasks_in_the_simulator(trained):
    from tests.simulator.test_fusion_sim import mlp
    model = trained[0]
    dgx = load_machine("dgx1_v100")
    cost = LearnedCostModel(COST, model)
    assert has_linear_transfers(cost) and cost.name == "learned:analytic"
    s = data_parallel(mlp(), dgx, 2).with_fusion(FusionPlan((FusionGroup(("fc1", "r1")),)))
    sim = Simulator(dgx, cost)
    assert sim.time_full(s) > 0
    fused = [sim.graph.task(t) for t in sim.graph.ids() if isinstance(sim.graph.task(t).action, Fused)]
    assert len(fused) == 2
    members, spec = _fc1_r1_members(sim, dgx)
    times = [COST.op_times(m.attrs, list(m.inputs), list(m.outputs), spec).forward_s for m in members]
    assert fused[0].exe_s == pytest.approx(model.predict_members(members, times), rel=1e-9)
    # the backward: the members' own backward times scaled by the forward's fused / summed ratio
    back = sum(COST.op_times(m.attrs, list(m.inputs), list(m.outputs), spec).backward_s for m in members)
    assert cost.fused_time(members, "backward", spec) == pytest.approx(fused[0].exe_s * back / sum(times), rel=1e-9)
    # everything else is the base's
    w = TensorShape((256, 256))
    assert cost.update_time(w, spec) == COST.update_time(w, spec)
    assert cost.reduce_time(w, 2, spec) == COST.reduce_time(w, 2, spec)


def test_a_learned_model_predicting_infinite_time_is_refused_by_name(trained, tmp_path):
    """Coefficients in range that overflow exp() on a real task: a clear error naming the file, not a
    non-finite task time deep in the simulator."""
    from tests.simulator.test_fusion_sim import mlp
    model, = trained[:1]
    path = tmp_path / "big.npz"
    model.save(path)
    loaded = LearnedFusedModel.load(path)
    loaded.predict_members = lambda members, times: float("inf")
    dgx = load_machine("dgx1_v100")
    s = data_parallel(mlp(), dgx, 2).with_fusion(FusionPlan((FusionGroup(("fc1", "r1")),)))
    with pytest.raises(ConfigError, match=r"the learned fused model .*big.npz predicts inf s for a fused task of linear"):
        Simulator(dgx, LearnedCostModel(COST, loaded)).time_full(s)


def test_learned_cost_model_keeps_a_nonlinear_base_nonlinear(trained):
    class Slow(AnalyticCostModel):
        def transfer_time(self, link, num_bytes):
            return 2 * super().transfer_time(link, num_bytes)

    slow = Slow()
    assert not has_linear_transfers(slow) and not has_linear_transfers(LearnedCostModel(slow, trained[0]))
    with pytest.raises(ConfigError, match="LearnedFusedModel"):
        LearnedCostModel(COST, object())


def test_fine_tuning_keeps_the_normalization_and_learns_new_samples(trained, tmp_path):
    path = tmp_path / "m.npz"
    trained[0].save(path)
    model = LearnedFusedModel.load(path)
    mean, std = model.feat_mean.copy(), model.target_std
    new = synthetic(60, seed=9)
    before = evaluate(model.predict, new)["median_rel_error"]
    model.fit(new, epochs=20, fine_tune=True)
    assert np.array_equal(model.feat_mean, mean) and model.target_std == std
    assert evaluate(model.predict, new)["median_rel_error"] <= before
    with pytest.raises(ConfigError, match="fine-tuning needs a trained model"):
        LearnedFusedModel(seed=0).fit(new, epochs=1, fine_tune=True)


# ---- the residual's weight, by leave-one-model-out cross-validation ---------------------------------

def _as_model(samples, name: str) -> list[FusedSample]:
    return [FusedSample(s.members, s.member_times, s.time_s, name) for s in samples]


def test_shrink_weighs_the_residual_and_zero_is_the_summed_times(tmp_path):
    train, test = synthetic(60, 12), synthetic(20, 13)
    model = LearnedFusedModel(depth=1, heads=2, width=8, seed=0)
    model.fit(train, epochs=5)
    full = model.predict_log(test)
    offset = np.log(sum_baseline(test))
    for w in (0.0, 0.3, 1.0):
        model.shrink = w
        assert np.allclose(model.predict_log(test), offset + w * (full - offset), rtol=0, atol=1e-12)
    model.shrink = 0.0
    assert np.allclose(model.predict(test), sum_baseline(test), rtol=1e-12)
    model.shrink, model.shrink_scores = 0.4, {0.0: 0.5, 0.4: 0.75, 1.0: 0.25}
    model.save(tmp_path / "m.npz")
    again = LearnedFusedModel.load(tmp_path / "m.npz")
    assert again.shrink == 0.4 and again.shrink_scores == model.shrink_scores
    assert np.array_equal(again.predict(test), model.predict(test))


def test_fit_shrink_is_the_best_weight_of_leave_one_model_out_folds():
    a, b = _as_model(synthetic(80, 14), "a"), _as_model(synthetic(80, 15), "b")
    model = LearnedFusedModel(depth=1, heads=2, width=8, seed=0)
    model.fit(a + b, epochs=20)
    grid = (0.0, 0.5, 1.0)
    chosen = model.fit_shrink(a + b, epochs=20, grid=grid)
    assert set(model.shrink_scores) == set(grid) and chosen == model.shrink
    best = max(model.shrink_scores.values())
    assert model.shrink_scores[chosen] == best and chosen == max(w for w, v in model.shrink_scores.items() if v == best)
    # the fold that holds out "b": one network trained on "a" alone, scored on "b"
    fold = LearnedFusedModel(depth=1, heads=2, width=8, seed=0)
    fold.fit(a, epochs=20)
    offset, y = np.log(sum_baseline(b)), np.array([s.time_s for s in b])
    r = fold.predict_log(b) - offset
    fold_a = LearnedFusedModel(depth=1, heads=2, width=8, seed=0)
    fold_a.fit(b, epochs=20)
    ra, ya = fold_a.predict_log(a) - np.log(sum_baseline(a)), np.array([s.time_s for s in a])
    for w in grid:
        share_b = np.mean(np.abs(np.exp(offset + w * r) - y) / y <= 0.10)
        share_a = np.mean(np.abs(np.exp(np.log(sum_baseline(a)) + w * ra) - ya) / ya <= 0.10)
        assert model.shrink_scores[w] == pytest.approx((share_a + share_b) / 2, abs=1e-12)
    # fusion that is the same in both models generalizes: the residual is kept
    assert chosen >= 0.5 and model.shrink_scores[chosen] > model.shrink_scores[0.0]


def test_fit_shrink_keeps_the_whole_residual_without_two_models_or_a_residual():
    train = synthetic(30, 16)
    model = LearnedFusedModel(depth=1, heads=2, width=8, seed=0)
    model.fit(train, epochs=2)
    assert model.fit_shrink(train, epochs=2) == 1.0 and model.shrink_scores == {}
    plain = LearnedFusedModel(depth=1, heads=2, width=8, seed=0, residual=False)
    plain.fit(_as_model(train[:15], "a") + _as_model(train[15:], "b"), epochs=2)
    assert plain.fit_shrink(_as_model(train[:15], "a") + _as_model(train[15:], "b"), epochs=2) == 1.0


def test_choose_ranks_predictors_on_models_left_out_first(tmp_path):
    a, b = _as_model(synthetic(40, 17), "a"), _as_model(synthetic(40, 18), "b")
    model = LearnedFusedModel(depth=1, heads=2, width=8, seed=0)
    model.fit(a + b, epochs=3)
    model.fit_shrink(a + b, epochs=3, grid=(0.0, 1.0))
    chosen = model.choose(a + b, synthetic(20, 19))
    assert set(model.cross_model) == {"learned", "sum of members", "linear"}
    assert model.cross_model["learned"] == model.shrink_scores[model.shrink]
    share_a = evaluate(LinearFusedModel().fit(b).predict, a)["share_within_10pct"]
    share_b = evaluate(LinearFusedModel().fit(a).predict, b)["share_within_10pct"]
    assert model.cross_model["linear"] == pytest.approx((share_a + share_b) / 2, abs=1e-12)
    assert model.cross_model[chosen] == max(model.cross_model.values())
    model.save(tmp_path / "m.npz")
    assert LearnedFusedModel.load(tmp_path / "m.npz").cross_model == model.cross_model


class _SumModel(LearnedFusedModel):
    """A learned model whose chosen predictor is the members' summed times (what ``choose`` keeps
    where the network's correction does not transfer)."""

    def __init__(self):
        pass

    def predict_members(self, members, member_times):
        return float(sum(member_times))


class _Overhead(CostModelWrapper):
    """The analytic model with ``over`` seconds per compute task beside each kernel (as the measured
    model's dispatch)."""

    def __init__(self, base, over):
        self.base, self.over = base, over

    @property
    def task_overhead_s(self):
        return self.over

    def op_times(self, attrs, inputs, outputs, device):
        t = self.base.op_times(attrs, inputs, outputs, device)
        return OpTimes(t.forward_s + self.over, t.backward_s + self.over, "with overhead")


@pytest.mark.parametrize("over", [0.0, 20e-6, 1e-3])
def test_learned_cost_charges_a_fused_task_its_members_kernels_and_one_overhead(over):
    """With a model that predicts the members' sum, a fused task costs its members' kernels plus one
    time per task, forward and backward; its iteration saves exactly (members - 1) overheads per
    fused task and phase, no more (a fusion that pays only by a model inconsistency is a defect)."""
    from tests.simulator.test_fusion_sim import mlp
    dgx = load_machine("dgx1_v100")
    base = _Overhead(COST, over)
    cost = LearnedCostModel(base, _SumModel())
    s = data_parallel(mlp(), dgx, 2)
    plan = FusionPlan((FusionGroup(("fc1", "r1")), FusionGroup(("fc1", "r1"), phase="backward")))
    sim = Simulator(dgx, cost, detail=False)
    unfused_s = sim.time_full(s)
    tasks = len(list(sim.graph.ids()))
    fused_s = sim.time_full(s.with_fusion(plan))
    assert len(list(sim.graph.ids())) == tasks - 4   # 2 devices x 2 phases, 2 members become 1
    members, spec = _fc1_r1_members(sim, dgx)
    own = [COST.op_times(m.attrs, list(m.inputs), list(m.outputs), spec) for m in members]
    assert cost.fused_time(members, "forward", spec) == pytest.approx(sum(t.forward_s for t in own) + over, rel=1e-12)
    assert cost.fused_time(members, "backward", spec) == pytest.approx(sum(t.backward_s for t in own) + over,
                                                                       rel=1e-12)
    # each device loses one task per phase (2 overheads of work, both on its critical path; the rings
    # they feed may start earlier): without an overhead nothing changes
    saved = unfused_s - fused_s
    if over == 0:
        assert saved == pytest.approx(0.0, abs=1e-15)
    else:
        assert 2 * over * (1 - 1e-9) <= saved <= 4 * over
