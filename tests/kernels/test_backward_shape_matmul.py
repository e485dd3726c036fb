"""Backward kernels of the shape operators, batch matmul, multi-head attention, reduce_sum/mean and
the LSTM cell: finite differences in float64, and PyTorch autograd where it is installed."""


import numpy as np
import pytest

from flexrt.ir import DataType
from flexrt.ir.ops import (BatchMatmulAttrs, CastAttrs, ConcatAttrs, FlatAttrs, GatherAttrs, LSTMAttrs,
                           MultiHeadAttentionAttrs, ReduceAttrs, ReshapeAttrs, SplitAttrs, TransposeAttrs)
from flexrt.ir.op_type import OpType
from flexrt.kernels.gradcheck import check_gradients
from flexrt.kernels.ops._scatter import scatter_add_along
from flexrt.kernels.registry import run_backward, run_forward


def _r(rng, *shape):
    return rng.standard_normal(shape)


def _torch():
    try:
        import torch
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"torch is not importable: {e}")
    return torch


# ---------------------------------------------------------------- shape operators

SHAPE_CASES = [
    ("concat_axis1", ConcatAttrs(1), lambda g: [_r(g, 2, 3, 4), _r(g, 2, 1, 4)]),
    ("concat_last_three", ConcatAttrs(-1), lambda g: [_r(g, 2, 3), _r(g, 2, 1), _r(g, 2, 4)]),
    ("split_axis1_two", SplitAttrs((1, 3), 1), lambda g: [_r(g, 3, 4, 2)]),
    ("split_axis0_three", SplitAttrs((2, 1, 1), 0), lambda g: [_r(g, 4, 3)]),
    ("split_neg_axis", SplitAttrs((2, 3), -1), lambda g: [_r(g, 2, 5)]),
    ("reshape_infer", ReshapeAttrs((4, -1)), lambda g: [_r(g, 2, 2, 3)]),
    ("reshape_3d", ReshapeAttrs((3, 2, 2)), lambda g: [_r(g, 4, 3)]),
    ("transpose_021", TransposeAttrs((0, 2, 1)), lambda g: [_r(g, 2, 3, 4)]),
    ("transpose_cycle", TransposeAttrs((2, 0, 1)), lambda g: [_r(g, 2, 3, 4)]),
    ("transpose_2d", TransposeAttrs((1, 0)), lambda g: [_r(g, 3, 5)]),
    ("flat_3d", FlatAttrs(), lambda g: [_r(g, 2, 3, 4)]),
    ("flat_4d", FlatAttrs(), lambda g: [_r(g, 2, 2, 1, 3)]),
    ("cast_double", CastAttrs(DataType.DT_DOUBLE), lambda g: [_r(g, 3, 4)]),
    ("gather_dim0_repeats", GatherAttrs(0), lambda g: [_r(g, 3, 4), np.array([[0, 2, 0, 0], [0, 0, 1, 2]])]),
    ("gather_dim1_repeats", GatherAttrs(1), lambda g: [_r(g, 3, 4), g.integers(0, 4, (3, 6))]),
    ("gather_smaller_index", GatherAttrs(1), lambda g: [_r(g, 4, 5, 3), g.integers(0, 5, (2, 7, 2))]),
    ("gather_neg_dim", GatherAttrs(-1), lambda g: [_r(g, 2, 3), np.array([[2, 2, 2, 2], [1, 0, 1, 0]])]),
]


@pytest.mark.parametrize("name,attrs,make", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_shape_op_backward_matches_finite_differences(name, attrs, make):
    rng = np.random.default_rng(3)
    ops = make(rng)
    n = check_gradients(attrs, ops, rng)
    assert n == sum(min(a.size, 64) for a in ops if a.dtype.kind == "f")


def test_split_backward_accepts_a_missing_output_gradient():
    rng = np.random.default_rng(0)
    x = _r(rng, 4, 3)
    attrs = SplitAttrs((1, 3), 0)
    outs = run_forward(np, attrs, [x])
    g1 = _r(rng, 3, 3)
    (dx,) = run_backward(np, attrs, [x], outs, [None, g1])
    np.testing.assert_array_equal(dx, np.concatenate([np.zeros((1, 3)), g1]))


def test_concat_backward_gives_none_for_integer_inputs():
    a, b = np.arange(4).reshape(2, 2), np.arange(2).reshape(1, 2)
    attrs = ConcatAttrs(0)
    outs = run_forward(np, attrs, [a, b])
    assert run_backward(np, attrs, [a, b], outs, [np.ones((3, 2))]) == (None, None)


def test_cast_backward_dtypes():
    rng = np.random.default_rng(1)
    x32 = _r(rng, 3, 2).astype(np.float32)
    attrs = CastAttrs(DataType.DT_DOUBLE)
    outs = run_forward(np, attrs, [x32])
    g = _r(rng, 3, 2)
    (dx,) = run_backward(np, attrs, [x32], outs, [g])
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, g.astype(np.float32))
    # integer input: no gradient; float -> integer output: a zero gradient of the input's dtype
    xi = np.arange(6).reshape(3, 2)
    assert run_backward(np, attrs, [xi], run_forward(np, attrs, [xi]), [g]) == (None,)
    to_int = CastAttrs(DataType.DT_INT32)
    (dz,) = run_backward(np, to_int, [g], run_forward(np, to_int, [g]), [np.ones((3, 2), np.int32)])
    assert dz.dtype == np.float64 and not dz.any()


