"""Machine views (Unity §3.2 "machine mappings"): where the tasks of a parallel operator run.

An operator split into ``d_1 x ... x d_n`` tasks gets a :class:`MachineView`: a start device and,
per dimension, a stride and a projection. Task ``(i_1, ..., i_n)`` runs on::

    node  = node(start)  + sum over INTER dims of i_k * stride_k
    local = local(start) + sum over INTRA dims of i_k * stride_k
    device = node * devices_per_node + local

INTRA dimensions step over devices, INTER dimensions over nodes. An INTRA dimension longer than a
node continues on the next node (the device ids stay contiguous), which is how a 1-D data-parallel
view spans nodes. Tasks are numbered row-major over the degrees.

Views are canonical where two describe the same devices: a dimension of degree 1 is INTRA with
stride 1, and an offset that is a whole number of nodes is INTER. :func:`enumerate_views` lists the
views Unity's search considers; their number grows linearly with the devices (§3.2): INTRA strides
either fit in a node's width or fill a dense block of devices, INTER strides fill a dense block of
nodes, so for fixed degrees the views are a constant number of stride patterns times the starts.

Entry points: :func:`view_devices`, :func:`check_placement`, :func:`enumerate_views`, :func:`data_parallel_view`,
:func:`view_from_device_ids`.
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from flexrt.errors import StrategyError
from flexrt.inputs import short
from flexrt.machine.machine import Machine, MachineShape, as_int


class Projection(enum.Enum):
    """Whether a view dimension steps over devices within a node or over nodes."""

    __hash__ = object.__hash__  # members are singletons compared by identity; Enum's own hash is slow

    INTRA = "intra"
    INTER = "inter"


@dataclass(frozen=True, slots=True)
class MachineView:
    """A start device and, per parallel dimension, a stride and a projection.

    Example:
        >>> v = MachineView(0, (1, 1), (Projection.INTRA, Projection.INTER))
        >>> str(v)
        '@0[intra*1, inter*1]'
    """

    start: int
    strides: tuple[int, ...]
    projections: tuple[Projection, ...]

    def __post_init__(self) -> None:
        start, strides = as_int(self.start), tuple(as_int(s) for s in self.strides)
        if start is None or start < 0:
            raise StrategyError(f"a view's start device must be an integer >= 0, got {self.start!r}")
        if any(s is None or s < 1 for s in strides):
            raise StrategyError(f"view strides must be integers >= 1, got {tuple(self.strides)}")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "projections", tuple(self.projections))
        if len(self.strides) != len(self.projections):
            raise StrategyError(f"a view needs one projection per stride; got strides {self.strides} and "
                                f"projections {tuple(p.value for p in self.projections)}")
        for p in self.projections:
            if not isinstance(p, Projection):
                raise StrategyError(f"view projections must be Projection values, got {p!r}")

    @property
    def ndims(self) -> int:
        return len(self.strides)

    def __str__(self) -> str:
        dims = ", ".join(f"{p.value}*{s}" for p, s in zip(self.projections, self.strides))
        return f"@{self.start}[{dims}]"


def _shape(machine: Machine | MachineShape) -> MachineShape:
    return machine if isinstance(machine, MachineShape) else machine.shape


def _check_degrees(degrees: Sequence[int]) -> tuple[int, ...]:
    ints = tuple(as_int(d) for d in degrees)
    if any(d is None or d < 1 for d in ints):
        raise StrategyError(f"parallel degrees must be integers >= 1, got {tuple(degrees)}")
    return ints


def _steps(view: MachineView, per_node: int) -> tuple[int, ...]:
    """Device-id step per dimension."""
    return tuple(s * per_node if p is Projection.INTER else s for s, p in zip(view.strides, view.projections))


def _offsets(degrees: tuple[int, ...], steps: tuple[int, ...]) -> tuple[int, ...]:
    """Device offsets of every task, row-major over ``degrees``."""
    return tuple(sum(i * s for i, s in zip(index, steps)) for index in itertools.product(*map(range, degrees)))


def view_devices(machine: Machine | MachineShape, view: MachineView, degrees: Sequence[int]) -> tuple[int, ...]:
    """The device of every task, row-major over ``degrees``.

    Raises StrategyError when the view has another number of dimensions or a task falls off the
    machine ("view @6[intra*1, intra*2] places task (1, 1) on device 9 but the machine has devices 0..7").

    Example:
        >>> from flexrt.machine import load_machine
        >>> view_devices(load_machine("summit"), MachineView(0, (3,), (Projection.INTRA,)), (2,))
        (0, 3)
    """
    return _view_devices(_shape(machine), view, _check_degrees(degrees))


def check_placement(machine: Machine, view: MachineView, degrees: Sequence[int], where: str) -> tuple[int, ...]:
    """The devices of ``view`` for a strategy file's operator split into ``degrees`` pieces, each on
    its own device of ``machine``; StrategyError naming ``where`` otherwise. The pieces are counted
    before any is placed, so that degrees no machine holds (1e30) are refused, not enumerated."""
    pieces = math.prod(degrees)
    if pieces > machine.num_devices:
        raise StrategyError(f"{where}: degrees {short(list(degrees))} make {short(pieces)} pieces but machine "
                            f"{machine.name!r} has {machine.num_devices} devices (valid: at most one piece a device)")
    try:
        devices = view_devices(machine, view, degrees)
    except StrategyError as e:
        raise StrategyError(f"{where}: {e}") from None
    if len(set(devices)) != len(devices):
        raise StrategyError(f"{where}: view {view} puts two pieces on one device (devices {list(devices)})")
    return devices


@functools.lru_cache(maxsize=65536)
def _view_devices(shape: MachineShape, view: MachineView, degrees: tuple[int, ...]) -> tuple[int, ...]:
    if len(degrees) != view.ndims:
        raise StrategyError(f"view {view} has {view.ndims} dimensions but the degrees {degrees} have {len(degrees)}")
    steps = _steps(view, shape.devices_per_node)
    devices = tuple(view.start + o for o in _offsets(degrees, steps))
    for index, device in zip(itertools.product(*map(range, degrees)), devices):
        if device >= shape.num_devices:
            raise StrategyError(f"view {view} places task {index} on device {device} but the machine has devices "
                                f"0..{shape.num_devices - 1}")
    return devices


def _canonical(shape: MachineShape, start: int, degrees: tuple[int, ...], steps: Sequence[int]) -> MachineView:
    strides, projections = [], []
    per_node = shape.devices_per_node
    for d, step in zip(degrees, steps):
        if d == 1:
            strides.append(1)
            projections.append(Projection.INTRA)
        elif step % per_node == 0 and shape.num_nodes > 1:
            strides.append(step // per_node)
            projections.append(Projection.INTER)
        else:
            strides.append(step)
            projections.append(Projection.INTRA)
    return MachineView(start, tuple(strides), tuple(projections))


def view_from_device_ids(machine: Machine | MachineShape, degrees: Sequence[int],
                         device_ids: Sequence[int]) -> MachineView | None:
    """The canonical view that puts task ``k`` (row-major over ``degrees``) on ``device_ids[k]``,
    or None when no view does (FlexFlow's ParallelConfig -> view).

    Example:
        >>> from flexrt.machine import load_machine
        >>> str(view_from_device_ids(load_machine("summit", nodes=2), (2, 3), [0, 1, 2, 6, 7, 8]))
        '@0[inter*1, intra*1]'
    """
    shape = _shape(machine)
    degrees = _check_degrees(degrees)
    ids = tuple(as_int(i) for i in device_ids)
    if len(ids) != math.prod(degrees):
        raise StrategyError(f"{len(ids)} device ids for degrees {degrees}, which make {math.prod(degrees)} tasks")
    for raw, i in zip(device_ids, ids):
        if i is None or not 0 <= i < shape.num_devices:
            raise StrategyError(f"device id {raw!r} is not on the machine (devices 0..{shape.num_devices - 1})")
    steps = []
    for k, d in enumerate(degrees):
        if d == 1:
            steps.append(1)
            continue
        step = ids[math.prod(degrees[k + 1:])] - ids[0]  # task with i_k = 1, every other index 0
        if step <= 0:
            return None
        steps.append(step)
    view = _canonical(shape, ids[0], degrees, steps)
    try:
        return view if _view_devices(shape, view, degrees) == ids else None
    except StrategyError:
        return None


def data_parallel_view(machine: Machine | MachineShape, total_degree: int) -> MachineView:
    """The 1-D view on devices ``0 .. total_degree - 1``: INTRA stride 1 within a node, continuing
    over the following nodes (INTER stride 1 when a node has one device)."""
    shape = _shape(machine)
    degree = as_int(total_degree)
    if degree is None or not 1 <= degree <= shape.num_devices:
        raise StrategyError(f"data parallel degree {total_degree!r} does not fit the machine's "
                            f"{shape.num_devices} devices (valid: 1..{shape.num_devices})")
    return _canonical(shape, 0, (degree,), (1,))


def _products(degrees: Sequence[int]) -> set[int]:
    """Products of every subset of ``degrees`` (1 for the empty one)."""
    return {math.prod(c) for r in range(len(degrees) + 1) for c in itertools.combinations(degrees, r)}


def _dense_strides(degrees: Sequence[int]) -> list[tuple[int, ...]]:
    """Stride vectors whose tasks fill a dense block ``0 .. prod(degrees) - 1`` (any dimension order)."""
    options = [sorted(_products(list(degrees[:k]) + list(degrees[k + 1:]))) for k in range(len(degrees))]
    block = set(range(math.prod(degrees)))
    return [s for s in itertools.product(*options) if set(_offsets(tuple(degrees), s)) == block]


def _intra_strides(degrees: tuple[int, ...], per_node: int) -> list[tuple[int, ...]]:
    """INTRA stride vectors: those whose tasks fit in one node's width, and the dense blocks that
    may be wider than a node."""
    if not degrees:
        return [()]
    limit = max(per_node - 1, 1)
    fits = [s for s in itertools.product(range(1, limit + 1), repeat=len(degrees))
            if sum((d - 1) * x for d, x in zip(degrees, s)) < per_node]
    return sorted(set(fits) | set(_dense_strides(degrees)))


def enumerate_views(machine: Machine | MachineShape, degrees: Sequence[int]) -> list[MachineView]:
    """Every view Unity's search considers for an operator with ``degrees``: each split of the
    dimensions into INTRA and INTER; INTRA strides whose tasks fit in a node's width, or that fill a
    dense block of devices; INTER strides that fill a dense block of nodes (in any dimension order);
    every start where all tasks land on distinct devices of the machine.

    The count grows linearly with the number of devices for fixed degrees. Sorted by (start,
    strides, projections).

    Example:
        >>> from flexrt.machine import load_machine
        >>> [str(v) for v in enumerate_views(load_machine("summit"), (6,))]
        ['@0[intra*1]']
    """
    shape = _shape(machine)
    degrees = _check_degrees(degrees)
    return list(_enumerate(shape, degrees))


@functools.lru_cache(maxsize=4096)
def _enumerate(shape: MachineShape, degrees: tuple[int, ...]) -> tuple[MachineView, ...]:
    total, per_node = shape.num_devices, shape.devices_per_node
    tasks = math.prod(degrees)
    if tasks > total:
        return ()
    split = [k for k, d in enumerate(degrees) if d > 1]
    found: dict[MachineView, None] = {}
    for assignment in itertools.product((Projection.INTRA, Projection.INTER), repeat=len(split)):
        intra = [k for k, p in zip(split, assignment) if p is Projection.INTRA]
        inter = [k for k, p in zip(split, assignment) if p is Projection.INTER]
        inter_options = _dense_strides([degrees[k] for k in inter])
        for intra_strides in _intra_strides(tuple(degrees[k] for k in intra), per_node):
            for inter_strides in inter_options:
                steps = [0] * len(degrees)
                for k, s in zip(intra, intra_strides):
                    steps[k] = s
                for k, s in zip(inter, inter_strides):
                    steps[k] = s * per_node
                offsets = _offsets(degrees, tuple(steps))
                if len(set(offsets)) != tasks:
                    continue
                for start in range(total - max(offsets)):
                    found.setdefault(_canonical(shape, start, degrees, steps), None)
    return tuple(sorted(found, key=lambda v: (v.start, v.strides, tuple(p.value for p in v.projections))))
