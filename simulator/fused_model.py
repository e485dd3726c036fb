"""The learned fused-operator cost model: DisCo's GNN-based Fused Op Estimator (§4.3, §5.2, §6.5).

A fused task's time is predicted from its members: their operator types, sizes, FLOPs, bytes, their
own measured times and the data dependencies between them (a small graph). The network (multi-head
graph attention, Eq. 1; a summed embedding, Eq. 2; three dense layers) lives in
``flexrt.simulator._fused_gat``, forward and backward written in NumPy; it is trained with Adam on
the squared error of logarithms (Eq. 3).

- ``FusedSample``: one labelled fused task (members, their own times, the fused time, the model it
  came from), JSON round trip; ``save_samples`` / ``load_samples`` (JSON lines).
- ``sample_arrays``: a sample's member features and adjacency.
- ``LearnedFusedModel``: ``fit``, ``predict``, ``save`` / ``load`` (``.npz``).
- Baselines: ``sum_baseline`` (the members' times added), ``analytic_baseline`` (the analytic fused
  model on a device), ``LinearFusedModel`` (least squares on aggregate features).
- ``evaluate`` (DisCo's prediction error |predicted - measured| / measured) and ``plot_cdf`` (Fig. 9).
- ``LearnedCostModel``: a cost model whose fused tasks are predicted by a ``LearnedFusedModel``.

Entry points: ``LearnedFusedModel``, ``LearnedCostModel``, ``evaluate``.

Example:
    >>> model = LearnedFusedModel(seed=0)                                      # doctest: +SKIP
    >>> model.fit(train, epochs=60)                                            # doctest: +SKIP
    >>> evaluate(model.predict, test)["share_within_14pct"]                    # doctest: +SKIP
    0.93
    >>> model.save("fused.npz")                                                # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
import platform
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np

from flexrt.errors import ConfigError, FlexrtError
from flexrt.inputs import check_keys, check_number, check_type, parse_json, read_text, short
from flexrt.ir.costs import op_cost
from flexrt.ir.datatype import DataType
from flexrt.ir.op_type import PARALLEL_OPS, SOURCE_OPS, OpType
from flexrt.ir.serialize import attrs_from_json, attrs_to_json
from flexrt.ir.tensor_shape import TensorShape
from flexrt.simulator import _fused_gat as gat
from flexrt.simulator.cost_model import (MIN_TASK_S, AnalyticCostModel, CostModelWrapper, FusedMember)

if TYPE_CHECKING:
    from flexrt.machine import DeviceSpec

FORMAT_VERSION = 2          # 2: an ensemble of weight sets and the held-out choice of predictor; 1 read too
SHRINK_GRID = tuple(k / 10 for k in range(11))   # the residual weights ``fit_shrink`` tries
# Operators that can be members of a fused task (compute operators), then a slot for the rest.
OP_VOCAB: tuple[str, ...] = tuple(t.value for t in OpType if t not in PARALLEL_OPS and t not in SOURCE_OPS) + ("other",)
NUMERIC_FEATURES = ("log_input_elements", "log_output_elements", "log_flops", "log_bytes", "log_time_s",
                    "internal", "recomputed", "log_internal_bytes")
_ANALYTIC = AnalyticCostModel()


# ---- samples -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FusedSample:
    """One labelled fused task: its members (``FusedMember``, in the order the task runs them), each
    member's own forward time (seconds, measured alone), the fused task's forward time, and the name
    of the model it came from.

    Example:
        >>> FusedSample((relu_member,), (2e-5,), 1.9e-5, "mlp").to_json()["time_s"]   # doctest: +SKIP
        1.9e-05
    """

    members: tuple
    member_times: tuple
    time_s: float
    model: str

    def __post_init__(self):
        object.__setattr__(self, "members", tuple(self.members))
        object.__setattr__(self, "member_times", tuple(float(t) for t in self.member_times))
        if not self.members:
            raise ConfigError("FusedSample: a fused task needs at least one member")
        if len(self.member_times) != len(self.members):
            raise ConfigError(f"FusedSample: {len(self.member_times)} member times for {len(self.members)} members")
        for what, t in [("time_s", self.time_s)] + [(f"member_times[{i}]", t) for i, t in enumerate(self.member_times)]:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t > 0):
                raise ConfigError(f"FusedSample ({self.model}): {what} is {t!r}; expected seconds, finite and > 0")

    def to_json(self) -> dict:
        return {"model": self.model, "time_s": self.time_s, "member_times": list(self.member_times),
                "members": [_member_to_json(m) for m in self.members]}

    @staticmethod
    def from_json(data: dict, where: str = "sample") -> "FusedSample":
        """The sample ``to_json`` wrote; ``ConfigError`` naming ``where`` if it is not one."""
        try:
            check_keys(data, _SAMPLE_KEYS, where, required=_SAMPLE_KEYS)
            members = tuple(_member_from_json(m, f"{where}.members[{i}]") for i, m in enumerate(data["members"]))
            for i, m in enumerate(members):
                bad = [x for x in m.internal if not 0 <= x < len(m.inputs)]
                if bad:
                    raise ConfigError(f"{where}.members[{i}].internal: {bad[0]} is not one of its "
                                      f"{len(m.inputs)} inputs; valid: 0..{len(m.inputs) - 1}")
                bad = [x for x in m.sources if not -1 <= x < i]
                if bad:
                    raise ConfigError(f"{where}.members[{i}].sources: {bad[0]} is no earlier member; valid: -1 (read "
                                      f"from outside) or 0..{i - 1}" if i else f"{where}.members[0].sources: "
                                      f"{bad[0]} is no earlier member; the first member reads from outside (-1)")
            times = data["member_times"]
            if not isinstance(times, list) or len(times) != len(members):
                raise ConfigError(f"{where}.member_times: expected a list of {len(members)} times, one per member, "
                                  f"got {short(times)}")
            for key, values in (("member_times", times), ("time_s", [data["time_s"]])):
                for v in values:
                    check_number(v, f"{where}.{key}", minimum=0.0, maximum=MAX_SAMPLE_S)
            return FusedSample(members, tuple(times), data["time_s"], str(data["model"]))
        except ConfigError:
            raise   # (it names its place)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"{where}: not a fused sample ({type(e).__name__}: {e}); expected keys model, "
                              f"time_s, member_times, members") from None


_SAMPLE_KEYS = ("model", "time_s", "member_times", "members")
MAX_SAMPLE_S = 3600.0    # one measured kernel: an hour is no kernel time, a unit or a typo


def _shape_to_json(s: TensorShape) -> dict:
    return {"dims": list(s.dims), "dtype": s.dtype.name}


def _shape_from_json(d: dict, where: str) -> TensorShape:
    try:
        return TensorShape(tuple(int(x) for x in d["dims"]), DataType[d["dtype"]])
    except KeyError as e:
        raise ConfigError(f"{where}: missing or unknown {e} (a shape is {{'dims': [...], 'dtype': 'DT_FLOAT'}})") from None


def _member_to_json(m: FusedMember) -> dict:
    return {"op": m.attrs.op_type.value, "attrs": attrs_to_json(m.attrs),
            "inputs": [_shape_to_json(s) for s in m.inputs], "outputs": [_shape_to_json(s) for s in m.outputs],
            "internal": list(m.internal), "recomputed": bool(m.recomputed), "sources": list(m.sources)}


def _member_from_json(d: dict, where: str) -> FusedMember:
    try:
        attrs = attrs_from_json(d["op"], d["attrs"], f"{where}.attrs")
    except FlexrtError as e:
        raise ConfigError(str(e)) from None
    return FusedMember(attrs, tuple(_shape_from_json(s, f"{where}.inputs") for s in d["inputs"]),
                       tuple(_shape_from_json(s, f"{where}.outputs") for s in d["outputs"]),
                       tuple(int(i) for i in d["internal"]), bool(d["recomputed"]),
                       tuple(int(i) for i in d["sources"]))


def save_samples(path, samples: Sequence[FusedSample]) -> None:
    """Write ``samples`` as JSON lines (one sample a line)."""
    with open(path, "w") as f:
        for s in samples:
            f.write(json.dumps(s.to_json(), separators=(",", ":")) + "\n")


def load_samples(path) -> list[FusedSample]:
    """The samples of a JSON-lines file (``save_samples``); ``ConfigError`` with file:line on a bad line."""
    if not os.path.exists(path):
        raise ConfigError(f"{path}: no such samples file (write one with `flexrt fusion-model collect`)")
    out = []
    for n, line in enumerate(read_text(path, "samples file").splitlines(), 1):
        if not line.strip():
            continue
        data = parse_json(line, str(path), line=n)
        out.append(FusedSample.from_json(check_type(data, dict, f"{path}:{n}"), f"{path}:{n}"))
    return out


# ---- features ------------------------------------------------------------------------------------

def sample_arrays(members: Sequence[FusedMember], member_times: Sequence[float],
                  vocab: Sequence[str] = OP_VOCAB) -> tuple[np.ndarray, np.ndarray]:
    """Per member (DisCo §4.3.1): a one-hot operator type over ``vocab`` (its last slot takes operators
    outside it), then ``NUMERIC_FEATURES``: log input and output elements, log FLOPs, log bytes moved,
    log of its own time, whether it reads operands from other members, whether it is recomputed,
    log bytes of those operands. The adjacency [m, m] links each member with itself and with the
    members it reads from or that read from it (``sources``; neighbours either way).

    Example:
        >>> X, A = sample_arrays(sample.members, sample.member_times)    # doctest: +SKIP
        >>> X.shape, A.shape                                              # doctest: +SKIP
        ((2, 54), (2, 2))
    """
    index = {name: i for i, name in enumerate(vocab)}
    other = len(vocab) - 1
    m, v = len(members), len(vocab)
    X = np.zeros((m, v + len(NUMERIC_FEATURES)))
    A = np.eye(m)
    for k, (mem, t) in enumerate(zip(members, member_times)):
        X[k, index.get(mem.attrs.op_type.value, other)] = 1.0
        cost = op_cost(mem.attrs, mem.inputs, mem.outputs)
        internal_bytes = sum(mem.inputs[i].size_bytes for i in mem.internal if i < len(mem.inputs))
        X[k, v:] = (np.log1p(sum(s.num_elements for s in mem.inputs)),
                    np.log1p(sum(s.num_elements for s in mem.outputs)),
                    np.log1p(cost.forward_flops), np.log1p(cost.bytes_read + cost.bytes_written),
                    np.log(max(float(t), MIN_TASK_S)), float(bool(mem.internal)), float(mem.recomputed),
                    np.log1p(internal_bytes))
        for j in mem.sources:
            if 0 <= j < m and j != k:
                A[k, j] = A[j, k] = 1.0
    return X, A


def _log_sum_times(sample: FusedSample) -> float:
    return math.log(sum(sample.member_times))


def _batch(arrays: Sequence[tuple[np.ndarray, np.ndarray]], mean: np.ndarray, std: np.ndarray):
    """Padded (X [B, M, F] normalized, adj [B, M, M] bool, mask [B, M]); padding attends to itself."""
    B, M, F = len(arrays), max(len(x) for x, _ in arrays), len(mean)
    X, mask = np.zeros((B, M, F)), np.zeros((B, M))
    adj = np.broadcast_to(np.eye(M, dtype=bool), (B, M, M)).copy()
    for b, (x, a) in enumerate(arrays):
        m = len(x)
        X[b, :m], mask[b, :m], adj[b, :m, :m] = (x - mean) / std, 1.0, a > 0
    return X, adj, mask


# ---- the model -----------------------------------------------------------------------------------

class LearnedFusedModel:
    """DisCo's Fused Op Estimator: graph attention over a fused task's members, a summed embedding,
    three dense layers; predicts log(fused forward time).

    With ``residual`` (default) the network's output is added to log(Σ member times): Eq. 3's loss is
    unchanged (the offset is a fixed input), the network learns what fusion changes.

    With ``ensemble`` K > 1 the model is K networks of one architecture trained from seeds ``seed``,
    ``seed + 1``, ... on the same samples; the prediction is the mean of their log-times (a deep
    ensemble: it averages out what each network fits of the labels' measurement noise).

    ``shrink`` (in [0, 1], default 1) weighs the residual: log t = log(Σ members) + shrink x the
    network's residual. ``fit_shrink`` picks it by leave-one-model-out cross-validation over the
    training samples' models, so that a network that fits what fusion changes in the models it saw
    trusts that only as far as it holds on a model it did not see (on a host where fusion changes
    little, it shrinks toward the members' summed times; where fusion pays, toward 1).

    ``choose(train, held_out)`` records which predictor the held-out samples say is best (this
    network, the members' summed times, or least squares on aggregate features, fitted on
    ``train``); ``predict_chosen`` and ``LearnedCostModel`` use that one.

    Args:
        depth, heads, width: attention layers (DisCo: 6), heads per layer, embedding width (a
            multiple of ``heads``).
        seed: weights and batch order; training is deterministic for it.
        residual: predict relative to the members' summed times.
        ensemble: networks averaged.
        vocab: operator names of the one-hot type (the last slot takes the rest).
        host: where the training times were measured (saved with the weights).

    Example:
        >>> model = LearnedFusedModel(depth=3, heads=4, width=32, seed=0)    # doctest: +SKIP
        >>> losses = model.fit(samples, epochs=60)                           # doctest: +SKIP
        >>> model.predict(samples[:2])                                       # doctest: +SKIP
        array([2.1e-05, 4.4e-04])
    """

    def __init__(self, depth: int = 3, heads: int = 4, width: int = 32, seed: int = 0, residual: bool = True,
                 vocab: Sequence[str] = OP_VOCAB, host: Optional[str] = None, ensemble: int = 1):
        for what, v in (("depth", depth), ("heads", heads), ("width", width), ("ensemble", ensemble)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"LearnedFusedModel: {what} is {v!r}; expected an int >= 1")
        if width % heads:
            raise ConfigError(f"LearnedFusedModel: width {width} does not divide into {heads} heads")
        self.depth, self.heads, self.width, self.seed, self.residual = depth, heads, width, seed, bool(residual)
        self.vocab = tuple(vocab)
        if not self.vocab or self.vocab[-1] != "other":
            raise ConfigError(f"LearnedFusedModel: the vocabulary must end with 'other'; got {self.vocab[-3:]}")
        self.host = host if host is not None else f"{platform.node()} {platform.machine()} {platform.processor()}".strip()
        self.num_features = len(self.vocab) + len(NUMERIC_FEATURES)
        self.ensemble = [gat.init_params(self.num_features, depth, heads, width, seed + k) for k in range(ensemble)]
        self.feat_mean = np.zeros(self.num_features)
        self.feat_std = np.ones(self.num_features)
        self.target_mean, self.target_std = 0.0, 1.0
        self.trained = False
        self.source = ""                   # the file it was loaded from (for messages)
        self.shrink = 1.0                  # the residual's weight (``fit_shrink``)
        self.shrink_scores: dict = {}      # shrink -> leave-one-model-out share within 10 % (``fit_shrink``)
        self.cross_model: dict = {}        # predictor -> leave-one-model-out share within 10 % (``choose``)
        self.chosen = "learned"            # the predictor ``choose`` found best on held-out samples
        self.held_out: dict = {}           # predictor -> its held-out scores (``evaluate`` without errors)
        self.linear: Optional[LinearFusedModel] = None

    def __repr__(self) -> str:
        return (f"LearnedFusedModel(depth={self.depth}, heads={self.heads}, width={self.width}, seed={self.seed}, "
                f"residual={self.residual}, shrink={self.shrink}, ensemble={len(self.ensemble)}, host={self.host!r}, "
                f"trained={self.trained}, chosen={self.chosen!r})")

    def _arrays(self, samples: Sequence[FusedSample]) -> list:
        return [sample_arrays(s.members, s.member_times, self.vocab) for s in samples]

    def _offsets(self, samples: Sequence[FusedSample]) -> np.ndarray:
        return np.array([_log_sum_times(s) if self.residual else 0.0 for s in samples])

    def fit(self, samples: Sequence[FusedSample], epochs: int = 60, batch_size: int = 32, lr: float = 3e-3,
            progress: Optional[Callable[[int, float], None]] = None, fine_tune: bool = False) -> list[float]:
        """Train on ``samples`` (features and target normalized on them first) with Adam on Eq. 3;
        returns the mean training loss (squared error of log seconds) of each epoch.
        ``progress(epoch, loss)`` is called after each epoch. ``fine_tune`` (DisCo §5.2: a trained
        model adapted to operator types or a host it has not seen) keeps the trained weights and their
        normalization and goes on training from them on ``samples``."""
        if not samples:
            raise ConfigError("LearnedFusedModel.fit: no samples")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ConfigError(f"LearnedFusedModel.fit: epochs is {epochs!r}; expected an int >= 1")
        if fine_tune and not self.trained:
            raise ConfigError("LearnedFusedModel.fit: fine-tuning needs a trained model (load one first)")
        arrays = self._arrays(samples)
        target = np.log([s.time_s for s in samples]) - self._offsets(samples)
        if not fine_tune:
            rows = np.concatenate([x for x, _ in arrays])
            v = len(self.vocab)
            self.feat_mean = np.concatenate([np.zeros(v), rows[:, v:].mean(axis=0)])
            std = rows[:, v:].std(axis=0)
            self.feat_std = np.concatenate([np.ones(v), np.where(std > 1e-9, std, 1.0)])
            self.target_mean = float(target.mean())
            self.target_std = float(target.std()) if target.std() > 1e-9 else 1.0
        scaled = (target - self.target_mean) / self.target_std
        per_member = [self._fit_one(params, self.seed + k, arrays, scaled, epochs, batch_size, lr)
                      for k, params in enumerate(self.ensemble)]
        losses = [float(np.mean(epoch)) for epoch in zip(*per_member)]
        if progress is not None:
            for epoch, loss in enumerate(losses):
                progress(epoch, loss)
        self.trained = True
        return losses

    def _fit_one(self, params: dict, seed: int, arrays: list, scaled: np.ndarray, epochs: int, batch_size: int,
                 lr: float) -> list[float]:
        """Adam on Eq. 3 for one network of the ensemble; its per-epoch training losses (log seconds²)."""
        rng = np.random.default_rng(seed)
        opt = gat.Adam(params, lr=lr)
        losses = []
        for _ in range(epochs):
            order, total = rng.permutation(len(arrays)), 0.0
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                X, adj, mask = _batch([arrays[i] for i in idx], self.feat_mean, self.feat_std)
                out, cache = gat.forward(params, X, adj, mask)
                err = out - scaled[idx]
                total += float((err ** 2).sum())
                opt.step(params, gat.backward(params, cache, 2 * err / len(idx)))
            losses.append(total / len(arrays) * self.target_std ** 2)
        return losses

    def predict_log(self, samples: Sequence[FusedSample], batch_size: int = 256) -> np.ndarray:
        """log(predicted forward seconds) per sample."""
        arrays, out = self._arrays(samples), []
        for start in range(0, len(arrays), batch_size):
            X, adj, mask = _batch(arrays[start:start + batch_size], self.feat_mean, self.feat_std)
            out.append(np.mean([gat.forward(params, X, adj, mask)[0] for params in self.ensemble], axis=0))
        scaled = np.concatenate(out) if out else np.zeros(0)
        residual = scaled * self.target_std + self.target_mean
        return (self.shrink if self.residual else 1.0) * residual + self._offsets(samples)

    def fit_shrink(self, samples: Sequence[FusedSample], epochs: int = 60,
                   grid: Sequence[float] = SHRINK_GRID) -> float:
        """Choose ``shrink`` by leave-one-model-out cross-validation: per model of ``samples`` (two or
        more needed), one network of this architecture trained on the other models' samples predicts
        that model's; the weight in ``grid`` with the largest mean share within 10 % over the models
        wins (ties: the larger weight). Sets and returns it; ``shrink_scores`` keeps every weight's
        score. Without the residual, or with fewer than two models, the weight stays 1."""
        models = sorted({s.model for s in samples})
        if not self.residual or len(models) < 2:
            self.shrink, self.shrink_scores = 1.0, {}
            return self.shrink
        shares = {float(w): [] for w in grid}
        for held in models:
            fold = LearnedFusedModel(self.depth, self.heads, self.width, self.seed, True, self.vocab, self.host)
            fold.fit([s for s in samples if s.model != held], epochs=epochs)
            test = [s for s in samples if s.model == held]
            offset = fold._offsets(test)
            residual = fold.predict_log(test) - offset
            measured = np.array([s.time_s for s in test])
            for w in shares:
                shares[w].append(float(np.mean(np.abs(np.exp(offset + w * residual) - measured) / measured <= 0.10)))
        self.shrink_scores = {w: float(np.mean(v)) for w, v in shares.items()}
        self.shrink = max(self.shrink_scores, key=lambda w: (round(self.shrink_scores[w], 12), w))
        return self.shrink

    def predict(self, samples: Sequence[FusedSample]) -> np.ndarray:
        """Predicted forward seconds per sample (``samples``' labels are not read)."""
        with np.errstate(over="ignore"):     # an overflow is infinite time: LearnedCostModel refuses it by name
            return np.exp(self.predict_log(samples))

    def predict_members(self, members: Sequence[FusedMember], member_times: Sequence[float]) -> float:
        """Predicted forward seconds of one fused task, by the chosen predictor (``choose``)."""
        return float(self.predict_chosen([FusedSample(tuple(members), tuple(member_times), 1.0, "")])[0])

    def predictors(self) -> dict[str, Callable[[Sequence[FusedSample]], np.ndarray]]:
        """The predictors ``choose`` picks from: this network, the members' summed times, and the
        least-squares baseline (once ``choose`` has fitted it)."""
        out = {"learned": self.predict, "sum of members": sum_baseline}
        if self.linear is not None:
            out["linear"] = self.linear.predict
        return out

    def choose(self, train: Sequence[FusedSample], held_out: Sequence[FusedSample]) -> str:
        """Score every predictor on ``held_out`` (the linear one fitted on ``train``) and keep the best:
        the largest share within 10 %, then the smaller median error. Where ``fit_shrink`` ran (two or
        more models), every predictor is first scored on models it did not see, as the network's weight
        was (leave-one-model-out over ``train``: ``cross_model``), and that share decides before the
        held-out one: a fused operator of a new model is what the simulator meets. Returns the name."""
        if not held_out:
            raise ConfigError("LearnedFusedModel.choose: no held-out samples to choose with")
        self.linear = LinearFusedModel().fit(train) if train else None
        self.held_out = {name: {k: v for k, v in evaluate(p, held_out).items() if k != "errors"}
                         for name, p in self.predictors().items()}
        self.cross_model = self._cross_model(train) if self.shrink_scores else {}

        def rank(n):
            return (self.cross_model.get(n, 0.0), self.held_out[n]["share_within_10pct"],
                    -self.held_out[n]["median_rel_error"])
        self.chosen = max(self.held_out, key=rank)
        return self.chosen

    def _cross_model(self, train: Sequence[FusedSample]) -> dict[str, float]:
        """Leave-one-model-out mean share within 10 % of each predictor over ``train``'s models: the
        network's at its chosen weight (``fit_shrink``), the linear baseline refitted per fold, the
        summed times as they are."""
        out = {"learned": self.shrink_scores[self.shrink]}
        shares: dict[str, list] = {"sum of members": [], "linear": []}
        for held in sorted({s.model for s in train}):
            test = [s for s in train if s.model == held]
            rest = [s for s in train if s.model != held]
            shares["sum of members"].append(evaluate(sum_baseline, test)["share_within_10pct"])
            shares["linear"].append(evaluate(LinearFusedModel().fit(rest).predict, test)["share_within_10pct"])
        out.update({n: float(np.mean(v)) for n, v in shares.items()})
        return out

    def predict_chosen(self, samples: Sequence[FusedSample]) -> np.ndarray:
        """Predicted forward seconds per sample by the predictor ``choose`` kept (this network until then)."""
        return self.predictors()[self.chosen](samples)

    # ---- files ----------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write weights, feature and target normalization, vocabulary, host and configuration to
        ``path`` (``.npz``, written as named)."""
        config = {"depth": self.depth, "heads": self.heads, "width": self.width, "seed": self.seed,
                  "residual": self.residual, "trained": self.trained, "ensemble": len(self.ensemble),
                  "chosen": self.chosen, "held_out": self.held_out, "shrink": self.shrink,
                  "cross_model": self.cross_model,
                  "shrink_scores": {str(k): v for k, v in self.shrink_scores.items()}}
        arrays = {f"param/{i}/{k}": v for i, params in enumerate(self.ensemble) for k, v in params.items()}
        if self.linear is not None:
            arrays["linear_coef"] = self.linear.coef
        arrays.update(version=np.array(FORMAT_VERSION), config=np.array(json.dumps(config)),
                      vocab=np.array(self.vocab), host=np.array(self.host), feat_mean=self.feat_mean,
                      feat_std=self.feat_std, target=np.array([self.target_mean, self.target_std]))
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path) -> "LearnedFusedModel":
        """The model ``save`` wrote; ``ConfigError`` for a missing, corrupt or other-version file."""
        if not os.path.exists(path):
            raise ConfigError(f"{path}: no such learned fused model (train one with `flexrt fusion-model train`)")
        try:
            with np.load(path, allow_pickle=False) as f:
                data = {k: f[k] for k in f.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            why = "it holds Python objects, which a model file never does" if "pickle" in str(e) else \
                f"{type(e).__name__}: {e}"
            raise ConfigError(f"{path}: not a learned fused model file ({why}); train one with `flexrt "
                              f"fusion-model train`") from None
        missing = {"version", "config", "vocab", "host", "feat_mean", "feat_std", "target"} - set(data)
        if missing:
            raise ConfigError(f"{path}: not a learned fused model file (missing {', '.join(sorted(missing))})")
        version = int(data["version"])
        if version not in (1, FORMAT_VERSION):
            raise ConfigError(f"{path}: learned fused model format version {version}; this flexrt reads versions 1 "
                              f"and {FORMAT_VERSION} (train the model again)")
        try:
            config = json.loads(str(data["config"]))
            model = cls(config["depth"], config["heads"], config["width"], config["seed"], config["residual"],
                        tuple(str(v) for v in data["vocab"]), str(data["host"]), int(config.get("ensemble", 1)))
            chosen, held_out = str(config.get("chosen", "learned")), dict(config.get("held_out", {}))
            shrink = float(config.get("shrink", 1.0))
            shrink_scores = {float(k): float(v) for k, v in dict(config.get("shrink_scores", {})).items()}
            if not 0.0 <= shrink <= 1.0:
                raise ValueError(f"shrink {shrink} is outside [0, 1]")
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{path}: bad model configuration ({type(e).__name__}: {e})") from None
        for i, params in enumerate(model.ensemble):
            for k, want in params.items():
                name = f"param/{k}" if version == 1 else f"param/{i}/{k}"
                got = data.get(name)
                if got is None or got.shape != want.shape:
                    raise ConfigError(f"{path}: weight {name} is {None if got is None else got.shape}; the "
                                      f"configuration (depth {config['depth']}, heads {config['heads']}, width "
                                      f"{config['width']}) needs {want.shape}")
                params[k] = _finite(path, name, got)
        if "linear_coef" in data:
            if data["linear_coef"].shape != (len(AGGREGATE_FEATURES),):
                raise ConfigError(f"{path}: linear_coef has shape {data['linear_coef'].shape}; expected "
                                  f"({len(AGGREGATE_FEATURES)},)")
            model.linear = LinearFusedModel()
            model.linear.coef = _finite(path, "linear_coef", data["linear_coef"])
        if chosen not in model.predictors():
            raise ConfigError(f"{path}: the chosen predictor {chosen!r} is not one of {', '.join(model.predictors())}")
        model.chosen, model.held_out = chosen, held_out
        model.shrink, model.shrink_scores = shrink, shrink_scores
        model.cross_model = {str(k): float(v) for k, v in dict(config.get("cross_model", {})).items()}
        if data["feat_mean"].shape != (model.num_features,) or data["feat_std"].shape != (model.num_features,):
            raise ConfigError(f"{path}: feature normalization has {data['feat_mean'].shape} entries; expected "
                              f"{model.num_features}")
        model.feat_mean, model.feat_std = _finite(path, "feat_mean", data["feat_mean"]), _finite(path, "feat_std",
                                                                                               data["feat_std"])
        model.target_mean, model.target_std = (float(x) for x in _finite(path, "target", data["target"], size=2))
        if not (model.feat_std > 0).all() or not model.target_std > 0:
            raise ConfigError(f"{path}: feat_std and the target's spread must be > 0 (they divide the features and "
                              f"times); this file has a zero or negative one: train the model again")
        model.trained = bool(config.get("trained", True))
        model.source = str(path)
        return model


# The largest magnitude a stored weight or statistic may have: the predictors exponentiate sums of
# their products, so beyond this a prediction overflows (a trained model's are within about 1e3).
MAX_STORED = 1e6


def _finite(path, name: str, array, size: Optional[int] = None) -> np.ndarray:
    """``array`` as float64, refused (naming ``name`` in ``path``) when it is not numbers, holds NaN,
    inf or values past ``MAX_STORED``, or (``size``) has another number of values."""
    try:
        out = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: {name} is not numbers ({np.asarray(array).dtype}); train the model again") from None
    if size is not None and out.size != size:
        raise ConfigError(f"{path}: {name} holds {out.size} values; expected {size} (train the model again)")
    if not np.isfinite(out).all() or (np.abs(out) > MAX_STORED).any():
        raise ConfigError(f"{path}: {name} holds NaN, inf or values past {MAX_STORED:g}; train the model again")
    return out


# ---- baselines -----------------------------------------------------------------------------------

def sum_baseline(samples: Sequence[FusedSample]) -> np.ndarray:
    """The members' own times added (no fusion effect)."""
    return np.array([sum(s.member_times) for s in samples])


def analytic_baseline(device: "DeviceSpec") -> Callable[[Sequence[FusedSample]], np.ndarray]:
    """The analytic fused model (``AnalyticCostModel.fused_time``, forward) on ``device``."""
    return lambda samples: np.array([_ANALYTIC.fused_time(s.members, "forward", device) for s in samples])


AGGREGATE_FEATURES = ("1", "log sum of member seconds", "log(1 + FLOPs)", "log(1 + bytes)", "members")


def aggregate_features(sample: FusedSample) -> np.ndarray:
    """``AGGREGATE_FEATURES``: [1, log Σ member seconds, log(1 + Σ FLOPs), log(1 + Σ bytes), member count]."""
    flops = nbytes = 0
    for m in sample.members:
        c = op_cost(m.attrs, m.inputs, m.outputs)
        flops, nbytes = flops + c.forward_flops, nbytes + c.bytes_read + c.bytes_written
    return np.array([1.0, _log_sum_times(sample), math.log1p(flops), math.log1p(nbytes), len(sample.members)])


class LinearFusedModel:
    """Least squares of log(fused seconds) on ``aggregate_features``.

    Example:
        >>> LinearFusedModel().fit(train).predict(test)     # doctest: +SKIP
    """

    def __init__(self):
        self.coef: Optional[np.ndarray] = None

    def fit(self, samples: Sequence[FusedSample]) -> "LinearFusedModel":
        if not samples:
            raise ConfigError("LinearFusedModel.fit: no samples")
        X = np.stack([aggregate_features(s) for s in samples])
        y = np.log([s.time_s for s in samples])
        self.coef = np.linalg.lstsq(X, y, rcond=None)[0]
        return self

    def predict(self, samples: Sequence[FusedSample]) -> np.ndarray:
        if self.coef is None:
            raise ConfigError("LinearFusedModel.predict: fit it first")
        with np.errstate(over="ignore"):
            return np.exp(np.stack([aggregate_features(s) for s in samples]) @ self.coef)


# ---- evaluation ----------------------------------------------------------------------------------

def evaluate(predict: Callable[[Sequence[FusedSample]], Sequence[float]], samples: Sequence[FusedSample]) -> dict:
    """DisCo §6.5's prediction error, |predicted - measured| / measured, per sample of ``samples``
    (``predict`` maps a list of samples to predicted seconds): the share within 10 % and 14 %, the
    median, and every error (``errors``, a NumPy array)."""
    if not samples:
        raise ConfigError("evaluate: no samples")
    pred = np.asarray(predict(samples), dtype=np.float64)
    if pred.shape != (len(samples),):
        raise ConfigError(f"evaluate: the predictor gave shape {pred.shape} for {len(samples)} samples")
    true = np.array([s.time_s for s in samples])
    errors = np.abs(pred - true) / true
    return {"share_within_10pct": float(np.mean(errors <= 0.10)), "share_within_14pct": float(np.mean(errors <= 0.14)),
            "median_rel_error": float(np.median(errors)), "errors": errors}


def plot_cdf(results: dict, path, title: str = "Fused operator time: prediction error") -> None:
    """DisCo's Fig. 9 for each predictor: the PDF and the CDF of its relative errors, side by side, with
    the 14 % mark; ``results`` maps a name to its errors."""
    import matplotlib
    matplotlib.use("Agg")  # files only, never a window
    from matplotlib import pyplot as plt

    fig, (pdf, cdf) = plt.subplots(1, 2, figsize=(10, 4))
    top = max([0.5] + [float(np.quantile(e, 0.95)) for e in results.values() if len(e)])
    bins = np.linspace(0, top, 40)
    for name, errors in results.items():
        e = np.sort(np.asarray(errors, dtype=np.float64))
        if not len(e):
            continue
        pdf.hist(np.minimum(e, top), bins=bins, density=True, histtype="step", label=name)
        cdf.plot(e, np.arange(1, len(e) + 1) / len(e), label=f"{name} ({np.mean(e <= 0.14):.0%} <= 14%)")
    for ax, label in ((pdf, "probability density"), (cdf, "cumulative share")):
        ax.axvline(0.14, color="grey", linestyle=":")
        ax.set_xlabel("|predicted - measured| / measured")
        ax.set_ylabel(label)
        ax.set_xlim(0, top)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- as a cost model -----------------------------------------------------------------------------

class LearnedCostModel(CostModelWrapper):
    """``base``'s cost model with its fused tasks predicted by ``model``: the forward time from the
    members' own forward times (``base.op_times``); the backward is the members' own backward times
    scaled by the same fused / summed ratio, so that a plan whose groups ``model`` predicts to cost
    their members' sum costs what the unfused strategy does. A base that charges a time per task
    beside its kernels (``task_overhead_s``: the measured model's dispatch) has it taken off each
    member's time and charged once per fused task. Everything else is ``base``'s, including whether
    its transfers are linear (``has_linear_transfers``).

    Example:
        >>> cost = LearnedCostModel(ProfiledCostModel(), LearnedFusedModel.load("fused.npz"))  # doctest: +SKIP
        >>> Simulator(machine, cost).time_full(strategy.with_fusion(plan))                    # doctest: +SKIP
    """

    not_delegated = ("model",)

    def __init__(self, base, model: LearnedFusedModel):
        if not isinstance(model, LearnedFusedModel):
            raise ConfigError(f"LearnedCostModel: model is {type(model).__name__}; expected a LearnedFusedModel")
        self.base, self.model = base, model
        self.name = f"learned:{getattr(base, 'name', type(base).__name__)}"
        self._memo: dict = {}

    def __repr__(self) -> str:
        return f"LearnedCostModel({self.base!r}, {self.model!r})"

    def __reduce__(self):  # pickle through the constructor: it picks the class from the base
        return LearnedCostModel, (self.base, self.model)

    def fused_time(self, members: Sequence[FusedMember], phase: str, device: "DeviceSpec") -> float:
        if phase not in ("forward", "backward"):
            raise ConfigError(f"LearnedCostModel.fused_time: phase is {phase!r}; valid: forward, backward")
        key = (tuple(members), device)
        try:
            got = self._memo.get(key)
        except TypeError:      # unhashable attributes: no memo
            key, got = None, None
        if got is None:
            over = float(getattr(self.base, "task_overhead_s", 0.0))
            own = [self.base.op_times(m.attrs, list(m.inputs), list(m.outputs), device) for m in members]
            forward = [max(t.forward_s - over, MIN_TASK_S) for t in own]
            backward = sum(max(t.backward_s - over, MIN_TASK_S) for t in own)
            predicted = max(self.model.predict_members(members, forward), MIN_TASK_S)
            if not math.isfinite(predicted):
                raise ConfigError(f"the learned fused model{' ' + self.model.source if self.model.source else ''} "
                                  f"predicts {predicted} s for a fused task of {', '.join(m.attrs.op_type.value for m in members)}: "
                                  f"its weights are corrupt or the task is far outside what it was trained on; train "
                                  f"it again, or time fused tasks with --fused-cost analytic")
            got = (predicted + over, max(backward * predicted / sum(forward), MIN_TASK_S) + over)
            if key is not None:
                self._memo[key] = got
        return got[0] if phase == "forward" else got[1]
