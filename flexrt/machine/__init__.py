"""``flexrt.machine``: the machine model: devices, directional links, routes and machine views.

    >>> from flexrt.machine import load_machine
    >>> m = load_machine("summit", nodes=2)
    >>> m.num_devices, m.devices_per_node
    (12, 6)
    >>> [t.value for t in m.route_types(0, 3)]
    ['nvlink', 'xbus', 'nvlink']

Machines come from presets (``configs/machines/*.yaml``: :func:`preset_names`), machine YAML files
(format in :mod:`flexrt.machine.yaml_format`) or FlexFlow's key = value machine model files
(:mod:`flexrt.machine.flexflow_format`); a string is a file when it has a ``/`` or a file suffix
(``.yaml``, ``.txt``, ...), else a preset name. Sizes and physical values are held to
:mod:`flexrt.machine.limits`. Machine views (Unity §3.2) are in :mod:`flexrt.machine.views`.
This layer imports only ``flexrt.ir`` and ``flexrt.errors``.
"""

from flexrt.machine.load import load_machine, load_spec, local_machine  # noqa: F401
from flexrt.machine.machine import (Device, DeviceSpec, FlopsTable, Link, LinkType, Machine,  # noqa: F401
                                    MachineShape)
from flexrt.machine.presets import calibrated_local_path, preset_names, preset_spec  # noqa: F401
from flexrt.machine.spec import MachineSpec, build_machine  # noqa: F401
from flexrt.machine.views import (MachineView, Projection, data_parallel_view, enumerate_views,  # noqa: F401
                                  view_devices, view_from_device_ids)
