"""Loading machines: a preset name, a machine YAML file, or FlexFlow's key = value file.

Entry points: :func:`load_machine`, :func:`load_spec`, :func:`local_machine`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from flexrt.errors import MachineSpecError
from flexrt.machine.flexflow_format import load_flexflow_spec, looks_like_flexflow
from flexrt.machine.machine import Machine
from flexrt.machine.presets import LOCAL, calibrated_local_path, preset_names, preset_spec
from flexrt.machine.spec import DeviceLinks, MachineSpec, SocketSpec, Topology, build_machine
from flexrt.machine.yaml_format import load_yaml_spec

YAML_SUFFIXES = (".yaml", ".yml")


def _is_path(name: str | Path) -> bool:
    if isinstance(name, Path):
        return True
    return "/" in name or "\\" in name or Path(name).suffix != "" or Path(name).is_file()


def load_spec(name_or_path: str | Path) -> MachineSpec:
    """The validated description of a preset (by name) or of a machine file (YAML, or FlexFlow's
    key = value format, told apart by the ``.yaml``/``.yml`` suffix or else by the content).

    ``"local"`` is the file ``flexrt calibrate`` wrote (:func:`~flexrt.machine.presets.calibrated_local_path`)
    when there is one, else the built-in estimate; the description says which."""
    if not isinstance(name_or_path, (str, Path)) or not str(name_or_path):
        raise MachineSpecError(f"a machine is a preset name or a file path, got {name_or_path!r}")
    if not _is_path(name_or_path):
        if str(name_or_path) == LOCAL and calibrated_local_path().is_file():
            return load_yaml_spec(calibrated_local_path())
        return preset_spec(str(name_or_path))
    path = Path(name_or_path)
    if not path.is_file():
        raise MachineSpecError(f"machine file {path} does not exist (presets: {', '.join(preset_names())})")
    if path.suffix.lower() in YAML_SUFFIXES:
        return load_yaml_spec(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MachineSpecError(f"cannot read machine file {path}: {e}") from None
    return load_flexflow_spec(path) if looks_like_flexflow(text) else load_yaml_spec(path)


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
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise MachineSpecError(f"the number of local devices must be a positive integer, got {devices!r}")
    spec = load_spec(LOCAL)
    kind = spec.sockets[0].devices[0]
    entries = tuple(DeviceLinks(Topology.ALL_TO_ALL, e.link, tuple(range(devices)), lanes=e.lanes, where=e.where)
                    for e in spec.intra_node.devices)
    spec = dataclasses.replace(spec, sockets=(SocketSpec(None, (kind,) * devices),),
                               intra_node=dataclasses.replace(spec.intra_node, devices=entries))
    return build_machine(spec, nodes)
