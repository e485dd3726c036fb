"""Where the pieces of a compute operator run and which region of each tensor each touches.

``OperatorLayout`` is one value per (operator, configuration, view): the axes' degrees, the device
of each piece, the region of each operand and output each piece reads or writes (halos included:
a convolution piece reads the rows around its own), piece shapes, the attributes each piece runs
with (``piece_call``: e.g. a convolution piece without the padding its halo holds) and the
distinct (attributes, operand shapes, output shapes) classes of pieces, which cost models time
once. Pieces are numbered in row-major order of the operator's axes, the order
``axis_coordinates`` gives.

``Layouts`` computes them for one machine and one model and keeps them: a search revisits the
same configurations many times. ``ReshardPlan`` (``flexrt.strategy.reshard``) is built from two
layouts.

Entry points: ``OperatorLayout``, ``operator_layout`` (``layout_on``), ``Layouts``.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexrt.errors import StrategyError
from flexrt.ir.parallel_axes import Region, axis_coordinates, configured_attrs, plan_regions, region_plan
from flexrt.ir.pcg import Node
from flexrt.ir.registry import op_def
from flexrt.ir.tensor_shape import TensorShape
from flexrt.machine import Machine
from flexrt.machine.views import MachineView, view_devices
from flexrt.strategy.config import OpShapes, Wiring


@dataclass(eq=False)
class OperatorLayout:
    """Where the pieces of a compute operator run and which region of each tensor each touches
    (compared and hashed by identity: ``Layouts`` makes one per operator, configuration and view)."""

    node: Node
    degree: dict
    devices: list[int]
    operand_regions: list[list[Region]]
    output_regions: list[list[Region]]
    operand_boxes: list[list[tuple]]  # per operand, each piece's region inside the tensor (a halo's padding cut off)
    operand_plain: list[bool]         # per operand: every piece has sum index 0 and copy index 0
    output_plain: list[bool]          # the same per output
    output_boxes: list[list[tuple]]   # per output, each piece's ranges
    output_sizes: list[tuple]         # per output, each piece's element count
    operand_shapes: list[TensorShape]
    output_shapes: list[TensorShape]
    piece_ins: list          # per piece: operand piece shapes (halo included)
    piece_outs: list         # per piece: output piece shapes
    piece_attrs: list        # per piece: (attributes it runs with, operands it zeroes)
    piece_class: list        # per piece: index of its (attributes, operand and output shapes) in ``classes``
    classes: list            # the distinct (attributes, operand shapes, output shapes) of the pieces
    origin: "OperatorLayout | None" = None   # the layout this one copies for another node (``Layouts``' twins):
    # every field but ``node`` is the origin's, so what depends on them alone (resharding plans) is shared

    @property
    def kin(self) -> "OperatorLayout":
        """The layout whose fields this one shares (itself unless it is a twin's copy)."""
        return self.origin if self.origin is not None else self

    @property
    def num_pieces(self) -> int:
        return len(self.devices)


def clip(region: Region, shape: TensorShape) -> tuple:
    """The part of a region inside the tensor (a halo reaches outside: padding)."""
    return tuple((max(a, 0), min(b, n)) for (a, b), n in zip(region.ranges, shape.dims))


def _piece_shapes(all_dims, dtype) -> tuple[list[TensorShape], list[int]]:
    """A ``TensorShape`` per piece (one object per distinct shape), and each piece's distinct-shape index."""
    made: dict = {}
    for dims in all_dims:
        if dims not in made:
            made[dims] = len(made)
    shapes = [TensorShape.piece(dims, dtype) for dims in made]
    codes = [made[dims] for dims in all_dims]
    return [shapes[c] for c in codes], codes


_PLANS: dict = {}


def _region_plan(axes, idx: int, rank: int, output: bool):
    """``region_plan``, kept per axes object (configurations' axes are memoized objects)."""
    key = (id(axes), idx, rank, output)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is axes:
        return hit[1]
    plan = region_plan(axes, idx, rank, output)
    if len(_PLANS) > 100_000:
        _PLANS.clear()
    _PLANS[key] = (axes, plan)
    return plan


def _piece_calls(opdef, attrs, axes, degree: dict, count: int) -> list:
    """``piece_call`` of every piece, called once per distinct coordinates on the axes it reads."""
    read = opdef.piece_call_axes
    if read is not None and not any(degree.get(a, 1) > 1 for a in read):  # it reads nothing that varies
        return [opdef.piece_call(attrs, {a.name: 0 for a in axes}, degree)] * count
    out, seen = [], {}
    for c in axis_coordinates(axes, degree):
        key = tuple(c.get(a, 0) for a in read) if read is not None else None
        hit = seen.get(key) if key is not None else None
        if hit is None:
            hit = opdef.piece_call(attrs, c, degree)
            if key is not None:
                seen[key] = hit
        out.append(hit)
    return out


def operator_layout(machine: Machine, wiring: Wiring, name: str, shapes: OpShapes, view: MachineView,
                    tensors: dict | None = None) -> OperatorLayout:
    """The layout of compute operator ``name`` of ``wiring``'s model under ``shapes`` and ``view``.
    ``tensors`` keeps the pieces of each distinct (region plan, degrees, tensor shape, halo)
    across calls: operators of one shape share them (their lists are shared, never changed)."""
    devices = list(view_devices(machine, view, tuple(d for _, d in shapes.degree)))
    if len(set(devices)) != len(devices):
        raise StrategyError(f"operator '{name}': its view {view} puts two pieces on one device")
    return layout_on(wiring.nodes[name], wiring.operand_full[name], wiring.output_full[name], shapes, devices,
                     tensors)


def layout_on(node: Node, full, outs, shapes: OpShapes, devices: list[int],
              tensors: dict | None = None) -> OperatorLayout:
    """The layout of compute operator ``node`` under ``shapes`` with piece p on ``devices[p]``: the
    one derivation of pieces, regions and piece classes (``operator_layout`` for a model's operator
    and a machine view; Unity's cost estimates for operators of its candidate graphs). ``full`` and
    ``outs`` are the full shapes of its operands (data, then weights) and outputs."""
    axes, degree = shapes.axes, shapes.degree_map
    count = len(devices)
    opdef = op_def(node.op_type)
    full = list(full)
    data_full = full[:len(full) - opdef.num_weights(node.attrs)]
    outs = list(outs)
    names = [a.name for a in axes]
    codes: list[list[int]] = []  # per tensor, each piece's distinct-shape index

    memo = tensors if tensors is not None else {}
    degrees = shapes.degree

    def pieces_of(i: int, s, output: bool):
        """(regions, piece shapes, distinct-shape codes, boxes inside the tensor, no partial sums nor
        replicas, element count per piece) of tensor ``i``."""
        plan = _region_plan(axes, i, s.rank, output)
        halo = any(d[1] for d in plan[0])
        key = (plan, degrees, i, s, output) + ((node.op_type, node.attrs, tuple(data_full), outs[0]) if halo else ())
        hit = memo.get(key)
        if hit is not None:
            return hit
        r, dims = (plan_regions(plan, i, names, degree, s, with_dims=True) if output else
                   plan_regions(plan, i, names, degree, s, opdef, node.attrs, data_full, outs[0], with_dims=True))
        ps, code = _piece_shapes(dims, s.dtype)
        boxes = [clip(x, s) for x in r] if halo else [x.ranges for x in r]
        plain = not any(degree[n] > 1 for n in plan[1] + plan[2])  # no partial sums, no replicas
        sizes: dict = {}  # piece shapes are shared objects: one count per distinct shape
        for x in ps:
            if id(x) not in sizes:
                sizes[id(x)] = x.num_elements
        memo[key] = hit = (r, ps, code, boxes, plain, tuple(sizes[id(x)] for x in ps))
        return hit

    def regions_of(tensors, output: bool):
        regions, piece_shapes, boxes, plain, sizes = [], [], [], [], []
        for i, s in enumerate(tensors):
            r, ps, code, b, pl, n = pieces_of(i, s, output)
            regions.append(r)
            piece_shapes.append(ps)
            codes.append(code)
            boxes.append(b)
            plain.append(pl)
            sizes.append(n)
        return regions, piece_shapes, boxes, plain, sizes

    operand_regions, piece_ins, operand_boxes, operand_plain, _ = regions_of(full, False)
    output_regions, piece_outs, output_boxes, output_plain, output_sizes = regions_of(outs, True)
    # e.g. a conv piece runs without the padding its halo holds
    if opdef.piece_call is None:
        piece_attrs = [(node.attrs, frozenset())] * count
    else:
        # from the configured attributes (a part axis's degree is one, ``configured_attrs``)
        piece_attrs = _piece_calls(opdef, configured_attrs(axes, node.attrs, degree), axes, degree, count)
        seen: dict = {}
        codes.append([seen.setdefault(a, len(seen)) for a, _ in piece_attrs])
    if all(not any(code) for code in codes):  # every piece alike (the common case): one class
        # operand pieces include their halo (padding outside the tensor counts: the kernel reads it)
        ins, outs_ = tuple(ps[0] for ps in piece_ins), tuple(ps[0] for ps in piece_outs)
        piece_ins, piece_outs = [ins] * count, [outs_] * count
        piece_class, classes = [0] * count, [(piece_attrs[0][0], ins, outs_)]
    else:
        piece_ins = list(zip(*piece_ins)) if full else [()] * count
        piece_outs = list(zip(*piece_outs))
        # a class per distinct (attributes, operand shapes, output shapes)
        index: dict = {}
        piece_class = [index.setdefault(key, len(index)) for key in zip(*codes)]
        first = {c: p for p, c in reversed(list(enumerate(piece_class)))}
        classes = [(piece_attrs[first[c]][0], piece_ins[first[c]], piece_outs[first[c]]) for c in range(len(index))]
    return OperatorLayout(node, degree, devices, operand_regions, output_regions, operand_boxes, operand_plain,
                          output_plain, output_boxes, output_sizes, full, outs, piece_ins, piece_outs, piece_attrs, piece_class, classes)


class Layouts:
    """The layouts of one model's operators on one machine, computed once per (operator,
    configuration, view). Configurations' shapes are memoized objects (``op_shapes``), so they are
    matched by identity; at most ``limit`` layouts are kept."""

    def __init__(self, machine: Machine, wiring: Wiring, limit: int = 50_000) -> None:
        self.machine, self.wiring, self.limit = machine, wiring, limit
        self._memo: dict = {}
        self._keys: dict = {}     # operator -> its keys in ``_memo``
        self._tensors: dict = {}  # pieces of each distinct tensor cut, shared by operators of one shape
        # the last layout per (configuration shapes, view): operators with equal attributes and shapes
        # share their shapes object (``op_shapes``), so their layouts differ only in the node
        self._twins: dict = {}
        self._same: dict = {}     # the same by the view's identity: (id(shapes), id(view), kind) -> (shapes, layout, view)

    def get(self, name: str, shapes: OpShapes, view: MachineView) -> OperatorLayout:
        key = (name, id(shapes), id(view))      # identities: hashing a view's value costs (millions of lookups)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is shapes and hit[2] is view:
            return hit[1]
        node = self.wiring.nodes[name]
        skey = (id(shapes), id(view), node.op_type)
        # an operator of the same kind, attributes, shapes and view: first by the view's identity
        # (a pipeline's micro-batch copies share their configuration), else by its value
        twin = self._same.get(skey)
        if twin is None or twin[0] is not shapes or twin[2] is not view:
            twin = self._twins.get((id(shapes), view, node.op_type))
        if twin is not None and twin[0] is shapes and (twin[1].node.attrs is node.attrs or twin[1].node.attrs == node.attrs):
            lay = object.__new__(OperatorLayout)       # a shallow copy (copy.copy is slower: millions of them)
            lay.__dict__.update(twin[1].__dict__)
            lay.node, lay.origin = node, twin[1].kin
        else:
            lay = operator_layout(self.machine, self.wiring, name, shapes, view, self._tensors)
        if len(self._memo) >= self.limit:  # a long search visits many; keep memory bounded
            self._memo.clear()
            self._keys.clear()
            self._tensors.clear()
            self._twins.clear()
            self._same.clear()
        self._twins[(id(shapes), view, node.op_type)] = (shapes, lay)
        self._same[skey] = (shapes, lay, view)
        self._memo[key] = (shapes, lay, view)
        self._keys.setdefault(name, []).append(key)
        return lay

    def drop(self, name: str) -> None:
        """Forget the layouts of operator ``name``."""
        for key in self._keys.pop(name, ()):
            self._memo.pop(key, None)

    def __len__(self) -> int:
        return len(self._memo)
