"""Axioms of the operators added to the rule language after TASO's: element-wise unary functions
(``unary(c, x)``, ``c`` indexing ``rule.UNARY_TYPES``), fused activations (``act(a, t)``), softmax,
bias add and linear with a bias (``linearb``), batch matmul (``bmm``), layer norm and embedding
(lookup and bag). The non-polynomial operators (unary functions, softmax, layer norm) are
uninterpreted: their axioms only say where they commute with data movement (concat, split,
transpose, the parallel operators) along the dimensions they do not reduce over. Read by
``axioms.py``, registered on import.
"""

from __future__ import annotations

from flexrt.search.substitutions.axiom_table import axiom, named, same_size
from flexrt.search.substitutions.rule import UNARY_TYPES

IDENTITY = UNARY_TYPES.index("OP_IDENTITY")
SIGMOID, TANH, GELU = (UNARY_TYPES.index(t) for t in ("OP_SIGMOID", "OP_TANH", "OP_GELU"))
_R = (2, 3)


def _movers(prefix: str, f, tensors: str, ints: str, on, transpose=None, parallel=True, shapes=None):
    """Axioms saying that ``f(A, v, t)`` (one tensor operand ``t``, the rest fixed) commutes with
    concat and split along dims ``on(v, ax)`` accepts, with transpose (``transpose(A, v)`` gives the
    transposed operator's ``f``), and with partition / combine / replicate along accepted dims."""
    g = (lambda A, v: [on(v, v.ax)])
    axiom(f"{prefix}(concat(ax, a, b)) = concat(ax, {prefix}(a), {prefix}(b))", "a b " + tensors, ints + " ax:dim",
          guard=g, shapes=shapes, ranks=_R)(named(f"{prefix}_concat", lambda A, v: (
              f(A, v, A.concat(v.ax, v.a, v.b)), A.concat(v.ax, f(A, v, v.a), f(A, v, v.b)))))
    for k in (0, 1):
        axiom(f"split({k}, ax, p, {prefix}(x)) = {prefix}(split({k}, ax, p, x))", "x " + tensors,
              ints + " ax:dim p:point", guard=g, shapes=shapes, ranks=_R)(named(f"split{k}_{prefix}", lambda A, v, k=k: (
                  A.split(k, v.ax, v.p, f(A, v, v.x)), f(A, v, A.split(k, v.ax, v.p, v.x)))))
    if transpose is not None:
        axiom(f"transpose({prefix}(x)) = {prefix}'(transpose(x))", "x " + tensors, ints, ranks=_R)(
            named(f"transpose_{prefix}", lambda A, v: (A.transpose(f(A, v, v.x)), transpose(A, v)(A.transpose(v.x)))))
    if not parallel:
        return
    pg = (lambda A, v: [on(v, v.d)])
    axiom(f"{prefix}(partition(d, k, x)) = partition(d, k, {prefix}(x))", "x " + tensors, ints + " d:dim k:deg",
          guard=pg, ranks=_R, parallel=True)(named(f"{prefix}_partition", lambda A, v: (
              f(A, v, A.partition(v.d, v.k, v.x)), A.partition(v.d, v.k, f(A, v, v.x)))))
    axiom(f"{prefix}(combine(d, k, x)) = combine(d, k, {prefix}(x))", "x " + tensors, ints + " d:dim k:deg",
          guard=pg, kinds=lambda v: {"x": {"parts": {v.d: v.k}}}, ranks=_R, parallel=True)(
        named(f"{prefix}_combine", lambda A, v: (f(A, v, A.combine(v.d, v.k, v.x)), A.combine(v.d, v.k, f(A, v, v.x)))))
    axiom(f"{prefix}(replicate(k, x)) = replicate(k, {prefix}(x))", "x " + tensors, ints + " k:deg", ranks=_R,
          parallel=True)(named(f"{prefix}_replicate", lambda A, v: (
              f(A, v, A.replicate(v.k, v.x)), A.replicate(v.k, f(A, v, v.x)))))


# ---- element-wise unary functions and fused activations ----------------------------------------
_movers("unary", lambda A, v, t: A.unary(v.c, t), "", "c:unary", lambda v, ax: True,
        transpose=lambda A, v: (lambda t: A.unary(v.c, t)))


