"""Load a model definition script: a zoo name (``examples/NAME.py``, installed as ``flexrt.examples``)
or a path to a ``.py`` file.

A script that defines ``build_model(ffconfig) -> FFModel`` at top level is imported (not run as
``__main__``) and that function is called; its other keyword parameters are the script's own
flags (``build_model(ffconfig, seq_length=40)`` takes ``--seq-length 128``). Any other script, such as an unmodified FlexFlow
example, runs as ``__main__`` in capture mode: its ``FFModel.compile`` call ends the run and hands
over the model; a script that never compiles gives the last ``FFModel`` it made. While a script
runs, ``sys.argv`` holds the model flags (so ``FFConfig()`` parses them) and its stdout is dropped.

Example:
    >>> loaded = load_model("mlp", ["-b", "64"])       # doctest: +SKIP
    >>> loaded.model.num_parameters()                  # doctest: +SKIP

Entry points: ``load_model``, ``zoo_models``.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import os
import runpy
import sys
import traceback
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator, Optional, Sequence

from flexrt.errors import ConfigError, FlexrtError
from flexrt.model import _capture
from flexrt.model.config import FFConfig
from flexrt.model.ffmodel import FFModel

ZOO_PACKAGE = "flexrt.examples"


@dataclass(frozen=True, slots=True)
class ZooModel:
    """A zoo entry: ``name`` (file stem) and the first line of its docstring."""

    name: str
    description: str


@dataclass(frozen=True)
class LoadedModel:
    """A model built from a script: its name, the script it came from and the model."""

    name: str
    source: str
    model: FFModel

    @property
    def config(self) -> FFConfig:
        return self.model.ffconfig


def _zoo_files() -> dict[str, resources.abc.Traversable]:
    try:
        root = resources.files(ZOO_PACKAGE)
    except ModuleNotFoundError:
        return {}
    files = {}
    for entry in root.iterdir():
        if entry.is_file() and entry.name.endswith(".py") and not entry.name.startswith("_"):
            files[entry.name[:-3]] = entry
    return dict(sorted(files.items()))


def _first_doc_line(text: str) -> str:
    try:
        doc = ast.get_docstring(ast.parse(text))
    except SyntaxError as e:
        return f"(does not parse: line {e.lineno}: {e.msg})"
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""


def zoo_models() -> tuple[ZooModel, ...]:
    """Every zoo model, by name, with the first line of its script's docstring."""
    return tuple(ZooModel(name, _first_doc_line(f.read_text(encoding="utf-8"))) for name, f in _zoo_files().items())


def _is_path(model: str) -> bool:
    return model.endswith(".py") or "/" in model or os.sep in model


def _resolve(model: str) -> tuple[str, resources.abc.Traversable]:
    if not isinstance(model, str) or not model:
        raise ConfigError(f"a model is a zoo name or a path to a .py script, got {model!r}")
    if _is_path(model):
        path = Path(model)
        if not path.is_file():
            raise ConfigError(f"model script {model} does not exist")
        return path.stem, path
    zoo = _zoo_files()
    if model in zoo:
        return model, zoo[model]
    valid = ", ".join(zoo) if zoo else "none (the zoo is empty)"
    raise ConfigError(f"unknown model {model!r}; valid models: {valid} (or a path to a .py definition script)")


@contextlib.contextmanager
def _script_env(path: Path, argv: Sequence[str]) -> Iterator[None]:
    """sys.argv = [script, *argv], the script's folder first on sys.path, stdout dropped."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _script_line(exc: BaseException, path: Path) -> str:
    """``file:line`` of the innermost frame of ``exc``'s traceback inside the script."""
    where = str(path)
    target = os.path.realpath(path)
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.realpath(frame.filename) == target:
            where = f"{path}:{frame.lineno}"
    return where


def _defines_build_model(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "build_model" for n in tree.body)


