"""TASO's operator properties (Unity §4 verifies with them), stated with tensor sizes: an axiom that
holds only for some sizes says which in ``where`` (``A.dim(t, i)``), e.g. split undoes concat only
when the two halves are equal. Read by ``axioms.py`` (Z3 and NumPy), registered on import.
"""

from __future__ import annotations

from flexrt.search.substitutions.axiom_table import (ACTI, lin2_shapes, lin_shapes, axiom, named, same_size)  # noqa: F401

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
       "x w", "a:acti", shapes=lin_shapes)
def transpose_linear(A, v):
    return A.transpose(A.linear(v.a, v.x, v.w)), A.linear(v.a, A.transpose(v.w), A.transpose(v.x))


@axiom("linear(2, x, w) = relu(linear(0, x, w)): PM_ACTI 2 is a fused relu", "x w", shapes=lin_shapes,
       ranks=(2, 3))
def linear_relu(A, v):
    return A.linear(2, v.x, v.w), A.relu(A.linear(0, v.x, v.w))


@axiom("linear(0, smul(s, x), w) = smul(s, linear(0, x, w)): linear in x", "x w", "s:scalar",
       shapes=lin_shapes, ranks=(2, 3))
def linear_smul_x(A, v):
    return A.linear(0, A.smul(v.s, v.x), v.w), A.smul(v.s, A.linear(0, v.x, v.w))


@axiom("linear(0, x, smul(s, w)) = smul(s, linear(0, x, w)): linear in w", "x w", "s:scalar",
       shapes=lin_shapes, ranks=(2, 3))
def linear_smul_w(A, v):
    return A.linear(0, v.x, A.smul(v.s, v.w)), A.smul(v.s, A.linear(0, v.x, v.w))


@axiom("linear(0, ewadd(x1, x2), w) = ewadd(linear(0, x1, w), linear(0, x2, w)): additive in x", "x1 x2 w",
       shapes=lin2_shapes, ranks=(2, 3))
def linear_add_x(A, v):
    return A.linear(0, A.ewadd(v.x1, v.x2), v.w), A.ewadd(A.linear(0, v.x1, v.w), A.linear(0, v.x2, v.w))


@axiom("linear(0, x, ewadd(w1, w2)) = ewadd(linear(0, x, w1), linear(0, x, w2)): additive in w", "x w1 w2",
       shapes=lin2_shapes, ranks=(2, 3))
def linear_add_w(A, v):
    return A.linear(0, v.x, A.ewadd(v.w1, v.w2)), A.ewadd(A.linear(0, v.x, v.w1), A.linear(0, v.x, v.w2))


@axiom("linear(a, linear(0, x, w1), w2) = linear(a, x, linear(0, w1, w2)): matmul is associative", "x w1 w2",
       "a:acti", shapes=lambda v, z: {"x": z.lead(v) + (z.b, z.i), "w1": (z.i, z.o), "w2": (z.o, z.c)},
       ranks=(2, 3))
def linear_assoc(A, v):
    return A.linear(v.a, A.linear(0, v.x, v.w1), v.w2), A.linear(v.a, v.x, A.linear(0, v.w1, v.w2))


@axiom("split(0, ax, p, concat(ax, a, b)) = a when p = dim(a, ax): split undoes concat", "a b",
       "ax:dim p:point", where=lambda A, v: [v.p == A.dim(v.a, v.ax)], ranks=(2, 3))
def split0_concat(A, v):
    return A.split(0, v.ax, v.p, A.concat(v.ax, v.a, v.b)), v.a


@axiom("split(1, ax, p, concat(ax, a, b)) = b when p = dim(a, ax): split undoes concat", "a b",
       "ax:dim p:point", where=lambda A, v: [v.p == A.dim(v.a, v.ax)], ranks=(2, 3))
def split1_concat(A, v):
    return A.split(1, v.ax, v.p, A.concat(v.ax, v.a, v.b)), v.b


@axiom("concat(ax, split(0, ax, p, x), split(1, ax, p, x)) = x: concat undoes split", "x", "ax:dim p:point",
       ranks=(2, 3))
def concat_split(A, v):
    return A.concat(v.ax, A.split(0, v.ax, v.p, v.x), A.split(1, v.ax, v.p, v.x)), v.x


@axiom("concat(ax, concat(ax, a, b), c) = concat(ax, a, concat(ax, b, c)): concat is associative (sound with "
       "sizes: split undoes concat only at its point)", "a b c", "ax:dim", ranks=(2, 3))
def concat_assoc(A, v):
    return A.concat(v.ax, A.concat(v.ax, v.a, v.b), v.c), A.concat(v.ax, v.a, A.concat(v.ax, v.b, v.c))


@axiom("concat(p, concat(q, a, b), concat(q, c, d)) = concat(q, concat(p, a, c), concat(p, b, d)) for p != q: "
       "a 2x2 block matrix is the same read by rows or by columns", "a b c d", "p:dim q:dim",
       guard=lambda A, v: [v.p != v.q],
       where=lambda A, v: same_size(A, v.a, v.c, [v.q]) + same_size(A, v.a, v.b, [v.p]), ranks=(2, 3))
def concat_blocks(A, v):
    return (A.concat(v.p, A.concat(v.q, v.a, v.b), A.concat(v.q, v.c, v.d)),
            A.concat(v.q, A.concat(v.p, v.a, v.c), A.concat(v.p, v.b, v.d)))


@axiom("ewadd(concat(ax, a, b), concat(ax, c, d)) = concat(ax, ewadd(a, c), ewadd(b, d)) when dim(a, ax) = "
       "dim(c, ax)", "a b c d", "ax:dim", where=lambda A, v: same_size(A, v.a, v.c, [v.ax]), ranks=(2, 3))
