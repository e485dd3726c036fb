"""Build flexrt and its Cython extensions; metadata lives in pyproject.toml.

``kernels/``, ``simulator/`` and ``search/`` (and ``examples/``, the model zoo, and ``configs/``, the
machine presets) are installed as subpackages of ``flexrt`` so that there is one import namespace.
``configs/`` is data: its YAML files are package data of ``flexrt.configs``, read with
``importlib.resources.files("flexrt.configs")``.
"""

from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

SUBPACKAGE_DIRS = {"kernels": "flexrt.kernels", "simulator": "flexrt.simulator", "search": "flexrt.search",
                   "examples": "flexrt.examples", "configs": "flexrt.configs"}
# Folders of data files (no __init__.py) inside a subpackage, installed with their files.
DATA_PACKAGES = {"flexrt.configs.machines": ["*.yaml", "*.md"], "flexrt.configs.experiments": ["*.yaml"],
                 "flexrt.configs.substitutions": ["*.json", "*.md"],
                 "flexrt.examples.strategies": ["*.json"], "flexrt.configs.fusion_model": ["*.npz", "*.md"]}

packages = find_packages(include=["flexrt", "flexrt.*"])
package_dir = {"flexrt": "flexrt"}
for src, pkg in SUBPACKAGE_DIRS.items():
    package_dir[pkg] = src
    packages.append(pkg)
    packages += [f"{pkg}.{p}" for p in find_packages(where=src)]
packages += list(DATA_PACKAGES)

extensions = [
    Extension("flexrt.ir._graph", ["flexrt/ir/_graph.pyx"]),
    Extension("flexrt.simulator._engine", ["simulator/_engine.pyx"]),
    Extension("flexrt.simulator._graph_core", ["simulator/_graph_core.pyx"], language="c++"),
    Extension("flexrt.search.unity._reshard", ["search/unity/_reshard.pyx"]),
]

setup(
    packages=packages,
    package_dir=package_dir,
    package_data=DATA_PACKAGES,
    ext_modules=cythonize(extensions, language_level=3, compiler_directives={"boundscheck": False,
                                                                           "wraparound": False}),
)
