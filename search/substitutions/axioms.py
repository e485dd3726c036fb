"""The axioms the substitution verifier reasons with (Unity §4, TASO's method), in one table.

Every axiom is written once, as a function of an *algebra* ``A`` and its variables ``v``, and is
read two ways:

- by :class:`Z3Algebra` as a universally quantified first-order formula over an uninterpreted
  tensor sort ``T`` (``verify.py`` proves rules from these formulas);
- by :class:`NumpyAlgebra` on concrete parallel values, so that each axiom is checked on random
  float tensors with flexrt's NumPy kernels (``tests/search/test_axioms.py``): an unsound axiom
  fails a test.

Operators (see ``semantics.py`` for what each means in flexrt): ``linear(acti, x, w)``,
``relu(x)``, ``ewadd(a, b)``, ``ewmul(a, b)``, ``smul(s, x)``, ``transpose(x)``,
``concat(axis, a, b)``, ``split0(axis, x)`` / ``split1(axis, x)`` (the two equal halves),
``partition(dim, deg, x)``, ``combine(dim, deg, x)``, ``replicate(deg, x)``, ``reduce(deg, x)``.
Dimensions count from the innermost, as FlexFlow's do: on ``x`` [batch, in] the feature dim is 0
and the batch dim is 1; on ``w`` [in, out] the output dim is 0 and the input (row) dim is 1.

The tensor sort is untyped: an axiom is stated for the shapes and parallel layouts that make its
left side well typed in flexrt (those are what the concrete check draws), and Z3 may apply it to
any term. Concat/split axioms assume equal halves (``split`` cuts in two equal parts), and no axiom
may combine with them to reach unequal halves: ``concat(concat(a, b), c) = concat(a, concat(b, c))``
is true but, with ``split0(concat(a, b)) = a`` applied to unequal halves, proves every tensor equal,
so it is left out.

Entry points: ``AXIOMS``, ``axiom_by_name``, ``check_axiom`` (the concrete check), ``Z3Algebra``,
``NumpyAlgebra``, ``z3_axioms``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

from flexrt.errors import GraphError

# Domains of integer parameters: what the concrete check draws and what Z3 is told.
DIM, DEG, ACTI, SCALAR = "dim", "deg", "acti", "scalar"


@dataclass(frozen=True, slots=True)
class Axiom:
    """One property: ``law(A, v) -> (lhs, rhs)`` holds for every assignment of ``v`` that satisfies
    ``guard(A, v)`` (a list of conditions) on tensors laid out as ``kinds(v)`` says."""
    name: str
    comment: str
    law: Callable
    tensors: tuple
    ints: tuple = ()                      # ((name, domain), ...)
    guard: Callable | None = None      # (A, v) -> [condition, ...]
    shapes: Callable | None = None     # (v, z) -> {tensor: sizes}; default: all z.shape(rank)
    kinds: Callable | None = None      # v -> {tensor: {"parts": {dim: deg}, "sum": k, "rep": k}}
    ranks: tuple = (2,)
    parallel: bool = field(default=False)


_AXIOMS: dict[str, Axiom] = {}


def axiom(comment: str, tensors: str, ints: str = "", *, guard=None, shapes=None, kinds=None, ranks=(2,),
          parallel: bool = False):
    """Register ``fn`` as an axiom. ``ints`` is ``"d:dim k:deg"``; ``tensors`` is ``"x w"``."""
    def deco(fn):
        if fn.__name__ in _AXIOMS:
            raise GraphError(f"axiom {fn.__name__} is already registered")
        ip = tuple(tuple(p.split(":")) for p in ints.split())
        _AXIOMS[fn.__name__] = Axiom(fn.__name__, comment, fn, tuple(tensors.split()), ip, guard, shapes, kinds,
                                     tuple(ranks), parallel)
        return fn
    return deco


def _lin_shapes(v, z):
    """x [.., b, i], w [i, o]."""
    return {"x": z.lead(v) + (z.b, z.i), "w": (z.i, z.o)}


def _lin2_shapes(v, z):
    return {"x": z.lead(v) + (z.b, z.i), "w1": (z.i, z.o), "w2": (z.i, z.o), "x1": z.lead(v) + (z.b, z.i),
            "x2": z.lead(v) + (z.b, z.i), "w": (z.i, z.o)}


def _part(d, k):
    """Every tensor partitioned ``k`` ways along ``d`` (names of integer variables)."""
    return lambda v: {"parts": {getattr(v, d): getattr(v, k)}}


def _sum(k):
    """Every tensor held as ``k`` partial sums."""
    return lambda v: {"sum": getattr(v, k)}


# ================================================================================================
# TASO's operator properties
# ================================================================================================

@axiom("ewadd(a, b) = ewadd(b, a): addition is commutative", "a b")
def ewadd_comm(A, v):
    return A.ewadd(v.a, v.b), A.ewadd(v.b, v.a)


@axiom("ewadd(ewadd(a, b), c) = ewadd(a, ewadd(b, c)): addition is associative", "a b c")
def ewadd_assoc(A, v):
    return A.ewadd(A.ewadd(v.a, v.b), v.c), A.ewadd(v.a, A.ewadd(v.b, v.c))


@axiom("ewmul(a, b) = ewmul(b, a): element-wise multiplication is commutative", "a b")
def ewmul_comm(A, v):
    return A.ewmul(v.a, v.b), A.ewmul(v.b, v.a)


@axiom("ewmul(ewmul(a, b), c) = ewmul(a, ewmul(b, c)): element-wise multiplication is associative", "a b c")
def ewmul_assoc(A, v):
    return A.ewmul(A.ewmul(v.a, v.b), v.c), A.ewmul(v.a, A.ewmul(v.b, v.c))


@axiom("ewmul(ewadd(a, b), c) = ewadd(ewmul(a, c), ewmul(b, c)): multiplication distributes over addition",
       "a b c")
def ewmul_distrib(A, v):
    return A.ewmul(A.ewadd(v.a, v.b), v.c), A.ewadd(A.ewmul(v.a, v.c), A.ewmul(v.b, v.c))


@axiom("smul(s, smul(t, x)) = smul(s*t, x): scalar multiplies compose", "x", "s:scalar t:scalar")
def smul_smul(A, v):
    return A.smul(v.s, A.smul(v.t, v.x)), A.smul(v.s * v.t, v.x)


@axiom("smul(1, x) = x: multiplying by one is the identity", "x")
def smul_one(A, v):
    return A.smul(1, v.x), v.x


@axiom("smul(s, ewadd(a, b)) = ewadd(smul(s, a), smul(s, b)): scalar multiply is linear", "a b", "s:scalar")
def smul_ewadd(A, v):
    return A.smul(v.s, A.ewadd(v.a, v.b)), A.ewadd(A.smul(v.s, v.a), A.smul(v.s, v.b))


@axiom("ewadd(smul(s, x), smul(t, x)) = smul(s+t, x): scalar multiples of one tensor add", "x",
       "s:scalar t:scalar")
def smul_add_scalars(A, v):
    return A.ewadd(A.smul(v.s, v.x), A.smul(v.t, v.x)), A.smul(v.s + v.t, v.x)


@axiom("ewadd(x, x) = smul(2, x): a tensor added to itself is doubled", "x")
def ewadd_self(A, v):
    return A.ewadd(v.x, v.x), A.smul(2, v.x)


@axiom("smul(s, ewmul(a, b)) = ewmul(smul(s, a), b): a scalar moves into a product", "a b", "s:scalar")
def smul_ewmul(A, v):
    return A.smul(v.s, A.ewmul(v.a, v.b)), A.ewmul(A.smul(v.s, v.a), v.b)


@axiom("relu(smul(s, x)) = smul(s, relu(x)) for s >= 0: relu is positively homogeneous", "x", "s:scalar",
       guard=lambda A, v: [v.s >= 0])
def relu_smul(A, v):
    return A.relu(A.smul(v.s, v.x)), A.smul(v.s, A.relu(v.x))


@axiom("relu(relu(x)) = relu(x): relu is idempotent", "x")
def relu_idem(A, v):
    return A.relu(A.relu(v.x)), A.relu(v.x)


@axiom("transpose(transpose(x)) = x: transpose is an involution", "x", ranks=(2, 3))
def transpose_invol(A, v):
    return A.transpose(A.transpose(v.x)), v.x


@axiom("transpose(ewadd(a, b)) = ewadd(transpose(a), transpose(b))", "a b", ranks=(2, 3))
def transpose_ewadd(A, v):
    return A.transpose(A.ewadd(v.a, v.b)), A.ewadd(A.transpose(v.a), A.transpose(v.b))


@axiom("transpose(ewmul(a, b)) = ewmul(transpose(a), transpose(b))", "a b", ranks=(2, 3))
def transpose_ewmul(A, v):
    return A.transpose(A.ewmul(v.a, v.b)), A.ewmul(A.transpose(v.a), A.transpose(v.b))


@axiom("transpose(relu(x)) = relu(transpose(x))", "x", ranks=(2, 3))
def transpose_relu(A, v):
    return A.transpose(A.relu(v.x)), A.relu(A.transpose(v.x))


@axiom("transpose(smul(s, x)) = smul(s, transpose(x))", "x", "s:scalar", ranks=(2, 3))
def transpose_smul(A, v):
    return A.transpose(A.smul(v.s, v.x)), A.smul(v.s, A.transpose(v.x))


@axiom("transpose(linear(a, x, w)) = linear(a, transpose(w), transpose(x)): (xw)^T = w^T x^T (rank-2 x)",
       "x w", "a:acti", shapes=_lin_shapes)
def transpose_linear(A, v):
    return A.transpose(A.linear(v.a, v.x, v.w)), A.linear(v.a, A.transpose(v.w), A.transpose(v.x))


@axiom("linear(2, x, w) = relu(linear(0, x, w)): PM_ACTI 2 is a fused relu", "x w", shapes=_lin_shapes,
       ranks=(2, 3))
def linear_relu(A, v):
    return A.linear(2, v.x, v.w), A.relu(A.linear(0, v.x, v.w))


@axiom("linear(0, smul(s, x), w) = smul(s, linear(0, x, w)): linear in x", "x w", "s:scalar",
       shapes=_lin_shapes, ranks=(2, 3))
def linear_smul_x(A, v):
    return A.linear(0, A.smul(v.s, v.x), v.w), A.smul(v.s, A.linear(0, v.x, v.w))


@axiom("linear(0, x, smul(s, w)) = smul(s, linear(0, x, w)): linear in w", "x w", "s:scalar",
       shapes=_lin_shapes, ranks=(2, 3))
def linear_smul_w(A, v):
    return A.linear(0, v.x, A.smul(v.s, v.w)), A.smul(v.s, A.linear(0, v.x, v.w))


@axiom("linear(0, ewadd(x1, x2), w) = ewadd(linear(0, x1, w), linear(0, x2, w)): additive in x", "x1 x2 w",
       shapes=_lin2_shapes, ranks=(2, 3))
def linear_add_x(A, v):
    return A.linear(0, A.ewadd(v.x1, v.x2), v.w), A.ewadd(A.linear(0, v.x1, v.w), A.linear(0, v.x2, v.w))


@axiom("linear(0, x, ewadd(w1, w2)) = ewadd(linear(0, x, w1), linear(0, x, w2)): additive in w", "x w1 w2",
       shapes=_lin2_shapes, ranks=(2, 3))
def linear_add_w(A, v):
    return A.linear(0, v.x, A.ewadd(v.w1, v.w2)), A.ewadd(A.linear(0, v.x, v.w1), A.linear(0, v.x, v.w2))


@axiom("linear(a, linear(0, x, w1), w2) = linear(a, x, linear(0, w1, w2)): matmul is associative", "x w1 w2",
       "a:acti", shapes=lambda v, z: {"x": z.lead(v) + (z.b, z.i), "w1": (z.i, z.o), "w2": (z.o, z.c)},
       ranks=(2, 3))
def linear_assoc(A, v):
    return A.linear(v.a, A.linear(0, v.x, v.w1), v.w2), A.linear(v.a, v.x, A.linear(0, v.w1, v.w2))


@axiom("split0(ax, concat(ax, a, b)) = a: split undoes concat (equal halves)", "a b", "ax:dim", ranks=(2, 3))
def split0_concat(A, v):
    return A.split0(v.ax, A.concat(v.ax, v.a, v.b)), v.a


@axiom("split1(ax, concat(ax, a, b)) = b: split undoes concat (equal halves)", "a b", "ax:dim", ranks=(2, 3))
def split1_concat(A, v):
    return A.split1(v.ax, A.concat(v.ax, v.a, v.b)), v.b


@axiom("concat(ax, split0(ax, x), split1(ax, x)) = x: concat undoes split", "x", "ax:dim", ranks=(2, 3))
def concat_split(A, v):
    return A.concat(v.ax, A.split0(v.ax, v.x), A.split1(v.ax, v.x)), v.x


@axiom("concat(p, concat(q, a, b), concat(q, c, d)) = concat(q, concat(p, a, c), concat(p, b, d)) for p != q: "
       "a 2x2 block matrix is the same read by rows or by columns", "a b c d", "p:dim q:dim",
       guard=lambda A, v: [v.p != v.q], ranks=(2, 3))
def concat_blocks(A, v):
    return (A.concat(v.p, A.concat(v.q, v.a, v.b), A.concat(v.q, v.c, v.d)),
            A.concat(v.q, A.concat(v.p, v.a, v.c), A.concat(v.p, v.b, v.d)))


@axiom("ewadd(concat(ax, a, b), concat(ax, c, d)) = concat(ax, ewadd(a, c), ewadd(b, d))", "a b c d", "ax:dim",
       ranks=(2, 3))
def ewadd_concat(A, v):
    return A.ewadd(A.concat(v.ax, v.a, v.b), A.concat(v.ax, v.c, v.d)), \
        A.concat(v.ax, A.ewadd(v.a, v.c), A.ewadd(v.b, v.d))


@axiom("ewmul(concat(ax, a, b), concat(ax, c, d)) = concat(ax, ewmul(a, c), ewmul(b, d))", "a b c d", "ax:dim",
       ranks=(2, 3))
def ewmul_concat(A, v):
    return A.ewmul(A.concat(v.ax, v.a, v.b), A.concat(v.ax, v.c, v.d)), \
        A.concat(v.ax, A.ewmul(v.a, v.c), A.ewmul(v.b, v.d))


@axiom("relu(concat(ax, a, b)) = concat(ax, relu(a), relu(b))", "a b", "ax:dim", ranks=(2, 3))
def relu_concat(A, v):
    return A.relu(A.concat(v.ax, v.a, v.b)), A.concat(v.ax, A.relu(v.a), A.relu(v.b))


@axiom("smul(s, concat(ax, a, b)) = concat(ax, smul(s, a), smul(s, b))", "a b", "ax:dim s:scalar", ranks=(2, 3))
def smul_concat(A, v):
    return A.smul(v.s, A.concat(v.ax, v.a, v.b)), A.concat(v.ax, A.smul(v.s, v.a), A.smul(v.s, v.b))


@axiom("transpose(concat(ax, a, b)) = concat(swap(ax), transpose(a), transpose(b)), swap exchanging dims 0, 1",
       "a b", "ax:dim", ranks=(2, 3))
def transpose_concat(A, v):
    return A.transpose(A.concat(v.ax, v.a, v.b)), A.concat(A.swap(v.ax), A.transpose(v.a), A.transpose(v.b))


@axiom("linear(a, concat(ax, x1, x2), w) = concat(ax, linear(a, x1, w), linear(a, x2, w)) for ax >= 1: "
       "linear over concat along a batch dim", "x1 x2 w", "a:acti ax:dim", guard=lambda A, v: [v.ax >= 1],
       shapes=_lin2_shapes, ranks=(2, 3))
def linear_concat_batch(A, v):
    return A.linear(v.a, A.concat(v.ax, v.x1, v.x2), v.w), \
        A.concat(v.ax, A.linear(v.a, v.x1, v.w), A.linear(v.a, v.x2, v.w))


@axiom("linear(a, x, concat(0, w1, w2)) = concat(0, linear(a, x, w1), linear(a, x, w2)): "
       "linear over concat along the weight's output dim", "x w1 w2", "a:acti", shapes=_lin2_shapes, ranks=(2, 3))
def linear_concat_out(A, v):
    return A.linear(v.a, v.x, A.concat(0, v.w1, v.w2)), A.concat(0, A.linear(v.a, v.x, v.w1),
                                                               A.linear(v.a, v.x, v.w2))


@axiom("linear(0, concat(0, x1, x2), concat(1, w1, w2)) = ewadd(linear(0, x1, w1), linear(0, x2, w2)): "
       "concat along the contracted dim is a sum", "x1 x2 w1 w2", shapes=_lin2_shapes, ranks=(2, 3))
def linear_concat_inner(A, v):
    return A.linear(0, A.concat(0, v.x1, v.x2), A.concat(1, v.w1, v.w2)), \
        A.ewadd(A.linear(0, v.x1, v.w1), A.linear(0, v.x2, v.w2))


def _split_axioms():
    """split_i commutes with the element-wise operators and with linear where the split dim is kept."""
    for i in (0, 1):
        def s(A, ax, x, i=i):
            return A.split0(ax, x) if i == 0 else A.split1(ax, x)
        axiom(f"split{i}(ax, relu(x)) = relu(split{i}(ax, x))", "x", "ax:dim", ranks=(2, 3))(
            _named(f"split{i}_relu", lambda A, v, s=s: (s(A, v.ax, A.relu(v.x)), A.relu(s(A, v.ax, v.x)))))
        axiom(f"split{i}(ax, smul(t, x)) = smul(t, split{i}(ax, x))", "x", "ax:dim t:scalar", ranks=(2, 3))(
            _named(f"split{i}_smul", lambda A, v, s=s: (s(A, v.ax, A.smul(v.t, v.x)), A.smul(v.t, s(A, v.ax, v.x)))))
        axiom(f"split{i}(ax, ewadd(a, b)) = ewadd(split{i}(ax, a), split{i}(ax, b))", "a b", "ax:dim", ranks=(2, 3))(
            _named(f"split{i}_ewadd", lambda A, v, s=s: (s(A, v.ax, A.ewadd(v.a, v.b)),
                                                          A.ewadd(s(A, v.ax, v.a), s(A, v.ax, v.b)))))
        axiom(f"split{i}(ax, ewmul(a, b)) = ewmul(split{i}(ax, a), split{i}(ax, b))", "a b", "ax:dim", ranks=(2, 3))(
            _named(f"split{i}_ewmul", lambda A, v, s=s: (s(A, v.ax, A.ewmul(v.a, v.b)),
                                                          A.ewmul(s(A, v.ax, v.a), s(A, v.ax, v.b)))))
        axiom(f"split{i}(swap(ax), transpose(x)) = transpose(split{i}(ax, x))", "x", "ax:dim", ranks=(2, 3))(
            _named(f"split{i}_transpose", lambda A, v, s=s: (s(A, A.swap(v.ax), A.transpose(v.x)),
                                                              A.transpose(s(A, v.ax, v.x)))))
        axiom(f"split{i}(ax, linear(a, x, w)) = linear(a, split{i}(ax, x), w) for ax >= 1: split along a batch dim",
              "x w", "a:acti ax:dim", guard=lambda A, v: [v.ax >= 1], shapes=_lin_shapes, ranks=(2, 3))(
            _named(f"split{i}_linear_batch", lambda A, v, s=s: (s(A, v.ax, A.linear(v.a, v.x, v.w)),
                                                                 A.linear(v.a, s(A, v.ax, v.x), v.w))))
        axiom(f"split{i}(0, linear(a, x, w)) = linear(a, x, split{i}(0, w)): split along the output dim", "x w",
              "a:acti", shapes=_lin_shapes, ranks=(2, 3))(
            _named(f"split{i}_linear_out", lambda A, v, s=s: (s(A, 0, A.linear(v.a, v.x, v.w)),
                                                               A.linear(v.a, v.x, s(A, 0, v.w)))))


def _named(name, fn):
    fn.__name__ = name
    return fn


_split_axioms()


# ================================================================================================
# Unity's parallel properties. partition(d, k, x) is x cut into k pieces along dim d; combine
# gathers them; replicate(k, x) makes k copies; reduce(k, x) sums k partial sums. Copies and
# partial sums are different slots of a ParallelTensorShape, so reduce(k, replicate(k, x)) is ill
# typed and no axiom relates them.
# ================================================================================================

@axiom("combine(d, k, partition(d, k, x)) = x: combine undoes partition", "x", "d:dim k:deg", ranks=(2, 3),
       parallel=True)
def combine_partition(A, v):
    return A.combine(v.d, v.k, A.partition(v.d, v.k, v.x)), v.x


@axiom("partition(d, k, combine(d, k, x)) = x: partition undoes combine", "x", "d:dim k:deg",
       kinds=_part("d", "k"), ranks=(2, 3), parallel=True)
def partition_combine(A, v):
    return A.partition(v.d, v.k, A.combine(v.d, v.k, v.x)), v.x


@axiom("partition(d, k, partition(e, j, x)) = partition(e, j, partition(d, k, x)) for d != e", "x",
       "d:dim k:deg e:dim j:deg", guard=lambda A, v: [v.d != v.e], ranks=(2, 3), parallel=True)
def partition_partition(A, v):
    return A.partition(v.d, v.k, A.partition(v.e, v.j, v.x)), A.partition(v.e, v.j, A.partition(v.d, v.k, v.x))


@axiom("combine(d, k, partition(e, j, x)) = partition(e, j, combine(d, k, x)) for d != e", "x",
       "d:dim k:deg e:dim j:deg", guard=lambda A, v: [v.d != v.e], kinds=_part("d", "k"), ranks=(2, 3),
       parallel=True)
def combine_partition_other(A, v):
    return A.combine(v.d, v.k, A.partition(v.e, v.j, v.x)), A.partition(v.e, v.j, A.combine(v.d, v.k, v.x))


@axiom("combine(d, k, combine(e, j, x)) = combine(e, j, combine(d, k, x)) for d != e", "x",
       "d:dim k:deg e:dim j:deg", guard=lambda A, v: [v.d != v.e],
       kinds=lambda v: {"parts": {v.d: v.k, v.e: v.j}}, ranks=(2, 3), parallel=True)
def combine_combine(A, v):
    return A.combine(v.d, v.k, A.combine(v.e, v.j, v.x)), A.combine(v.e, v.j, A.combine(v.d, v.k, v.x))


@axiom("partition(d, k, partition(d, j, x)) = partition(d, j*k, x): partitioning a partitioned dim refines it",
       "x", "d:dim k:deg j:deg", ranks=(2, 3), parallel=True)
def partition_refine(A, v):
    return A.partition(v.d, v.k, A.partition(v.d, v.j, v.x)), A.partition(v.d, v.j * v.k, v.x)


@axiom("combine(d, k, combine(d, j, x)) = combine(d, j*k, x): combining in two rounds", "x", "d:dim k:deg j:deg",
       kinds=lambda v: {"parts": {v.d: v.j * v.k}}, ranks=(2, 3), parallel=True)
def combine_coarsen(A, v):
    return A.combine(v.d, v.k, A.combine(v.d, v.j, v.x)), A.combine(v.d, v.j * v.k, v.x)


@axiom("replicate(k, partition(d, j, x)) = partition(d, j, replicate(k, x))", "x", "k:deg d:dim j:deg",
       ranks=(2, 3), parallel=True)
def replicate_partition(A, v):
    return A.replicate(v.k, A.partition(v.d, v.j, v.x)), A.partition(v.d, v.j, A.replicate(v.k, v.x))


@axiom("replicate(k, combine(d, j, x)) = combine(d, j, replicate(k, x))", "x", "k:deg d:dim j:deg",
       kinds=_part("d", "j"), ranks=(2, 3), parallel=True)
def replicate_combine(A, v):
    return A.replicate(v.k, A.combine(v.d, v.j, v.x)), A.combine(v.d, v.j, A.replicate(v.k, v.x))


@axiom("reduce(k, partition(d, j, x)) = partition(d, j, reduce(k, x))", "x", "k:deg d:dim j:deg",
       kinds=_sum("k"), ranks=(2, 3), parallel=True)
def reduce_partition(A, v):
    return A.reduce(v.k, A.partition(v.d, v.j, v.x)), A.partition(v.d, v.j, A.reduce(v.k, v.x))


@axiom("reduce(k, combine(d, j, x)) = combine(d, j, reduce(k, x))", "x", "k:deg d:dim j:deg",
       kinds=lambda v: {"parts": {v.d: v.j}, "sum": v.k}, ranks=(2, 3), parallel=True)
def reduce_combine(A, v):
    return A.reduce(v.k, A.combine(v.d, v.j, v.x)), A.combine(v.d, v.j, A.reduce(v.k, v.x))


@axiom("replicate(j, reduce(k, x)) = reduce(k, replicate(j, x)): copies of a sum are sums of copies", "x",
       "k:deg j:deg", kinds=_sum("k"), ranks=(2, 3), parallel=True)
def replicate_reduce(A, v):
    return A.replicate(v.j, A.reduce(v.k, v.x)), A.reduce(v.k, A.replicate(v.j, v.x))


@axiom("replicate(j, replicate(k, x)) = replicate(j*k, x): copies of copies", "x", "k:deg j:deg",
       ranks=(2, 3), parallel=True)
def replicate_replicate(A, v):
    return A.replicate(v.j, A.replicate(v.k, v.x)), A.replicate(v.j * v.k, v.x)


@axiom("reduce(j, reduce(k, x)) = reduce(j*k, x): summing partial sums in two rounds", "x", "k:deg j:deg",
       kinds=lambda v: {"sum": v.j * v.k}, ranks=(2, 3), parallel=True)
def reduce_reduce(A, v):
    return A.reduce(v.j, A.reduce(v.k, v.x)), A.reduce(v.j * v.k, v.x)


def _elementwise_parallel_axioms():
    """Element-wise operators commute with each parallel operator that they accept: every piece
    is computed from the pieces at the same place (Fig. 11a is ``relu`` with ``partition``)."""
    movers = (  # (name, apply(A, v, t), tensor kinds, ints, for which ops)
        ("partition", lambda A, v, t: A.partition(v.d, v.k, t), None, "d:dim k:deg",
         ("relu", "ewadd", "ewmul", "smul")),
        ("combine", lambda A, v, t: A.combine(v.d, v.k, t), lambda v: {"parts": {v.d: v.k}}, "d:dim k:deg",
         ("relu", "ewadd", "ewmul", "smul")),
        ("replicate", lambda A, v, t: A.replicate(v.k, t), None, "k:deg", ("relu", "ewadd", "ewmul", "smul")),
        # Partial sums: only the linear operators accept them (relu(a+b) != relu(a)+relu(b)).
        ("reduce", lambda A, v, t: A.reduce(v.k, t), lambda v: {"sum": v.k}, "k:deg", ("ewadd", "smul")),
    )
    for pname, P, kind, ints, ops in movers:
        kinds = (lambda v, kind=kind, ts=("a", "b", "x"): {t: kind(v) for t in ts}) if kind else None
        for op in ops:
            if op == "relu":
                law = lambda A, v, P=P: (A.relu(P(A, v, v.x)), P(A, v, A.relu(v.x)))
                axiom(f"relu({pname}(x)) = {pname}(relu(x))", "x", ints, kinds=kinds, ranks=(2, 3),
                      parallel=True)(_named(f"relu_{pname}", law))
            elif op == "smul":
                law = lambda A, v, P=P: (A.smul(v.s, P(A, v, v.x)), P(A, v, A.smul(v.s, v.x)))
                axiom(f"smul(s, {pname}(x)) = {pname}(smul(s, x))", "x", ints + " s:scalar", kinds=kinds,
                      ranks=(2, 3), parallel=True)(_named(f"smul_{pname}", law))
            else:
                law = lambda A, v, P=P, op=op: (getattr(A, op)(P(A, v, v.a), P(A, v, v.b)),
                                                P(A, v, getattr(A, op)(v.a, v.b)))
                extra = ": reduce is additive" if pname == "reduce" else ""
                axiom(f"{op}({pname}(a), {pname}(b)) = {pname}({op}(a, b)){extra}", "a b", ints, kinds=kinds,
                      ranks=(2, 3), parallel=True)(_named(f"{op}_{pname}", law))


_elementwise_parallel_axioms()


@axiom("transpose(partition(d, k, x)) = partition(swap(d), k, transpose(x))", "x", "d:dim k:deg", ranks=(2, 3),
       parallel=True)
def transpose_partition(A, v):
    return A.transpose(A.partition(v.d, v.k, v.x)), A.partition(A.swap(v.d), v.k, A.transpose(v.x))


@axiom("transpose(combine(d, k, x)) = combine(swap(d), k, transpose(x))", "x", "d:dim k:deg",
       kinds=_part("d", "k"), ranks=(2, 3), parallel=True)
def transpose_combine(A, v):
    return A.transpose(A.combine(v.d, v.k, v.x)), A.combine(A.swap(v.d), v.k, A.transpose(v.x))


@axiom("transpose(replicate(k, x)) = replicate(k, transpose(x))", "x", "k:deg", ranks=(2, 3), parallel=True)
def transpose_replicate(A, v):
    return A.transpose(A.replicate(v.k, v.x)), A.replicate(v.k, A.transpose(v.x))


@axiom("transpose(reduce(k, x)) = reduce(k, transpose(x))", "x", "k:deg", kinds=_sum("k"), ranks=(2, 3),
       parallel=True)
def transpose_reduce(A, v):
    return A.transpose(A.reduce(v.k, v.x)), A.reduce(v.k, A.transpose(v.x))


# ---- linear: data, model and reduction parallelism -------------------------------------------
# flexrt reads a replicated x as model parallelism (it wants w split by the copy degree) and a
# partial-sum w with a replicated x as ill typed, so linear(replicate(x), replicate(w)) and
# linear(replicate(x), reduce(w)) have no axiom.

@axiom("linear(a, partition(d, k, x), replicate(k, w)) = partition(d, k, linear(a, x, w)) for d >= 1: "
       "data parallelism (a batch dim of x)", "x w", "a:acti d:dim k:deg", guard=lambda A, v: [v.d >= 1],
       shapes=_lin_shapes, ranks=(2, 3), parallel=True)
def linear_data_parallel(A, v):
    return A.linear(v.a, A.partition(v.d, v.k, v.x), A.replicate(v.k, v.w)), \
        A.partition(v.d, v.k, A.linear(v.a, v.x, v.w))


@axiom("combine(d, k, linear(a, x, replicate(k, w))) = linear(a, combine(d, k, x), w) for d >= 1: "
       "gathering the output of a data-parallel linear", "x w", "a:acti d:dim k:deg",
       guard=lambda A, v: [v.d >= 1], shapes=_lin_shapes, kinds=lambda v: {"x": {"parts": {v.d: v.k}}},
       ranks=(2, 3), parallel=True)
def linear_data_combine(A, v):
    return A.combine(v.d, v.k, A.linear(v.a, v.x, A.replicate(v.k, v.w))), \
        A.linear(v.a, A.combine(v.d, v.k, v.x), v.w)


@axiom("linear(a, replicate(k, x), partition(0, k, w)) = partition(0, k, linear(a, x, w)): "
       "model parallelism (the output dim)", "x w", "a:acti k:deg", shapes=_lin_shapes, ranks=(2, 3),
       parallel=True)
def linear_model_parallel(A, v):
    return A.linear(v.a, A.replicate(v.k, v.x), A.partition(0, v.k, v.w)), \
        A.partition(0, v.k, A.linear(v.a, v.x, v.w))


@axiom("combine(0, k, linear(a, replicate(k, x), w)) = linear(a, x, combine(0, k, w)): "
       "gathering the output of a model-parallel linear", "x w", "a:acti k:deg", shapes=_lin_shapes,
       kinds=lambda v: {"w": {"parts": {0: v.k}}}, ranks=(2, 3), parallel=True)
def linear_model_combine(A, v):
    return A.combine(0, v.k, A.linear(v.a, A.replicate(v.k, v.x), v.w)), \
        A.linear(v.a, v.x, A.combine(0, v.k, v.w))


@axiom("reduce(k, linear(0, partition(0, k, x), partition(1, k, w))) = linear(0, x, w): "
       "reduction parallelism (the contracted dim) makes partial sums", "x w", "k:deg", shapes=_lin_shapes,
       ranks=(2, 3), parallel=True)
def linear_reduction_parallel(A, v):
    return A.reduce(v.k, A.linear(0, A.partition(0, v.k, v.x), A.partition(1, v.k, v.w))), A.linear(0, v.x, v.w)


@axiom("linear(0, reduce(k, x), w) = reduce(k, linear(0, x, replicate(k, w))): Unity §4's example, "
       "linear commutes with reduce", "x w", "k:deg", shapes=_lin_shapes, kinds=lambda v: {"x": {"sum": v.k}},
       ranks=(2, 3), parallel=True)
def linear_reduce_x(A, v):
    return A.linear(0, A.reduce(v.k, v.x), v.w), A.reduce(v.k, A.linear(0, v.x, A.replicate(v.k, v.w)))


# ---- concat and split with the parallel operators ---------------------------------------------

def _concat_split_parallel_axioms():
    """Concat and split commute with partition/combine on another dim, replicate and reduce."""
    movers = (
        ("partition", lambda A, v, t: A.partition(v.d, v.k, t), None, "d:dim k:deg", True),
        ("combine", lambda A, v, t: A.combine(v.d, v.k, t), lambda v: {"parts": {v.d: v.k}}, "d:dim k:deg", True),
        ("replicate", lambda A, v, t: A.replicate(v.k, t), None, "k:deg", False),
        ("reduce", lambda A, v, t: A.reduce(v.k, t), lambda v: {"sum": v.k}, "k:deg", False),
    )
    for pname, P, kind, ints, on_dim in movers:
        kinds = (lambda v, kind=kind: {t: kind(v) for t in ("a", "b", "x")}) if kind else None
        guard = (lambda A, v: [v.d != v.ax]) if on_dim else None
        other = " for d != ax" if on_dim else ""
        axiom(f"concat(ax, {pname}(a), {pname}(b)) = {pname}(concat(ax, a, b)){other}", "a b", ints + " ax:dim",
              guard=guard, kinds=kinds, ranks=(2, 3), parallel=True)(
            _named(f"concat_{pname}", lambda A, v, P=P: (A.concat(v.ax, P(A, v, v.a), P(A, v, v.b)),
                                                         P(A, v, A.concat(v.ax, v.a, v.b)))))
        for i in (0, 1):
            def s(A, ax, x, i=i):
                return A.split0(ax, x) if i == 0 else A.split1(ax, x)
            axiom(f"split{i}(ax, {pname}(x)) = {pname}(split{i}(ax, x)){other}", "x", ints + " ax:dim",
                  guard=guard, kinds=kinds, ranks=(2, 3), parallel=True)(
                _named(f"split{i}_{pname}", lambda A, v, P=P, s=s: (s(A, v.ax, P(A, v, v.x)),
                                                                     P(A, v, s(A, v.ax, v.x)))))


_concat_split_parallel_axioms()

AXIOMS: tuple[Axiom, ...] = tuple(_AXIOMS.values())


def axiom_by_name(name: str) -> Axiom:
    try:
        return _AXIOMS[name]
    except KeyError:
        raise GraphError(f"no axiom named {name!r} (there are {len(_AXIOMS)}: {', '.join(list(_AXIOMS)[:5])}, ...)") \
            from None


# ================================================================================================
# The two readings
# ================================================================================================

class Z3Algebra:
    """Rule operators as Z3 uninterpreted functions over the sort ``T``; integer parameters are Ints."""

    def __init__(self):
        import z3
        self.z3 = z3
        T, I = z3.DeclareSort("T"), z3.IntSort()
        self.T = T
        F = z3.Function
        self._linear = F("linear", I, T, T, T)
        self._relu, self._transpose = F("relu", T, T), F("transpose", T, T)
        self._ewadd, self._ewmul = F("ewadd", T, T, T), F("ewmul", T, T, T)
        self._smul = F("smul", I, T, T)
        self._concat = F("concat", I, T, T, T)
        self._split0, self._split1 = F("split0", I, T, T), F("split1", I, T, T)
        self._partition, self._combine = F("partition", I, I, T, T), F("combine", I, I, T, T)
        self._replicate, self._reduce = F("replicate", I, T, T), F("reduce", I, T, T)

    def linear(self, a, x, w): return self._linear(a, x, w)
    def relu(self, x): return self._relu(x)
    def transpose(self, x): return self._transpose(x)
    def ewadd(self, a, b): return self._ewadd(a, b)
    def ewmul(self, a, b): return self._ewmul(a, b)
    def smul(self, s, x): return self._smul(s, x)
    def concat(self, ax, a, b): return self._concat(ax, a, b)
    def split0(self, ax, x): return self._split0(ax, x)
    def split1(self, ax, x): return self._split1(ax, x)
    def partition(self, d, k, x): return self._partition(d, k, x)
    def combine(self, d, k, x): return self._combine(d, k, x)
    def replicate(self, k, x): return self._replicate(k, x)
    def reduce(self, k, x): return self._reduce(k, x)

    def swap(self, d):
        z3 = self.z3
        return z3.If(d == 0, 1, z3.If(d == 1, 0, d))

    def formula(self, ax: Axiom, patterns: bool = True):
        """``ForAll vars. domain and guard -> lhs == rhs``, with each side that mentions every bound
        variable as an E-matching pattern."""
        z3 = self.z3
        env = {n: z3.Int(n) for n, _ in ax.ints}
        env.update({n: z3.Const(n, self.T) for n in ax.tensors})
        v = SimpleNamespace(**env)
        lhs, rhs = ax.law(self, v)
        conds = []
        for n, dom in ax.ints:
            if dom == DIM:
                conds.append(env[n] >= 0)
            elif dom == DEG:
                conds.append(env[n] >= 1)
            elif dom == ACTI:
                conds.append(z3.Or(env[n] == 0, env[n] == 2))
        conds += list(ax.guard(self, v)) if ax.guard else []
        body = lhs == rhs if not conds else z3.Implies(z3.And(*conds), lhs == rhs)
        bound = list(env.values())
        pats = [side for side in (lhs, rhs) if patterns and _is_pattern(z3, side, set(env))]
        return z3.ForAll(bound, body, patterns=pats) if pats else z3.ForAll(bound, body)


def _is_pattern(z3, e, names: set) -> bool:
    """A side may trigger E-matching when it is an application built only of uninterpreted functions,
    bound variables and numerals, and mentions every bound variable."""
    if z3.is_const(e):
        return False
    seen, stack = set(), [e]
    while stack:
        t = stack.pop()
        if z3.is_int_value(t):
            continue
        if t.decl().kind() != z3.Z3_OP_UNINTERPRETED:
            return False
        if z3.is_const(t):
            seen.add(str(t))
        stack.extend(t.children())
    return names <= seen


def z3_axioms(alg: Z3Algebra, patterns: bool = True) -> list:
    return [alg.formula(ax, patterns) for ax in AXIOMS]


class NumpyAlgebra:
    """Rule operators on ``ParallelValue``s with flexrt's NumPy kernels (compute operators run piece by
    piece with ``run_pieces``; parallel operators move pieces with ``apply_parallel_op``)."""

    def __init__(self):
        import numpy as np
        from flexrt.kernels import pieces
        from flexrt.search.substitutions.rule import PatternOp
        from flexrt.search.substitutions.semantics import to_attrs
        self.np, self.pieces, self.PatternOp, self.to_attrs = np, pieces, PatternOp, to_attrs

    def _attrs(self, t, vals, **params):
        return self.to_attrs(self.PatternOp(t, (), tuple(params.items())), [x.shape.tensor_shape for x in vals])

    def _run(self, t, vals, **params):
        return self.pieces.run_pieces(self.np, self._attrs(t, vals, **params), list(vals), t)

    def _move(self, t, x, **params):
        return self.pieces.apply_parallel_op(self.np, self._attrs(t, [x], **params), x)

    def linear(self, a, x, w): return self._run("OP_LINEAR", [x, w], PM_ACTI=a)[0]
    def relu(self, x): return self._run("OP_RELU", [x])[0]
    def transpose(self, x): return self._run("OP_TRANSPOSE", [x])[0]
    def ewadd(self, a, b): return self._run("OP_EW_ADD", [a, b])[0]
    def ewmul(self, a, b): return self._run("OP_EW_MUL", [a, b])[0]
    def smul(self, s, x): return self._run("OP_SCALAR_MULTIPLY", [x], PM_SCALAR=s)[0]
    def concat(self, ax, a, b): return self._run("OP_CONCAT", [a, b], PM_AXIS=ax, PM_NUM_INPUTS=2)[0]
    def split0(self, ax, x): return self._run("OP_SPLIT", [x], PM_AXIS=ax, PM_NUM_OUTPUTS=2)[0]
    def split1(self, ax, x): return self._run("OP_SPLIT", [x], PM_AXIS=ax, PM_NUM_OUTPUTS=2)[1]
    def partition(self, d, k, x): return self._move("OP_PARTITION", x, PM_PARALLEL_DIM=d, PM_PARALLEL_DEGREE=k)
    def combine(self, d, k, x): return self._move("OP_COMBINE", x, PM_PARALLEL_DIM=d, PM_PARALLEL_DEGREE=k)
    def replicate(self, k, x): return self._move("OP_REPLICATE", x, PM_PARALLEL_DEGREE=k)
    def reduce(self, k, x): return self._move("OP_REDUCE", x, PM_PARALLEL_DEGREE=k)

    @staticmethod
    def swap(d):
        return {0: 1, 1: 0}.get(d, d)

    def value(self, full, kind: dict, rng):
        """A parallel value holding ``full`` laid out as ``kind`` ({"parts": {dim: deg}, "sum", "rep"})."""
        from flexrt.ir.parallel_tensor import ParallelTensorShape
        r = full.ndim
        degrees = [1] * r
        for d, k in (kind or {}).get("parts", {}).items():
            degrees[r - 1 - d] = k
        shape = ParallelTensorShape.of(full.shape, degrees, sum_degree=(kind or {}).get("sum", 1),
                                       discard_copy_degree=(kind or {}).get("rep", 1))
        return self.pieces.scatter(self.np, full, shape, rng)

    def same(self, a, b, rtol=1e-6, atol=1e-6) -> str | None:
        """None when two parallel values have the same parallel shape and pieces, else why not."""
        if a.shape != b.shape:
            return f"parallel shapes differ: {a.shape} vs {b.shape}"
        for key in a.pieces:
            if not self.np.allclose(a.pieces[key], b.pieces[key], rtol=rtol, atol=atol):
                return f"piece {key} differs"
        return None


class _Sizes:
    """Sizes for one concrete check: every size a multiple of ``unit`` (so every split halves and every
    degree, and product of degrees, divides), one common shape per rank, and named sizes for linear (b, i, o, c)."""

    def __init__(self, rank: int, unit: int, rng):
        pick = lambda: unit * int(rng.integers(1, 3))
        self.rank = rank
        self.b, self.i, self.o, self.c, self.b2 = (pick() for _ in range(5))
        self._shape = tuple(pick() for _ in range(rank))

    def shape(self, rank: int) -> tuple:
        return self._shape

    def lead(self, v) -> tuple:
        return (self.b2,) * (self.rank - 2)


def check_axiom(ax: Axiom, rank: int, ints: dict, rng) -> str | None:
    """Evaluate ``ax`` on random float tensors (``ints`` assigns its integer variables, drawn from their
    domains with dims below ``rank``); None when both sides agree piece by piece, else what differs.
    Assignments that fail the guard return None (nothing to check)."""
    A = NumpyAlgebra()
    v = SimpleNamespace(**ints)
    if ax.guard and not all(ax.guard(A, v)):
        return None
    unit = math.lcm(2, math.prod(ints[n] for n, dom in ax.ints if dom == DEG))  # products of degrees divide too
    z = _Sizes(rank, unit, rng)
    shapes = ax.shapes(v, z) if ax.shapes else {t: z.shape(rank) for t in ax.tensors}
    kinds = ax.kinds(v) if ax.kinds else {}
    if kinds and set(kinds) <= {"parts", "sum", "rep"}:
        kinds = {t: kinds for t in ax.tensors}
    for t in ax.tensors:
        full = rng.standard_normal(shapes[t])
        setattr(v, t, A.value(full, kinds.get(t), rng))
    lhs, rhs = ax.law(A, v)
    why = A.same(lhs, rhs)
    return None if why is None else f"{ax.name} ({ax.comment}) with {ints}, rank {rank}: {why}"
