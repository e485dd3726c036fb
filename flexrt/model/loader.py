"""Load a model definition script: a zoo name (``examples/NAME.py``, installed as ``flexrt.examples``)
or a path to a ``.py`` file.

A script that defines ``build_model(ffconfig) -> FFModel`` at top level is imported (not run as
``__main__``) and that function is called; its other keyword parameters are the script's own
flags (``build_model(ffconfig, seq_length=40)`` takes ``--seq-length 128``). Any other script, such as an unmodified FlexFlow
example, runs as ``__main__`` in capture mode: its ``FFModel.compile`` call ends the run and hands
over the model; a script that never compiles gives the last ``FFModel`` it made. While a script
runs, ``sys.argv`` holds the model flags (so ``FFConfig()`` parses them) and its stdout is dropped.

A script is read through ``flexrt.inputs`` (a regular file, decoded as Python decodes source: UTF-8
or the PEP 263 coding line it declares), parsed and compiled once, and run in a fresh module as
``runpy.run_path`` would. Whatever goes wrong is one ``ConfigError`` (or the script's own flexrt
error) naming the script's file and line: a bad byte (with its offset), a syntax error, or an
exception its code raised (``m.py:3: the script raised ZeroDivisionError: division by zero``).

Example:
    >>> loaded = load_model("mlp", ["-b", "64"])       # doctest: +SKIP
    >>> loaded.model.num_parameters()                  # doctest: +SKIP

Entry points: ``load_model``, ``zoo_models``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import io
import os
import re
import signal
import sys
import threading
import traceback
import types
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from flexrt.errors import ConfigError, FlexrtError
from flexrt.inputs import clip, read_text, short
from flexrt.ir.op_type import OpType
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
        return path.stem, path  # reading it says what is wrong with it (missing, a directory, ...)
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


MESSAGE_CHARS = 300  # of a script's exception message quoted in an error


def _script_frame(exc: BaseException, path: Path):
    """The innermost frame of ``exc``'s traceback inside the script, or None."""
    target = os.path.realpath(path)
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.realpath(frame.filename) == target:
            found = frame
    return found


def _script_line(exc: BaseException, path: Path) -> str:
    """``file:line`` of the innermost frame of ``exc``'s traceback inside the script."""
    frame = _script_frame(exc, path)
    return f"{path}:{frame.lineno}" if frame is not None else str(path)


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
                raise ConfigError(f"flag {flag} needs a value (default {short(param.default)})")
            inline, i = argv[i + 1], i + 1
        try:
            kwargs[param.name] = type(param.default)(inline)
        except (ValueError, TypeError):  # TypeError: a default such as None, whose type takes no text
            kind = type(param.default).__name__
            raise ConfigError(f"flag {flag} takes {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got "
                              f"{short(inline)}") from None
        i += 1
    return rest, kwargs


@dataclass(frozen=True)
class _Script:
    """A script read, parsed and compiled: its path, syntax tree and code."""

    path: Path
    tree: ast.Module
    code: types.CodeType


