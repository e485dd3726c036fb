"""Backward of linear (every fused activation, with and without bias) by finite differences."""

import numpy as np
import pytest

from flexrt.ir import ActiMode
from flexrt.ir.ops import LinearAttrs
from flexrt.kernels.gradcheck import check_gradients


@pytest.mark.parametrize("act", list(ActiMode))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xshape", [(3, 4), (3, 2, 4)])
def test_linear_backward_matches_finite_differences(act, bias, xshape):
    rng = np.random.default_rng(11)
    ops = [rng.standard_normal(xshape), rng.standard_normal((4, 5))] + ([rng.standard_normal(5)] if bias else [])
    n = check_gradients(LinearAttrs(5, bias, act), ops, rng)
    assert n == np.prod(xshape) + 20 + (5 if bias else 0)