@pytest.mark.parametrize("use_add_at", [True, False])
def test_scatter_add_both_paths_accumulate_repeats(use_add_at):
    rng = np.random.default_rng(2)
    index = rng.integers(0, 3, (4, 5, 2))
    src = _r(rng, 4, 5, 2)
    out = scatter_add_along(np, (6, 3, 2), 1, index, src, np.float64, use_add_at=use_add_at)
    ref = np.zeros((6, 3, 2))
    for a in range(4):
        for b in range(5):
            for c in range(2):
                ref[a, index[a, b, c], c] += src[a, b, c]
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dim,xshape,ishape", [(0, (3, 4), (5, 4)), (1, (3, 4), (2, 6)), (2, (2, 3, 4), (2, 2, 7))])
def test_gather_backward_matches_torch(dim, xshape, ishape):
    torch = _torch()
    rng = np.random.default_rng(4)
    x = _r(rng, *xshape)
    index = rng.integers(0, xshape[dim], ishape)
    attrs = GatherAttrs(dim)
    (y,) = run_forward(np, attrs, [x, index])
    g = _r(rng, *y.shape)
    dx, di = run_backward(np, attrs, [x, index], [y], [g])
    assert di is None
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.gather(tx, dim, torch.tensor(index))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12)
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- batch matmul

@pytest.mark.parametrize("ashape,bshape", [((2, 3, 4), (2, 4, 5)), ((2, 2, 1, 3), (2, 2, 3, 2)), ((1, 4, 4), (1, 4, 1))])
def test_batch_matmul_backward_matches_finite_differences(ashape, bshape):
    rng = np.random.default_rng(5)
    ops = [_r(rng, *ashape), _r(rng, *bshape)]
    assert check_gradients(BatchMatmulAttrs(), ops, rng) == sum(min(a.size, 64) for a in ops)


# ---------------------------------------------------------------- multi-head attention

def _mha_operands(rng, n, lq, lk, e, kdim, vdim, bias):
    data = [_r(rng, n, lq, e), _r(rng, n, lk, kdim), _r(rng, n, lk, vdim)]
    ws = [_r(rng, e, e) * 0.5, _r(rng, kdim, e) * 0.5, _r(rng, vdim, e) * 0.5, _r(rng, e, e) * 0.5]
    return data + ws + ([_r(rng, e) for _ in range(4)] if bias else [])


MHA_CASES = [  # (embed_dim, heads, kdim, vdim, bias, n, lq, lk)
    (4, 1, 0, 0, True, 2, 3, 3),
    (4, 2, 0, 0, False, 2, 3, 2),
    (4, 2, 3, 5, True, 1, 2, 4),
    (6, 2, 5, 3, False, 2, 1, 3),
    (6, 3, 2, 4, True, 1, 3, 2),
]


@pytest.mark.parametrize("e,h,kdim,vdim,bias,n,lq,lk", MHA_CASES)
def test_attention_backward_matches_finite_differences(e, h, kdim, vdim, bias, n, lq, lk):
    rng = np.random.default_rng(6)
    attrs = MultiHeadAttentionAttrs(e, h, kdim, vdim, bias=bias)
    ops = _mha_operands(rng, n, lq, lk, e, attrs.kdim, attrs.vdim, bias)
    n_checked = check_gradients(attrs, ops, rng)
    assert n_checked == sum(min(a.size, 64) for a in ops)


def test_attention_backward_on_a_heads_piece():
    """A piece cut along heads holds fewer columns of wq/wk/wv and rows of wo; same formulas."""
    rng = np.random.default_rng(7)
    attrs = MultiHeadAttentionAttrs(6, 3, bias=True)
    ops = _mha_operands(rng, 2, 2, 3, 6, 6, 6, True)
    piece = ops[:3] + [ops[3][:, :2], ops[4][:, :2], ops[5][:, :2], ops[6][:2], ops[7][:2], ops[8][:2],
                       ops[9][:2], ops[10]]
    check_gradients(attrs, piece, rng)


