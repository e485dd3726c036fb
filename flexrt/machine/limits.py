"""Limits on machine descriptions: how large a machine flexrt builds, how large a machine file it
reads, and the physical values it accepts. Every reader (machine YAML, FlexFlow's key = value file,
``--nodes``, ``flexrt calibrate``) checks them *before* anything is allocated, and every message
names the limit (``... at most 4096 nodes (flexrt.machine.limits.MAX_NODES)``).

The sizes are generous (a machine of 65,536 devices builds in a few seconds and a few hundred MB)
and safe: nothing a file or a flag says can make flexrt allocate without bound. The ranges of
physical values keep simulated times well inside float64 (FLOP/s from 1 kFLOP/s, bandwidths from
1 MB/s, latencies up to 1 s): a ``bandwidth: 1.0e-300`` is refused at load, with its file and line.
Measured collectives (a machine file's ``collectives`` section) have their own ranges (``FIT_*``) and
counts (``MAX_COLLECTIVE_FITS``, ``MAX_FIT_SIZES``).

Entry points: the constants, :func:`named`, :func:`check_size`, :func:`check_links`.
"""

from __future__ import annotations

from flexrt.errors import MachineSpecError
from flexrt.inputs import short

# --- sizes ---
MAX_FILE_BYTES = 128 * 1024      # a machine file (the presets are under 3 KB; YAML is parsed in pure Python)
MAX_NODES = 4096                 # nodes of one machine
MAX_DEVICES_PER_NODE = 1024      # compute devices of one node (and workers of `flexrt calibrate --devices`)
MAX_DEVICES = 65536              # compute devices of the whole machine
MAX_SOCKETS_PER_NODE = 256       # CPU sockets of one node
MAX_NICS_PER_NODE = 1024         # network adapters of one node
MAX_LANES = 64                   # lanes bonded into one connection
MAX_LINKS_PER_NODE = 65536       # directional links of one node (an all_to_all of 256 devices makes 65,280)
MAX_LINKS = 524288               # directional links of the whole machine (a DGX-1 of 4096 nodes has 335,872)
MAX_NAME_CHARS = 200             # a machine's or a device kind's name
MAX_INT_DIGITS = 30              # digits of an integer in a machine file (no limit here has more than 6)
MAX_COLLECTIVE_FITS = 4096       # entries of one collective in a machine file's ``collectives`` section
MAX_FIT_SIZES = 10000            # message sizes a collective fit says it was fitted to

# --- physical values, in the units of machine YAML: (lowest, highest) ---
PEAK_TFLOPS = (1e-9, 1e6)        # TFLOP/s per dtype: 1 kFLOP/s .. 1 EFLOP/s
BANDWIDTH_GBS = (1e-3, 1e6)      # GB/s, links (one lane, one direction) and device memory: 1 MB/s .. 1 PB/s
MEMORY_GIB = (1e-6, 1e6)         # GiB of device memory: about 1 KiB .. 1 PiB
LATENCY_US = (0.0, 1e6)          # microseconds, link latencies and kernel launch overheads: 0 .. 1 s
EFFICIENCY = (1e-3, 1.0)         # fraction of peak a large kernel reaches
FIT_NS_PER_BYTE = (0.0, 1e6)     # C of a collective's T = C x + D, ns per byte: 0 .. 1 ms per byte
FIT_US = (0.0, 1e6)              # D of a collective's T = C x + D, microseconds: 0 .. 1 s
FIT_R2 = (-1e6, 1.0)             # r squared of a fit (negative: worse than the mean)
FIT_REL_ERROR = (0.0, 1e6)       # relative error of a fit over its measured sizes (0.08: 8%)


def named(limit: str) -> str:
    """``"4096 (flexrt.machine.limits.MAX_NODES)"``: a limit's value and where it is set."""
    return f"{globals()[limit]} (flexrt.machine.limits.{limit})"


def _fail(where: str, message: str) -> MachineSpecError:
    return MachineSpecError(f"{where}: {message}" if where else message)


def check_links(count: int, where: str, what: str) -> None:
    """Refuse a node whose directional links would number more than ``MAX_LINKS_PER_NODE`` (``what``
    says which entry made them, for the message)."""
    if count > MAX_LINKS_PER_NODE:
        raise _fail(where, f"{what} makes {count} directional links in one node, over the limit of "
                           f"{named('MAX_LINKS_PER_NODE')}; join large groups through a switch "
                           f"(switch: [...]) instead of all_to_all or pairs")


def check_size(name: str, nodes: int, devices_per_node: int, links_per_node: int, where: str = "",
               flag: bool = False) -> None:
    """Refuse a machine of more than ``MAX_NODES`` nodes, ``MAX_DEVICES_PER_NODE`` devices per node,
    ``MAX_DEVICES`` devices or ``MAX_LINKS`` links in all, before it is built. ``flag``: the node count
    came from ``--nodes`` (``load_machine(..., nodes=N)``), so the message names that flag."""
    said = f"--nodes {nodes}: " if flag else ""
    fix = "give --nodes" if flag else "use"
    if not 1 <= nodes <= MAX_NODES:
        raise _fail(where, f"{said}machine {short(name)} can have 1..{MAX_NODES} nodes, got {nodes}; "
                           f"the limit is {named('MAX_NODES')}")
    if devices_per_node > MAX_DEVICES_PER_NODE:
        raise _fail(where, f"machine {short(name)} has {devices_per_node} devices per node, over the limit of "
                           f"{named('MAX_DEVICES_PER_NODE')}")
    if nodes * devices_per_node > MAX_DEVICES:
        raise _fail(where, f"{said}{nodes} nodes x {devices_per_node} devices = {nodes * devices_per_node} "
                           f"devices, over the limit of {named('MAX_DEVICES')}; {fix} at most "
                           f"{MAX_DEVICES // devices_per_node} nodes")
    if nodes * links_per_node > MAX_LINKS:
        raise _fail(where, f"{said}{nodes} nodes x {links_per_node} links = {nodes * links_per_node} directional "
                           f"links, over the limit of {named('MAX_LINKS')}; {fix} at most "
                           f"{MAX_LINKS // max(links_per_node, 1)} nodes")
