"""Run under ``mpiexec -n R`` by tests/runtime/test_mpi.py (not collected by pytest: no test_ prefix).

``python tests/runtime/mpi_case.py law MODEL,... KIND,...``: every (model, kind) strategy trains
3 steps across the ranks; rank 0 prints ``OK model kind loss_err weight_err`` or raises.
``... fail``: rank 1 raises during training; the job must end with its message.
``... world``: builds a session on dgx1_v100 (8 devices) whatever the world size.
``... memory MODEL,...``: the accuracy models' validation strategies on a local machine of one
device per rank; rank 0 prints ``PEAK model strategy device predicted measured`` per device.
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
from tests.runtime.test_central_law import MODELS, SGD, batch, strategy_of, weights_for  # noqa: E402


def law(models: str, kinds: str) -> None:
    machine = load_machine("dgx1_v100")
    comm = mpi.world()
    for model in models.split(","):
        for kind in kinds.split(","):
            m, loss = MODELS[model](DataType.DT_DOUBLE)
            w0 = weights_for(m.pcg, DataType.DT_DOUBLE)
            inputs, labels = batch(m.pcg, loss)
            ref = ReferenceTrainer(m.pcg, w0, optimizer_step("sgd", **SGD), loss)
            session = Session(strategy_of(kind, m.pcg, machine), machine, loss=loss, weights=w0, **SGD)
            assert session.layout is not None and session.layout.size == comm.Get_size()
            loss_err = max(abs(ref.step(inputs, labels) - session.step(inputs, labels).loss) for _ in range(3))
            got = session.weights()
            weight_err = max(relative_error(got[k], ref.weights[k]) for k in got)
            if loss_err > 1e-10 or weight_err > 1e-10:
                raise AssertionError(f"{model} {kind}: loss error {loss_err:.3g}, weight error {weight_err:.3g}")
            if comm.Get_rank() == 0:
                print(f"OK {model} {kind} {loss_err:.3g} {weight_err:.3g}", flush=True)


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
            for _ in range(3):
                result = session.step(inputs, labels)
            for d, v in session.memory_report(result).items():
                if comm.Get_rank() == 0:
                    print(f"PEAK {model} {label} {d} {v['predicted_peak']} {v['measured_peak']}", flush=True)


if __name__ == "__main__":
    {"law": law, "fail": fail, "world": world, "memory": memory}[sys.argv[1]](*sys.argv[2:])
