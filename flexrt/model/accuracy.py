"""Simulator accuracy against real runs: the models, the strategies, the measurements and the scores.

FlexFlow (§8.3) checks its simulator against real runs: the error per strategy and whether the
simulator *ranks* strategies as the runs do. ``flexrt accuracy`` (``flexrt.cli._accuracy``) runs
this module on the ``local`` machine, one process per device (MPI ranks, one BLAS thread each):

- **models** (``MODELS``): an MLP, a CNN (conv, pool, dense), a transformer block (multi-head
  attention, layer norms, feed-forward), a DLRM (embeddings, dense towers, concat) and an RNN (LSTM
  unrolled over steps), small enough for a 2-core host;
- **calibration strategies** (``calibration_strategies``): one device, and random strategies of
  seeds 1000+; their runtime traces fill ``MeasuredTimes`` (``flexrt.simulator.measured_costs``);
- **validation strategies** (``validation_strategies``), disjoint from those: data parallel,
  model parallel (dense layers split on their outputs), reduction parallel (split on their inputs,
  partial sums), a hybrid (data and model parallel by layer), operators placed round-robin, and
  random strategies of seeds 0, 1, ...;
- **scores** (``scores``): per strategy measured vs predicted; median and max |error|, Kendall's tau
  overall and within each model, top-1 regret (how much slower the predicted-best strategy of a
  model runs than its measured-best), per task kind measured / predicted.

Entry points: ``MODELS``, ``calibration_strategies``, ``validation_strategies``, ``batch_for``,
``timed_steps``, ``kind_sums``, ``kendall_tau``, ``scores``, ``side_by_side``.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

import numpy as np

from flexrt.core import ActiMode, AggrMode, DataType, FFConfig, FFModel
from flexrt.simulator.actions import RingStep
from flexrt.strategy import Strategy, data_parallel, is_compute, random_strategy
from flexrt.strategy.pipeline import pipeline_strategy
from flexrt.strategy.space import config_at

CLASSES = 10


# ---- models ----------------------------------------------------------------------------------------

def mlp_model(batch: int):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([batch, 256], DataType.DT_FLOAT)
    t = m.dense(x, 512, ActiMode.AC_MODE_RELU, name="fc1")
    t = m.dense(t, 512, ActiMode.AC_MODE_RELU, name="fc2")
    m.softmax(m.dense(t, CLASSES, name="head"), name="sm")
    return m.pcg


def cnn_model(batch: int):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([batch, 3, 32, 32], DataType.DT_FLOAT)
    t = m.conv2d(x, 16, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, name="conv1")
    t = m.pool2d(t, 2, 2, 2, 2, 0, 0, name="pool1")
    t = m.conv2d(t, 32, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, name="conv2")
    t = m.pool2d(t, 2, 2, 2, 2, 0, 0, name="pool2")
    t = m.flat(t, name="flat")
    t = m.dense(t, 128, ActiMode.AC_MODE_RELU, name="fc1")
    m.softmax(m.dense(t, CLASSES, name="head"), name="sm")
    return m.pcg


def dlrm_model(batch: int):
    m = FFModel(FFConfig([]))
    dense = m.create_tensor([batch, 13], DataType.DT_FLOAT)
    sparse = [m.create_tensor([batch, 1], DataType.DT_INT64) for _ in range(4)]
    t = m.dense(dense, 128, ActiMode.AC_MODE_RELU, name="bot0")
    t = m.dense(t, 32, ActiMode.AC_MODE_RELU, name="bot1")
    embs = [m.embedding(s, 2000, 32, AggrMode.AGGR_MODE_SUM, name=f"emb{i}") for i, s in enumerate(sparse)]
    z = m.concat([t] + embs, 1, name="interaction")
    z = m.dense(z, 256, ActiMode.AC_MODE_RELU, name="top0")
    m.softmax(m.dense(z, CLASSES, name="top1"), name="sm")
    return m.pcg


def transformer_model(batch: int):
    m = FFModel(FFConfig([]))
    seq, d = 32, 64
    x = m.create_tensor([batch, seq, d], DataType.DT_FLOAT)
    a = m.multihead_attention(x, x, x, d, 4, name="attn")
    t = m.layer_norm(m.add(a, x, name="res1"), [2], name="ln1")
    f = m.dense(m.dense(t, 128, ActiMode.AC_MODE_RELU, name="ffn1"), d, name="ffn2")
    t = m.layer_norm(m.add(f, t, name="res2"), [2], name="ln2")
    t = m.flat(t, name="flat")
    m.softmax(m.dense(t, CLASSES, name="head"), name="sm")
    return m.pcg


def rnn_model(batch: int):
    m = FFModel(FFConfig([]))
    steps, width, hidden = 6, 64, 128
    h = m.create_tensor([batch, hidden], DataType.DT_FLOAT)
    c = m.create_tensor([batch, hidden], DataType.DT_FLOAT)
    for s in range(steps):       # one LSTM layer unrolled: every step reads the first step's weights
        x = m.create_tensor([batch, width], DataType.DT_FLOAT)
        h, c = m.lstm(x, h, c, hidden, shared_op="lstm0" if s else None, name=f"lstm{s}")
    m.softmax(m.dense(h, CLASSES, name="head"), name="sm")
    return m.pcg


# name -> (builder, batch)
MODELS: dict[str, tuple[Callable, int]] = {"mlp": (mlp_model, 64), "cnn": (cnn_model, 16), "dlrm": (dlrm_model, 256),
                                           "transformer": (transformer_model, 8), "rnn": (rnn_model, 32)}


# ---- strategies -------------------------------------------------------------------------------------

def hand_made(base, machine, rule) -> Strategy:
    """``rule(k, node)`` -> (degrees, start device) for the k-th compute operator."""
    configs = {}
    k = 0
    for node in base.nodes:
        if is_compute(node):
            degrees, device = rule(k, node)
            configs[node.id] = config_at(base, node, machine, degrees, device % machine.num_devices)
            k += 1
    return Strategy.from_configs(base, configs)


def _dense(node) -> bool:
    return node.op_type.value == "linear"


_BATCH_AXES = ("sample", "dim0")


def _batch_split(n: int) -> dict:
    return {a: n for a in _BATCH_AXES}


def validation_strategies(base, machine, seeds=range(2), pipelines: bool = False) -> list[tuple[str, Strategy]]:
    """Data, model, reduction, hybrid, placement and random strategies over ``machine``'s devices;
    with ``pipelines``, GPipe and 1F1B over 2 stages of 4 micro-batches too."""
    n = machine.num_devices
    pipes = [(f"{s}2x4", pipeline_strategy(base, machine, 2, 4, s)) for s in ("gpipe", "1f1b")] \
        if pipelines and n % 2 == 0 else []
    out = [(f"data{n}", data_parallel(base, machine, n))]
    out.append((f"model{n}", hand_made(base, machine, lambda k, node: ([{"out": n}, {"heads": n}], 0))))
    out.append((f"reduction{n}", hand_made(base, machine, lambda k, node: ([{"in": n}, _batch_split(n)], 0))))
    out.append(("hybrid", hand_made(base, machine, lambda k, node: (
        {"out": n} if _dense(node) and k % 2 else _batch_split(n), 0))))
    out.append(("roundrobin", hand_made(base, machine, lambda k, node: ({}, k))))
    out += [(f"random{s}", random_strategy(base, machine, s)) for s in seeds]
    return out + pipes


CALIBRATION_SEED = 1000


def calibration_strategies(base, machine, count: int = 3, pipelines: bool = False) -> list[tuple[str, Strategy]]:
    """One device, and random strategies of seeds ``CALIBRATION_SEED``.. (never validated); with
    ``pipelines``, a pipeline of 4 micro-batches whose pieces are the validated pipelines' (the
    micro-batch's rows): interleaved 1F1B with 2 chunks over 2 stages where the devices pair up
    (each process then holds its stages' weights and activations only, as in the validated
    pipelines: measured on one device holding all of them, the same pieces ran 1.3-1.9x slower), on
    one device otherwise."""
    if pipelines and machine.num_devices % 2 == 0:
        pipes = [("calib-interleaved2x4", pipeline_strategy(base, machine, 2, 4, "interleaved", chunks=2))]
    else:
        pipes = [("calib-1f1b1x4", pipeline_strategy(base, machine, 1, 4, "1f1b"))] if pipelines else []
    return [("one-device", data_parallel(base, machine, 1))] + [
        (f"calib{CALIBRATION_SEED + s}", random_strategy(base, machine, CALIBRATION_SEED + s))
        for s in range(count)] + pipes


# ---- measurement ------------------------------------------------------------------------------------

def batch_for(plan, batch: int, seed: int = 0):
    """Random inputs (indices in range for integer inputs) and class labels."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, b in plan.inputs.items():
        shape = tuple(hi for _, hi in b.ranges)
        if np.issubdtype(np.dtype(b.dtype), np.integer):
            inputs[name] = rng.integers(0, 1000, size=shape).astype(b.dtype)
        else:
            inputs[name] = rng.standard_normal(shape).astype(b.dtype)
    return inputs, rng.integers(0, CLASSES, size=(batch, 1)).astype(np.int32)