@axiom("unary(identity, x) = x", "x", ranks=_R)
def unary_identity(A, v):
    return A.unary(IDENTITY, v.x), v.x


@axiom("act(0, t) = t: no activation", "t", ranks=_R)
def act_none(A, v):
    return A.act(0, v.t), v.t


@axiom("act(1, t) = unary(sigmoid, t)", "t", ranks=_R)
def act_sigmoid(A, v):
    return A.act(1, v.t), A.unary(SIGMOID, v.t)


@axiom("act(2, t) = relu(t)", "t", ranks=_R)
def act_relu(A, v):
    return A.act(2, v.t), A.relu(v.t)


@axiom("act(3, t) = unary(tanh, t)", "t", ranks=_R)
def act_tanh(A, v):
    return A.act(3, v.t), A.unary(TANH, v.t)


@axiom("act(4, t) = unary(gelu, t)", "t", ranks=_R)
def act_gelu(A, v):
    return A.act(4, v.t), A.unary(GELU, v.t)


def _lin_acti_axioms():
    for a, what in ((1, "sigmoid"), (3, "tanh"), (4, "gelu")):
        axiom(f"linear({a}, x, w) = act({a}, linear(0, x, w)): PM_ACTI {a} is a fused {what}", "x w",
              shapes=lambda v, z: {"x": z.lead(v) + (z.b, z.i), "w": (z.i, z.o)}, ranks=_R)(
            named(f"linear_{what}", lambda A, v, a=a: (A.linear(a, v.x, v.w), A.act(a, A.linear(0, v.x, v.w)))))


_lin_acti_axioms()

# ---- softmax ---------------------------------------------------------------------------------
_movers("softmax", lambda A, v, t: A.softmax(v.sd, t), "", "sd:dim", lambda v, ax: ax != v.sd,
        transpose=lambda A, v: (lambda t: A.softmax(A.swap(v.sd), t)))


# ---- bias add and linear with a bias -----------------------------------------------------------
def _bias_shapes(v, z):
    return {"x": z.lead(v) + (z.b, z.o), "x1": z.lead(v) + (z.b, z.o), "x2": z.lead(v) + (z.b, z.o),
            "y": z.lead(v) + (z.b, z.o), "b": (z.o,), "b1": (z.o,), "b2": (z.o,), "w": (z.i, z.o)}


_movers("bias_add", lambda A, v, t: A.bias_add(t, v.bias), "bias", "", lambda v, ax: ax >= 1, parallel=False,
        shapes=lambda v, z: {"a": z.shape(z.rank), "b": z.shape(z.rank), "x": z.shape(z.rank),
                             "bias": z.shape(z.rank)[-1:]})


@axiom("bias_add(concat(0, x1, x2), concat(0, b1, b2)) = concat(0, bias_add(x1, b1), bias_add(x2, b2)) when "
       "dim(x1, 0) = dim(b1, 0)", "x1 x2 b1 b2", where=lambda A, v: [A.dim(v.x1, 0) == A.dim(v.b1, 0)],
       shapes=_bias_shapes, ranks=_R)
def bias_add_concat_features(A, v):
    return (A.bias_add(A.concat(0, v.x1, v.x2), A.concat(0, v.b1, v.b2)),
            A.concat(0, A.bias_add(v.x1, v.b1), A.bias_add(v.x2, v.b2)))


@axiom("bias_add(ewadd(x, y), b) = ewadd(bias_add(x, b), y)", "x y b", shapes=_bias_shapes, ranks=_R)
def bias_add_ewadd(A, v):
    return A.bias_add(A.ewadd(v.x, v.y), v.b), A.ewadd(A.bias_add(v.x, v.b), v.y)


@axiom("bias_add(bias_add(x, b1), b2) = bias_add(x, ewadd(b1, b2))", "x b1 b2", shapes=_bias_shapes, ranks=_R)
def bias_add_twice(A, v):
    return A.bias_add(A.bias_add(v.x, v.b1), v.b2), A.bias_add(v.x, A.ewadd(v.b1, v.b2))


@axiom("bias_add(partition(d, k, x), replicate(k, b)) = partition(d, k, bias_add(x, b)) for d >= 1: data "
       "parallelism", "x b", "d:dim k:deg", guard=lambda A, v: [v.d >= 1], shapes=_bias_shapes, ranks=_R,
       parallel=True)
