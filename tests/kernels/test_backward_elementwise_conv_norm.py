"""Backward kernels of the element-wise ops, conv2d, pool2d, batch_norm, layer_norm, softmax,
embedding and dropout: by finite differences (float64) and against PyTorch's autograd."""

import numpy as np
import pytest

from flexrt.ir import ActiMode, AggrMode, PoolType
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import (BatchNormAttrs, Conv2DAttrs, DropoutAttrs, ElementBinaryAttrs, ElementUnaryAttrs,
                           EmbeddingAttrs, LayerNormAttrs, Pool2DAttrs, SoftmaxAttrs)
from flexrt.kernels.gradcheck import check_gradients
from flexrt.kernels.ops._scatter import scatter_add_rows
from flexrt.kernels.registry import run_backward, run_forward


def _away_from(x, kink=0.0, gap=1e-3):
    """``x`` with every element at least ``gap`` from ``kink``."""
    d = x - kink
    return kink + np.where(np.abs(d) < gap, np.where(d < 0, -gap, gap) * 10, d)


# ---------------------------------------------------------------- element-wise

UNARY = [OpType.RELU, OpType.SIGMOID, OpType.TANH, OpType.GELU, OpType.ELU, OpType.EXP, OpType.LOG, OpType.SIN, OpType.COS,
         OpType.IDENTITY, OpType.RSQRT, OpType.POW, OpType.SCALAR_ADD, OpType.SCALAR_SUB, OpType.SCALAR_MUL,
         OpType.SCALAR_TRUE_DIV]


@pytest.mark.parametrize("op", UNARY, ids=lambda t: t.value)
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2)])
def test_unary_backward_matches_finite_differences(op, shape):
    rng = np.random.default_rng(1)
    x = _away_from(rng.standard_normal(shape))
    if op in (OpType.RSQRT, OpType.POW, OpType.LOG):
        x = np.abs(x) + 0.5
    scalars = [2.5, -1.5] if op is OpType.POW else [1.5]
    for s in scalars:
        n = check_gradients(ElementUnaryAttrs(op, s), [x], rng)
        assert n == x.size


BINARY = [OpType.EW_ADD, OpType.EW_SUB, OpType.EW_MUL, OpType.EW_DIV, OpType.EW_MAX, OpType.EW_MIN]
SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((2, 1, 4), (3, 1)),
               ((), (2, 3))]


@pytest.mark.parametrize("op", BINARY, ids=lambda t: t.value)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_binary_backward_matches_finite_differences(op, shapes):
    rng = np.random.default_rng(2)
    a = rng.standard_normal(shapes[0])
    b = rng.standard_normal(shapes[1])
    if op is OpType.EW_DIV:
        b = np.sign(_away_from(b)) * (np.abs(b) + 0.5)
    if op in (OpType.EW_MAX, OpType.EW_MIN):  # keep every pair at least 1e-3 apart
        gap = lambda: np.min(np.abs(a - b))  # noqa: E731
        if gap() < 1e-2:
            b = b + 0.05
        assert gap() >= 1e-3
    n = check_gradients(ElementBinaryAttrs(op), [np.asarray(a, dtype=np.float64), b], rng)
    assert n == min(a.size, 64) + min(b.size, 64)


@pytest.mark.parametrize("op", [OpType.EW_MAX, OpType.EW_MIN], ids=lambda t: t.value)
def test_max_min_ties_go_to_the_first_operand(op):
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([1.0, 5.0, 0.0])
    attrs = ElementBinaryAttrs(op)
    outs = run_forward(np, attrs, [a, b])
    da, db = run_backward(np, attrs, [a, b], outs, [np.ones(3)])
    assert da[0] == 1.0 and db[0] == 0.0
    assert da[1:].tolist() == ([0.0, 1.0] if op is OpType.EW_MAX else [1.0, 0.0])
    assert (da + db).tolist() == [1.0, 1.0, 1.0]


def test_binary_broadcast_gradient_has_operand_shapes():
    a, b = np.ones((2, 1, 4)), np.ones((3, 1))
    attrs = ElementBinaryAttrs(OpType.EW_ADD)
    outs = run_forward(np, attrs, [a, b])
    da, db = run_backward(np, attrs, [a, b], outs, [np.ones((2, 3, 4))])
    assert da.shape == a.shape and db.shape == b.shape
    assert np.all(da == 3) and np.all(db == 8)


# ---------------------------------------------------------------- conv2d / pool2d

