"""The central law for one operator's tests: a small float64 model trained with SGD and momentum
on a mean-squared-error loss gives one device's losses and weights (within 1e-10) under a strategy.
Shared by the per-operator central-law tests (reverse, the fused LLM layers)."""

from __future__ import annotations

import numpy as np

from flexrt.ir.op_type import OpType
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session, initial_weights

STEPS = 3
TOL = 1e-10
SGD = {"lr": 0.05, "momentum": 0.9}


def train_like_one_device(pcg, strategy, machine, label_shape, perturb=None, must_train=False):
    """Train ``STEPS`` steps under ``strategy`` and on one device (the reference trainer) from the
    same weights (``perturb(weights, rng)`` moves them off their initial values) and compare."""
    rng = np.random.default_rng(0)
    w0 = initial_weights(pcg, seed=1)
    w0 = perturb(w0, rng) if perturb else {k: v + 0.1 for k, v in w0.items()}
    inputs = {n.name: rng.standard_normal(n.attrs.shape.dims) for n in pcg.nodes if n.op_type is OpType.INPUT}
    labels = rng.standard_normal(label_shape)
    loss = "mean_squared_error_avg"
    ref = ReferenceTrainer(pcg, w0, optimizer_step("sgd", **SGD), loss)
    session = Session(strategy, machine, optimizer="sgd", loss=loss, weights=w0, **SGD)
    for step in range(STEPS):
        want = ref.step(inputs, labels)
        got = session.step(inputs, labels).loss
        assert abs(got - want) <= TOL * max(1.0, abs(want)), (step, got, want)
    got_w = session.weights()
    for name, w in ref.weights.items():
        assert relative_error(got_w[name], w) <= TOL, name
        assert not must_train or not np.array_equal(w, w0[name]), f"{name} did not train"
    return session
