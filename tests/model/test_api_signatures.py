"""Every FFModel method and API class has FlexFlow's parameter names, order and defaults (FlexFlow's
current flexflow_cffi.py; REFERENCE.md lists an older master), so that FlexFlow scripts run unchanged."""

import inspect

import pytest

from flexrt.ir import ActiMode, DataType, PoolType
from flexrt.model import (AdamOptimizer, FFConfig, FFModel, GlorotUniformInitializer, NormInitializer, SGDOptimizer,
                          UniformInitializer, ZeroInitializer)

R = inspect.Parameter.empty  # a required parameter
NONE = ActiMode.AC_MODE_NONE

UNARY_INPLACE = ["relu", "gelu", "elu"]
UNARY_INPUT = ["sigmoid", "tanh", "rsqrt", "identity"]  # FlexFlow's take no inplace
UNARY_X = ["exp", "sin", "cos"]  # FlexFlow names their argument x
UNARY = UNARY_INPLACE + UNARY_INPUT + UNARY_X
BINARY = ["add", "subtract", "multiply", "divide", "max", "min"]
SCALAR = ["scalar_add", "scalar_sub", "scalar_multiply", "scalar_true_divide"]

# method -> [(parameter, default)] after self, in order.
FFMODEL = {
    "create_tensor": [("dims", R), ("data_type", DataType.DT_FLOAT), ("create_grad", True)],
    "dense": [("input", R), ("out_dim", R), ("activation", NONE), ("use_bias", True), ("datatype", DataType.DT_NONE),
              ("shared_op", None), ("kernel_initializer", None), ("bias_initializer", None),
              ("kernel_regularizer", None), ("name", None)],
    "conv2d": [("input", R), ("out_channels", R), ("kernel_h", R), ("kernel_w", R), ("stride_h", R), ("stride_w", R),
               ("padding_h", R), ("padding_w", R), ("activation", NONE), ("groups", 1), ("use_bias", True),
               ("shared_op", None), ("kernel_initializer", None), ("bias_initializer", None), ("name", None)],
    "pool2d": [("input", R), ("kernel_h", R), ("kernel_w", R), ("stride_h", R), ("stride_w", R), ("padding_h", R),
               ("padding_w", R), ("pool_type", PoolType.POOL_MAX), ("activation", NONE), ("name", None)],
    "embedding": [("input", R), ("num_embeddings", R), ("embedding_dim", R), ("aggr", R), ("dtype", DataType.DT_FLOAT),
                  ("shared_op", None), ("kernel_initializer", None), ("name", None)],
    "concat": [("tensors", R), ("axis", R), ("name", None)],
    "split": [("input", R), ("sizes", R), ("axis", R), ("name", None)],
    "multihead_attention": [("query", R), ("key", R), ("value", R), ("embed_dim", R), ("num_heads", R), ("kdim", 0),
                            ("vdim", 0), ("dropout", 0.0), ("bias", True), ("add_bias_kv", False),
                            ("add_zero_attn", False), ("kernel_initializer", None), ("name", None)],
    "batch_norm": [("input", R), ("relu", True), ("name", None)],
    "layer_norm": [("input", R), ("axes", R), ("elementwise_affine", True), ("eps", 1e-5), ("use_bias", True),
                   ("name", None)],
    "batch_matmul": [("A", R), ("B", R), ("a_seq_length_dim", None), ("b_seq_length_dim", None), ("name", None)],
    "softmax": [("input", R), ("axis", -1), ("name", None)],
    "reshape": [("input", R), ("shape", R), ("name", None)],
    "transpose": [("input", R), ("perm", R), ("name", None)],
    "reverse": [("input", R), ("axis", R), ("name", None)],
    "flat": [("input", R), ("name", None)],
    "dropout": [("input", R), ("rate", R), ("seed", R), ("name", None)],
    "gather": [("input", R), ("index", R), ("dim", R), ("name", None)],
    "reduce_sum": [("input", R), ("axes", R), ("keepdims", False), ("name", None)],
    "mean": [("input", R), ("dims", R), ("keepdims", False), ("name", None)],
    "pow": [("input", R), ("exponent", R), ("name", None)],
    "cast": [("input", R), ("dtype", R), ("name", None)],
    "lstm": [("input", R), ("hx", R), ("cx", R), ("hidden_size", R), ("shared_op", None), ("name", None)],
    **{m: [("x", R), ("y", R), ("inplace_a", False), ("name", None)] for m in BINARY},
    **{m: [("input", R), ("scalar", R), ("inplace", True), ("name", None)] for m in SCALAR},
    **{m: [("input", R), ("inplace", True), ("name", None)] for m in UNARY_INPLACE},
    **{m: [("input", R), ("name", None)] for m in UNARY_INPUT},
    **{m: [("x", R), ("name", None)] for m in UNARY_X},
    # training calls (they land with the runtime; the signatures are fixed now)
    "compile": [("optimizer", None), ("loss_type", None), ("metrics", None), ("comp_mode", None)],
    "fit": [("x", None), ("y", None), ("batch_size", None), ("epochs", 1)],
    "eval": [("x", None), ("y", None), ("batch_size", None)],
    "init_layers": [], "forward": [("seq_length", None)], "backward": [("seq_length", None)], "zero_gradients": [], "update": [], "get_perf_metrics": [],
    "create_data_loader": [("batch_tensor", R), ("full_array", R)],
    "get_layers": [], "summary": [("file", None)], "print_layers": [("id", -1)], "num_parameters": [],
}

CLASSES = {
    FFModel: [("ffconfig", R)],
    FFConfig: [("argv", None)],
    SGDOptimizer: [("ffmodel", R), ("lr", 0.01), ("momentum", 0.0), ("nesterov", False), ("weight_decay", 0.0)],
    AdamOptimizer: [("ffmodel", R), ("alpha", 0.001), ("beta1", 0.9), ("beta2", 0.999), ("weight_decay", 0.0),
                    ("epsilon", 1e-8)],
    GlorotUniformInitializer: [("seed", R)],
    ZeroInitializer: [],
    UniformInitializer: [("seed", R), ("minv", R), ("maxv", R)],
    NormInitializer: [("seed", R), ("mean", R), ("stddev", R)],
}


# flexrt's own additions: keyword-only, after every FlexFlow parameter, so FlexFlow calls are unchanged
EXTENSIONS = {"multihead_attention": [("causal", False)], "forward": [("training", None)], "softmax": [("causal", False)]}


def _params(fn, skip_self: bool, keyword_only: bool = False):
    params = list(inspect.signature(fn).parameters.values())
    if skip_self:
        params = params[1:]
    return [(p.name, p.default) for p in params if (p.kind is p.KEYWORD_ONLY) == keyword_only]


@pytest.mark.parametrize("method", sorted(FFMODEL))
def test_ffmodel_method_signature_matches_flexflow(method):
    assert _params(getattr(FFModel, method), skip_self=True) == FFMODEL[method]
    assert _params(getattr(FFModel, method), skip_self=True, keyword_only=True) == EXTENSIONS.get(method, [])


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_class_signature_matches_flexflow(cls):
    assert _params(cls, skip_self=False) == CLASSES[cls]


def test_every_reference_layer_method_is_listed():
    reference = {"create_tensor", "dense", "conv2d", "pool2d", "embedding", "concat", "split", "multihead_attention",
                 "batch_norm", "layer_norm", "batch_matmul", "softmax", "reshape", "transpose", "reverse", "flat", "dropout",
                 "gather", "reduce_sum", "mean", "pow", "cast", "lstm", *UNARY, *BINARY, *SCALAR}
    assert reference <= set(FFMODEL)

