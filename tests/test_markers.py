"""The ``gpu``/``mpi`` markers skip with a reason where the machine lacks what they need, and run
where it has it; an unknown marker is an error (``--strict-markers``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import gpu_missing, mpi_missing

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text(encoding="utf-8")
# The inner runs need neither plugin, and loading them costs seconds per run.
NO_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:benchmark")
INI = """
[pytest]
addopts = -ra --strict-markers
markers =
    gpu: needs a GPU
    mpi: needs MPI
    slow: slow
"""


@pytest.mark.parametrize("marker, missing", [("gpu", gpu_missing), ("mpi", mpi_missing)])
def test_marker_skips_with_reason_or_runs(pytester, marker, missing):
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.{marker}
        def test_needs_it():
            assert True

        def test_plain():
            assert True
    """)
    result = pytester.runpytest(*NO_PLUGINS)
    reason = missing()
    if reason is None:
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines([f"SKIPPED*{reason[:40]}*"])


def test_unknown_marker_is_an_error(pytester):
    pytester.makeini(INI)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpuu
        def test_typo():
            pass
    """)
    result = pytester.runpytest(*NO_PLUGINS)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*'gpuu' not found in `markers` configuration option*"])