def script_options(build_model) -> dict[str, inspect.Parameter]:
    """``--flag`` -> parameter, for build_model's keyword parameters after ``ffconfig``."""
    params = list(inspect.signature(build_model).parameters.values())[1:]
    return {"--" + p.name.replace("_", "-"): p for p in params
            if p.default is not inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def split_script_flags(build_model, argv: Sequence[str]) -> tuple[list[str], dict]:
    """Separate the script's own flags (see ``script_options``) from the FFConfig flags."""
    options = script_options(build_model)
    rest, kwargs, i = [], {}, 0
    argv = list(argv)
    while i < len(argv):
        flag, _, inline = argv[i].partition("=")
        if flag not in options:
            rest.append(argv[i])
            i += 1
            continue
        param = options[flag]
        if isinstance(param.default, bool):
            kwargs[param.name] = True
            i += 1
            continue
        if not inline:
            if i + 1 >= len(argv):
                raise ConfigError(f"flag {flag} needs a value (default {param.default!r})")
            inline, i = argv[i + 1], i + 1
        try:
            kwargs[param.name] = type(param.default)(inline)
        except ValueError:
            kind = type(param.default).__name__
            raise ConfigError(f"flag {flag} takes {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {inline!r}") from None
        i += 1
    return rest, kwargs


def _parse(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as e:
        raise ConfigError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None


def _build_model_of(path: Path):
    return runpy.run_path(str(path), run_name="__flexrt_model__")["build_model"]


def script_build_model(model: str):
    """The ``build_model`` function of a zoo name or script path, or None when it has none."""
    _, entry = _resolve(model)
    with resources.as_file(entry) as path:
        path = Path(path)
        tree = _parse(path)
        if not _defines_build_model(tree):
            return None
        with _script_env(path, []):
            return _build_model_of(path)


def _run(path: Path, argv: Sequence[str], uses_build_model: bool) -> Optional[FFModel]:
    if uses_build_model:
        build_model = _build_model_of(path)
        rest, kwargs = split_script_flags(build_model, argv)
        result = build_model(FFConfig(rest), **kwargs)
        if result is not None and not isinstance(result, FFModel):
            raise ConfigError(f"{path}: build_model(ffconfig) must return an FFModel, got {type(result).__name__}")
        return result
    runpy.run_path(str(path), run_name="__main__")
    return None


def load_model(model: str, argv: Sequence[str] = ()) -> LoadedModel:
    """Build the model of a zoo name or script path, with model flags ``argv`` (``["-b", "64"]``).

    Raises ConfigError for an unknown model or a script that fails (with the script's file:line),
    and passes on the script's own flexrt errors (ShapeError, ...) with that location added.
    """
    name, entry = _resolve(model)
    argv = list(argv)
    with resources.as_file(entry) as path:
        path = Path(path)
        tree = _parse(path)
        built: Optional[FFModel] = None
        with _capture.capturing() as state, _script_env(path, argv):
            try:
                built = _run(path, argv, _defines_build_model(tree))
            except _capture.ModelCaptured as captured:
                built = captured.model
            except FlexrtError as e:
                raise type(e)(f"model {name} ({_script_line(e, path)}): {e}") from e
            except SystemExit as e:
                if not state.models:
                    raise ConfigError(f"model script {path} exited (status {e.code}) before making an FFModel") \
                        from None
            except ModuleNotFoundError as e:
                if e.name and e.name.split(".")[0] == "flexflow":
                    raise ConfigError(f"{_script_line(e, path)}: the script imports {e.name}; change "
                                      f"`from flexflow.core import *` to `from flexrt.core import *`") from None
                raise ConfigError(f"{_script_line(e, path)}: {e}") from e
            except Exception as e:  # a bug in the script: say where, keep the cause for --traceback users
                raise ConfigError(f"model script {_script_line(e, path)} raised {type(e).__name__}: {e}") from e
        if built is None:
            if not state.models:
                raise ConfigError(f"model script {path} made no FFModel (define build_model(ffconfig) or build one "
                                  f"at top level / under `if __name__ == \"__main__\":`)")
            built = state.models[-1]
        return LoadedModel(name, str(path), built)
