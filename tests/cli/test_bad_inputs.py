"""Every case of the bad-input corpus (``tests/cli/badinput.py``) gets one clear line and a
non-zero exit: no traceback, no hang, no silent acceptance."""

from __future__ import annotations

import pytest

from .badinput import all_cases, run_in_process

CASES = all_cases()


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_one_clear_line(c, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    r = run_in_process(c, tmp_path)
    assert r.kind == "clear", (f"{c.id}: {r.kind} (exit {r.status})\nargv: {' '.join(c.argv)}\nexpected: {c.expect}\n"
                               f"stderr: {r.stderr[-2000:]}")



def test_the_corpus_is_large():
    assert len(CASES) >= 200, len(CASES)