def timed_steps(session, inputs, labels, repeat: int, warmup: int = 1):
    """(median wall seconds, every timed iteration's result sorted by wall time) over ``repeat``
    steps after ``warmup`` untimed ones."""
    for _ in range(warmup):
        session.step(inputs, labels)
    results = sorted((session.step(inputs, labels) for _ in range(repeat)), key=lambda r: r.wall_s)
    return statistics.median(r.wall_s for r in results), results


def kind_sums(plan, measured, dispatch_s: float = 0.0) -> dict:
    """Task kind -> [measured seconds, predicted seconds], each task counted once and a transfer once
    (by its first hop, predicted from its first hop's start to its last hop's end); a ring collective
    ("allreduce": its hops and sum steps) runs as one task whose time every member records, so a member's measured time is divided by the group's size. A compute
    task's prediction counts without ``dispatch_s`` (the runtime's time per task beside the task,
    which its traced duration leaves out)."""
    size: dict = {}
    for t in plan.tasks:
        if isinstance(t.action, RingStep):
            size[t.action.group.id] = size.get(t.action.group.id, 0) + 1
    out: dict = {}
    span: dict = {}   # a transfer's predicted time runs from its first hop's start to its last hop's end
    for t, a, b in zip(plan.tasks, plan.predicted_start, plan.predicted_end):
        if t.transfer >= 0:
            lo, hi = span.get(t.transfer, (a, b))
            span[t.transfer] = (min(lo, a), max(hi, b))
    predicted = [span[t.transfer][1] - span[t.transfer][0] if t.transfer >= 0 else b - a
                 for t, a, b in zip(plan.tasks, plan.predicted_start, plan.predicted_end)]
    for t, m, p in zip(plan.tasks, measured, predicted):
        if t.kind.value == "transfer" and t.action is None:
            continue    # another hop of a transfer: the transfer counts once, by its first hop
        ring = isinstance(t.action, RingStep)
        share = size[t.action.group.id] if ring else 1
        kind = "allreduce" if ring or (t.kind.value == "reduce" and t.action is None) else t.kind.value
        acc = out.setdefault(kind, [0.0, 0.0])
        acc[0] += float(m) / share
        acc[1] += float(p) - (dispatch_s if 0 <= t.device < plan.num_compute_devices else 0.0)
    return out