def bias_add_data_parallel(A, v):
    return A.bias_add(A.partition(v.d, v.k, v.x), A.replicate(v.k, v.b)), A.partition(v.d, v.k, A.bias_add(v.x, v.b))


@axiom("combine(d, k, bias_add(x, replicate(k, b))) = bias_add(combine(d, k, x), b) for d >= 1", "x b",
       "d:dim k:deg", guard=lambda A, v: [v.d >= 1], shapes=_bias_shapes,
       kinds=lambda v: {"x": {"parts": {v.d: v.k}}}, ranks=_R, parallel=True)
def bias_add_data_combine(A, v):
    return A.combine(v.d, v.k, A.bias_add(v.x, A.replicate(v.k, v.b))), A.bias_add(A.combine(v.d, v.k, v.x), v.b)


@axiom("bias_add(replicate(k, x), replicate(k, b)) = replicate(k, bias_add(x, b))", "x b", "k:deg",
       shapes=_bias_shapes, ranks=_R, parallel=True)
def bias_add_replicate(A, v):
    return A.bias_add(A.replicate(v.k, v.x), A.replicate(v.k, v.b)), A.replicate(v.k, A.bias_add(v.x, v.b))


@axiom("bias_add(partition(0, k, x), partition(0, k, b)) = partition(0, k, bias_add(x, b)): the feature dim",
       "x b", "k:deg", shapes=_bias_shapes, ranks=_R, parallel=True)
def bias_add_feature_parallel(A, v):
    return A.bias_add(A.partition(0, v.k, v.x), A.partition(0, v.k, v.b)), A.partition(0, v.k, A.bias_add(v.x, v.b))


@axiom("linearb(a, x, w, b) = act(a, bias_add(linear(0, x, w), b)): a linear's bias and activation", "x w b",
       "a:acti", shapes=lambda v, z: {"x": z.lead(v) + (z.b, z.i), "w": (z.i, z.o), "b": (z.o,)}, ranks=_R)
def linearb_def(A, v):
    return A.linearb(v.a, v.x, v.w, v.b), A.act(v.a, A.bias_add(A.linear(0, v.x, v.w), v.b))


# ---- batch matmul: a [..., m, k] x b [..., k, n]; dims: n/k = 0, m/k = 1, batch >= 2 ------------
def _bmm_shapes(v, z):
    a, b = z.lead(v) + (z.b, z.i), z.lead(v) + (z.i, z.o)
    return {"a": a, "a1": a, "a2": a, "b": b, "b1": b, "b2": b, "c": z.lead(v) + (z.o, z.c)}


_B = (3, 4)


@axiom("bmm(bmm(a, b), c) = bmm(a, bmm(b, c)): batch matmul is associative", "a b c", shapes=_bmm_shapes, ranks=_B)
def bmm_assoc(A, v):
    return A.bmm(A.bmm(v.a, v.b), v.c), A.bmm(v.a, A.bmm(v.b, v.c))


@axiom("transpose(bmm(a, b)) = bmm(transpose(b), transpose(a))", "a b", shapes=_bmm_shapes, ranks=_B)
def transpose_bmm(A, v):
    return A.transpose(A.bmm(v.a, v.b)), A.bmm(A.transpose(v.b), A.transpose(v.a))


@axiom("bmm(ewadd(a1, a2), b) = ewadd(bmm(a1, b), bmm(a2, b))", "a1 a2 b", shapes=_bmm_shapes, ranks=_B)
def bmm_add_a(A, v):
    return A.bmm(A.ewadd(v.a1, v.a2), v.b), A.ewadd(A.bmm(v.a1, v.b), A.bmm(v.a2, v.b))


@axiom("bmm(a, ewadd(b1, b2)) = ewadd(bmm(a, b1), bmm(a, b2))", "a b1 b2", shapes=_bmm_shapes, ranks=_B)
def bmm_add_b(A, v):
    return A.bmm(v.a, A.ewadd(v.b1, v.b2)), A.ewadd(A.bmm(v.a, v.b1), A.bmm(v.a, v.b2))


@axiom("bmm(smul(s, a), b) = smul(s, bmm(a, b))", "a b", "s:scalar", shapes=_bmm_shapes, ranks=_B)
def bmm_smul_a(A, v):
    return A.bmm(A.smul(v.s, v.a), v.b), A.smul(v.s, A.bmm(v.a, v.b))


