"""Malformed nodes of the composed operators (``flexrt.torch._composites``: interpolation, transposed
convolution, group norm, padding, einsum, gathers, LSTM, ...), as a hand-edited text file or a
broken ONNX graph gives them, raise only flexrt's errors: never a Python exception, never a huge
allocation (a size of 10**9 is refused before anything is allocated)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.errors import FlexrtError
from flexrt.model import DataType, FFConfig, FFModel
from flexrt.torch._build import build
from flexrt.torch._ir import IRNode

VALUES = [0, 1, 2, 3, -1, -5, 7, 10 ** 9, 2.5, -0.5, float("nan"), float("inf"), None, True, "x", (), (1,), (2, 3),
          (0, 0), (1, 2, 3, 4), (-1, 2), ("a",), "bhid,bhjd->bhij", "ab->", "...ij->...ji", "abc,abc", (None,),
          (1.5, 2.0)]
KEYWORDS = {
    "INTERPOLATE": {"size": VALUES, "scale": VALUES, "mode": ["nearest", "linear", "bicubic", 3],
                    "coords": ["asymmetric", "align_corners", "bogus"], "rounding": ["floor", "bad"],
                    "recompute": [True, 2]},
    "CONV_TRANSPOSE2D": {"output_padding": VALUES, "padding_end": VALUES, "in_channels": VALUES},
    "GROUP_NORM": {"eps": VALUES, "rank": VALUES}, "VAR": {"keepdim": VALUES, "correction": VALUES, "std": VALUES},
    "REDUCE_L2": {"keepdim": VALUES}, "NORMALIZE": {}, "FULL": {"dtype": ["torch.float32", "bogus", None]},
    "UNFLATTEN": {}, "CLAMP": {}, "LOG_SOFTMAX": {"dim": VALUES}, "LOGSUMEXP": {"keepdim": VALUES}, "SOFTPLUS": {},
    "MISH": {}, "ABS": {}, "PAD": {"mode": ["constant", "reflect", "circular", "edge", None], "value": VALUES},
    "PRELU": {}, "LSTM": {"batch_first": VALUES}, "GRU": {"batch_first": VALUES}, "EINSUM": {}, "EMBEDDING": {"aggr": ["sum", "avg", "max", None]},
    "EXPAND": {"broadcast": [True]},
}
INPUTS = {"PRELU": [2], "EINSUM": [1, 2], "GROUP_NORM": [1, 3], "LSTM": [1, 3], "GRU": [1, 2]}


@st.composite
def _nodes(draw):
    op = draw(st.sampled_from(sorted(KEYWORDS)))
    dims = [2] + draw(st.lists(st.integers(1, 5), min_size=0, max_size=3))
    dtype = draw(st.sampled_from([DataType.DT_FLOAT, DataType.DT_INT64]))
    fields = tuple(draw(st.lists(st.sampled_from(VALUES), max_size=11)))
    keywords = tuple((k, draw(st.sampled_from(v))) for k, v in KEYWORDS[op].items() if draw(st.booleans()))
    return op, dims, dtype, fields, keywords, draw(st.sampled_from(INPUTS.get(op, [1])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_nodes())
def test_malformed_composed_nodes_raise_only_flexrt_errors(case):
    op, dims, dtype, fields, keywords, n_inputs = case
    ff = FFModel(FFConfig(["-b", "2"]))
    tensors = [ff.create_tensor(dims, dtype) for _ in range(n_inputs)]
    names = [f"x{i}" for i in range(n_inputs)]
    nodes = [IRNode(n, (), (), "INPUT") for n in names] + [IRNode("op", tuple(names), (), op, fields, keywords)]
    try:
        build(ff, nodes + [IRNode("output", ("op",), (), "OUTPUT")], tensors)
    except FlexrtError:
        pass


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([slice(None), np.array([0, 1]), (0, 1), 0, -1, np.array([True, False]), Ellipsis,
                                 None, (5,), np.array([[0], [1]]), 1.5]), min_size=1, max_size=4))
def test_malformed_gathers_raise_only_flexrt_errors(index):
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 3, 4], DataType.DT_FLOAT)
    nodes = [IRNode("x", (), (), "INPUT"), IRNode("op", ("x",), (), "GETITEM", (tuple(index),)),
             IRNode("output", ("op",), (), "OUTPUT")]
    try:
        build(ff, nodes, [x])
    except FlexrtError:
        pass


def test_a_huge_size_is_refused_before_it_is_allocated():
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 3, 5], DataType.DT_FLOAT)
    nodes = [IRNode("x", (), (), "INPUT"), IRNode("up", ("x",), (), "INTERPOLATE", (), (("scale", 10 ** 9),)),
             IRNode("output", ("up",), (), "OUTPUT")]
    with pytest.raises(FlexrtError, match=r"node 'up' \(INTERPOLATE\): interpolating 5 positions to 5000000000 "
                                          r"would hold .* values \(more than 134217728\)"):
        build(ff, nodes, [x])
