"""The central law on graphs the Keras front end builds from its newer layers (unrolled LSTM, GRU and
SimpleRNN, Bidirectional, Conv1D, dilated convolutions, depthwise and separable convolutions): random strategies train to
one device's weights (float64, 1e-10). An unrolled recurrence reads each state twice or more (a
fan-out of partial sums under some strategies: what a sweep found wrong on a GRU)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import DataType
from flexrt.keras import layers
from flexrt.keras.models import Model
from flexrt.model import FFConfig
from flexrt.strategy import random_strategy
from tests.runtime.test_central_law import TOL, compare_with_one_device, machine, weights_for

__all__ = ["machine"]  # the fixture
F64 = DataType.DT_DOUBLE


def _pcg(name):
    """The FFModel graph Keras compiles for model ``name`` (float64, batch 8)."""
    if name in ("lstm", "gru", "simple_rnn", "bidirectional"):
        x = layers.Input(shape=(4, 3), dtype="float64")
        cell = {"lstm": lambda: layers.LSTM(5, return_sequences=True), "gru": lambda: layers.GRU(5),
                "simple_rnn": lambda: layers.SimpleRNN(5),
                "bidirectional": lambda: layers.Bidirectional(layers.GRU(4, return_sequences=True))}[name]()
        t = cell(x)
        if t.num_dims == 3:
            t = layers.Flatten()(t)
    elif name == "conv1d":
        x = layers.Input(shape=(9, 3), dtype="float64")
        t = layers.GlobalMaxPooling1D()(layers.MaxPooling1D(2)(layers.Conv1D(4, 3, activation="relu")(x)))
    elif name == "dilated":    # a WaveNet-like stack (the windows and a dense layer), then a dilated 2-D one
        x = layers.Input(shape=(12, 3), dtype="float64")
        t = layers.Conv1D(4, 2, dilation_rate=2, activation="relu")(layers.Conv1D(4, 2, dilation_rate=1)(x))
        t = layers.Flatten()(layers.Conv2D(2, (3, 2), dilation_rate=(1, 2), padding="valid")(
            layers.Reshape((1, 9, 4))(t)))
    else:
        x = layers.Input(shape=(4, 6, 6), dtype="float64")
        t = layers.Flatten()(layers.SeparableConv2D(3, (3, 3))(layers.DepthwiseConv2D((3, 3))(x)))
    m = Model(x, layers.Dense(2)(t), ffconfig=FFConfig(["-b", "8"]))
    m.compile("sgd", "mean_squared_error")
    return m.ffmodel.pcg


MODELS = ("lstm", "gru", "simple_rnn", "bidirectional", "conv1d", "dilated", "separable")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(MODELS), seed=st.integers(0, 10**6))
def test_random_strategies_of_keras_graphs_train_like_one_device(name, seed, machine):
    pcg = _pcg(name)
    compare_with_one_device(f"{name} seed {seed}", pcg, random_strategy(pcg, machine, seed), machine,
                            "mean_squared_error_avg", TOL[F64], weights_for(pcg, F64))


@pytest.mark.parametrize("name", MODELS)
def test_each_keras_graph_under_a_fixed_random_strategy(name, machine):
    pcg = _pcg(name)
    compare_with_one_device(name, pcg, random_strategy(pcg, machine, 1), machine, "mean_squared_error_avg", TOL[F64],
                            weights_for(pcg, F64), mode="threads")
