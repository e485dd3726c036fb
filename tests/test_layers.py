"""The layering of DESIGN.md, enforced on the source: no module imports a layer to its right.

    flexrt.ir -> flexrt.machine -> flexrt.strategy -> flexrt.kernels -> flexrt.simulator -> flexrt.search
    flexrt.runtime may import ir, machine, strategy, kernels, simulator
    flexrt.model, flexrt.cli, flexrt.core (and the zoo, flexrt.examples) may import anything
    flexrt (the package __init__), flexrt.errors, flexrt.paths, flexrt.inputs and flexrt.gc_pause are importable
    by all and import no layer

Every ``.py`` file of ``flexrt/``, ``kernels/``, ``simulator/`` and ``search/`` is parsed with
``ast`` (the last three are installed as ``flexrt.kernels`` etc.); every import counts, including
imports inside functions and under ``TYPE_CHECKING``. ``flexrt.ir`` also stays free of third-party
weight: no YAML, no CuPy, no MPI, and NumPy only in ``flexrt/ir/graph_algos.py`` (the compiled
extension's arrays).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = {"flexrt": "flexrt", "kernels": "flexrt.kernels", "simulator": "flexrt.simulator",
               "search": "flexrt.search"}

BASE, IR, MACHINE, STRATEGY, KERNELS, SIMULATOR, SEARCH, RUNTIME, TOP = (
    "base", "flexrt.ir", "flexrt.machine", "flexrt.strategy", "flexrt.kernels", "flexrt.simulator", "flexrt.search",
    "flexrt.runtime", "top")

# Module prefix -> layer; the longest matching prefix wins. ``flexrt`` itself matches exactly only,
# so a new top-level module must be placed here on purpose.
LAYER_OF = {
    "flexrt": BASE, "flexrt.errors": BASE, "flexrt.paths": BASE, "flexrt.inputs": BASE, "flexrt.gc_pause": BASE,
    "flexrt.ir": IR, "flexrt.machine": MACHINE, "flexrt.strategy": STRATEGY, "flexrt.kernels": KERNELS,
    "flexrt.simulator": SIMULATOR, "flexrt.search": SEARCH, "flexrt.runtime": RUNTIME,
    "flexrt.model": TOP, "flexrt.cli": TOP, "flexrt.core": TOP, "flexrt.keras": TOP, "flexrt.examples": TOP, "flexrt.__main__": TOP,
    "flexrt.torch": TOP, "flexrt.onnx": TOP, "flexrt.experiments": TOP,
}
_CHAIN = [BASE, IR, MACHINE, STRATEGY, KERNELS, SIMULATOR, SEARCH]
ALLOWED = {layer: set(_CHAIN[:i + 1]) for i, layer in enumerate(_CHAIN)}
ALLOWED[RUNTIME] = {BASE, IR, MACHINE, STRATEGY, KERNELS, SIMULATOR, RUNTIME}
ALLOWED[TOP] = set(_CHAIN) | {RUNTIME, TOP}

# Third-party modules a layer must not import, with the files exempt from the rule.
FORBIDDEN_THIRD_PARTY = {
    IR: {"numpy": {"flexrt/ir/graph_algos.py"}, "yaml": set(), "cupy": set(), "mpi4py": set()},
}


def module_name(path: Path, root: Path = ROOT) -> str:
    """Dotted name a source file is installed as (``kernels/ops/dense.py`` -> ``flexrt.kernels.ops.dense``)."""
    rel = path.relative_to(root)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    parts[0] = SOURCE_DIRS[parts[0]]
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    """The layer of a flexrt module, or None when it belongs to none."""
    if module == "flexrt":
        return BASE
    parts = module.split(".")
    for i in range(len(parts), 1, -1):
        layer = LAYER_OF.get(".".join(parts[:i]))
        if layer is not None:
            return layer
    return None


def _imports(tree: ast.AST, module: str, is_package: bool):
    """(line, imported module) for every import; ``from X import y`` yields ``X.y`` when that names
    a flexrt submodule, else ``X``."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub.startswith("flexrt.") and layer_of(sub) not in (None, layer_of(target)):
                    yield node.lineno, sub
                else:
                    yield node.lineno, target