@axiom("bmm(a, smul(s, b)) = smul(s, bmm(a, b))", "a b", "s:scalar", shapes=_bmm_shapes, ranks=_B)
def bmm_smul_b(A, v):
    return A.bmm(v.a, A.smul(v.s, v.b)), A.smul(v.s, A.bmm(v.a, v.b))


@axiom("bmm(concat(1, a1, a2), b) = concat(1, bmm(a1, b), bmm(a2, b)): rows of a", "a1 a2 b", shapes=_bmm_shapes,
       ranks=_B)
def bmm_concat_m(A, v):
    return A.bmm(A.concat(1, v.a1, v.a2), v.b), A.concat(1, A.bmm(v.a1, v.b), A.bmm(v.a2, v.b))


@axiom("bmm(a, concat(0, b1, b2)) = concat(0, bmm(a, b1), bmm(a, b2)): columns of b", "a b1 b2",
       shapes=_bmm_shapes, ranks=_B)
def bmm_concat_n(A, v):
    return A.bmm(v.a, A.concat(0, v.b1, v.b2)), A.concat(0, A.bmm(v.a, v.b1), A.bmm(v.a, v.b2))


@axiom("bmm(concat(0, a1, a2), concat(1, b1, b2)) = ewadd(bmm(a1, b1), bmm(a2, b2)) when dim(a1, 0) = dim(b1, 1)",
       "a1 a2 b1 b2", where=lambda A, v: [A.dim(v.a1, 0) == A.dim(v.b1, 1)], shapes=_bmm_shapes, ranks=_B)
def bmm_concat_k(A, v):
    return A.bmm(A.concat(0, v.a1, v.a2), A.concat(1, v.b1, v.b2)), A.ewadd(A.bmm(v.a1, v.b1), A.bmm(v.a2, v.b2))


@axiom("bmm(concat(ax, a1, a2), concat(ax, b1, b2)) = concat(ax, bmm(a1, b1), bmm(a2, b2)) for ax >= 2 when "
       "dim(a1, ax) = dim(b1, ax)", "a1 a2 b1 b2", "ax:dim", guard=lambda A, v: [v.ax >= 2],
       where=lambda A, v: same_size(A, v.a1, v.b1, [v.ax]), shapes=_bmm_shapes, ranks=_B)
def bmm_concat_batch(A, v):
    return (A.bmm(A.concat(v.ax, v.a1, v.a2), A.concat(v.ax, v.b1, v.b2)),
            A.concat(v.ax, A.bmm(v.a1, v.b1), A.bmm(v.a2, v.b2)))


@axiom("bmm(partition(d, k, a), partition(d, k, b)) = partition(d, k, bmm(a, b)) for d >= 2: batch parallelism",
       "a b", "d:dim k:deg", guard=lambda A, v: [v.d >= 2], shapes=_bmm_shapes, ranks=_B, parallel=True)
def bmm_batch_parallel(A, v):
    return A.bmm(A.partition(v.d, v.k, v.a), A.partition(v.d, v.k, v.b)), A.partition(v.d, v.k, A.bmm(v.a, v.b))


@axiom("bmm(partition(1, k, a), replicate(k, b)) = partition(1, k, bmm(a, b)): rows of a", "a b", "k:deg",
       shapes=_bmm_shapes, ranks=_B, parallel=True)
def bmm_m_parallel(A, v):
    return A.bmm(A.partition(1, v.k, v.a), A.replicate(v.k, v.b)), A.partition(1, v.k, A.bmm(v.a, v.b))


@axiom("bmm(replicate(k, a), partition(0, k, b)) = partition(0, k, bmm(a, b)): columns of b", "a b", "k:deg",
       shapes=_bmm_shapes, ranks=_B, parallel=True)
def bmm_n_parallel(A, v):
    return A.bmm(A.replicate(v.k, v.a), A.partition(0, v.k, v.b)), A.partition(0, v.k, A.bmm(v.a, v.b))


@axiom("reduce(k, bmm(partition(0, k, a), partition(1, k, b))) = bmm(a, b): the contracted dim", "a b", "k:deg",
       shapes=_bmm_shapes, ranks=_B, parallel=True)
def bmm_reduction_parallel(A, v):
    return A.reduce(v.k, A.bmm(A.partition(0, v.k, v.a), A.partition(1, v.k, v.b))), A.bmm(v.a, v.b)


