"""Axioms of ``reduce_sum(ax, x)``: the sum of ``x`` along dimension ``ax`` (from the innermost),
which the output no longer has. A sum is linear: it passes through additions, scalars, linears over
the dimensions it does not sum, and partial sums; concatenation along the summed dimension becomes
an addition, along another a concatenation one dimension further in; cutting the summed dimension
makes partial sums (reduction parallelism). And an embedding bag is the sum of its lookups along
the bag (Unity Fig. 16c: EmbeddingBag -> Embedding, whose bag dimension parallelizes like any
other). Read by ``axioms.py``, registered on import.
"""

from __future__ import annotations

from flexrt.search.substitutions.axiom_table import axiom, lin_shapes, part_kind, sum_kind

_R = (2, 3)


def _after(A, d, ax):
    """Where dimension ``d`` (not ``ax``) of ``x`` is in ``reduce_sum(ax, x)``."""
    return A.ite(d < ax, d, d - 1)


@axiom("dim(reduce_sum(ax, x), i) = dim(x, i) if i < ax else dim(x, i + 1)", "x", "ax:dim i:dim", ranks=_R)
def dim_reduce_sum(A, v):
    return A.dim(A.reduce_sum(v.ax, v.x), v.i), A.ite(v.i < v.ax, A.dim(v.x, v.i), A.dim(v.x, v.i + 1))


@axiom("reduce_sum(ax, ewadd(a, b)) = ewadd(reduce_sum(ax, a), reduce_sum(ax, b))", "a b", "ax:dim", ranks=_R)
def reduce_sum_ewadd(A, v):
    return A.reduce_sum(v.ax, A.ewadd(v.a, v.b)), A.ewadd(A.reduce_sum(v.ax, v.a), A.reduce_sum(v.ax, v.b))


@axiom("reduce_sum(ax, smul(s, x)) = smul(s, reduce_sum(ax, x))", "x", "ax:dim s:scalar", ranks=_R)
def reduce_sum_smul(A, v):
    return A.reduce_sum(v.ax, A.smul(v.s, v.x)), A.smul(v.s, A.reduce_sum(v.ax, v.x))


@axiom("reduce_sum(ax, concat(ax, a, b)) = ewadd(reduce_sum(ax, a), reduce_sum(ax, b))", "a b", "ax:dim",
       shapes=lambda v, z: {"a": z.shape(z.rank), "b": z.other(v.ax)}, ranks=_R)
def reduce_sum_concat_summed(A, v):
    return A.reduce_sum(v.ax, A.concat(v.ax, v.a, v.b)), A.ewadd(A.reduce_sum(v.ax, v.a), A.reduce_sum(v.ax, v.b))


@axiom("reduce_sum(ax, concat(d, a, b)) = concat(d', reduce_sum(ax, a), reduce_sum(ax, b)) for d != ax "
       "(d' = d if d < ax else d - 1)", "a b", "ax:dim d:dim", guard=lambda A, v: [v.d != v.ax],
       shapes=lambda v, z: {"a": z.shape(z.rank), "b": z.other(v.d)}, ranks=_R)
def reduce_sum_concat_other(A, v):
    return (A.reduce_sum(v.ax, A.concat(v.d, v.a, v.b)),
            A.concat(_after(A, v.d, v.ax), A.reduce_sum(v.ax, v.a), A.reduce_sum(v.ax, v.b)))


@axiom("reduce_sum(ax, linear(0, x, w)) = linear(0, reduce_sum(ax, x), w) for ax >= 1: a sum over samples",
       "x w", "ax:dim", guard=lambda A, v: [v.ax >= 1], shapes=lin_shapes, ranks=(3,))  # a linear's x: rank >= 2
def reduce_sum_linear(A, v):
    return A.reduce_sum(v.ax, A.linear(0, v.x, v.w)), A.linear(0, A.reduce_sum(v.ax, v.x), v.w)


@axiom("embedding(1, idx, t) = reduce_sum(1, embedding(0, idx, t)): a bag is the sum of its lookups",
       "idx t", shapes=lambda v, z: {"idx": z.shape(z.rank), "t": (z.b, z.o)}, ranks=_R)
def embedding_bag_is_a_sum(A, v):
    return A.embedding(1, v.idx, v.t), A.reduce_sum(1, A.embedding(0, v.idx, v.t))


# ---- parallel ---------------------------------------------------------------------------------
@axiom("reduce(k, reduce_sum(ax, partition(ax, k, x))) = reduce_sum(ax, x): the summed dim cut makes partial sums",
       "x", "ax:dim k:deg", ranks=_R, parallel=True)
def reduce_sum_partial(A, v):
    return A.reduce(v.k, A.reduce_sum(v.ax, A.partition(v.ax, v.k, v.x))), A.reduce_sum(v.ax, v.x)


@axiom("reduce_sum(ax, partition(d, k, x)) = partition(d', k, reduce_sum(ax, x)) for d != ax", "x",
       "ax:dim d:dim k:deg", guard=lambda A, v: [v.d != v.ax], ranks=_R, parallel=True)
def reduce_sum_partition(A, v):
    return A.reduce_sum(v.ax, A.partition(v.d, v.k, v.x)), A.partition(_after(A, v.d, v.ax), v.k,
                                                                      A.reduce_sum(v.ax, v.x))


@axiom("reduce_sum(ax, combine(d, k, x)) = combine(d', k, reduce_sum(ax, x)) for d != ax", "x",
       "ax:dim d:dim k:deg", guard=lambda A, v: [v.d != v.ax], kinds=part_kind("d", "k"), ranks=_R, parallel=True)
def reduce_sum_combine(A, v):
    return A.reduce_sum(v.ax, A.combine(v.d, v.k, v.x)), A.combine(_after(A, v.d, v.ax), v.k,
                                                                  A.reduce_sum(v.ax, v.x))


@axiom("reduce_sum(ax, replicate(k, x)) = replicate(k, reduce_sum(ax, x))", "x", "ax:dim k:deg", ranks=_R,
       parallel=True)
def reduce_sum_replicate(A, v):
    return A.reduce_sum(v.ax, A.replicate(v.k, v.x)), A.replicate(v.k, A.reduce_sum(v.ax, v.x))


@axiom("reduce_sum(ax, reduce(k, x)) = reduce(k, reduce_sum(ax, x)): partial sums pass through", "x",
       "ax:dim k:deg", kinds=sum_kind("k"), ranks=_R, parallel=True)
def reduce_sum_reduce(A, v):
    return A.reduce_sum(v.ax, A.reduce(v.k, v.x)), A.reduce(v.k, A.reduce_sum(v.ax, v.x))


@axiom("reduce_sum(i, reduce_sum(j, x)) = reduce_sum(j - 1, reduce_sum(i, x)) for i < j: sums commute", "x",
       "i:dim j:dim", guard=lambda A, v: [v.i < v.j], ranks=_R)
def reduce_sum_commute(A, v):
    return A.reduce_sum(v.i, A.reduce_sum(v.j, v.x)), A.reduce_sum(v.j - 1, A.reduce_sum(v.i, v.x))
