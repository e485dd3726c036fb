"""FlexFlow's strategy file (r22.07 text format), both directions.

The file (REFERENCE.md): line 1 the number of operators; then per operator, one field per line:
its name; the device type (0 GPU, 1 CPU); the number of dimensions; the dimensions' degrees,
tab-separated; the number of devices n (the product of the degrees); the n device ids,
tab-separated. Operators missing from a file fall back to data parallelism.

FlexFlow's degrees are per dimension of the operator's **output** tensor, in Legion order: the
innermost (last) tensor dimension first, the sample dimension last; the device ids are listed
with the first listed dimension varying fastest (Legion's linearization). Our configurations give
a degree per parallel axis instead; each axis lands on one output dimension (``ParallelAxis.outputs``
on output 0), except the axes whose pieces produce partial sums or copies of the output (a
linear's ``in`` reduction, attention's ``heads``, a ``replica`` axis). Decision: such an axis is
written as one extra, outermost dimension after the tensor's dimensions, like the replica
dimension FlexFlow r22.07 appends to its parallel tensors; an operator without one has exactly
the output's number of dimensions, as FlexFlow writes it. Reading an extra dimension gives its
degree to the operator's axis of that kind (a SOAP axis first). Two axes set on one dimension
cannot be written and raise StrategyError.

Entry points: ``strategy_to_text``, ``strategy_from_text``, ``save_text_strategy``,
``load_text_strategy``.

Example:
    >>> text = strategy_to_text(data_parallel(pcg, machine), machine)   # doctest: +SKIP
    >>> strategy_from_text(text, pcg, machine).configs == data_parallel(pcg, machine).configs  # doctest: +SKIP
    True
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from flexrt.errors import FlexrtError, StrategyError
from flexrt.inputs import listing, read_text, short
from flexrt.ir.pcg import PCG, Node
from flexrt.ir.registry import SlotKind
from flexrt.machine import Machine
from flexrt.machine.views import view_devices, view_from_device_ids
from flexrt.strategy.config import SOAP_KINDS, ConfigStrategy, OpConfig, Strategy, compute_node, is_compute
from flexrt.strategy.space import all_axes, apply_single, data_parallel

DEVICE_TYPES = {"gpu": 0, "cpu": 1}
_KIND_OF_TYPE = {v: k for k, v in DEVICE_TYPES.items()}
_INT = re.compile(r"[-+]?[0-9]{1,18}")  # what FlexFlow's C++ reader takes as an integer field


@dataclass(frozen=True, slots=True)
class _Layout:
    """How one operator's axes map to the file's dimensions (tensor order, extra dimension last)."""

    names: tuple[str, ...]          # every axis of the operator, in axis order
    dim_of: tuple[int, ...]         # per axis: its tensor dimension, or ``rank`` for the extra one
    soap: tuple[bool, ...]          # per axis: a SOAP axis (preferred when reading)
    rank: int                       # output rank


def _layout(base: PCG, node: Node) -> _Layout:
    axes = all_axes(base, node)
    rank = base.output_shapes(node.id)[0].rank
    dims = []
    for a in axes:
        slots = [s for k, s in a.outputs if k == 0]
        dims.append(slots[0].dim if slots and slots[0].kind is SlotKind.SHARD else rank)
    soap = tuple(a.kind in SOAP_KINDS and not a.degree_attr and not any(s.kind is SlotKind.SUM for _, s in a.operands)
                 for a in axes)
    return _Layout(tuple(a.name for a in axes), tuple(dims), soap, rank)


def _reader_axis(lay: _Layout, dim: int) -> int:
    """The axis a file dimension's degree is given to when read: a SOAP axis first, then axis order."""
    return min((k for k, x in enumerate(lay.dim_of) if x == dim), key=lambda k: (not lay.soap[k], k))


def name_list(names) -> str:
    """Operator names for a message, quoted and shortened (``flexrt.inputs.listing``)."""
    return listing(short(n, 30) for n in names)


def _device_type(machine: Machine, devices) -> int:
    kinds = {machine.devices[d].spec.kind for d in devices}
    if len(kinds) != 1 or next(iter(kinds)) not in DEVICE_TYPES:
        raise StrategyError(f"devices {list(devices)} are of kinds {sorted(kinds)}; FlexFlow's format has one "
                            f"device type per operator, one of {', '.join(DEVICE_TYPES)}")
    return DEVICE_TYPES[kinds.pop()]