def _read_script(path: Path) -> _Script:
    """Read, parse and compile a script; ConfigError naming file:line for anything that stops it."""
    text = read_text(path, "model script", ConfigError, source=True)
    try:
        tree = ast.parse(text, filename=str(path))
        return _Script(path, tree, compile(tree, str(path), "exec"))
    except SyntaxError as e:
        line = e.lineno or (text.count("\n", 0, text.find("\0")) + 1 if "\0" in text else 1)
        raise ConfigError(f"{path}:{line}: syntax error: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise ConfigError(f"{path}: the script is nested too deeply for Python to compile") from None


def _exec(script: _Script, run_name: str) -> dict[str, Any]:
    """Run the script in a fresh module named ``run_name`` (in ``sys.modules`` while it runs, as
    ``runpy.run_path`` does) and return its globals."""
    module = types.ModuleType(run_name)
    module.__dict__.update(__file__=str(script.path), __cached__=None, __loader__=None, __package__="",
                           __spec__=None)
    saved = sys.modules.get(run_name)
    sys.modules[run_name] = module
    try:
        exec(script.code, module.__dict__)
    finally:
        if saved is None:
            sys.modules.pop(run_name, None)
        else:
            sys.modules[run_name] = saved
    return dict(module.__dict__)


def _flexflow_hint(exc: ModuleNotFoundError, path: Path) -> str:
    """What to do about a script importing one of FlexFlow's modules: import flexrt's counterpart
    where there is one, else say there is none. (Python names only the missing top package,
    ``flexflow``; the statement names the module.)"""
    frame = _script_frame(exc, path)
    found = re.search(r"\b(?:from|import)\s+(flexflow(?:\.\w+)*)", frame.line or "") if frame else None
    module = found.group(1) if found else exc.name
    ours = "flexrt" + module[len("flexflow"):]
    try:
        found = importlib.util.find_spec(ours) is not None
    except ImportError:  # its parent package is missing
        found = False
    if found:
        return f"the script imports {module}; import {ours} instead (e.g. `from flexrt.core import *`)"
    return f"the script imports {module}, which flexrt does not provide ({ours} does not exist)"


SCRIPT_TIMEOUT_ENV = "FLEXRT_SCRIPT_TIMEOUT"
DEFAULT_SCRIPT_TIMEOUT_S = 600.0


class _ScriptTimeout(BaseException):
    """Raised into a script that runs past its time (a BaseException: its ``except Exception`` cannot
    swallow it)."""


def script_timeout_s() -> float:
    """Seconds a model script may run before flexrt stops it: ``$FLEXRT_SCRIPT_TIMEOUT`` (0: no
    limit), else ``DEFAULT_SCRIPT_TIMEOUT_S``."""
    text = os.environ.get(SCRIPT_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_SCRIPT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"${SCRIPT_TIMEOUT_ENV} must be a number of seconds >= 0 (0: no limit), got {short(text)}")
    return value


@contextlib.contextmanager
def _time_limit(path: Path) -> Iterator[None]:
    """Stop the script at ``script_timeout_s`` with a ConfigError naming the line it was running: a
    script that loops never hangs a command. Only in the main thread where SIGALRM exists (elsewhere
    it runs unlimited)."""
    seconds = script_timeout_s()
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise _ScriptTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _ScriptTimeout as e:
        raise ConfigError(f"{_script_line(e, path)}: the script ran {seconds:g} s without handing over a model (under "
                          f"flexrt its FFModel.compile call, or build_model's return, ends the run); set "
                          f"${SCRIPT_TIMEOUT_ENV} to allow longer (seconds, 0: no limit)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _reported(name: str, path: Path) -> Iterator[None]:
    """An exception of the running script as one error naming the script's file:line: its own flexrt
    errors keep their type, anything else becomes a ConfigError."""
    try:
        yield
    except FlexrtError as e:
        raise type(e)(f"model {name} ({_script_line(e, path)}): {e}") from e
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "flexflow":
            raise ConfigError(f"{_script_line(e, path)}: {_flexflow_hint(e, path)}") from None
        raise ConfigError(f"{_script_line(e, path)}: {clip(str(e), MESSAGE_CHARS)}") from e
    except Exception as e:  # a bug in the script: say where, keep the cause for --traceback users
        raise ConfigError(f"{_script_line(e, path)}: the script raised {type(e).__name__}: "
                          f"{clip(str(e), MESSAGE_CHARS)}") from e


_BUILD_MODELS: dict = {}  # (path, mtime, size) -> build_model: a command runs a script's top level once


def _build_model_of(script: _Script, name: str):
    try:
        st = os.stat(script.path)
        key: Optional[tuple] = (str(script.path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    hit = _BUILD_MODELS.get(key) if key is not None else None
    if hit is not None:
        return hit
    with _reported(name, script.path):
        build_model = _exec(script, "__flexrt_model__").get("build_model")
    if not callable(build_model):
        raise ConfigError(f"{script.path}: build_model is {short(build_model)} after the script ran, not a function "
                          f"build_model(ffconfig)")
    if key is not None:
        if len(_BUILD_MODELS) > 64:
            _BUILD_MODELS.clear()
        _BUILD_MODELS[key] = build_model
    return build_model


def is_onnx(model: str) -> bool:
    """``model`` names an ONNX file (``load_model`` builds it through ``flexrt.onnx``)."""
    return isinstance(model, str) and model.lower().endswith(".onnx")


def _onnx_inputs(om, config: FFConfig, batch_given: bool, path: str) -> list:
    """(name, dims, DataType) of each graph input that is not an initializer: the first dimension is
    the batch (``-b`` when given or when the file leaves it symbolic), the others the file's."""
    from flexrt.onnx.model import input_data_type
    out = []
    for i in om.model.graph.input:
        if i.name in om.constants:
            continue
        t = i.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
        if not dims:
            raise ConfigError(f"{path}: input '{i.name}' has no dimensions; flexrt's inputs have a batch dimension")
        if batch_given or dims[0] is None:
            dims[0] = config.batch_size
        if any(d is None for d in dims[1:]):
            shown = [d.dim_value or d.dim_param or "?" for d in t.shape.dim]
            raise ConfigError(f"{path}: input '{i.name}' has symbolic dimensions {shown}; only the first (the "
                              f"batch) may be symbolic: export with fixed sizes")
        dtype = input_data_type(t.elem_type)
        if dtype is None:
            raise ConfigError(f"{path}: input '{i.name}' has ONNX element type {t.elem_type}; valid: float, double, "
                              f"int32, int64, bool (1, 11, 6, 7, 9)")
        out.append((i.name, dims, dtype))
    if not out:
        raise ConfigError(f"{path}: the graph has no inputs besides its initializers")
    return out


def _load_onnx(model: str, argv: Sequence[str]) -> LoadedModel:
    """An ONNX file as a model: its graph inputs at the batch of ``-b`` (else the file's, or ``-b``'s
    default where the file leaves it symbolic), built by ``flexrt.onnx.ONNXModel``. The FFModel
    starts from its own initial weights, as a zoo model does."""
    from flexrt.onnx import ONNXModel   # the ONNX front end builds on this layer: imported when used
    config = FFConfig(list(argv))
    batch_given = any(a in ("-b", "--batch-size") or a.startswith("--batch-size=") for a in argv)
    om = ONNXModel(model)
    specs = _onnx_inputs(om, config, batch_given, model)
    if not batch_given and specs[0][1][0] != config.batch_size:   # the file fixes the batch: the model's
        config = config.with_values(batch_size=specs[0][1][0])
    ffmodel = FFModel(config)
    inputs = {name: ffmodel.create_tensor(dims, dtype) for name, dims, dtype in specs}
    om.apply(ffmodel, inputs)
    name = Path(model).stem
    _check_has_operators(ffmodel, name, model)
    return LoadedModel(name, model, ffmodel)


def script_build_model(model: str):
    """The ``build_model`` function of a zoo name or script path, or None when it has none (or an
    ONNX file)."""
    if is_onnx(model):
        return None
    name, entry = _resolve(model)
    with resources.as_file(entry) as path:
        script = _read_script(Path(path))
        if not _defines_build_model(script.tree):
            return None
        with _script_env(script.path, []), _time_limit(script.path):
            try:
                return _build_model_of(script, name)
            except SystemExit as e:
                raise ConfigError(f"model script {script.path} exited (status {short(e.code)}) before defining "
                                  f"build_model") from None


def _run(script: _Script, name: str, argv: Sequence[str], uses_build_model: bool) -> Optional[FFModel]:
    if not uses_build_model:
        with _reported(name, script.path):
            _exec(script, "__main__")
        return None
    build_model = _build_model_of(script, name)
    with _reported(name, script.path):
        rest, kwargs = split_script_flags(build_model, argv)
        result = build_model(FFConfig(rest), **kwargs)
    if result is not None and not isinstance(result, FFModel):
        raise ConfigError(f"{script.path}: build_model(ffconfig) must return an FFModel, got {type(result).__name__}")
    return result


def load_model(model: str, argv: Sequence[str] = ()) -> LoadedModel:
    """Build the model of a zoo name or script path, with model flags ``argv`` (``["-b", "64"]``).

    Raises ConfigError for an unknown model or a script that fails (with the script's file:line),
    and passes on the script's own flexrt errors (ShapeError, ...) with that location added. An
    ``.onnx`` path is built through the ONNX front end (``_load_onnx``).
    """
    if is_onnx(model):
        return _load_onnx(model, argv)
    name, entry = _resolve(model)
    argv = list(argv)
    with resources.as_file(entry) as path:
        script = _read_script(Path(path))
        path = script.path
        built: Optional[FFModel] = None
        exited = ""
        with _capture.capturing() as state, _script_env(path, argv), _time_limit(path):
            try:
                built = _run(script, name, argv, _defines_build_model(script.tree))
            except _capture.ModelCaptured as captured:
                built = captured.model
            except SystemExit as e:
                if not state.models:
                    raise ConfigError(f"model script {path} exited (status {short(e.code)}) before making an "
                                      f"FFModel") from None
                exited = f"; the script exited (status {short(e.code)}, {_script_line(e, path)}) before adding any"
        if built is None:
            if not state.models:
                raise ConfigError(f"model script {path} made no FFModel (define build_model(ffconfig) or build one "
                                  f"at top level / under `if __name__ == \"__main__\":`)")
            built = state.models[-1]
        _check_has_operators(built, name, path, exited)
        return LoadedModel(name, str(path), built)


def _check_has_operators(model: FFModel, name: str, path, why: str = "") -> None:
    """A model to show, simulate or train computes something: refuse one of inputs only."""
    nodes = model.pcg.nodes
    if not any(n.op_type not in (OpType.INPUT, OpType.WEIGHT) for n in nodes):
        inputs = [n.name for n in nodes if n.op_type is OpType.INPUT]
        why = why or "; add layers such as dense or conv2d to it"
        raise ConfigError(f"model {name} ({path}) has no operators (only {len(inputs)} input(s)"
                          f"{': ' + short(inputs) if inputs else ''}){why}")