# ---- layer norm over the n innermost dims: x alone, or with gamma (and beta) -------------------
def _ln(arity):
    ws = ("g", "beta")[:arity - 1]
    return (lambda A, v, t: A.layernorm(v.n, t, *(getattr(v, w) for w in ws))), " ".join(ws), ws


def _layernorm_axioms():
    for arity in (1, 2, 3):
        f, tensors, ws = _ln(arity)
        shapes = (lambda v, z: {"x": z.shape(z.rank), "a": z.shape(z.rank), "b": z.other(v.ax),
                                **{w: z.shape(z.rank)[z.rank - v.n:] for w in ("g", "beta")}})
        name = f"layernorm{arity}"
        g = lambda A, v: [v.ax >= v.n]  # noqa: E731
        axiom(f"{name}(concat(ax, a, b)) = concat(ax, {name}(a), {name}(b)) for ax >= n", "a b " + tensors,
              "n:axes ax:dim", guard=g, shapes=shapes, ranks=_R)(named(f"{name}_concat", lambda A, v, f=f: (
                  f(A, v, A.concat(v.ax, v.a, v.b)), A.concat(v.ax, f(A, v, v.a), f(A, v, v.b)))))
        for k in (0, 1):
            axiom(f"split({k}, ax, p, {name}(x)) = {name}(split({k}, ax, p, x)) for ax >= n", "x " + tensors,
                  "n:axes ax:dim p:point", guard=g, shapes=shapes, ranks=_R)(named(f"split{k}_{name}", lambda A, v, f=f, k=k: (
                      A.split(k, v.ax, v.p, f(A, v, v.x)), f(A, v, A.split(k, v.ax, v.p, v.x)))))
        rep = lambda A, v, ws=ws: [A.replicate(v.k, getattr(v, w)) for w in ws]  # noqa: E731
        axiom(f"{name}(partition(d, k, x), replicate(k, weights)) = partition(d, k, {name}(x)) for d >= n", "x " + tensors,
              "n:axes d:dim k:deg", guard=lambda A, v: [v.d >= v.n],
              shapes=lambda v, z: {"x": z.shape(z.rank), **{w: z.shape(z.rank)[z.rank - v.n:] for w in ("g", "beta")}},
              ranks=_R, parallel=True)(named(f"{name}_partition", lambda A, v, rep=rep, ws=ws: (
                  A.layernorm(v.n, A.partition(v.d, v.k, v.x), *rep(A, v)),
                  A.partition(v.d, v.k, A.layernorm(v.n, v.x, *(getattr(v, w) for w in ws))))))
        axiom(f"{name}(replicate(k, x), replicate(k, weights)) = replicate(k, {name}(x))", "x " + tensors,
              "n:axes k:deg", shapes=lambda v, z: {"x": z.shape(z.rank),
                                                   **{w: z.shape(z.rank)[z.rank - v.n:] for w in ("g", "beta")}},
              ranks=_R, parallel=True)(named(f"{name}_replicate", lambda A, v, rep=rep, ws=ws: (
                  A.layernorm(v.n, A.replicate(v.k, v.x), *rep(A, v)),
                  A.replicate(v.k, A.layernorm(v.n, v.x, *(getattr(v, w) for w in ws))))))
        axiom(f"combine(d, k, {name}(x, replicate(k, weights))) = {name}(combine(d, k, x)) for d >= n",
              "x " + tensors, "n:axes d:dim k:deg", guard=lambda A, v: [v.d >= v.n],
              shapes=lambda v, z: {"x": z.shape(z.rank), **{w: z.shape(z.rank)[z.rank - v.n:] for w in ("g", "beta")}},
              kinds=lambda v: {"x": {"parts": {v.d: v.k}}}, ranks=_R, parallel=True)(
            named(f"{name}_combine", lambda A, v, rep=rep, ws=ws: (
                A.combine(v.d, v.k, A.layernorm(v.n, v.x, *rep(A, v))),
                A.layernorm(v.n, A.combine(v.d, v.k, v.x), *(getattr(v, w) for w in ws)))))


_layernorm_axioms()


