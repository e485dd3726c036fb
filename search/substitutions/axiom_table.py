"""The registry of the verifier's axioms (``axioms.py`` reads it): ``Axiom``, the ``axiom`` decorator
and helpers shared by the tables ``axioms_algebraic.py`` (TASO's operator properties, concat and
split, the new operators), ``axioms_parallel.py`` (Unity's parallel properties) and
``axioms_sizes.py`` (the size of every operator's output, ``dim(t, i)``).

An axiom is ``law(A, v) -> (lhs, rhs)``, read by an algebra ``A`` (Z3 or NumPy, see ``axioms.py``),
holding for every assignment of its integer variables that satisfies ``guard`` and every tensor
sizes that satisfy ``where`` (conditions on ``A.dim(t, i)``, the size of dimension ``i`` of ``t``
counted from the innermost).

Entry points: ``Axiom``, ``axiom``, ``registered``, the domains ``DIM``, ``DEG``, ``ACTI``, ``SCALAR``,
``UNARY``, ``AXES``, ``AGGR``, ``WINDOW``, ``GROUP``, ``POINT``, ``SIZE``; ``conv_shapes``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from flexrt.errors import GraphError
from flexrt.search.substitutions.semantics import encode_window, window_of

# Domains of integer parameters: what the concrete check draws and what Z3 is told.
DIM, DEG, ACTI, SCALAR = "dim", "deg", "acti", "scalar"
UNARY, AXES, AGGR = "unary", "axes", "aggr"   # an element-wise function's code, layer norm's dims, a bag or not
WINDOW, GROUP = "window", "group"   # a convolution's window (semantics.window_code) and its groups
POINT = "point"   # where a split cuts: 1 <= p < the dimension's size (the split's typing says the latter)
SIZE = "size"     # one size of a reshape's target: >= 1
# Windows the concrete checks draw (kernel, stride, padding along height and width), as codes.
CONV_WINDOWS = tuple(encode_window(w) for w in (
    (1, 1, 1, 1, 0, 0), (3, 3, 1, 1, 1, 1), (3, 3, 2, 2, 1, 1), (1, 3, 1, 1, 0, 1), (2, 2, 2, 2, 0, 0)))
@dataclass(frozen=True, slots=True)
class Axiom:
    """One property: ``law(A, v) -> (lhs, rhs)`` holds for every assignment of ``v`` that satisfies
    ``guard(A, v)`` and ``where(A, v)`` (lists of conditions) on tensors laid out as ``kinds(v)`` says."""
    name: str
    comment: str
    law: Callable
    tensors: tuple
    ints: tuple = ()                      # ((name, domain), ...)
    guard: Callable | None = None      # (A, v) -> [condition, ...] on the integer variables
    where: Callable | None = None      # (A, v) -> [condition, ...] on the tensors' sizes (A.dim)
    shapes: Callable | None = None     # (v, z) -> {tensor: sizes}; default: all z.shape(rank)
    kinds: Callable | None = None      # v -> {tensor: {"parts": {dim: deg}, "sum": k, "rep": k}}
    ranks: tuple = (2,)
    parallel: bool = field(default=False)


_AXIOMS: dict[str, Axiom] = {}


def axiom(comment: str, tensors: str, ints: str = "", *, guard=None, where=None, shapes=None, kinds=None,
          ranks=(2,), parallel: bool = False):
    """Register ``fn`` as an axiom. ``ints`` is ``"d:dim k:deg"``; ``tensors`` is ``"x w"``."""
    def deco(fn):
        if fn.__name__ in _AXIOMS:
            raise GraphError(f"axiom {fn.__name__} is already registered")
        ip = tuple(tuple(p.split(":")) for p in ints.split())
        _AXIOMS[fn.__name__] = Axiom(fn.__name__, comment, fn, tuple(tensors.split()), ip, guard, where, shapes,
                                     kinds, tuple(ranks), parallel)
        return fn
    return deco


def registered() -> tuple:
    return tuple(_AXIOMS.values())


def lin_shapes(v, z):
    """x [.., b, i], w [i, o]."""
    return {"x": z.lead(v) + (z.b, z.i), "w": (z.i, z.o)}


def lin2_shapes(v, z):
    return {"x": z.lead(v) + (z.b, z.i), "w1": (z.i, z.o), "w2": (z.i, z.o), "x1": z.lead(v) + (z.b, z.i),
            "x2": z.lead(v) + (z.b, z.i), "w": (z.i, z.o)}


def conv_shapes(v, z):
    """x [N, C, H, W] with C = g * i, kernels w [O, i, kh, kw] with O = g * o, biases [O]; the window
    of ``v.c`` (sizes every window of ``CONV_WINDOWS`` fits)."""
    g = getattr(v, "g", 1)
    win = window_of(v.c)
    x, w, b = (z.b, g * z.i, 5, 6), (g * z.o, z.i, win["PM_KERNEL_H"], win["PM_KERNEL_W"]), (g * z.o,)
    return {"x": x, "x1": x, "x2": x, "w": w, "w1": w, "w2": w, "b": b, "b1": b, "b2": b}


def part_kind(d, k):
    """Every tensor partitioned ``k`` ways along ``d`` (names of integer variables)."""
    return lambda v: {"parts": {getattr(v, d): getattr(v, k)}}


def sum_kind(k):
    """Every tensor held as ``k`` partial sums."""
    return lambda v: {"sum": getattr(v, k)}


def named(name, fn):
    fn.__name__ = name
    return fn


def same_size(A, a, b, dims) -> list:
    """Conditions: ``a`` and ``b`` have equal sizes along ``dims``."""
    return [A.dim(a, d) == A.dim(b, d) for d in dims]