@pytest.mark.parametrize("act", list(ActiMode), ids=lambda a: a.name)
@pytest.mark.parametrize("cfg", [  # (C, out, kh, kw, stride, padding, groups, bias)
    (2, 3, 3, 3, (1, 1), (0, 0), 1, True),
    (4, 4, 3, 2, (2, 1), (1, 0), 2, True),
    (4, 6, 2, 2, (1, 2), (1, 1), 2, False),
    (3, 3, 3, 3, (2, 2), (1, 1), 3, True),
], ids=str)
def test_conv2d_backward_matches_finite_differences(act, cfg):
    c, out, kh, kw, stride, padding, groups, bias = cfg
    rng = np.random.default_rng(3)
    attrs = Conv2DAttrs(out, kh, kw, *stride, *padding, groups, bias, act)
    x = rng.standard_normal((2, c, 5, 4))
    k = rng.standard_normal((out, c // groups, kh, kw))
    ops = [x, k] + ([rng.standard_normal(out)] if bias else [])
    if act is ActiMode.AC_MODE_RELU:  # the pre-activations of this draw keep away from the kink
        (y,) = run_forward(np, Conv2DAttrs(out, kh, kw, *stride, *padding, groups, bias), ops)
        assert np.min(np.abs(y)) >= 1e-3
    n = check_gradients(attrs, ops, rng, max_elements=40)
    assert n == min(x.size, 40) + min(k.size, 40) + (out if bias else 0)


def _distinct(rng, shape):
    """Values with distinct magnitudes, at least 1e-2 apart (max pooling away from ties)."""
    size = int(np.prod(shape))
    return (rng.permutation(size) * 0.05 - size * 0.025 + 0.0125).reshape(shape)


@pytest.mark.parametrize("pool", list(PoolType), ids=lambda p: p.name)
@pytest.mark.parametrize("act", [ActiMode.AC_MODE_NONE, ActiMode.AC_MODE_TANH, ActiMode.AC_MODE_GELU],
                         ids=lambda a: a.name)
@pytest.mark.parametrize("cfg", [  # (kernel, stride, padding)
    ((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (1, 2), (1, 0)), ((2, 3), (1, 1), (0, 1)),
], ids=str)
def test_pool2d_backward_matches_finite_differences(pool, act, cfg):
    kernel, stride, padding = cfg
    rng = np.random.default_rng(4)
    x = _distinct(rng, (2, 2, 5, 6))
    n = check_gradients(Pool2DAttrs(*kernel, *stride, *padding, pool, act), [x], rng)
    assert n == min(x.size, 64)


def test_max_pool_ties_go_to_the_first_position():
    x = np.ones((1, 1, 2, 2))
    attrs = Pool2DAttrs(2, 2, 2, 2)
    outs = run_forward(np, attrs, [x])
    (dx,) = run_backward(np, attrs, [x], outs, [np.full((1, 1, 1, 1), 3.0)])
    assert dx.reshape(-1).tolist() == [3.0, 0.0, 0.0, 0.0]


# ---------------------------------------------------------------- normalization

@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shape", [(5, 3), (3, 2, 3, 2)])
def test_batch_norm_backward_matches_finite_differences(relu, shape):
    rng = np.random.default_rng(5)
    c = shape[1]
    ops = [rng.standard_normal(shape), rng.standard_normal(c), rng.standard_normal(c)]
    if relu:
        (y,) = run_forward(np, BatchNormAttrs(relu=False, eps=1e-3), ops)
        assert np.min(np.abs(y)) >= 1e-3
    n = check_gradients(BatchNormAttrs(relu=relu, eps=1e-3), ops, rng)
    assert n == min(np.prod(shape), 64) + 2 * c


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,axes", [((4, 6), (-1,)), ((2, 3, 4), (-1,)), ((2, 3, 4), (1, 2)),
                                        ((2, 3, 4), (-2, -1))], ids=str)
def test_layer_norm_backward_matches_finite_differences(affine, shape, axes):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape)
    norm = tuple(shape[a] for a in sorted(a % len(shape) for a in axes))
    ops = [x] + ([rng.standard_normal(norm), rng.standard_normal(norm)] if affine else [])
    n = check_gradients(LayerNormAttrs(axes, affine, eps=1e-4), ops, rng)
    assert n == min(x.size, 64) + (2 * int(np.prod(norm)) if affine else 0)


@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((4, 6), 0), ((2, 3, 4), 1), ((2, 3, 4), -1)], ids=str)
def test_softmax_backward_matches_finite_differences(shape, axis):
    rng = np.random.default_rng(7)
    n = check_gradients(SoftmaxAttrs(axis), [rng.standard_normal(shape) * 2], rng)
    assert n == min(int(np.prod(shape)), 64)


# ---------------------------------------------------------------- embedding / dropout

