"""Every computing operator has a forward and a backward kernel."""

from flexrt.ir.op_type import PARALLEL_OPS, SOURCE_OPS
from flexrt.ir.registry import registered_ops
from flexrt.kernels import backward_kernel, forward_kernel


def test_every_compute_operator_has_forward_and_backward_kernels():
    compute = [t for t in registered_ops() if t not in PARALLEL_OPS and t not in SOURCE_OPS]
    assert len(compute) >= 40
    missing = []
    for t in compute:
        for what, get in (("forward", forward_kernel), ("backward", backward_kernel)):
            try:
                get(t)
            except Exception:
                missing.append(f"{t.value} ({what})")
    assert not missing, "operators without kernels: " + ", ".join(missing)
