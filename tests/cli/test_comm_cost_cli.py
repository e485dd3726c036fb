"""``--comm-cost analytic|measured`` on flexrt simulate, search and train: measured AllReduce fits from
the machine file time the rings end to end, and a machine without fits is refused at startup."""

from __future__ import annotations

import json

import pytest

from flexrt.cli import main

from ..machine.test_collectives_yaml import GOOD

SIM = ["simulate", "mlp_unity_fig2", "-b", "64"]


@pytest.fixture()
def fits(tmp_path) -> str:
    path = tmp_path / "fits.yaml"
    path.write_text(GOOD)
    return str(path)


def run_json(capsys, argv) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_simulate_comm_cost_measured_end_to_end(fits, capsys):
    analytic = run_json(capsys, SIM + ["--machine", fits, "--json"])
    measured = run_json(capsys, SIM + ["--machine", fits, "--comm-cost", "measured", "--json"])
    assert (analytic["comm_cost"], analytic["allreduce_fits"]) == ("analytic", None)
    assert measured["comm_cost"] == "measured"
    (group,) = measured["allreduce_fits"]          # data parallel over the 4 devices: one group
    assert (group["devices"], group["nodes"], group["measured"]) == (4, 1, True)
    assert (group["c_s_per_byte"], group["d_s"]) == (pytest.approx(0.3e-9), pytest.approx(45e-6))
    assert measured["moved_elements"] == analytic["moved_elements"]   # the same task graph
    assert measured["iteration_time_s"] != analytic["iteration_time_s"]
    assert measured["iteration_time_s"] > 45e-6        # every gradient's ring takes at least D = 45 us
    # delta simulation walks from data parallelism (rings of 4) to a strategy with rings of 2 devices
    assert main(SIM + ["--machine", fits, "--comm-cost", "measured", "--method", "delta", "--random-strategy",
                       "0"]) == 0
    out = capsys.readouterr().out
    assert "AllReduces timed by measured T = C x + D: 2 devices on 1 node (measured), 4 devices on 1 node " \
           "(measured)" in out


def test_comm_cost_measured_without_fits_is_refused_with_the_command(capsys):
    for command in (SIM, ["search", "mlp_unity_fig2", "-b", "64", "--algo", "data-parallel"],
                    ["train", "mlp_unity_fig2", "-b", "8", "--steps", "1"]):
        assert main(command + ["--machine", "dgx1_v100" if command[0] != "train" else "local",
                               "--comm-cost", "measured"]) == 1
        err = capsys.readouterr().err
        assert "--comm-cost measured: machine " in err and "has no measured AllReduce fits" in err
        assert "measure them with `mpiexec -n N flexrt calibrate`" in err
    assert main(SIM + ["--machine", "dgx1_v100", "--comm-cost", "fast"]) == 2
    assert "invalid choice: 'fast' (choose from 'analytic', 'measured')" in capsys.readouterr().err


def test_search_and_train_time_rings_with_the_fits(fits, capsys):
    simulated = run_json(capsys, SIM + ["--machine", fits, "--comm-cost", "measured", "--json"])
    found = run_json(capsys, ["search", "mlp_unity_fig2", "-b", "64", "--machine", fits, "--algo", "data-parallel",
                              "--comm-cost", "measured", "--json"])
    assert found["comm_cost"] == "measured"
    assert found["iteration_time_s"] == pytest.approx(simulated["iteration_time_s"], rel=1e-12)
    trained = run_json(capsys, ["train", "mlp_unity_fig2", "-b", "64", "--machine", fits, "--steps", "1",
                                "--comm-cost", "measured", "--json"])
    assert trained["comm_cost"] == "measured"
    assert trained["simulated_ms"] == pytest.approx(simulated["iteration_time_s"] * 1e3, rel=1e-12)