@pytest.mark.parametrize("aggr", list(AggrMode), ids=lambda a: a.name)
@pytest.mark.parametrize("idx_shape", [(5,), (3, 4), (2, 2, 3)], ids=str)
def test_embedding_backward_matches_finite_differences(aggr, idx_shape):
    rng = np.random.default_rng(8)
    idx = rng.integers(0, 6, idx_shape)  # repeats: the scatter-add must accumulate
    table = rng.standard_normal((6, 3))
    attrs = EmbeddingAttrs(6, 3, aggr)
    n = check_gradients(attrs, [idx, table], rng)
    assert n == table.size
    outs = run_forward(np, attrs, [idx, table])
    didx, _ = run_backward(np, attrs, [idx, table], outs, [np.ones_like(outs[0])])
    assert didx is None


def test_scatter_add_rows_matches_one_hot_fallback():
    class NoAt:  # an array module whose add has no .at: takes the bincount path
        def __getattr__(self, name):
            if name == "add":
                return lambda a, b: np.add(a, b)
            return getattr(np, name)
    rng = np.random.default_rng(9)
    idx = rng.integers(0, 5, 12)
    vals = rng.standard_normal((12, 3))
    want = np.zeros((5, 3))
    np.add.at(want, idx, vals)
    np.testing.assert_allclose(scatter_add_rows(np, 5, idx, vals), want)
    np.testing.assert_allclose(scatter_add_rows(NoAt(), 5, idx, vals), want)


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.7])
@pytest.mark.parametrize("shape", [(10,), (4, 5, 3)], ids=str)
def test_dropout_backward_matches_finite_differences_and_mask(rate, shape):
    rng = np.random.default_rng(10)
    x = rng.standard_normal(shape)
    attrs = DropoutAttrs(rate, seed=42)
    assert check_gradients(attrs, [x], rng) == min(x.size, 64)
    (y,) = run_forward(np, attrs, [x])
    (dx,) = run_backward(np, attrs, [x], [y], [np.ones(shape)])
    np.testing.assert_array_equal(dx != 0, y != 0)   # the forward's own mask
    np.testing.assert_allclose(dx[dx != 0], 1.0 / (1.0 - rate))


# ---------------------------------------------------------------- against PyTorch autograd

def _torch():
    try:
        import torch
    except Exception as e:  # pragma: no cover - torch is optional
        pytest.skip(f"PyTorch is not importable: {e}")
    return torch


def _compare_with_torch(attrs, operands, torch_fn, rng, grad_mask=None):
    torch = _torch()
    outs = run_forward(np, attrs, operands)
    dys = [rng.standard_normal(o.shape) for o in outs]
    grads = run_backward(np, attrs, operands, outs, dys)
    tens = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in operands]
    ty = torch_fn(*tens)
    np.testing.assert_allclose(ty.detach().numpy(), outs[0], rtol=1e-10, atol=1e-10)
    ty.backward(torch.tensor(dys[0]))
    for a, t, g in zip(operands, tens, grads):
        if a.dtype.kind != "f":
            assert g is None
            continue
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("cfg", [  # (C, out, k, stride, padding, groups, bias, act)
    (3, 4, (3, 3), (1, 1), (1, 1), 1, True, "none"),
    (4, 6, (3, 2), (2, 1), (1, 0), 2, True, "relu"),
    (6, 6, (3, 3), (2, 2), (1, 1), 3, False, "gelu"),
    (4, 8, (1, 1), (1, 1), (0, 0), 4, True, "sigmoid"),
    (2, 4, (2, 3), (1, 2), (0, 1), 1, False, "tanh"),
], ids=str)
def test_conv2d_backward_matches_torch(cfg):
    torch = _torch()
    c, out, k, stride, padding, groups, bias, act = cfg
    mode = {"none": ActiMode.AC_MODE_NONE, "relu": ActiMode.AC_MODE_RELU, "gelu": ActiMode.AC_MODE_GELU,
            "sigmoid": ActiMode.AC_MODE_SIGMOID, "tanh": ActiMode.AC_MODE_TANH}[act]
    tact = {"none": lambda y: y, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
            "sigmoid": torch.sigmoid, "tanh": torch.tanh}[act]
    rng = np.random.default_rng(12)
    ops = [rng.standard_normal((2, c, 7, 6)), rng.standard_normal((out, c // groups, *k))]
    if bias:
        ops.append(rng.standard_normal(out))
    attrs = Conv2DAttrs(out, *k, *stride, *padding, groups, bias, mode)

    def fn(x, w, b=None):
        return tact(torch.nn.functional.conv2d(x, w, b, stride, padding, 1, groups))
    _compare_with_torch(attrs, ops, fn, rng)


@pytest.mark.parametrize("cfg", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (1, 2), (1, 1))],
                         ids=str)
@pytest.mark.parametrize("pool", list(PoolType), ids=lambda p: p.name)
def test_pool2d_backward_matches_torch(cfg, pool):
    torch = _torch()
    k, stride, padding = cfg
    rng = np.random.default_rng(13)
    x = _distinct(rng, (2, 3, 7, 6))
    F = torch.nn.functional
    if pool is PoolType.POOL_MAX:
        fn = lambda t: F.max_pool2d(t, k, stride, padding)  # noqa: E731
    else:
        fn = lambda t: F.avg_pool2d(t, k, stride, padding, count_include_pad=True)  # noqa: E731
    _compare_with_torch(Pool2DAttrs(*k, *stride, *padding, pool), [x], fn, rng)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 3, 2)], ids=str)