@pytest.mark.parametrize("e,h,kdim,vdim,bias,n,lq,lk", MHA_CASES)
def test_attention_backward_matches_torch(e, h, kdim, vdim, bias, n, lq, lk):
    torch = _torch()
    import torch.nn.functional as F
    rng = np.random.default_rng(8)
    attrs = MultiHeadAttentionAttrs(e, h, kdim, vdim, bias=bias)
    ops = _mha_operands(rng, n, lq, lk, e, attrs.kdim, attrs.vdim, bias)
    (y,) = run_forward(np, attrs, ops)
    g = _r(rng, *y.shape)
    grads = run_backward(np, attrs, ops, [y], [g])
    t = [torch.tensor(a, requires_grad=True) for a in ops]
    tq, tk, tv = (a.transpose(0, 1) for a in t[:3])          # torch wants [L, N, E]
    same = attrs.kdim == e and attrs.vdim == e
    kwargs = dict(
        in_proj_weight=torch.cat([t[3].T, t[4].T, t[5].T]) if same else None,
        in_proj_bias=torch.cat(t[7:10]) if bias else None,
        bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
        out_proj_weight=t[6].T, out_proj_bias=t[10] if bias else None,
        training=False, need_weights=False)
    if not same:
        kwargs.update(use_separate_proj_weight=True, q_proj_weight=t[3].T, k_proj_weight=t[4].T,
                      v_proj_weight=t[5].T)
    out, _ = F.multi_head_attention_forward(tq, tk, tv, e, h, **kwargs)
    out = out.transpose(0, 1)
    np.testing.assert_allclose(y, out.detach().numpy(), rtol=1e-10, atol=1e-10)
    out.backward(torch.tensor(g))
    for i, (ours, ta) in enumerate(zip(grads, t)):
        np.testing.assert_allclose(ours, ta.grad.numpy(), rtol=1e-9, atol=1e-10, err_msg=f"operand {i}")


# ---------------------------------------------------------------- reduce_sum, mean

@pytest.mark.parametrize("op", [OpType.REDUCE_SUM, OpType.MEAN])
@pytest.mark.parametrize("axes,keepdims", [((1,), False), ((1,), True), ((0, 2), False), ((-1, 0), True),
                                           ((0, 1, 2), False)])
def test_reduce_backward_matches_finite_differences(op, axes, keepdims):
    rng = np.random.default_rng(9)
    x = _r(rng, 2, 3, 4)
    assert check_gradients(ReduceAttrs(op, axes, keepdims), [x], rng, max_elements=24) == 24


def test_reduce_sum_backward_none_for_integers():
    x = np.arange(6).reshape(2, 3)
    attrs = ReduceAttrs(OpType.REDUCE_SUM, (0,))
    assert run_backward(np, attrs, [x], run_forward(np, attrs, [x]), [np.ones(3)]) == (None,)


# ---------------------------------------------------------------- LSTM cell

def _lstm_operands(rng, n, inp, hid):
    return [_r(rng, n, inp), _r(rng, n, hid), _r(rng, n, hid), _r(rng, inp, 4 * hid) * 0.5,
            _r(rng, hid, 4 * hid) * 0.5, _r(rng, 4 * hid) * 0.5]


@pytest.mark.parametrize("n,inp,hid", [(2, 3, 2), (1, 2, 3), (3, 4, 1)])
def test_lstm_backward_matches_finite_differences(n, inp, hid):
    rng = np.random.default_rng(10)
    ops = _lstm_operands(rng, n, inp, hid)
    assert check_gradients(LSTMAttrs(hid), ops, rng) == sum(min(a.size, 64) for a in ops)


def test_lstm_backward_one_output_gradient_missing():
    rng = np.random.default_rng(11)
    ops = _lstm_operands(rng, 2, 3, 2)
    attrs = LSTMAttrs(2)
    outs = run_forward(np, attrs, ops)
    g = _r(rng, 2, 2)
    only_h = run_backward(np, attrs, ops, outs, [g, None])
    both = run_backward(np, attrs, ops, outs, [g, np.zeros((2, 2))])
    for a, b in zip(only_h, both):
        np.testing.assert_allclose(a, b)