# ---- embedding: idx [N, ...] (a bag: [N, ..., L]), table t [entries, channels] ----------------
def _emb_shapes(v, z):
    t = (z.b, z.o)
    return {"idx": z.shape(z.rank), "idx1": z.shape(z.rank), "idx2": z.shape(z.rank), "t": t, "t1": t, "t2": t}


@axiom("embedding(g, idx, concat(0, t1, t2)) = concat(0, embedding(g, idx, t1), embedding(g, idx, t2)): channels",
       "idx t1 t2", "g:aggr", shapes=_emb_shapes, ranks=_R)
def embedding_concat_channels(A, v):
    return (A.embedding(v.g, v.idx, A.concat(0, v.t1, v.t2)),
            A.concat(0, A.embedding(v.g, v.idx, v.t1), A.embedding(v.g, v.idx, v.t2)))


@axiom("embedding(g, concat(ax, idx1, idx2), t) = concat(ax + 1 - g, embedding(g, idx1, t), embedding(g, idx2, t)) "
       "for ax >= g: lookups are independent", "idx1 idx2 t", "g:aggr ax:dim", guard=lambda A, v: [v.ax >= v.g],
       shapes=_emb_shapes, ranks=_R)
def embedding_concat_lookups(A, v):
    return (A.embedding(v.g, A.concat(v.ax, v.idx1, v.idx2), v.t),
            A.concat(v.ax + 1 - v.g, A.embedding(v.g, v.idx1, v.t), A.embedding(v.g, v.idx2, v.t)))


@axiom("embedding(1, concat(0, idx1, idx2), t) = ewadd(embedding(1, idx1, t), embedding(1, idx2, t)): a bag sums",
       "idx1 idx2 t", shapes=_emb_shapes, ranks=_R)
def embedding_bag_concat(A, v):
    return A.embedding(1, A.concat(0, v.idx1, v.idx2), v.t), A.ewadd(A.embedding(1, v.idx1, v.t),
                                                                     A.embedding(1, v.idx2, v.t))


@axiom("embedding(g, idx, ewadd(t1, t2)) = ewadd(embedding(g, idx, t1), embedding(g, idx, t2))", "idx t1 t2",
       "g:aggr", shapes=_emb_shapes, ranks=_R)
def embedding_add_table(A, v):
    return A.embedding(v.g, v.idx, A.ewadd(v.t1, v.t2)), A.ewadd(A.embedding(v.g, v.idx, v.t1),
                                                                 A.embedding(v.g, v.idx, v.t2))


@axiom("embedding(g, idx, smul(s, t)) = smul(s, embedding(g, idx, t))", "idx t", "g:aggr s:scalar",
       shapes=_emb_shapes, ranks=_R)
def embedding_smul_table(A, v):
    return A.embedding(v.g, v.idx, A.smul(v.s, v.t)), A.smul(v.s, A.embedding(v.g, v.idx, v.t))


@axiom("embedding(g, partition(d, k, idx), replicate(k, t)) = partition(d + 1 - g, k, embedding(g, idx, t)) for "
       "d >= g: data parallelism", "idx t", "g:aggr d:dim k:deg", guard=lambda A, v: [v.d >= v.g],
       shapes=_emb_shapes, ranks=_R, parallel=True)
def embedding_data_parallel(A, v):
    return (A.embedding(v.g, A.partition(v.d, v.k, v.idx), A.replicate(v.k, v.t)),
            A.partition(v.d + 1 - v.g, v.k, A.embedding(v.g, v.idx, v.t)))


@axiom("embedding(g, replicate(k, idx), partition(0, k, t)) = partition(0, k, embedding(g, idx, t)): channels",
       "idx t", "g:aggr k:deg", shapes=_emb_shapes, ranks=_R, parallel=True)
def embedding_model_parallel(A, v):
    return (A.embedding(v.g, A.replicate(v.k, v.idx), A.partition(0, v.k, v.t)),
            A.partition(0, v.k, A.embedding(v.g, v.idx, v.t)))


@axiom("reduce(k, embedding(1, partition(0, k, idx), replicate(k, t))) = embedding(1, idx, t): a bag split "
       "along its length makes partial sums", "idx t", "k:deg", shapes=_emb_shapes, ranks=_R, parallel=True)
def embedding_bag_parallel(A, v):
    return A.reduce(v.k, A.embedding(1, A.partition(0, v.k, v.idx), A.replicate(v.k, v.t))), \
        A.embedding(1, v.idx, v.t)
