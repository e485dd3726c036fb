"""DisCo's AllReduce regression per device group in ``flexrt calibrate``: the fit recovers a known
T = C x + D and reports its error, the calibrated machine file carries the fits (and loads them back
as written), and under ``mpiexec`` every group 2..R is measured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flexrt.errors import MachineSpecError
from flexrt.machine import load_machine
from flexrt.runtime.calibrate import CalibrationResult, fit_collective, machine_yaml

SIZES = [8, 4096, 65536, 1 << 20, 16 << 20]
ROOT = Path(__file__).resolve().parents[2]


def result(groups=(), allreduce=(), ranks=0) -> CalibrationResult:
    """A calibration of made-up host numbers with the given AllReduce samples."""
    return CalibrationResult((("float32", 1e11), ("float64", 5e10)), 2e10, 2e-6, 1e10, 3e-7, (), 8 * 2**30, 2,
                             True, 0.1, 5e9, 2e-6, max(ranks, 1), tuple(allreduce), ranks, tuple(groups))


def test_fit_recovers_a_known_c_and_d_and_reports_its_error():
    c, d = 0.25e-9, 20e-6
    f = fit_collective(SIZES, [c * x + d for x in SIZES], devices=3, nodes=1)
    assert (f.devices, f.nodes, f.sizes) == (3, 1, 5)
    assert f.c_s_per_byte == pytest.approx(c, rel=1e-9) and f.d_s == pytest.approx(d, rel=1e-9)
    assert f.r2 == pytest.approx(1.0) and f.max_rel_error < 1e-9 and f.median_rel_error < 1e-9
    # 10% above the line at 8 bytes and 10% below at 16 MB: both count alike (relative least squares)
    times = [c * x + d for x in SIZES]
    times[0] *= 1.1
    times[-1] *= 0.9
    noisy = fit_collective(SIZES, times)
    predicted = [noisy.time_s(x) for x in SIZES]
    rel = sorted(abs(p - t) / t for p, t in zip(predicted, times))
    assert noisy.max_rel_error == pytest.approx(rel[-1]) and noisy.median_rel_error == pytest.approx(rel[2])
    assert 0.05 < noisy.max_rel_error < 0.1
    assert noisy.d_s == pytest.approx(d, rel=0.1) and noisy.c_s_per_byte == pytest.approx(c, rel=0.1)


def test_fit_keeps_c_and_d_non_negative():
    # times that fall with size below 1 MB would give a negative C: C is 0 and D their (relative) mean
    flat = fit_collective([8, 1 << 20], [10e-6, 9e-6])
    assert flat.c_s_per_byte == 0.0 and 9e-6 < flat.d_s < 10e-6
    # times that grow faster than the size would give a negative D: D is 0 and C the line through zero
    steep = fit_collective([1 << 20, 2 << 20], [1e-3, 3e-3])
    assert steep.d_s == 0.0 and 1e-3 / (1 << 20) < steep.c_s_per_byte < 3e-3 / (2 << 20)
    with pytest.raises(MachineSpecError, match="two or more message sizes"):
        fit_collective([8, 8], [1e-5, 2e-5])
    with pytest.raises(MachineSpecError, match="positive times"):
        fit_collective([8, 16], [1e-5, 0.0])


def test_machine_file_carries_the_group_fits_and_loads_them_as_written(tmp_path):
    lines = {2: (0.2e-9, 15e-6), 3: (0.31e-9, 33e-6)}
    groups = [(g, 1, tuple((x, c * x + d) for x in SIZES)) for g, (c, d) in lines.items()]
    r = result(groups, groups[-1][2], ranks=3)
    text = machine_yaml(r, 1)
    assert "MPI messages between two ranks measured here" in text   # the links between ranks: point to point
    assert "collectives:\n  allreduce:\n    - {devices: 2, nodes: 1, c_ns_per_byte: 0.2, d_us: 15, r2: 1" in text
    path = tmp_path / "local.yaml"
    path.write_text(text)
    machine = load_machine(str(path), nodes=3)
    loaded = machine.fits()
    assert [(f.devices, f.nodes, f.sizes) for f in loaded] == [(2, 1, 5), (3, 1, 5)]
    for f, written in zip(loaded, r.group_fits()):
        assert f.c_s_per_byte == pytest.approx(written.c_s_per_byte, rel=1e-5)   # 6 significant digits
        assert f.d_s == pytest.approx(written.d_s, rel=1e-5)
        assert f.max_rel_error == pytest.approx(written.max_rel_error, rel=1e-5, abs=1e-12)
    doc = r.to_json()["allreduce_groups"]
    assert [(g["devices"], g["nodes"], len(g["samples"])) for g in doc] == [(2, 1, 5), (3, 1, 5)]
    assert doc[1]["c_s_per_byte"] == pytest.approx(0.31e-9)
    assert "collectives:" not in machine_yaml(result(), 1)   # nothing measured between ranks: no section


def test_the_calibrated_local_machine_keeps_its_fits(tmp_path, monkeypatch):
    from flexrt.machine import calibrated_local_path, local_machine
    from flexrt.runtime.calibrate import write_machine_yaml
    monkeypatch.setenv("FLEXRT_CACHE_DIR", str(tmp_path))
    groups = [(2, 1, tuple((x, 0.2e-9 * x + 15e-6) for x in SIZES))]
    write_machine_yaml(result(groups, groups[0][2], ranks=2), calibrated_local_path(), 2)
    fits = load_machine("local").fits()
    assert len(fits) == 1 and fits[0].d_s == pytest.approx(15e-6, rel=1e-5)
    assert local_machine(6, nodes=2).fits() == fits      # any worker count and node count


@pytest.mark.mpi
def test_calibrate_under_mpiexec_fits_every_device_group(tmp_path):
    from flexrt.runtime.mpi import find_mpiexec
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_"))}
    env["FLEXRT_CACHE_DIR"] = str(tmp_path)
    out = tmp_path / "fits.yaml"
    r = subprocess.run([find_mpiexec(), "-n", "3", sys.executable, "-m", "flexrt.cli", "calibrate", "--quick",
                        "--devices", "1", "--output", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "AllReduce 2 devices, 1 node  T = " in r.stdout and "AllReduce 3 devices, 1 node  T = " in r.stdout
    machine = load_machine(str(out), nodes=3)
    fits = machine.fits()
    assert [(f.devices, f.nodes, f.sizes) for f in fits] == [(2, 1, 4), (3, 1, 4)]   # quick: 4 sizes
    assert all(np.isfinite([f.c_s_per_byte, f.d_s, f.r2, f.max_rel_error]).all() for f in fits)
    assert all(f.c_s_per_byte > 0 or f.d_s > 0 for f in fits)