def test_lstm_unrolled_steps_match_finite_differences():
    """A few steps through one cell with shared weights: back-propagate the states through the
    cells (accumulating weight gradients) and compare with central differences of the whole loss."""
    rng = np.random.default_rng(12)
    n, inp, hid, steps = 2, 3, 2, 3
    attrs = LSTMAttrs(hid)
    xs = [_r(rng, n, inp) for _ in range(steps)]
    h0, c0 = _r(rng, n, hid), _r(rng, n, hid)
    w = [_r(rng, inp, 4 * hid) * 0.5, _r(rng, hid, 4 * hid) * 0.5, _r(rng, 4 * hid) * 0.5]
    gh = [_r(rng, n, hid) for _ in range(steps)]
    gc_last = _r(rng, n, hid)

    def run(xs, h0, c0, w):
        states, h, c = [], h0, c0
        for x in xs:
            h, c = run_forward(np, attrs, [x, h, c, *w])
            states.append((h, c))
        return states

    def loss(xs, h0, c0, w):
        states = run(xs, h0, c0, w)
        return sum(np.sum(g * s[0]) for g, s in zip(gh, states)) + np.sum(gc_last * states[-1][1])

    states = run(xs, h0, c0, w)
    dw = [np.zeros_like(a) for a in w]
    dxs = [None] * steps
    dh, dc = np.zeros((n, hid)), gc_last
    for t in reversed(range(steps)):
        h_prev, c_prev = (h0, c0) if t == 0 else states[t - 1]
        grads = run_backward(np, attrs, [xs[t], h_prev, c_prev, *w], list(states[t]), [dh + gh[t], dc])
        dxs[t], dh, dc = grads[:3]
        for a, b in zip(dw, grads[3:]):
            a += b

    eps = 1e-6
    for arr, analytic in [(xs[0], dxs[0]), (xs[2], dxs[2]), (h0, dh), (c0, dc), (w[0], dw[0]), (w[1], dw[1]),
                          (w[2], dw[2])]:
        flat, ga = arr.reshape(-1), analytic.reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + eps
            up = loss(xs, h0, c0, w)
            flat[j] = old - eps
            down = loss(xs, h0, c0, w)
            flat[j] = old
            num = (up - down) / (2 * eps)
            assert abs(num - ga[j]) <= 1e-7 + 1e-5 * max(abs(num), abs(ga[j]))


@pytest.mark.parametrize("n,inp,hid", [(2, 3, 2), (3, 5, 4)])
def test_lstm_backward_matches_torch_lstm_cell(n, inp, hid):
    torch = _torch()
    rng = np.random.default_rng(13)
    ops = _lstm_operands(rng, n, inp, hid)
    attrs = LSTMAttrs(hid)
    outs = run_forward(np, attrs, ops)
    gh, gc = _r(rng, n, hid), _r(rng, n, hid)
    grads = run_backward(np, attrs, ops, outs, [gh, gc])
    cell = torch.nn.LSTMCell(inp, hid).double()
    with torch.no_grad():        # torch: weight_ih [4H, in] (gates i, f, g, o), two biases
        cell.weight_ih.copy_(torch.tensor(ops[3].T))
        cell.weight_hh.copy_(torch.tensor(ops[4].T))
        cell.bias_ih.copy_(torch.tensor(ops[5]))
        cell.bias_hh.zero_()
    tx, th, tc = (torch.tensor(a, requires_grad=True) for a in ops[:3])
    h1, c1 = cell(tx, (th, tc))
    np.testing.assert_allclose(outs[0], h1.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(outs[1], c1.detach().numpy(), rtol=1e-10, atol=1e-12)
    torch.autograd.backward([h1, c1], [torch.tensor(gh), torch.tensor(gc)])
    ref = [tx.grad, th.grad, tc.grad, cell.weight_ih.grad.T, cell.weight_hh.grad.T, cell.bias_ih.grad]
    for i, (ours, r) in enumerate(zip(grads, ref)):
        np.testing.assert_allclose(ours, r.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"operand {i}")
    np.testing.assert_allclose(grads[5], cell.bias_hh.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bias", [False, True])
def test_causal_attention_backward_matches_finite_differences(bias):
    rng = np.random.default_rng(9)
    attrs = MultiHeadAttentionAttrs(6, 3, bias=bias, causal=True)
    ops = _mha_operands(rng, 2, 4, 4, 6, 6, 6, bias)
    check_gradients(attrs, ops, rng)


def test_causal_attention_sees_only_earlier_keys_and_pieces_know_their_offset():
    """Changing key/value at position j changes no output before j; a piece of the queries with
    ``query_offset`` gives the rows of the whole."""
    from flexrt.kernels.registry import run_forward
    rng = np.random.default_rng(10)
    attrs = MultiHeadAttentionAttrs(6, 2, bias=True, causal=True)
    ops = _mha_operands(rng, 2, 6, 6, 6, 6, 6, True)
    (whole,) = run_forward(np, attrs, ops)
    changed = [o.copy() for o in ops]
    changed[1][:, 4:] += 1.0
    changed[2][:, 4:] += 1.0
    (after,) = run_forward(np, attrs, changed)
    assert np.array_equal(after[:, :4], whole[:, :4]) and not np.allclose(after[:, 4:], whole[:, 4:])
    import dataclasses
    for k in range(3):          # 3 pieces of 2 queries each
        piece = dataclasses.replace(attrs, query_offset=k)
        (got,) = run_forward(np, piece, [ops[0][:, 2 * k:2 * k + 2]] + ops[1:])
        assert np.allclose(got, whole[:, 2 * k:2 * k + 2], rtol=1e-12, atol=1e-12)
