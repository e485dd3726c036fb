"""The size of every operator's output, ``dim(t, i)`` (dimension ``i`` of ``t`` counted from the
innermost, as FlexFlow's rules count): the typing that lets the verifier state concat and split
soundly (``split(0, ax, p, concat(ax, a, b)) = a`` only when ``p = dim(a, ax)``). Each is an
axiom like any other, checked on real tensors (a tensor of rank r has size 1 beyond its rank).
Parallel operators keep the logical size. Read by ``axioms.py``, registered on import.
"""

from __future__ import annotations

from flexrt.search.substitutions.axiom_table import axiom, conv_shapes, lin_shapes, named

_SAME_SIZE = (  # (name, tensors, ints, output, shapes): the output has the first tensor's sizes
    ("relu", "x", "", lambda A, v: A.relu(v.x), None),
    ("smul", "x", "s:scalar", lambda A, v: A.smul(v.s, v.x), None),
    ("ewadd", "x y", "", lambda A, v: A.ewadd(v.x, v.y), None),
    ("ewmul", "x y", "", lambda A, v: A.ewmul(v.x, v.y), None),
    ("unary", "x", "c:unary", lambda A, v: A.unary(v.c, v.x), None),
    ("softmax", "x", "d:dim", lambda A, v: A.softmax(v.d, v.x), None),
    ("bias_add", "x b", "", lambda A, v: A.bias_add(v.x, v.b), lambda v, z: {"x": z.shape(2), "b": z.shape(2)[-1:]}),
    ("layernorm", "x", "n:axes", lambda A, v: A.layernorm(v.n, v.x), None),
    ("partition", "x", "d:dim k:deg", lambda A, v: A.partition(v.d, v.k, v.x), None),
    ("replicate", "x", "k:deg", lambda A, v: A.replicate(v.k, v.x), None),
)


def _same_size_axioms():
    for name, tensors, ints, out, shapes in _SAME_SIZE:
        law = lambda A, v, out=out: (A.dim(out(A, v), v.i), A.dim(v.x, v.i))  # noqa: E731
        axiom(f"dim({name}(x, ...), i) = dim(x, i)", tensors, (ints + " i:dim").strip(), shapes=shapes,
              ranks=(2, 3))(named(f"dim_{name}", law))


_same_size_axioms()


@axiom("dim(combine(d, k, x), i) = dim(x, i)", "x", "d:dim k:deg i:dim", kinds=lambda v: {"parts": {v.d: v.k}},
       ranks=(2, 3))
def dim_combine(A, v):
    return A.dim(A.combine(v.d, v.k, v.x), v.i), A.dim(v.x, v.i)


@axiom("dim(reduce(k, x), i) = dim(x, i)", "x", "k:deg i:dim", kinds=lambda v: {"sum": v.k}, ranks=(2, 3))
def dim_reduce(A, v):
    return A.dim(A.reduce(v.k, v.x), v.i), A.dim(v.x, v.i)


@axiom("dim(transpose(x), i) = dim(x, swap(i))", "x", "i:dim", ranks=(2, 3))
def dim_transpose(A, v):
    return A.dim(A.transpose(v.x), v.i), A.dim(v.x, A.swap(v.i))


@axiom("dim(concat(ax, a, b), i) = dim(a, ax) + dim(b, ax) if i = ax else dim(a, i)", "a b", "ax:dim i:dim",
       shapes=lambda v, z: {"a": z.shape(z.rank), "b": z.other(v.ax)}, ranks=(2, 3))
def dim_concat(A, v):
    return A.dim(A.concat(v.ax, v.a, v.b), v.i), A.ite(v.i == v.ax, A.dim(v.a, v.i) + A.dim(v.b, v.i), A.dim(v.a, v.i))


def _split_size_axioms():
    for k in (0, 1):
        def law(A, v, k=k):
            along = v.p if k == 0 else A.dim(v.x, v.ax) - v.p
            return A.dim(A.split(k, v.ax, v.p, v.x), v.i), A.ite(v.i == v.ax, along, A.dim(v.x, v.i))
        axiom(f"dim(split({k}, ax, p, x), i) = {'p' if k == 0 else 'dim(x, ax) - p'} if i = ax else dim(x, i)", "x",
              "ax:dim p:point i:dim", ranks=(2, 3))(named(f"dim_split{k}", law))


_split_size_axioms()


@axiom("dim(linear(a, x, w), i) = dim(w, 0) if i = 0 else dim(x, i)", "x w", "a:acti i:dim", shapes=lin_shapes,
       ranks=(2, 3))
def dim_linear(A, v):
    return A.dim(A.linear(v.a, v.x, v.w), v.i), A.ite(v.i == 0, A.dim(v.w, 0), A.dim(v.x, v.i))


@axiom("dim(linearb(a, x, w, b), i) = dim(w, 0) if i = 0 else dim(x, i)", "x w b", "a:acti i:dim",
       shapes=lambda v, z: {**lin_shapes(v, z), "b": (z.o,)}, ranks=(2, 3))
def dim_linearb(A, v):
    return A.dim(A.linearb(v.a, v.x, v.w, v.b), v.i), A.ite(v.i == 0, A.dim(v.w, 0), A.dim(v.x, v.i))


@axiom("dim(bmm(a, b), i) = dim(b, 0) if i = 0 else dim(a, i)", "a b", "i:dim",
       shapes=lambda v, z: {"a": z.lead(v) + (z.b, z.i), "b": z.lead(v) + (z.i, z.o)}, ranks=(3, 4))
def dim_bmm(A, v):
    return A.dim(A.bmm(v.a, v.b), v.i), A.ite(v.i == 0, A.dim(v.b, 0), A.dim(v.a, v.i))


@axiom("dim(embedding(g, idx, t), i) = dim(t, 0) if i = 0 else dim(idx, i - 1 + g): a bag (g = 1) drops "
       "the bag dim", "idx t", "g:aggr i:dim", shapes=lambda v, z: {"idx": z.shape(z.rank), "t": (z.b, z.o)},
       ranks=(2, 3))
def dim_embedding(A, v):
    return A.dim(A.embedding(v.g, v.idx, v.t), v.i), A.ite(v.i == 0, A.dim(v.t, 0), A.dim(v.idx, v.i - 1 + v.g))


def _conv_size(A, v, out):
    return A.dim(out, v.i), A.ite(v.i == 0, A.conv_w(v.c, A.dim(v.x, 0)), A.ite(
        v.i == 1, A.conv_h(v.c, A.dim(v.x, 1)), A.ite(v.i == 2, A.dim(v.w, 3), A.dim(v.x, v.i))))


@axiom("dim(conv(c, g, a, x, w), i) = conv_w(c, W), conv_h(c, H), dim(w, 3) (output channels), dim(x, 3) (batch) "
       "for i = 0, 1, 2, 3", "x w", "c:window g:group a:acti i:dim", shapes=conv_shapes, ranks=(4,))
def dim_conv(A, v):
    return _conv_size(A, v, A.conv(v.c, v.g, v.a, v.x, v.w))


@axiom("dim(convb(c, g, a, x, w, b), i) = dim(conv(c, g, a, x, w), i)", "x w b", "c:window g:group a:acti i:dim",
       shapes=conv_shapes, ranks=(4,))
def dim_convb(A, v):
    return _conv_size(A, v, A.convb(v.c, v.g, v.a, v.x, v.w, v.b))