def test_batch_norm_backward_matches_torch(relu, shape):
    torch = _torch()
    rng = np.random.default_rng(14)
    c = shape[1]
    ops = [rng.standard_normal(shape), rng.standard_normal(c), rng.standard_normal(c)]

    def fn(x, w, b):
        y = torch.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=1e-5)
        return torch.relu(y) if relu else y
    _compare_with_torch(BatchNormAttrs(relu=relu, eps=1e-5), ops, fn, rng)


@pytest.mark.parametrize("shape,axes", [((4, 6), (-1,)), ((2, 3, 4), (-2, -1))], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_matches_torch(shape, axes, affine):
    torch = _torch()
    rng = np.random.default_rng(15)
    norm = shape[len(shape) - len(axes):]
    ops = [rng.standard_normal(shape)] + ([rng.standard_normal(norm), rng.standard_normal(norm)] if affine else [])

    def fn(x, w=None, b=None):
        return torch.nn.functional.layer_norm(x, norm, w, b, eps=1e-5)
    _compare_with_torch(LayerNormAttrs(axes, affine, eps=1e-5), ops, fn, rng)


@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((2, 3, 4), 1), ((2, 3, 4), 0)], ids=str)
def test_softmax_backward_matches_torch(shape, axis):
    torch = _torch()
    rng = np.random.default_rng(16)
    _compare_with_torch(SoftmaxAttrs(axis), [rng.standard_normal(shape) * 3],
                        lambda x: torch.softmax(x, dim=axis), rng)


@pytest.mark.parametrize("aggr", list(AggrMode), ids=lambda a: a.name)
def test_embedding_backward_matches_torch(aggr):
    torch = _torch()
    rng = np.random.default_rng(17)
    idx = rng.integers(0, 7, (4, 5))
    table = rng.standard_normal((7, 3))

    def fn(i, t):
        rows = torch.nn.functional.embedding(i, t)
        if aggr is AggrMode.AGGR_MODE_SUM:
            return rows.sum(dim=-2)
        if aggr is AggrMode.AGGR_MODE_AVG:
            return rows.mean(dim=-2)
        return rows
    _compare_with_torch(EmbeddingAttrs(7, 3, aggr), [idx, table], fn, rng)


@pytest.mark.parametrize("attrs,shapes", [
    (ElementUnaryAttrs(OpType.RSQRT), [(3, 4)]),
    (ElementUnaryAttrs(OpType.POW, 2.0), [(3, 4)]),
    (ElementBinaryAttrs(OpType.EW_DIV), [(3, 4), (4,)]),
    (Conv2DAttrs(4, 3, 3, 1, 1, 1, 1, 2, True, ActiMode.AC_MODE_GELU), [(2, 4, 5, 5), (4, 2, 3, 3), (4,)]),
    (Pool2DAttrs(3, 3, 2, 2, 1, 1, PoolType.POOL_AVG), [(2, 3, 5, 5)]),
    (BatchNormAttrs(), [(4, 3, 2, 2), (3,), (3,)]),
    (LayerNormAttrs((-1,)), [(4, 6), (6,), (6,)]),
    (SoftmaxAttrs(-1), [(4, 6)]),
    (DropoutAttrs(0.5, seed=1), [(4, 6)]),
], ids=lambda v: getattr(v, "op_type", None) and v.op_type.value)
def test_backward_keeps_float32(attrs, shapes):
    rng = np.random.default_rng(18)
    ops = [np.abs(rng.standard_normal(s)).astype(np.float32) + np.float32(0.5) for s in shapes]
    outs = run_forward(np, attrs, ops)
    grads = run_backward(np, attrs, ops, outs, [np.ones_like(o) for o in outs])
    for a, g in zip(ops, grads):
        assert g.dtype == np.float32 and g.shape == a.shape
