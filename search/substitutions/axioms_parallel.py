"""Unity's parallel properties (§4): partition(d, k, x) is x cut into k pieces along dim d; combine
gathers them; replicate(k, x) makes k copies; reduce(k, x) sums k partial sums. Copies and partial
sums are different slots of a ParallelTensorShape, so reduce(k, replicate(k, x)) is ill typed and no
axiom relates them. Read by ``axioms.py``, registered on import.
"""

from __future__ import annotations

from flexrt.search.substitutions.axiom_table import (axiom, lin_shapes, named, part_kind, sum_kind)


@axiom("combine(d, k, partition(d, k, x)) = x: combine undoes partition", "x", "d:dim k:deg", ranks=(2, 3),
       parallel=True)
def combine_partition(A, v):
    return A.combine(v.d, v.k, A.partition(v.d, v.k, v.x)), v.x


@axiom("partition(d, k, combine(d, k, x)) = x: partition undoes combine", "x", "d:dim k:deg",
       kinds=part_kind("d", "k"), ranks=(2, 3), parallel=True)
def partition_combine(A, v):
    return A.partition(v.d, v.k, A.combine(v.d, v.k, v.x)), v.x


@axiom("partition(d, k, partition(e, j, x)) = partition(e, j, partition(d, k, x)) for d != e", "x",
       "d:dim k:deg e:dim j:deg", guard=lambda A, v: [v.d != v.e], ranks=(2, 3), parallel=True)
def partition_partition(A, v):
    return A.partition(v.d, v.k, A.partition(v.e, v.j, v.x)), A.partition(v.e, v.j, A.partition(v.d, v.k, v.x))


@axiom("combine(d, k, partition(e, j, x)) = partition(e, j, combine(d, k, x)) for d != e", "x",
       "d:dim k:deg e:dim j:deg", guard=lambda A, v: [v.d != v.e], kinds=part_kind("d", "k"), ranks=(2, 3),
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
       kinds=part_kind("d", "j"), ranks=(2, 3), parallel=True)
def replicate_combine(A, v):
    return A.replicate(v.k, A.combine(v.d, v.j, v.x)), A.combine(v.d, v.j, A.replicate(v.k, v.x))


@axiom("reduce(k, partition(d, j, x)) = partition(d, j, reduce(k, x))", "x", "k:deg d:dim j:deg",
       kinds=sum_kind("k"), ranks=(2, 3), parallel=True)
def reduce_partition(A, v):
    return A.reduce(v.k, A.partition(v.d, v.j, v.x)), A.partition(v.d, v.j, A.reduce(v.k, v.x))


@axiom("reduce(k, combine(d, j, x)) = combine(d, j, reduce(k, x))", "x", "k:deg d:dim j:deg",
       kinds=lambda v: {"parts": {v.d: v.j}, "sum": v.k}, ranks=(2, 3), parallel=True)
def reduce_combine(A, v):
    return A.reduce(v.k, A.combine(v.d, v.j, v.x)), A.combine(v.d, v.j, A.reduce(v.k, v.x))


@axiom("replicate(j, reduce(k, x)) = reduce(k, replicate(j, x)): copies of a sum are sums of copies", "x",
       "k:deg j:deg", kinds=sum_kind("k"), ranks=(2, 3), parallel=True)
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
                      parallel=True)(named(f"relu_{pname}", law))
            elif op == "smul":
                law = lambda A, v, P=P: (A.smul(v.s, P(A, v, v.x)), P(A, v, A.smul(v.s, v.x)))
                axiom(f"smul(s, {pname}(x)) = {pname}(smul(s, x))", "x", ints + " s:scalar", kinds=kinds,
                      ranks=(2, 3), parallel=True)(named(f"smul_{pname}", law))
            else:
                law = lambda A, v, P=P, op=op: (getattr(A, op)(P(A, v, v.a), P(A, v, v.b)),
                                                P(A, v, getattr(A, op)(v.a, v.b)))
                extra = ": reduce is additive" if pname == "reduce" else ""
                axiom(f"{op}({pname}(a), {pname}(b)) = {pname}({op}(a, b)){extra}", "a b", ints, kinds=kinds,
                      ranks=(2, 3), parallel=True)(named(f"{op}_{pname}", law))


_elementwise_parallel_axioms()


@axiom("transpose(partition(d, k, x)) = partition(swap(d), k, transpose(x))", "x", "d:dim k:deg", ranks=(2, 3),
       parallel=True)
def transpose_partition(A, v):
    return A.transpose(A.partition(v.d, v.k, v.x)), A.partition(A.swap(v.d), v.k, A.transpose(v.x))


@axiom("transpose(combine(d, k, x)) = combine(swap(d), k, transpose(x))", "x", "d:dim k:deg",
       kinds=part_kind("d", "k"), ranks=(2, 3), parallel=True)