def _operator_lines(base: PCG, node: Node, cfg: OpConfig, machine: Machine) -> list[str]:
    lay = _layout(base, node)
    deg = tuple(cfg.degree_map.get(n, 1) for n in lay.names)
    extra = any(d > 1 and dim == lay.rank for d, dim in zip(deg, lay.dim_of))
    ndims = lay.rank + (1 if extra else 0)
    file_deg = [1] * ndims                       # tensor order: dim 0 .. rank-1, then the extra one
    owner = [None] * ndims
    for name, d, dim in zip(lay.names, deg, lay.dim_of):
        if d > 1:
            if owner[dim] is not None:
                raise StrategyError(f"operator '{node.name}': axes {owner[dim]} and {name} both split output "
                                    f"dimension {dim}; FlexFlow's format has one degree per dimension")
            owner[dim], file_deg[dim] = name, d
            if lay.names[_reader_axis(lay, dim)] != name:
                raise StrategyError(f"operator '{node.name}': axis {name} cannot be written in FlexFlow's format: "
                                    f"its dimension reads back as axis {lay.names[_reader_axis(lay, dim)]}; "
                                    f"save the strategy as JSON instead")
    devices = view_devices(machine, cfg.view, deg)          # row-major over the axes
    strides = [math.prod(deg[k + 1:]) for k in range(len(deg))]
    # the file lists pieces with the extra dimension slowest, then dims 0 .. rank-1 (last fastest)
    order = ([lay.rank] if extra else []) + list(range(lay.rank))
    axis_on = {dim: k for k, (d, dim) in enumerate(zip(deg, lay.dim_of)) if d > 1}
    ids = []
    for coords in itertools.product(*(range(file_deg[dim]) for dim in order)):
        ids.append(devices[sum(c * strides[axis_on[dim]] for c, dim in zip(coords, order) if dim in axis_on)])
    legion = list(reversed(file_deg[:lay.rank])) + file_deg[lay.rank:]   # innermost tensor dim first
    return [node.name, str(_device_type(machine, ids)), str(ndims), "\t".join(map(str, legion)), str(len(ids)),
            "\t".join(map(str, ids))]


def strategy_to_text(strategy: Strategy, machine: Machine) -> str:
    """FlexFlow's text form of a per-operator strategy (operators in the model's node order)."""
    if not isinstance(strategy, ConfigStrategy):
        raise StrategyError("only a strategy built from per-operator configurations can be written in FlexFlow's "
                            "format (this one has a rewritten PCG; save it as JSON)")
    base = strategy.base
    lines = [str(len(strategy.configs))]
    for nid, cfg in sorted(strategy.configs.items()):
        lines += _operator_lines(base, base.node(nid), cfg, machine)
    return "\n".join(lines) + "\n"


def save_text_strategy(path: str, strategy: Strategy, machine: Machine) -> None:
    """Write ``strategy`` to ``path`` in FlexFlow's r22.07 text format."""
    text = strategy_to_text(strategy, machine)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class _Reader:
    def __init__(self, text: str, source: str) -> None:
        self.lines = text.splitlines()
        self.source = source
        self.i = 0

    def where(self, line: int | None = None) -> str:
        return f"{self.source}:{line if line is not None else self.i}"

    def line(self, what: str) -> str:
        # blank lines between operators are tolerated; FlexFlow's reader skips whitespace
        while self.i < len(self.lines) and not self.lines[self.i].strip():
            self.i += 1
        if self.i >= len(self.lines):
            raise StrategyError(f"{self.source}:{self.i + 1}: the file ends where {what} was expected")
        self.i += 1
        return self.lines[self.i - 1].strip()

    def ints(self, what: str, count: int | None = None) -> list[int]:
        text = self.line(what)
        words = text.split()
        if not all(_INT.fullmatch(w) for w in words):  # int() would also take "1_0" and non-ASCII digits
            raise StrategyError(f"{self.where()}: {what} must be integers, got {short(text)}")
        values = [int(w) for w in words]
        if count is not None and len(values) != count:
            raise StrategyError(f"{self.where()}: expected {count} value(s) for {what}, got {len(values)} "
                                f"({short(text)})")
        return values


