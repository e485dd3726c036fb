"""Run under ``mpiexec -n R`` by tests/runtime/test_forward_only.py (not collected: no test_ prefix).

``python tests/runtime/mpi_forward_case.py MODEL KIND,...``: for each strategy kind, a forward pass
alone across the ranks, every operator's output read back on every rank (compared with one device),
a weight written and read back, then the rest of the iteration and two more steps compared with the
single-device reference; rank 0 prints ``OK model kind`` or a rank raises.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from flexrt.core import DataType  # noqa: E402
from flexrt.machine import load_machine  # noqa: E402
from flexrt.runtime import mpi  # noqa: E402
from flexrt.runtime.executor import optimizer_step, relative_error  # noqa: E402
from flexrt.runtime.reference import ReferenceTrainer  # noqa: E402
from flexrt.runtime.session import Session  # noqa: E402
from tests.runtime.test_central_law import MODELS, SGD, batch, strategy_of, weights_for  # noqa: E402
from tests.runtime.test_forward_only import reference_outputs  # noqa: E402


def check(model: str, kind: str, machine, comm) -> None:
    m, loss = MODELS[model](DataType.DT_DOUBLE)
    w0 = weights_for(m.pcg, DataType.DT_DOUBLE)
    inputs, labels = batch(m.pcg, loss)
    session = Session(strategy_of(kind, m.pcg, machine), machine, loss=loss, weights=w0, **SGD)
    assert session.layout is not None and session.layout.size == comm.Get_size()
    where = f"rank {comm.Get_rank()} {model} {kind}"
    session.forward(inputs)
    for (op, k), want in reference_outputs(m.pcg, w0, inputs).items():
        err = relative_error(session.output(op, k), want)
        if err > 1e-10:
            raise AssertionError(f"{where}: output {op}:{k} differs by {err:.3g}")
    ref = ReferenceTrainer(m.pcg, w0, optimizer_step("sgd", **SGD), loss)
    errors = [abs(session.finish(labels).loss - ref.step(inputs, labels))]
    name = min(w0)
    new = np.random.default_rng(7).standard_normal(w0[name].shape)
    session.set_weight(name, new)
    ref.weights[name][...] = new
    if relative_error(session.weight(name), new) > 0:
        raise AssertionError(f"{where}: weight {name} read back differs")
    errors += [abs(session.step(inputs, labels).loss - ref.step(inputs, labels)) for _ in range(2)]
    got = session.weights()
    weight_err = max(relative_error(got[k], ref.weights[k]) for k in got)
    if max(errors) > 1e-10 or weight_err > 1e-10:
        raise AssertionError(f"{where}: loss error {max(errors):.3g}, weight error {weight_err:.3g}")
    if comm.Get_rank() == 0:
        print(f"OK {model} {kind}", flush=True)


def main(model: str, kinds: str) -> None:
    machine = load_machine("dgx1_v100")
    comm = mpi.world()
    for kind in kinds.split(","):
        check(model, kind, machine, comm)


if __name__ == "__main__":
    main(*sys.argv[1:])