def transpose_combine(A, v):
    return A.transpose(A.combine(v.d, v.k, v.x)), A.combine(A.swap(v.d), v.k, A.transpose(v.x))


@axiom("transpose(replicate(k, x)) = replicate(k, transpose(x))", "x", "k:deg", ranks=(2, 3), parallel=True)
def transpose_replicate(A, v):
    return A.transpose(A.replicate(v.k, v.x)), A.replicate(v.k, A.transpose(v.x))


@axiom("transpose(reduce(k, x)) = reduce(k, transpose(x))", "x", "k:deg", kinds=sum_kind("k"), ranks=(2, 3),
       parallel=True)
def transpose_reduce(A, v):
    return A.transpose(A.reduce(v.k, v.x)), A.reduce(v.k, A.transpose(v.x))


# ---- linear: data, model and reduction parallelism -------------------------------------------
# flexrt reads a replicated x as model parallelism (it wants w split by the copy degree) and a
# partial-sum w with a replicated x as ill typed, so linear(replicate(x), replicate(w)) and
# linear(replicate(x), reduce(w)) have no axiom.

@axiom("linear(a, partition(d, k, x), replicate(k, w)) = partition(d, k, linear(a, x, w)) for d >= 1: "
       "data parallelism (a batch dim of x)", "x w", "a:acti d:dim k:deg", guard=lambda A, v: [v.d >= 1],
       shapes=lin_shapes, ranks=(2, 3), parallel=True)
def linear_data_parallel(A, v):
    return A.linear(v.a, A.partition(v.d, v.k, v.x), A.replicate(v.k, v.w)), \
        A.partition(v.d, v.k, A.linear(v.a, v.x, v.w))


@axiom("combine(d, k, linear(a, x, replicate(k, w))) = linear(a, combine(d, k, x), w) for d >= 1: "
       "gathering the output of a data-parallel linear", "x w", "a:acti d:dim k:deg",
       guard=lambda A, v: [v.d >= 1], shapes=lin_shapes, kinds=lambda v: {"x": {"parts": {v.d: v.k}}},
       ranks=(2, 3), parallel=True)
def linear_data_combine(A, v):
    return A.combine(v.d, v.k, A.linear(v.a, v.x, A.replicate(v.k, v.w))), \
        A.linear(v.a, A.combine(v.d, v.k, v.x), v.w)


@axiom("linear(a, replicate(k, x), partition(0, k, w)) = partition(0, k, linear(a, x, w)): "
       "model parallelism (the output dim)", "x w", "a:acti k:deg", shapes=lin_shapes, ranks=(2, 3),
       parallel=True)
def linear_model_parallel(A, v):
    return A.linear(v.a, A.replicate(v.k, v.x), A.partition(0, v.k, v.w)), \
        A.partition(0, v.k, A.linear(v.a, v.x, v.w))


@axiom("combine(0, k, linear(a, replicate(k, x), w)) = linear(a, x, combine(0, k, w)): "
       "gathering the output of a model-parallel linear", "x w", "a:acti k:deg", shapes=lin_shapes,
       kinds=lambda v: {"w": {"parts": {0: v.k}}}, ranks=(2, 3), parallel=True)
def linear_model_combine(A, v):
    return A.combine(0, v.k, A.linear(v.a, A.replicate(v.k, v.x), v.w)), \
        A.linear(v.a, v.x, A.combine(0, v.k, v.w))


@axiom("reduce(k, linear(0, partition(0, k, x), partition(1, k, w))) = linear(0, x, w): "
       "reduction parallelism (the contracted dim) makes partial sums", "x w", "k:deg", shapes=lin_shapes,
       ranks=(2, 3), parallel=True)
def linear_reduction_parallel(A, v):
    return A.reduce(v.k, A.linear(0, A.partition(0, v.k, v.x), A.partition(1, v.k, v.w))), A.linear(0, v.x, v.w)


@axiom("linear(0, reduce(k, x), w) = reduce(k, linear(0, x, replicate(k, w))): Unity §4's example, "
       "linear commutes with reduce", "x w", "k:deg", shapes=lin_shapes, kinds=lambda v: {"x": {"sum": v.k}},
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
            named(f"concat_{pname}", lambda A, v, P=P: (A.concat(v.ax, P(A, v, v.a), P(A, v, v.b)),
                                                         P(A, v, A.concat(v.ax, v.a, v.b)))))
        for i in (0, 1):
            axiom(f"split({i}, ax, p, {pname}(x)) = {pname}(split({i}, ax, p, x)){other}", "x", ints + " ax:dim p:point",
                  guard=guard, kinds=kinds, ranks=(2, 3), parallel=True)(
                named(f"split{i}_{pname}", lambda A, v, P=P, i=i: (A.split(i, v.ax, v.p, P(A, v, v.x)),
                                                                     P(A, v, A.split(i, v.ax, v.p, v.x)))))


_concat_split_parallel_axioms()

