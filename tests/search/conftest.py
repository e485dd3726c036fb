"""Small models and machines for the search tests (built with the FFModel API)."""

import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.machine import load_machine
from flexrt.simulator.cost_model import AnalyticCostModel


def tiny_mlp():
    m = FFModel(FFConfig(["-b", "16"]))
    x = m.create_tensor([16, 64], DataType.DT_FLOAT)
    t = m.dense(x, 256, ActiMode.AC_MODE_RELU, name="fc1")
    t = m.dense(t, 256, ActiMode.AC_MODE_RELU, name="fc2")
    t = m.dense(t, 10, name="fc3")
    m.softmax(t, name="softmax")
    return m.pcg


@pytest.fixture(scope="module")
def mlp():
    return tiny_mlp()


@pytest.fixture(scope="module")
def p100():
    return load_machine("flexflow_p100", nodes=1)


@pytest.fixture(scope="module")
def cost():
    return AnalyticCostModel()
