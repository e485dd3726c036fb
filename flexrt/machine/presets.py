"""Machine presets: the YAML files in ``configs/machines/``, installed as package data of
``flexrt.configs`` and found with ``importlib.resources``.

The ``local`` preset has a measured twin: ``flexrt calibrate`` writes it to
:func:`calibrated_local_path`, and :func:`flexrt.machine.load_spec` (so ``load_machine("local")``)
prefers that file to the built-in estimate. :func:`preset_spec` is always the built-in file.

Entry points: :func:`preset_names`, :func:`preset_spec`, :func:`calibrated_local_path`.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from flexrt.paths import cache_dir
from flexrt.errors import MachineSpecError
from flexrt.inputs import short
from flexrt.machine.spec import MachineSpec
from flexrt.machine.yaml_format import parse_yaml_spec

PACKAGE, FOLDER, SUFFIX = "flexrt.configs", "machines", ".yaml"
LOCAL = "local"
# The profile cache's directory convention (flexrt.simulator.profile_cache.default_cache_path),
# repeated here because the machine layer may not import the simulator.
CALIBRATED_LOCAL_FILE = "local.yaml"


def calibrated_local_path() -> Path:
    """Where ``flexrt calibrate`` writes, and ``load_machine("local")`` looks for, the measured
    ``local`` machine: ``$FLEXRT_CACHE_DIR/local.yaml``, else ``$XDG_CACHE_HOME/flexrt/local.yaml``,
    else ``~/.cache/flexrt/local.yaml`` (read from the environment at each call)."""
    return cache_dir() / CALIBRATED_LOCAL_FILE


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
        raise MachineSpecError(f"unknown machine preset {short(name)}; presets: {', '.join(preset_names())} "
                               f"(or give the path of a machine file)")
    resource = _folder() / f"{name}{SUFFIX}"
    return parse_yaml_spec(resource.read_text(encoding="utf-8"), f"{PACKAGE}/{FOLDER}/{name}{SUFFIX}")