def ewadd_concat(A, v):
    return A.ewadd(A.concat(v.ax, v.a, v.b), A.concat(v.ax, v.c, v.d)), \
        A.concat(v.ax, A.ewadd(v.a, v.c), A.ewadd(v.b, v.d))


@axiom("ewmul(concat(ax, a, b), concat(ax, c, d)) = concat(ax, ewmul(a, c), ewmul(b, d)) when dim(a, ax) = "
       "dim(c, ax)", "a b c d", "ax:dim", where=lambda A, v: same_size(A, v.a, v.c, [v.ax]), ranks=(2, 3))
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
       shapes=lin2_shapes, ranks=(2, 3))
def linear_concat_batch(A, v):
    return A.linear(v.a, A.concat(v.ax, v.x1, v.x2), v.w), \
        A.concat(v.ax, A.linear(v.a, v.x1, v.w), A.linear(v.a, v.x2, v.w))


@axiom("linear(a, x, concat(0, w1, w2)) = concat(0, linear(a, x, w1), linear(a, x, w2)): "
       "linear over concat along the weight's output dim", "x w1 w2", "a:acti", shapes=lin2_shapes, ranks=(2, 3))
def linear_concat_out(A, v):
    return A.linear(v.a, v.x, A.concat(0, v.w1, v.w2)), A.concat(0, A.linear(v.a, v.x, v.w1),
                                                               A.linear(v.a, v.x, v.w2))


@axiom("linear(0, concat(0, x1, x2), concat(1, w1, w2)) = ewadd(linear(0, x1, w1), linear(0, x2, w2)): "
       "concat along the contracted dim is a sum (when dim(x1, 0) = dim(w1, 1))", "x1 x2 w1 w2", shapes=lin2_shapes,
       where=lambda A, v: [A.dim(v.x1, 0) == A.dim(v.w1, 1)], ranks=(2, 3))
def linear_concat_inner(A, v):
    return A.linear(0, A.concat(0, v.x1, v.x2), A.concat(1, v.w1, v.w2)), \
        A.ewadd(A.linear(0, v.x1, v.w1), A.linear(0, v.x2, v.w2))


def _split_axioms():
    """Part i of a split commutes with the element-wise operators and with linear where the split dim is kept."""
    for i in (0, 1):
        def s(A, ax, p, x, i=i):
            return A.split(i, ax, p, x)
        ints = "ax:dim p:point"
        axiom(f"split({i}, ax, p, relu(x)) = relu(split({i}, ax, p, x))", "x", ints, ranks=(2, 3))(
            named(f"split{i}_relu", lambda A, v, s=s: (s(A, v.ax, v.p, A.relu(v.x)), A.relu(s(A, v.ax, v.p, v.x)))))
        axiom(f"split({i}, ax, p, smul(t, x)) = smul(t, split({i}, ax, p, x))", "x", ints + " t:scalar", ranks=(2, 3))(
            named(f"split{i}_smul", lambda A, v, s=s: (s(A, v.ax, v.p, A.smul(v.t, v.x)),
                                                         A.smul(v.t, s(A, v.ax, v.p, v.x)))))
        axiom(f"split({i}, ax, p, ewadd(a, b)) = ewadd(split({i}, ax, p, a), split({i}, ax, p, b))", "a b", ints,
              ranks=(2, 3))(
            named(f"split{i}_ewadd", lambda A, v, s=s: (s(A, v.ax, v.p, A.ewadd(v.a, v.b)),
                                                          A.ewadd(s(A, v.ax, v.p, v.a), s(A, v.ax, v.p, v.b)))))
        axiom(f"split({i}, ax, p, ewmul(a, b)) = ewmul(split({i}, ax, p, a), split({i}, ax, p, b))", "a b", ints,
              ranks=(2, 3))(
            named(f"split{i}_ewmul", lambda A, v, s=s: (s(A, v.ax, v.p, A.ewmul(v.a, v.b)),
                                                          A.ewmul(s(A, v.ax, v.p, v.a), s(A, v.ax, v.p, v.b)))))
        axiom(f"split({i}, swap(ax), p, transpose(x)) = transpose(split({i}, ax, p, x))", "x", ints, ranks=(2, 3))(
            named(f"split{i}_transpose", lambda A, v, s=s: (s(A, A.swap(v.ax), v.p, A.transpose(v.x)),
                                                              A.transpose(s(A, v.ax, v.p, v.x)))))
        axiom(f"split({i}, ax, p, linear(a, x, w)) = linear(a, split({i}, ax, p, x), w) for ax >= 1: split along a "
              "batch dim", "x w", "a:acti " + ints, guard=lambda A, v: [v.ax >= 1], shapes=lin_shapes, ranks=(2, 3))(
            named(f"split{i}_linear_batch", lambda A, v, s=s: (s(A, v.ax, v.p, A.linear(v.a, v.x, v.w)),
                                                                 A.linear(v.a, s(A, v.ax, v.p, v.x), v.w))))
        axiom(f"split({i}, 0, p, linear(a, x, w)) = linear(a, x, split({i}, 0, p, w)): split along the output dim",
              "x w", "a:acti p:point", shapes=lin_shapes, ranks=(2, 3))(
            named(f"split{i}_linear_out", lambda A, v, s=s: (s(A, 0, v.p, A.linear(v.a, v.x, v.w)),
                                                               A.linear(v.a, v.x, s(A, 0, v.p, v.w)))))


_split_axioms()
