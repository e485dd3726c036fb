"""The NumPy runtime holds every device of its process in host memory: a run whose replayed peak
exceeds the host's available memory is refused before anything is allocated, with what it needs
and what there is (not killed by the system halfway)."""

from __future__ import annotations

import re

import pytest

from flexrt.core import DataType
from flexrt.errors import StrategyError
from flexrt.machine import load_machine
from flexrt.runtime import session as session_module
from flexrt.runtime.session import Session
from flexrt.simulator.memory import MemoryTimeline, combined_peak
from flexrt.strategy import data_parallel

from .test_central_law import MODELS, batch, weights_for

MACHINE = load_machine("dgx1_v100")


def test_combined_peak_adds_the_devices_at_each_instant():
    tl = MemoryTimeline(peak_bytes={0: 10, 1: 7}, times={0: [0, 1, 2, 3], 1: [0, 2, 2, 3]},
                        live_bytes={0: [4, 10, 5, 5], 1: [1, 7, 3, 0]}, allocated_bytes={})
    # t=0: 4+1; t=1: 10+1; t=2: 5 + max(7, 3) (device 1 changes twice then); t=3: 5+0
    assert combined_peak(tl, [0, 1]) == 12
    assert combined_peak(tl, [0]) == 10 and combined_peak(tl, [1]) == 7 and combined_peak(tl, []) == 0


def _session(**kw):
    m, loss = MODELS["mlp"](DataType.DT_DOUBLE)
    return Session(data_parallel(m.pcg, MACHINE), MACHINE, loss=loss, weights=weights_for(m.pcg, DataType.DT_DOUBLE),
                   lr=0.05, **kw), m.pcg, loss


def test_a_run_larger_than_the_host_is_refused_with_both_numbers(monkeypatch):
    s, pcg, loss = _session()
    need = session_module.combined_peak(s._replayed(), range(MACHINE.num_devices))
    s.step(*batch(pcg, loss))
    measured = sum(s.last.peak_bytes.get(d, 0) for d in range(MACHINE.num_devices))
    assert max(s.last.peak_bytes.values()) <= need <= measured   # between the busiest device and all peaks summed
    monkeypatch.setattr(session_module, "available_host_bytes", lambda: need - 1)
    with pytest.raises(StrategyError, match=r"does not fit this host: .* 8 simulated device\(s\) .* available"):
        _session()
    _session(check_memory=False)                                  # the check can be skipped
    monkeypatch.setattr(session_module, "available_host_bytes", lambda: need)
    _session()
    monkeypatch.setattr(session_module, "available_host_bytes", lambda: None)   # the system does not say
    _session()


@pytest.mark.mpi
def test_ranks_on_one_host_are_counted_together_and_refuse_together():
    from tests.runtime.test_mpi import mpirun
    r = mpirun(2, "host")
    assert r.returncode == 0, r.stdout + r.stderr
    # the ranks' lines may interleave in the launcher's output
    assert sorted(re.findall(r"(REFUSED|FITS) (\d)", r.stdout)) == \
        [("FITS", "0"), ("FITS", "1"), ("REFUSED", "0"), ("REFUSED", "1")], r.stdout