def violations(path: Path, source: str, root: Path = ROOT) -> list[str]:
    """Every forbidden import of one file, as ``file:line: message``."""
    rel = path.relative_to(root).as_posix()
    module = module_name(path, root)
    layer = layer_of(module)
    if layer is None:
        return [f"{rel}:1: module {module} belongs to no layer; add it to LAYER_OF in tests/test_layers.py"]
    tree = ast.parse(source, filename=rel)
    found = []
    for line, target in _imports(tree, module, path.name == "__init__.py"):
        top = target.split(".")[0]
        if top == "flexrt":
            to = layer_of(target)
            if to is None:
                found.append(f"{rel}:{line}: imports {target}, which belongs to no layer")
            elif to not in ALLOWED[layer]:
                found.append(f"{rel}:{line}: {module} ({layer}) imports {target} ({to}); "
                             f"{layer} may import only {', '.join(sorted(ALLOWED[layer]))}")
        for name, exempt in FORBIDDEN_THIRD_PARTY.get(layer, {}).items():
            if top == name and rel not in exempt:
                where = f" (allowed only in {', '.join(sorted(exempt))})" if exempt else ""
                found.append(f"{rel}:{line}: {module} ({layer}) imports {target}; {layer} must not import "
                             f"{name}{where}")
    return found


def source_files() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py"))


def test_layers_no_module_imports_a_layer_to_its_right():
    files = source_files()
    assert ROOT / "flexrt" / "ir" / "graph_algos.py" in files and ROOT / "kernels" / "__init__.py" in files
    found = [v for p in files for v in violations(p, p.read_text(encoding="utf-8"))]
    assert not found, "upward or forbidden imports:\n" + "\n".join(found)


@pytest.mark.parametrize("rel, source, expected", [
    ("flexrt/ir/x.py", "import flexrt.simulator.tasks\n", "flexrt/ir/x.py:1: flexrt.ir.x (flexrt.ir) imports "
                                                          "flexrt.simulator.tasks (flexrt.simulator)"),
    ("flexrt/ir/x.py", "\n\ndef f():\n    from flexrt import kernels\n", "flexrt/ir/x.py:4: flexrt.ir.x (flexrt.ir) "
                                                                        "imports flexrt.kernels (flexrt.kernels)"),
    ("kernels/ops/x.py", "from ...search import mcmc\n", "kernels/ops/x.py:1: flexrt.kernels.ops.x (flexrt.kernels) "
                                                        "imports flexrt.search (flexrt.search)"),
    ("simulator/x.py", "from flexrt.runtime import run\n", "imports flexrt.runtime (flexrt.runtime)"),
    ("flexrt/runtime/x.py", "import flexrt.search\n", "imports flexrt.search (flexrt.search)"),
    ("flexrt/errors.py", "from flexrt.ir import OpType\n", "flexrt.errors (base) imports flexrt.ir"),
    ("flexrt/ir/x.py", "import yaml\n", "flexrt/ir/x.py:1: flexrt.ir.x (flexrt.ir) imports yaml"),
    ("flexrt/ir/ops/x.py", "import numpy as np\n", "must not import numpy (allowed only in flexrt/ir/graph_algos.py)"),
    ("flexrt/widgets.py", "", "module flexrt.widgets belongs to no layer"),
    ("search/x.py", "import flexrt.widgets\n", "search/x.py:1: imports flexrt.widgets, which belongs to no layer"),
])
def test_layers_checker_reports_file_line_and_import(rel, source, expected):
    found = violations(ROOT / rel, source)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("rel, source", [
    ("flexrt/ir/graph_algos.py", "import numpy as np\nfrom flexrt.errors import GraphError\n"),
    ("flexrt/ir/ops/x.py", "from ..registry import op_def\nfrom . import linear\nfrom flexrt import errors\n"),
    ("kernels/x.py", "import numpy\nfrom flexrt.ir import OpType\nfrom flexrt.machine import Machine\n"),
    ("search/x.py", "from flexrt.simulator import simulate\nfrom flexrt.kernels import run_forward\n"),
    ("flexrt/runtime/x.py", "from flexrt.simulator import TaskGraph\n"),
    ("flexrt/cli/x.py", "from flexrt.search import mcmc\nfrom flexrt.runtime import run\nimport flexrt.examples\n"),
    ("flexrt/core.py", "from flexrt.model import FFModel\n"),
    ("flexrt/__init__.py", "from flexrt.errors import FlexrtError\n"),
    ("flexrt/ir/x.py", "from flexrt import __version__\nfrom . import graph_algos\n"),
])
def test_layers_checker_accepts_downward_imports(rel, source):
    assert violations(ROOT / rel, source) == []


def test_nothing_outside_a_cupy_backend_imports_cupy():
    """The GPU is optional: only a CuPy backend module (``*cupy*`` in its path) may import CuPy."""
    found = [f"{p.relative_to(ROOT).as_posix()}:{line}: imports {target}"
             for p in source_files() if "cupy" not in p.relative_to(ROOT).as_posix()
             for line, target in _imports(ast.parse(p.read_text(encoding="utf-8")), module_name(p, ROOT),
                                          p.name == "__init__.py")
             if target.split(".")[0] == "cupy"]
    assert not found, "CuPy imported outside a CuPy backend:\n" + "\n".join(found)
