"""Build flexrt and its Cython extensions; metadata lives in pyproject.toml.

``kernels/``, ``simulator/`` and ``search/`` (and ``examples/``, the model zoo) are installed as
subpackages of ``flexrt`` so that there is one import namespace.
"""

from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

SUBPACKAGE_DIRS = {"kernels": "flexrt.kernels", "simulator": "flexrt.simulator", "search": "flexrt.search",
                   "examples": "flexrt.examples"}

packages = find_packages(include=["flexrt", "flexrt.*"])
package_dir = {"flexrt": "flexrt"}
for src, pkg in SUBPACKAGE_DIRS.items():
    package_dir[pkg] = src
    packages.append(pkg)
    packages += [f"{pkg}.{p}" for p in find_packages(where=src)]

extensions = [
    Extension("flexrt.ir._graph", ["flexrt/ir/_graph.pyx"]),
]

setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=cythonize(extensions, language_level=3, compiler_directives={"boundscheck": False,
                                                                           "wraparound": False}),
)