def _read_operator(r: _Reader, base: PCG, machine: Machine) -> tuple[int, OpConfig]:
    name = r.line("an operator name")
    at = r.i
    node = compute_node(base, name)
    if node is None:
        ops = [n.name for n in base.nodes if is_compute(n)]
        raise StrategyError(f"{r.where(at)}: no operator named {short(name)} in this model (its operators: "
                            f"{name_list(ops)}); the file was made for another model")
    (dtype,) = r.ints(f"the device type of '{name}'", 1)
    if dtype not in _KIND_OF_TYPE:
        raise StrategyError(f"{r.where()}: device type {dtype} of '{name}' is neither 0 (GPU) nor 1 (CPU)")
    lay = _layout(base, node)
    (ndims,) = r.ints(f"the number of dimensions of '{name}'", 1)
    if ndims not in (lay.rank, lay.rank + 1):
        raise StrategyError(f"{r.where()}: '{name}' has {ndims} dimension(s) in the file but its output has "
                            f"{lay.rank} (valid: {lay.rank}, or {lay.rank + 1} with a replica dimension); "
                            f"the file was made for another model")
    legion = r.ints(f"the {ndims} degrees of '{name}'", ndims)
    deg_line = r.i
    if any(d < 1 for d in legion):
        raise StrategyError(f"{r.where()}: degrees of '{name}' must be >= 1, got {legion}")
    file_deg = list(reversed(legion[:lay.rank])) + legion[lay.rank:]
    (n,) = r.ints(f"the number of devices of '{name}'", 1)
    if n != math.prod(file_deg):
        raise StrategyError(f"{r.where()}: '{name}' lists {n} devices but its degrees {short(legion)} make "
                            f"{math.prod(file_deg)} pieces")
    ids = r.ints(f"the {n} device ids of '{name}'", n)
    ids_line = r.i
    bad = [d for d in ids if not 0 <= d < machine.num_devices]
    if bad:
        raise StrategyError(f"{r.where()}: '{name}' uses device {bad[0]} but machine {machine.name!r} has devices "
                            f"0..{machine.num_devices - 1}; the file was made for another machine")
    if n > machine.num_devices:
        raise StrategyError(f"{r.where(ids_line)}: '{name}' is split into {n} pieces but machine {machine.name!r} "
                            f"has {machine.num_devices} devices, one piece each at most")
    kinds = {machine.devices[d].spec.kind for d in ids}
    if kinds != {_KIND_OF_TYPE[dtype]}:
        raise StrategyError(f"{r.where(ids_line)}: '{name}' has device type {dtype} ({_KIND_OF_TYPE[dtype]}) but "
                            f"its devices on {machine.name!r} are {', '.join(sorted(kinds))}")
    # give each file dimension with degree > 1 to its axis (a SOAP axis first, then in axis order)
    degrees: dict[str, int] = {}
    axis_of_dim: dict[int, int] = {}
    for dim, d in enumerate(file_deg):
        if d == 1:
            continue
        if dim not in lay.dim_of:
            raise StrategyError(f"{r.where(deg_line)}: '{name}' ({node.op_type.value}) cannot be split along "
                                f"{'its replica dimension' if dim == lay.rank else f'output dimension {dim}'} "
                                f"(degree {d})")
        axis_of_dim[dim] = _reader_axis(lay, dim)
        degrees[lay.names[axis_of_dim[dim]]] = d
    deg = tuple(degrees.get(a, 1) for a in lay.names)
    strides = [math.prod(deg[k + 1:]) for k in range(len(deg))]
    order = ([lay.rank] if ndims > lay.rank else []) + list(range(lay.rank))
    by_axis = [0] * len(ids)
    for pos, coords in enumerate(itertools.product(*(range(file_deg[dim]) for dim in order))):
        by_axis[sum(c * strides[axis_of_dim[dim]] for c, dim in zip(coords, order) if dim in axis_of_dim)] = ids[pos]
    try:
        apply_single(base, node, degrees)
    except FlexrtError as e:
        raise StrategyError(f"{r.where(deg_line)}: degrees {legion} do not fit '{name}': {e}") from None
    view = view_from_device_ids(machine, deg, by_axis)
    if view is None:
        raise StrategyError(f"{r.where(ids_line)}: the device ids {ids} of '{name}' do not form a machine view on "
                            f"{machine.name!r} (pieces must step by a constant stride per dimension)")
    return node.id, OpConfig(tuple(degrees.items()), view)


def strategy_from_text(text: str, base: PCG, machine: Machine, source: str = "<text>") -> Strategy:
    """A strategy from FlexFlow's text format; operators the text leaves out are data parallel."""
    r = _Reader(text, source)
    (count,) = r.ints("the number of operators", 1)
    computes = sum(1 for n in base.nodes if is_compute(n))
    if not 0 <= count <= computes:
        raise StrategyError(f"{r.where()}: line 1 announces {count} operators; the model has {computes} (valid: "
                            f"0..{computes}, those the file configures)")
    configs: dict[int, OpConfig] = {}
    for _ in range(count):
        nid, cfg = _read_operator(r, base, machine)
        if nid in configs:
            raise StrategyError(f"{r.where()}: operator '{base.node(nid).name}' appears twice")
        configs[nid] = cfg
    rest = [k for k in range(r.i, len(r.lines)) if r.lines[k].strip()]
    if rest:
        raise StrategyError(f"{r.where(rest[0] + 1)}: text after the {count} operator(s) line 1 announces: "
                            f"{short(r.lines[rest[0]].strip())}")
    missing = [n for n in base.nodes if is_compute(n) and n.id not in configs]
    if missing:
        dp = data_parallel(base, machine).configs
        configs.update({n.id: dp[n.id] for n in missing})
    try:
        strategy = ConfigStrategy(base, configs)
        strategy.check_views(machine)
    except FlexrtError as e:
        raise StrategyError(f"{source}: {e}") from None
    return strategy


def load_text_strategy(path: str, base: PCG, machine: Machine) -> Strategy:
    """Read a FlexFlow r22.07 strategy file for the model ``base`` on ``machine``."""
    return strategy_from_text(read_text(path, "strategy file", StrategyError), base, machine, str(path))
