"""The bad-input corpus: malformed files and flags given to the ``flexrt`` command, with what each
must produce. Each area has its module (``corpus_*.py`` beside this one) with a ``CASES`` list;
``test_bad_inputs.py`` runs every case in-process, ``bench/bench_bad_inputs.py`` runs them in
child processes with a time and memory limit and counts the outcomes.

A case is the command line (``{name}`` stands for the path of the case's file ``name``, written
into a fresh folder first; ``{dir}`` for the folder) and a regular expression the one-line error
must match (naming where, the bad value and what is valid). Every case must end with exit status 1
or 2 and exactly one line on stderr starting ``flexrt``, without a traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

Content = Union[str, bytes]


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple                      # the command line after ``flexrt``
    expect: str                      # regular expression the error line must match (re.search)
    files: dict = field(default_factory=dict)   # file name -> content (str: UTF-8; bytes as is)
    setup: Optional[Callable[[Path], None]] = None  # makes what files cannot (a FIFO, a folder)


def case(id: str, argv: str, expect: str, files: Optional[dict] = None, setup=None) -> Case:
    """A case from a command line written as one string (split on spaces)."""
    return Case(id, tuple(argv.split()), expect, dict(files or {}), setup)


def materialize(c: Case, folder: Path) -> list[str]:
    """Write the case's files into ``folder`` and return its command line."""
    for name, content in c.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    if c.setup is not None:
        c.setup(folder)
    names = {f"{{{name}}}": str(folder / name) for name in c.files}
    names["{dir}"] = str(folder)

    def fill(arg: str) -> str:
        for k, v in names.items():
            arg = arg.replace(k, v)
        return arg
    return [fill(a) for a in c.argv]


@dataclass
class Outcome:
    status: int
    stderr: str
    stdout: str
    kind: str       # clear | unclear | traceback | silent | hang


def classify(c: Case, status: Optional[int], stderr: str) -> str:
    """The corpus's outcome classes (the issue's must-show)."""
    if status is None:
        return "hang"
    if "Traceback (most recent call last)" in stderr or status == 70 or status not in (0, 1, 2):
        return "traceback"
    if status == 0:
        return "silent"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if len(lines) == 1 and lines[0].startswith("flexrt") and len(lines[0]) <= 600 and re.search(c.expect, lines[0]):
        return "clear"
    return "unclear"


class _Timeout(Exception):
    pass


def run_in_process(c: Case, folder: Path, timeout_s: int = 10) -> Outcome:
    """Run the case through ``flexrt.cli.main`` in this process (SIGALRM ends a hang)."""
    from flexrt.cli import main

    argv = materialize(c, folder)
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout_s)
    cwd = os.getcwd()
    try:
        os.chdir(folder)  # a relative path in a case means the case's folder
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status: Optional[int] = main(argv)
    except _Timeout:
        status = None
    except SystemExit as e:  # a script calling sys.exit
        status = e.code if isinstance(e.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
    return Outcome(status if status is not None else -1, err.getvalue(), out.getvalue(),
                   classify(c, status, err.getvalue()))


def all_cases() -> list[Case]:
    """Every case of every ``corpus_*.py`` module beside this file."""
    import importlib

    cases: list[Case] = []
    for path in sorted(Path(__file__).parent.glob("corpus_*.py")):
        cases += importlib.import_module(f"tests.cli.{path.stem}").CASES
    ids = [c.id for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    assert not dupes, f"corpus case ids repeat: {sorted(dupes)}"
    return cases
