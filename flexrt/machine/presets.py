"""Machine presets: the YAML files in ``configs/machines/``, installed as package data of
``flexrt.configs`` and found with ``importlib.resources``.

Entry points: :func:`preset_names`, :func:`preset_spec`.
"""

from __future__ import annotations

import functools
from importlib import resources

from flexrt.errors import MachineSpecError
from flexrt.machine.spec import MachineSpec
from flexrt.machine.yaml_format import parse_yaml_spec

PACKAGE, FOLDER, SUFFIX = "flexrt.configs", "machines", ".yaml"


def _folder():
    try:
        return resources.files(PACKAGE) / FOLDER
    except ModuleNotFoundError:
        raise MachineSpecError(f"the machine presets are missing: package {PACKAGE} is not installed; "
                               f"reinstall flexrt (pip install -e .)") from None


@functools.cache
def preset_names() -> tuple[str, ...]:
    """Names of the machine presets, sorted: ``('dgx1_v100', 'dgx_a100', ..., 'summit')``."""
    return tuple(sorted(f.name[:-len(SUFFIX)] for f in _folder().iterdir()
                        if f.name.endswith(SUFFIX) and f.is_file()))


@functools.cache
def preset_spec(name: str) -> MachineSpec:
    """The validated description of preset ``name``; a MachineSpecError listing the presets otherwise."""
    if name not in preset_names():
        raise MachineSpecError(f"unknown machine preset {name!r}; presets: {', '.join(preset_names())} "
                               f"(or give the path of a machine file)")
    resource = _folder() / f"{name}{SUFFIX}"
    return parse_yaml_spec(resource.read_text(encoding="utf-8"), f"{PACKAGE}/{FOLDER}/{name}{SUFFIX}")

