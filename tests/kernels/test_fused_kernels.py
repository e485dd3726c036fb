"""Fused element-wise kernels (``flexrt.kernels.fused``): a chain evaluated as one expression gives
the member kernels' values (bitwise for arithmetic), keeps float32, renders CUDA source for CuPy,
and ``backward_reads`` names every value a backward kernel reads (stand-ins for the rest change
nothing)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import GraphError
from flexrt.ir.op_type import ELEMENT_BINARY, ELEMENT_UNARY, OpType
from flexrt.ir.ops.element_binary import ElementBinaryAttrs
from flexrt.ir.ops.element_unary import ElementUnaryAttrs
from flexrt.kernels.fused import CHAIN_OPS, ChainStep, ElementwiseChain, backward_reads, cuda_source
from flexrt.kernels.registry import run_backward, run_forward

ARITHMETIC = {OpType.IDENTITY, OpType.SCALAR_ADD, OpType.SCALAR_SUB, OpType.SCALAR_MUL, OpType.SCALAR_TRUE_DIV,
              OpType.EW_ADD, OpType.EW_SUB, OpType.EW_MUL, OpType.EW_DIV, OpType.EW_MAX, OpType.EW_MIN,
              OpType.RELU}
SCALARS = {OpType.POW: 2.0, OpType.SCALAR_ADD: 0.3, OpType.SCALAR_SUB: 1.5, OpType.SCALAR_MUL: -0.7,
           OpType.SCALAR_TRUE_DIV: 3.0}


def attrs_of(t: OpType):
    if t in ELEMENT_BINARY:
        return ElementBinaryAttrs(t)
    return ElementUnaryAttrs(t, SCALARS.get(t, 0.0))


def safe_input(t: OpType, x):
    return np.abs(x) + 0.5 if t in (OpType.RSQRT, OpType.POW, OpType.LOG) else x


@st.composite
def chains(draw):
    n = draw(st.integers(1, 5))
    steps, num_in = [], 0
    for k in range(n):
        t = draw(st.sampled_from(sorted(CHAIN_OPS - {OpType.RSQRT, OpType.POW, OpType.LOG}, key=lambda o: o.value)))
        args = []
        for j in range(2 if t in ELEMENT_BINARY else 1):
            if k and (j == 0 or draw(st.booleans())):
                args.append(("step", k - 1 if j == 0 else draw(st.integers(0, k - 1))))
            else:
                args.append(("in", num_in))
                num_in += 1
        steps.append(ChainStep(attrs_of(t), tuple(args)))
    return ElementwiseChain(tuple(steps))


def member_by_member(chain: ElementwiseChain, inputs: list, defined=None, periodic=None):
    """The chain run one kernel at a time; ``defined`` (a boolean array) is cleared where a sin or
    cos got an argument beyond 1e6, whose value no two roundings of it agree on; ``periodic`` (an
    array) is raised to the largest |argument| a sin or cos got: each rounds its argument's ulp,
    which is absolute, so two roundings of it differ by that much whatever the result."""
    done = []
    for s in chain.steps:
        args = [inputs[j] if kind == "in" else done[j] for kind, j in s.args]
        if s.attrs.op_type in (OpType.SIN, OpType.COS):
            if defined is not None:
                defined &= ~(np.abs(args[0]) > 1e6)
            if periodic is not None:
                np.maximum(periodic, np.nan_to_num(np.abs(args[0]), nan=0.0, posinf=0.0), out=periodic)
        done.append(run_forward(np, s.attrs, args)[0])
    return done[-1]


@settings(max_examples=60, deadline=None)
@given(chain=chains(), seed=st.integers(0, 100))
def test_chain_expression_gives_the_member_kernels_values(chain, seed):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal((5, 7)) for _ in range(chain.num_inputs)]
    defined, periodic = np.ones((5, 7), dtype=bool), np.zeros((5, 7))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        got, want = chain.evaluate(np, inputs), member_by_member(chain, inputs, defined, periodic)
    assert got.dtype == want.dtype and got.shape == want.shape
    got, want, periodic = got[defined], want[defined], periodic[defined]
    if all(s.attrs.op_type in ARITHMETIC for s in chain.steps):
        assert np.array_equal(got, want, equal_nan=True)   # 0/0 gives NaN in both
    else:
        # one expression (numexpr's VML) and the member kernels (NumPy) round exp/log/tanh alike to
        # about an ulp, but a chain magnifies it by each step's condition number (|x| for exp:
        # exp(exp(exp(x))) ~ 1e85 reaches 1.1e-13): a few ulps of that; a sin or cos of a large
        # argument (exp(x) ~ 1e4 and more) differs by a few ulps of the argument (1e-10 was seen)
        bound = 1e-11 * np.abs(want) + 1e-15 + 16 * np.finfo(np.float64).eps * periodic
        both_nan = np.isnan(got) & np.isnan(want)
        assert bool(np.all(both_nan | (np.abs(got - want) <= bound) | (got == want))), \
            f"{got[~both_nan]} != {want[~both_nan]} within {bound[~both_nan]}"


def test_a_cosine_of_a_large_argument_differs_by_the_arguments_ulps():
    """cos(exp(exp(cos(x) + y))): the last cosine's argument reaches 1e5, and the fused expression and
    the member kernels differ by ~1e-11 there (hypothesis found such a chain past the old 1e-11
    relative tolerance, 929 times over): within a few ulps of the argument."""
    chain = ElementwiseChain((ChainStep(attrs_of(OpType.COS), (("in", 0),)),
                              ChainStep(attrs_of(OpType.EW_ADD), (("step", 0), ("in", 1))),
                              ChainStep(attrs_of(OpType.EXP), (("step", 1),)),
                              ChainStep(attrs_of(OpType.EXP), (("step", 2),)),
                              ChainStep(attrs_of(OpType.COS), (("step", 3),))))
    for seed in range(50):
        rng = np.random.default_rng(seed)
        inputs = [rng.standard_normal((5, 7)), rng.uniform(1.0, 2.7, (5, 7))]
        defined, periodic = np.ones((5, 7), dtype=bool), np.zeros((5, 7))
        got, want = chain.evaluate(np, inputs), member_by_member(chain, inputs, defined, periodic)
        bound = 1e-11 * np.abs(want) + 1e-15 + 16 * np.finfo(np.float64).eps * periodic
        assert bool(np.all((np.abs(got - want) <= bound)[defined]))


@pytest.mark.parametrize("t", sorted(CHAIN_OPS, key=lambda o: o.value))
def test_each_operator_alone_matches_its_kernel_in_float32(t):
    rng = np.random.default_rng(0)
    n = 2 if t in ELEMENT_BINARY else 1
    inputs = [safe_input(t, rng.standard_normal((4, 9)).astype(np.float32)) for _ in range(n)]
    chain = ElementwiseChain((ChainStep(attrs_of(t), tuple(("in", j) for j in range(n))),))
    got, want = chain.evaluate(np, inputs), member_by_member(chain, inputs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_chain_text_in_both_dialects():
    chain = ElementwiseChain((ChainStep(attrs_of(OpType.SCALAR_MUL), (("in", 0),)),
                              ChainStep(attrs_of(OpType.RELU), (("step", 0),)),
                              ChainStep(attrs_of(OpType.EW_ADD), (("step", 1), ("in", 1))),
                              ChainStep(attrs_of(OpType.POW), (("step", 2),))))
    assert chain.text("numexpr") == "((where((x0 * c0) < zero, zero, (x0 * c0))) + x1) ** c3"
    assert chain.text("cuda") == "pow(((((x0 * c0) < zero ? zero : (x0 * c0))) + x1), c3)"
    ins, out, body = cuda_source(chain)
    assert ins == "T x0, T x1, T zero, T one, T c0, T c3" and out == "T y"
    assert body == f"y = {chain.text('cuda')};"
    assert set(chain.constants(np.float32)) == {"zero", "one", "c0", "c3"}
    assert chain.constants(np.float32)["c0"].dtype == np.float32
    with pytest.raises(GraphError, match="unknown expression dialect 'c'"):
        chain.text("c")


@pytest.mark.parametrize("op", [OpType.RELU, OpType.ELU, OpType.EW_MAX, OpType.EW_MIN])
def test_a_chain_propagates_nans_as_its_member_kernels(op):
    """NumPy's maximum and minimum return a NaN operand; the fused expression did not (relu(0 / 0)
    gave 0 fused, NaN member by member: hypothesis found it). Zeros compare equal whatever their sign."""
    binary = op in (OpType.EW_MAX, OpType.EW_MIN)
    chain = ElementwiseChain((ChainStep(attrs_of(op), (("in", 0), ("in", 1)) if binary else (("in", 0),)),))
    values = np.array([np.nan, -0.0, 0.0, -1.5, 2.0, np.inf, -np.inf])
    a, b = np.meshgrid(values, values)
    inputs = [a, b] if binary else [a]
    with np.errstate(all="ignore"):
        got = chain.evaluate(np, inputs)
        want = member_by_member(chain, inputs, np.ones(a.shape, dtype=bool))
    assert np.array_equal(got, want, equal_nan=True)


def test_invalid_chains_are_refused():
    with pytest.raises(GraphError, match="gelu is not a chainable"):
        ElementwiseChain((ChainStep(attrs_of(OpType.GELU), (("in", 0),)),))
    with pytest.raises(GraphError, match="neither a chain input nor an earlier step"):
        ElementwiseChain((ChainStep(attrs_of(OpType.RELU), (("step", 0),)),))
    with pytest.raises(GraphError, match="add takes 2 operands, got 1"):
        ElementwiseChain((ChainStep(attrs_of(OpType.EW_ADD), (("in", 0),)),))


@pytest.mark.parametrize("t", sorted(ELEMENT_UNARY | ELEMENT_BINARY, key=lambda o: o.value))
def test_backward_reads_names_every_value_the_backward_kernel_reads(t):
    rng = np.random.default_rng(1)
    attrs = attrs_of(t)
    n = 2 if t in ELEMENT_BINARY else 1
    ops = [safe_input(t, rng.standard_normal((3, 4))) for _ in range(n)]
    outs = list(run_forward(np, attrs, ops))
    dy = [rng.standard_normal(outs[0].shape)]
    want = run_backward(np, attrs, ops, outs, dy)
    read_ops, read_outs = backward_reads(t, n, 1)
    stand_in = lambda a: np.broadcast_to(np.zeros((), a.dtype), a.shape)  # noqa: E731
    got = run_backward(np, attrs, [a if i in read_ops else stand_in(a) for i, a in enumerate(ops)],
                       [a if k in read_outs else stand_in(a) for k, a in enumerate(outs)], dy)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def test_backward_reads_of_other_operators_is_everything():
    assert backward_reads(OpType.LINEAR, 3, 1) == ((0, 1, 2), (0,))
