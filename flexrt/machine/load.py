"""Loading machines: a preset name, a machine YAML file, or FlexFlow's key = value file.

Entry points: :func:`load_machine`, :func:`load_spec`, :func:`local_machine`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from flexrt.errors import MachineSpecError
from flexrt.inputs import short
from flexrt.machine.flexflow_format import looks_like_flexflow, parse_flexflow_spec
from flexrt.machine.limits import MAX_DEVICES_PER_NODE, named
from flexrt.machine.machine import Machine
from flexrt.machine.presets import LOCAL, calibrated_local_path, preset_names, preset_spec
from flexrt.machine.spec import (DeviceLinks, MachineSpec, SocketSpec, Topology, build_machine, read_machine_file,
                                 shown)
from flexrt.machine.yaml_format import load_yaml_spec, parse_yaml_spec

YAML_SUFFIXES = (".yaml", ".yml")
# A machine given by a string is a file when it has one of these suffixes or a "/" in it; any other
# string is a preset name, even where a file of that name lies in the working directory.
PATH_SUFFIXES = YAML_SUFFIXES + (".txt", ".conf", ".cfg", ".config", ".ini", ".machine")
MAX_PATH_CHARS = 4096


def is_path(name: str | os.PathLike) -> bool:
    """Whether ``name`` means a machine file rather than a preset: a ``Path``, or a string that contains
    a ``/`` (or ``\\``) or ends in one of ``PATH_SUFFIXES`` (``"summit"`` is always the preset)."""
    if not isinstance(name, str):
        return True
    return "/" in name or "\\" in name or name.lower().endswith(PATH_SUFFIXES)


def _preset(name: str) -> MachineSpec:
    if name == LOCAL and calibrated_local_path().is_file():
        try:
            return load_yaml_spec(calibrated_local_path())
        except MachineSpecError as e:
            raise MachineSpecError(f"{e} (the calibrated `local` machine: run `flexrt calibrate` again, or delete "
                                   f"the file to use the built-in estimate)") from None
    if name in preset_names():
        return preset_spec(name)
    rule = f"a machine file's path has a '/' or ends in {', '.join(PATH_SUFFIXES)}"
    hint = (f"; to load the file {shown(name)} here give ./{shown(name)} ({rule})" if os.path.lexists(name) else
            f" (or a machine file: {rule})")
    raise MachineSpecError(f"unknown machine preset {short(name)}; presets: {', '.join(preset_names())}{hint}")


def load_spec(name_or_path: str | Path) -> MachineSpec:
    """The validated description of a preset (by name) or of a machine file (YAML, or FlexFlow's
    key = value format, told apart by the ``.yaml``/``.yml`` suffix or else by the content). A string
    is a file only when it looks like a path (:func:`is_path`): a preset name always means the preset.

    ``"local"`` is the file ``flexrt calibrate`` wrote (:func:`~flexrt.machine.presets.calibrated_local_path`)
    when there is one, else the built-in estimate; the description says which."""
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path):
        raise MachineSpecError(f"a machine is a preset name or a file path, got {short(name_or_path)}")
    text = os.fspath(name_or_path)
    if not isinstance(text, str) or "\x00" in text or len(text) > MAX_PATH_CHARS:
        raise MachineSpecError(f"a machine is a preset name or a file path of at most {MAX_PATH_CHARS} characters "
                               f"without NUL, got {short(text)}")
    if not is_path(name_or_path):
        return _preset(text)
    path = Path(text)
    if not os.path.lexists(path):
        raise MachineSpecError(f"machine file {shown(text)} does not exist "
                               f"(presets: {', '.join(preset_names())})")
    content = read_machine_file(path)
    if path.suffix.lower() not in YAML_SUFFIXES and looks_like_flexflow(content):
        return parse_flexflow_spec(content, str(path))
    return parse_yaml_spec(content, str(path))


def load_machine(name_or_path: str | Path, nodes: int | None = None) -> Machine:
    """A machine from a preset name or a file, with ``nodes`` nodes (default: the file's).

    Example:
        >>> m = load_machine("dgx_a100", nodes=2)
        >>> m.num_devices, m.devices[0].spec.name
        (16, 'A100-SXM4-80GB')
    """
    return build_machine(load_spec(name_or_path), nodes)


def local_machine(devices: int = 4, nodes: int = 1) -> Machine:
    """The ``local`` machine (this host's CPU; calibrated when ``flexrt calibrate`` has run, see
    :func:`load_spec`) with ``devices`` workers per node."""
    if isinstance(devices, bool) or not isinstance(devices, int) or not 1 <= devices <= MAX_DEVICES_PER_NODE:
        raise MachineSpecError(f"the number of local devices must be an integer 1..{MAX_DEVICES_PER_NODE}, got "
                               f"{short(devices)}; the limit is {named('MAX_DEVICES_PER_NODE')}")
    spec = load_spec(LOCAL)
    kind = spec.sockets[0].devices[0]
    entries = tuple(DeviceLinks(Topology.ALL_TO_ALL, e.link, tuple(range(devices)), lanes=e.lanes, where=e.where)
                    for e in spec.intra_node.devices)
    spec = dataclasses.replace(spec, sockets=(SocketSpec(None, (kind,) * devices),),
                               intra_node=dataclasses.replace(spec.intra_node, devices=entries))
    return build_machine(spec, nodes)