# ---- scores -----------------------------------------------------------------------------------------

def kendall_tau(x, y) -> float:
    """Kendall's tau-b of two sequences (ties in either count as neither concordant nor discordant)."""
    n = len(x)
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return (conc - disc) / denom if denom else float("nan")


def scores(rows: list[dict], key: str = "predicted_s") -> dict:
    """Over ``rows`` (each with "model", "measured_s" and ``key``): median and max |error|
    (|measured - predicted| / measured), Kendall's tau overall and per model, top-1 regret per model
    and its maximum."""
    meas = [r["measured_s"] for r in rows]
    pred = [r[key] for r in rows]
    errs = [abs(m - p) / m for m, p in zip(meas, pred)]
    per_model: dict = {}
    for name in dict.fromkeys(r["model"] for r in rows):
        rs = [r for r in rows if r["model"] == name]
        best_pred = min(rs, key=lambda r: r[key])
        best_meas = min(rs, key=lambda r: r["measured_s"])
        per_model[name] = {"tau": kendall_tau([r["measured_s"] for r in rs], [r[key] for r in rs]),
                           "regret": best_pred["measured_s"] / best_meas["measured_s"] - 1.0,
                           "predicted_best": best_pred["strategy"], "measured_best": best_meas["strategy"],
                           "strategies": len(rs)}
    return {"median_error": statistics.median(errs), "max_error": max(errs), "tau": kendall_tau(meas, pred),
            "max_regret": max(m["regret"] for m in per_model.values()), "per_model": per_model, "n": len(rows)}


def side_by_side(measured: dict, simulated: dict) -> dict:
    """One Chrome trace holding the measured and the simulated timelines (the layout both write),
    measured as processes 0-1 ("measured: devices", "measured: links") and simulated as 2-3."""
    events = []
    for offset, trace, label in ((0, measured, "measured"), (2, simulated, "simulated")):
        for e in trace["traceEvents"]:
            e = dict(e, pid=e.get("pid", 0) + offset)
            if e.get("ph") == "M" and e.get("name") == "process_name":
                e["args"] = {"name": f"{label}: {e['args']['name']}"}
            events.append(e)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"measured": measured.get("otherData", {}), "simulated": simulated.get("otherData", {})}}
