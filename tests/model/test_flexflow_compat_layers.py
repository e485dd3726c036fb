"""Layer calls as FlexFlow's current flexflow_cffi.py and its example scripts make them: positional
arguments land where FlexFlow puts them (conv2d's ``AC_MODE_RELU, True``, ``exp(x, name)``,
``embedding(..., aggr, dtype)``), ``layer_norm(use_bias=False)``, ``reverse`` and ``UniformInitializer(seed, minv, maxv)``."""

import pytest

from flexrt.core import (
    ActiMode,
    AggrMode,
    DataType,
    FFConfig,
    FFModel,
    UniformInitializer,
)
from flexrt.errors import ConfigError
from flexrt.ir.op_type import OpType


@pytest.fixture
def m():
    return FFModel(FFConfig([]))


def test_conv2d_groups_true_is_one_as_in_flexflow_scripts(m):
    x = m.create_tensor([2, 3, 8, 8], DataType.DT_FLOAT)
    y = m.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, True)
    assert y.dims == (2, 4, 8, 8) and m._layers[-1].attrs.groups == 1
    with pytest.raises(ConfigError, match="groups must be an integer >= 1, got False"):
        m.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, False)


@pytest.mark.parametrize("method, op", [("exp", OpType.EXP), ("log", OpType.LOG), ("sin", OpType.SIN), ("cos", OpType.COS),
                                        ("sigmoid", OpType.SIGMOID), ("tanh", OpType.TANH),
                                        ("rsqrt", OpType.RSQRT), ("identity", OpType.IDENTITY)])
def test_unary_without_inplace_takes_name_second(m, method, op):
    x = m.create_tensor([4, 5], DataType.DT_FLOAT)
    getattr(m, method)(x, f"my_{method}")
    layer = m._layers[-1]
    assert (layer.name, layer.attrs.op_type, layer.options) == (f"my_{method}", op, ())


@pytest.mark.parametrize("method", ["relu", "gelu", "elu"])
def test_unary_with_inplace_keeps_it_as_an_option(m, method):
    x = m.create_tensor([4, 5], DataType.DT_FLOAT)
    getattr(m, method)(x, False, "act")
    assert m._layers[-1].option("inplace") is False and m._layers[-1].name == "act"


def test_embedding_dtype_is_fifth_positional(m):
    idx = m.create_tensor([4, 2], DataType.DT_INT64)
    out = m.embedding(idx, 10, 3, AggrMode.AGGR_MODE_SUM, DataType.DT_DOUBLE)
    assert out.dims == (4, 3) and out.data_type is DataType.DT_DOUBLE


def test_dense_datatype_default_is_none_and_output_follows_input(m):
    x = m.create_tensor([4, 5], DataType.DT_DOUBLE)
    assert m.dense(x, 3).data_type is DataType.DT_DOUBLE
    assert m._layers[-1].option("datatype") is DataType.DT_NONE


def test_layer_norm_use_bias_false_has_only_gamma(m):
    x = m.create_tensor([4, 6], DataType.DT_FLOAT)
    m.layer_norm(x, [1], True, 1e-5, False, "ln")
    assert [w.name for w in m._layers[-1].weights] == ["gamma"]
    m.layer_norm(x, [1], name="ln_bias")
    assert [w.name for w in m._layers[-1].weights] == ["gamma", "beta"]
    m.layer_norm(x, [1], False, use_bias=True, name="ln_plain")
    assert m._layers[-1].weights == ()


def test_reverse_layer(m):
    x = m.create_tensor([4, 5, 6], DataType.DT_FLOAT)
    out = m.reverse(x, axis=2, name="rev")
    assert out.dims == (4, 5, 6) and m._layers[-1].attrs.axis == 2
    with pytest.raises(ConfigError, match="reverse: axis must be an integer"):
        m.reverse(x, 1.0)


def test_uniform_initializer_flexflow_names():
    init = UniformInitializer(seed=12, minv=-1, maxv=1)
    assert (init.seed, init.minv, init.maxv, init.min, init.max) == (12, -1.0, 1.0, -1.0, 1.0)
    assert UniformInitializer(12, -1, 1) == init
    with pytest.raises(ConfigError, match="UniformInitializer: maxv must be a number >= 1"):
        UniformInitializer(0, 1.0, 0.5)


@pytest.mark.parametrize("dims, axes, normalized", [
    ((4, 5, 6), [2], (2,)),            # NumPy's numbering: the last dimension
    ((4, 5, 6), [1, 2], (1, 2)),
    ((4, 5, 6), [-1], (2,)),
    ((4, 5, 6), [0], (2,)),            # FlexFlow's current numbering, from the last dimension
    ((4, 5, 6), [0, 1], (1, 2)),
    ((4, 5, 6, 7), [1, 0], (2, 3)),
    ((4, 5, 6), [0, 1, 2], (0, 1, 2)),  # every dimension: both numberings agree
])
def test_layer_norm_axes_in_either_numbering(dims, axes, normalized):
    from flexrt.ir.ops.layer_norm import normalized_axes
    m = FFModel(FFConfig(["-b", str(dims[0])]))
    t = m.layer_norm(m.create_tensor(list(dims)), axes)
    layer = m.get_layers()[-1] if isinstance(m.get_layers(), list) else list(m.get_layers().values())[-1]
    assert normalized_axes(layer.attrs, t.get_shape()) == normalized
