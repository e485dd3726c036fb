"""README.md stays true: its Python examples run, and what they print is what the README says.

Each ```python block runs top to bottom, one statement at a time, in a namespace of its own. A
``print(...)`` whose output is one line must print exactly its trailing comment; a statement
followed by comment lines ``# SomeError: message`` must raise that error with that message. A
block that imports a module which has not landed yet is skipped, naming the module.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import re
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def trailing_comment(line: str) -> str | None:
    m = re.search(r"\)\s+#\s?(.*)$", line)
    return m.group(1).strip() if m else None


def expected_error(lines: list[str], after: int) -> tuple[str, str] | None:
    """``(error name, message)`` from the ``# Name: message`` comment lines after line ``after``."""
    comment = []
    for line in lines[after:]:
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    m = re.match(r"(\w+(?:Error|Exception)): (.*)", " ".join(comment))
    return (m.group(1), m.group(2)) if m else None


def run_block(code: str) -> None:
    lines = code.splitlines()
    namespace: dict = {"__name__": "__readme__"}
    for stmt in ast.parse(code).body:
        source = ast.get_source_segment(code, stmt)
        error = expected_error(lines, stmt.end_lineno)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            if error is None:
                exec(compile(ast.Module([stmt], []), "README.md", "exec"), namespace)
            else:
                with pytest.raises(Exception) as info:
                    exec(compile(ast.Module([stmt], []), "README.md", "exec"), namespace)
        if error is not None:
            name, message = error
            assert type(info.value).__name__ == name, f"{source!r} raised {info.value!r}, README says {name}"
            assert " ".join(str(info.value).split()) == message, f"{source!r}: README says {message!r}"
        printed = out.getvalue().rstrip("\n")
        is_print = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and getattr(
            stmt.value.func, "id", None) == "print"
        comment = trailing_comment(lines[stmt.end_lineno - 1])
        if is_print:
            assert printed.rpartition("\n")[2] != "None", f"README.md: {source} prints None"
        if is_print and comment is not None and "\n" not in printed:
            assert printed == comment, f"README.md: {source} prints {printed!r}, the README says {comment!r}"


def test_readme_has_quick_start_commands():
    text = README.read_text(encoding="utf-8")
    assert "```\nmake demo\nmake test\n```" in text


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs_as_documented(index, monkeypatch):
    code = python_blocks()[index]
    for m in re.finditer(r"^from (flexrt[\w.]*) import", code, re.M):
        try:
            importlib.import_module(m.group(1))
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("flexrt"):
                raise
            pytest.skip(f"README block {index} needs {e.name}, which has not landed yet")
    monkeypatch.setattr(sys, "argv", ["readme_example.py"])  # FFConfig parses the command line
    run_block(code)
