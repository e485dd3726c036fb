"""Run under ``mpiexec -n R`` by tests/runtime/test_mpi.py (not collected by pytest: no test_ prefix).

``python tests/runtime/mpi_case.py law MODEL,... KIND,...``: every (model, kind) strategy trains
3 steps across the ranks; rank 0 prints ``OK model kind loss_err weight_err`` or raises.
``... fail``: rank 1 raises during training; the job must end with its message.
``... world``: builds a session on dgx1_v100 (8 devices) whatever the world size.
``... memory MODEL,...``: the accuracy models' validation strategies on a local machine of one
device per rank; rank 0 prints ``PEAK model strategy device predicted measured`` per device.
``... host``: the ranks on one host together need more memory than it has: every rank refuses.
``... parts``: Fig. 16b's concat parts (tests/runtime/test_concat_parts.py) on devices 0, 2, 4, 6, and
Fig. 11b's Add cut by operand (test_add_operands.py) on devices 0 and 4, so on more than one rank,
and four merged convolutions with one folded kernel (test_folded_weights.py) data parallel on 8
devices; rank 0 prints ``OK parts N loss_err weight_err`` per part degree, ``OK operands
add|subtract ...``, ``OK folded data ...``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from flexrt.core import DataType  # noqa: E402
from flexrt.machine import load_machine  # noqa: E402
from flexrt.runtime import mpi  # noqa: E402
from flexrt.runtime.executor import optimizer_step, relative_error  # noqa: E402
from flexrt.runtime.reference import ReferenceTrainer  # noqa: E402
from flexrt.runtime.session import Session  # noqa: E402
from tests.runtime.test_central_law import MODELS, SGD, batch, reference_update, strategy_of, weights_for  # noqa: E402


def law(models: str, kinds: str) -> None:
    """A kind may end in ``+recompute`` (full recomputation, 2 operators a segment) or ``+fp16``
    (the model in float16, loss scale 256: within two float16 ulps of the reference) or ``+bf16``
    (bfloat16: within four bfloat16 ulps), and in ``+xla`` or ``+jax`` (that fusion policy's plan,
    ``flexrt.search.fusion_policies``), and in ``+sync`` (gradients synchronized after the backward
    pass, ``flexrt.simulator.sync_lowering``)."""
    from flexrt.ir.precision import with_precision
    from flexrt.strategy.config import wiring_of
    from flexrt.strategy.recompute import recompute_set
    machine = load_machine("dgx1_v100")
    comm = mpi.world()
    for model in models.split(","):
        for spec in kinds.split(","):
            kind, *extras = spec.split("+")
            precision = next((p for p in ("fp16", "bf16") if p in extras), None)
            half = precision == "fp16"
            m, loss = MODELS[model](DataType.DT_FLOAT if precision else DataType.DT_DOUBLE)
            pcg = with_precision(m.pcg, precision) if precision else m.pcg
            w0 = weights_for(pcg, DataType.DT_FLOAT if precision else DataType.DT_DOUBLE)
            inputs, labels = batch(pcg, loss)
            scale = {"loss_scale": 256.0} if half else {}
            strategy = strategy_of(kind, pcg, machine)
            ref = ReferenceTrainer(pcg, w0, reference_update(strategy, "sgd", **SGD), loss, **scale)
            if "recompute" in extras:
                strategy = strategy.with_recompute(recompute_set(wiring_of(pcg), "full", segment_ops=2))
            for policy in (e for e in extras if e in ("xla", "jax")):
                from flexrt.search.fusion_policies import apply_policy
                strategy = apply_policy(policy, strategy, machine)
                assert strategy.fusion, f"{model} {spec}: the {policy} policy fused nothing"
            cost = None
            if "sync" in extras:   # gradients synchronized after the backward pass (a barrier per device)
                from flexrt.simulator.cost_model import AnalyticCostModel
                from flexrt.simulator.sync_lowering import with_grad_sync
                cost = with_grad_sync(AnalyticCostModel(), "after_backward")
            session = Session(strategy, machine, loss=loss, weights=w0, cost_model=cost, **scale, **SGD)
            assert session.layout is not None and session.layout.size == comm.Get_size()
            loss_err = max(abs(ref.step(inputs, labels) - session.step(inputs, labels).loss) for _ in range(3))
            got = session.weights()
            weight_err = max(relative_error(got[k], ref.weights[k]) for k in got)
            tol = {"fp16": 2 * 2.0 ** -10, "bf16": 4 * 2.0 ** -8}.get(precision, 1e-10)
            if loss_err > max(tol, 1e-10) * 10 or weight_err > tol:
                raise AssertionError(f"{model} {spec}: loss error {loss_err:.3g}, weight error {weight_err:.3g}")
            if comm.Get_rank() == 0:
                print(f"OK {model} {spec} {loss_err:.3g} {weight_err:.3g}", flush=True)


def fail() -> None:
    machine = load_machine("dgx1_v100")
    comm = mpi.world()
    m, loss = MODELS["mlp"](DataType.DT_DOUBLE)
    session = Session(strategy_of("data", m.pcg, machine), machine, loss=loss, **SGD)
    inputs, labels = batch(m.pcg, loss)
    session.step(inputs, labels)
    if comm.Get_rank() == 1:
        raise RuntimeError("rank one failed on purpose")
    session.step(inputs, labels)  # the other ranks wait for rank 1's messages: the abort must end them
    session.step(inputs, labels)


def world() -> None:
    machine = load_machine("dgx1_v100")
    m, loss = MODELS["mlp"](DataType.DT_DOUBLE)
    Session(strategy_of("data", m.pcg, machine), machine, loss=loss, **SGD)


def memory(models: str) -> None:
    from flexrt.machine import local_machine
    from flexrt.model.accuracy import MODELS as ACCURACY_MODELS, batch_for, validation_strategies
    comm = mpi.world()
    machine = local_machine(1, nodes=comm.Get_size())
    for model in models.split(","):
        build, size = ACCURACY_MODELS[model]
        for label, strategy in validation_strategies(build(size), machine, range(2)):
            session = Session(strategy, machine, optimizer="sgd", lr=0.01)
            inputs, labels = batch_for(session.plan, size)
            # the measured peak follows the order tasks really ran in, which a loaded host perturbs: of
            # 3 steps, the one closest to the prediction (the other two warm up or met the load)
            closest = {}
            for _ in range(3):
                result = session.step(inputs, labels)
                for d, v in session.memory_report(result).items():
                    p, q = v['predicted_peak'], v['measured_peak']
                    if d not in closest or abs(p - q) < abs(closest[d][0] - closest[d][1]):
                        closest[d] = (p, q)
            for d, (p, q) in closest.items():
                if comm.Get_rank() == 0:
                    print(f"PEAK {model} {label} {d} {p} {q}", flush=True)


def host() -> None:
    """Each rank's devices fit the host's memory, the ranks' together do not: every rank refuses the
    run, none waits for another."""
    from mpi4py import MPI
    from flexrt.errors import StrategyError
    from flexrt.runtime import session as session_module
    from flexrt.simulator.memory import combined_peak
    machine = load_machine("dgx1_v100")
    comm = mpi.world()
    m, loss = MODELS["mlp"](DataType.DT_DOUBLE)
    from flexrt.strategy import data_parallel
    strategy = data_parallel(m.pcg, machine)                               # every device, both ranks
    s = Session(strategy, machine, loss=loss, check_memory=False, **SGD)
    need = combined_peak(s._replayed(), [d for d in range(machine.num_devices) if s.layout.owns(d)])
    total, most = comm.allreduce(need), comm.allreduce(need, op=MPI.MAX)
    assert 0 < most < total
    session_module.available_host_bytes = lambda: (most + total) // 2   # each rank's fits, theirs do not
    try:
        Session(strategy, machine, loss=loss, **SGD)
    except StrategyError as e:
        assert "in the ranks on this host" in str(e) and f"{machine.num_devices} simulated device(s)" in str(e), e
        print(f"REFUSED {comm.Get_rank()}", flush=True)
    session_module.available_host_bytes = lambda: total
    Session(strategy, machine, loss=loss, **SGD)                        # exactly enough
    print(f"FITS {comm.Get_rank()}", flush=True)


def parts() -> None:
    from tests.runtime import test_add_operands as add_case
    from tests.runtime.test_concat_parts import LOSS, dlrm_parts, fig16b
    machine = load_machine("dgx1_v100")
    comm = mpi.world()
    concat = dlrm_parts()
    cases = [(f"parts {n}", concat, fig16b(concat, machine, n, (0, 2, 4, 6))) for n in (2, 4)]
    for op in ("add", "subtract"):
        towers = add_case.towers(op)
        cases.append((f"operands {op}", towers, add_case.fig11b(towers, machine, devices=(0, 4))))
    from flexrt.strategy import data_parallel
    from tests.runtime.test_folded_weights import branches, merged
    base = branches(4)   # TASO's merged convolutions, their kernels folded into one weight
    cases.append(("folded data", base, data_parallel(merged(base), machine, 8)))
    for label, pcg, strategy in cases:
        w0 = weights_for(pcg, DataType.DT_DOUBLE)
        inputs, labels = batch(pcg, LOSS)
        ref = ReferenceTrainer(pcg, w0, optimizer_step("sgd", **SGD), LOSS)
        session = Session(strategy, machine, loss=LOSS, weights=w0, **SGD)
        assert session.layout is not None and session.layout.size == comm.Get_size()
        loss_err = max(abs(ref.step(inputs, labels) - session.step(inputs, labels).loss) for _ in range(3))
        got = session.weights()
        weight_err = max(relative_error(got[k], ref.weights[k]) for k in got)
        if loss_err > 1e-9 or weight_err > 1e-10:
            raise AssertionError(f"{label}: loss error {loss_err:.3g}, weight error {weight_err:.3g}")
        if comm.Get_rank() == 0:
            print(f"OK {label} {loss_err:.3g} {weight_err:.3g}", flush=True)


if __name__ == "__main__":
    {"law": law, "fail": fail, "world": world, "memory": memory, "host": host,
     "parts": parts}[sys.argv[1]](*sys.argv[2:])
