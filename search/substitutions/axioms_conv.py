"""Axioms of the 2-D convolution (TASO's conv2d properties, Unity's parallel ones, in flexrt's NCHW
layout) and of training-mode batch norm (``bn(a, x, scale, bias)``, ``a`` 0 or 2: a fused ReLU;
uninterpreted, commuting with data movement along the channels only). ``conv(c, g, a, x, w)`` and
``convb(c, g, a, x, w, b)`` have window code ``c`` (``semantics.window_code``), ``g`` groups and fused
activation ``a``; x [N, C, H, W], w [out, C / g, kh, kw], b [out]. Dimensions count from the innermost: x's batch is dim 3 and its channels dim 2,
w's output channels dim 3 and its input channels dim 2.

The window is one opaque integer: no axiom depends on its value, so every law holds for every
kernel, stride and padding (the output's height and width are ``conv_h(c, H)`` / ``conv_w(c, W)``,
uninterpreted in Z3, concrete in the NumPy check). Laws across output channels (concat, split,
model parallelism of the kernel) are stated for one group; grouped convolutions keep the data- and
group-parallel ones. Read by ``axioms.py``, registered on import.
"""

from __future__ import annotations

from flexrt.search.substitutions.axiom_table import axiom, conv_shapes, named

_R = (4,)
_CONV = "c:window g:group"


# ---- the fused activation ------------------------------------------------------------------------
@axiom("conv(c, g, a, x, w) = act(a, conv(c, g, 0, x, w)): PM_ACTI is a fused activation", "x w",
       _CONV + " a:acti", shapes=conv_shapes, ranks=_R)
def conv_act(A, v):
    return A.conv(v.c, v.g, v.a, v.x, v.w), A.act(v.a, A.conv(v.c, v.g, 0, v.x, v.w))


@axiom("convb(c, g, a, x, w, b) = act(a, convb(c, g, 0, x, w, b)): PM_ACTI is a fused activation", "x w b",
       _CONV + " a:acti", shapes=conv_shapes, ranks=_R)
def convb_act(A, v):
    return A.convb(v.c, v.g, v.a, v.x, v.w, v.b), A.act(v.a, A.convb(v.c, v.g, 0, v.x, v.w, v.b))


# ---- linearity (without activation) ----------------------------------------------------------
@axiom("conv(c, g, 0, ewadd(x1, x2), w) = ewadd(conv(c, g, 0, x1, w), conv(c, g, 0, x2, w)): additive in x",
       "x1 x2 w", _CONV, shapes=conv_shapes, ranks=_R)
def conv_add_x(A, v):
    return (A.conv(v.c, v.g, 0, A.ewadd(v.x1, v.x2), v.w),
            A.ewadd(A.conv(v.c, v.g, 0, v.x1, v.w), A.conv(v.c, v.g, 0, v.x2, v.w)))


@axiom("conv(c, g, 0, x, ewadd(w1, w2)) = ewadd(conv(c, g, 0, x, w1), conv(c, g, 0, x, w2)): additive in w",
       "x w1 w2", _CONV, shapes=conv_shapes, ranks=_R)
def conv_add_w(A, v):
    return (A.conv(v.c, v.g, 0, v.x, A.ewadd(v.w1, v.w2)),
            A.ewadd(A.conv(v.c, v.g, 0, v.x, v.w1), A.conv(v.c, v.g, 0, v.x, v.w2)))


@axiom("convb(c, g, 0, ewadd(x1, x2), w, b) = ewadd(conv(c, g, 0, x1, w), convb(c, g, 0, x2, w, b)): the bias "
       "is added once", "x1 x2 w b", _CONV, shapes=conv_shapes, ranks=_R)
def convb_add_x(A, v):
    return (A.convb(v.c, v.g, 0, A.ewadd(v.x1, v.x2), v.w, v.b),
            A.ewadd(A.conv(v.c, v.g, 0, v.x1, v.w), A.convb(v.c, v.g, 0, v.x2, v.w, v.b)))


@axiom("conv(c, g, 0, smul(s, x), w) = smul(s, conv(c, g, 0, x, w)): linear in x", "x w", _CONV + " s:scalar",
       shapes=conv_shapes, ranks=_R)
def conv_smul_x(A, v):
    return A.conv(v.c, v.g, 0, A.smul(v.s, v.x), v.w), A.smul(v.s, A.conv(v.c, v.g, 0, v.x, v.w))


@axiom("conv(c, g, 0, x, smul(s, w)) = smul(s, conv(c, g, 0, x, w)): linear in w", "x w", _CONV + " s:scalar",
       shapes=conv_shapes, ranks=_R)
def conv_smul_w(A, v):
    return A.conv(v.c, v.g, 0, v.x, A.smul(v.s, v.w)), A.smul(v.s, A.conv(v.c, v.g, 0, v.x, v.w))


# ---- concat and split ------------------------------------------------------------------------
@axiom("conv(c, g, a, concat(3, x1, x2), w) = concat(3, conv(c, g, a, x1, w), conv(c, g, a, x2, w)): "
       "samples are independent", "x1 x2 w", _CONV + " a:acti", shapes=conv_shapes, ranks=_R)
def conv_concat_batch(A, v):
    return (A.conv(v.c, v.g, v.a, A.concat(3, v.x1, v.x2), v.w),
            A.concat(3, A.conv(v.c, v.g, v.a, v.x1, v.w), A.conv(v.c, v.g, v.a, v.x2, v.w)))


@axiom("convb(c, g, a, concat(3, x1, x2), w, b) = concat(3, convb(c, g, a, x1, w, b), convb(c, g, a, x2, w, b))",
       "x1 x2 w b", _CONV + " a:acti", shapes=conv_shapes, ranks=_R)
def convb_concat_batch(A, v):
    return (A.convb(v.c, v.g, v.a, A.concat(3, v.x1, v.x2), v.w, v.b),
            A.concat(3, A.convb(v.c, v.g, v.a, v.x1, v.w, v.b), A.convb(v.c, v.g, v.a, v.x2, v.w, v.b)))


@axiom("conv(c, 1, a, x, concat(3, w1, w2)) = concat(2, conv(c, 1, a, x, w1), conv(c, 1, a, x, w2)): kernels "
       "side by side make channels side by side (TASO's merged convolutions)", "x w1 w2", "c:window a:acti",
       shapes=conv_shapes, ranks=_R)
def conv_concat_out(A, v):
    return (A.conv(v.c, 1, v.a, v.x, A.concat(3, v.w1, v.w2)),
            A.concat(2, A.conv(v.c, 1, v.a, v.x, v.w1), A.conv(v.c, 1, v.a, v.x, v.w2)))


@axiom("convb(c, 1, a, x, concat(3, w1, w2), concat(0, b1, b2)) = concat(2, convb(c, 1, a, x, w1, b1), "
       "convb(c, 1, a, x, w2, b2))", "x w1 w2 b1 b2", "c:window a:acti", shapes=conv_shapes, ranks=_R)
def convb_concat_out(A, v):
    return (A.convb(v.c, 1, v.a, v.x, A.concat(3, v.w1, v.w2), A.concat(0, v.b1, v.b2)),
            A.concat(2, A.convb(v.c, 1, v.a, v.x, v.w1, v.b1), A.convb(v.c, 1, v.a, v.x, v.w2, v.b2)))


@axiom("conv(c, 1, 0, concat(2, x1, x2), concat(2, w1, w2)) = ewadd(conv(c, 1, 0, x1, w1), conv(c, 1, 0, x2, w2)) "
       "when dim(x1, 2) = dim(w1, 2): concat along the contracted channels is a sum", "x1 x2 w1 w2", "c:window",
       where=lambda A, v: [A.dim(v.x1, 2) == A.dim(v.w1, 2)], shapes=conv_shapes, ranks=_R)
def conv_concat_in(A, v):
    return (A.conv(v.c, 1, 0, A.concat(2, v.x1, v.x2), A.concat(2, v.w1, v.w2)),
            A.ewadd(A.conv(v.c, 1, 0, v.x1, v.w1), A.conv(v.c, 1, 0, v.x2, v.w2)))


def _conv_split_axioms():
    for k in (0, 1):
        axiom(f"split({k}, 3, p, conv(c, g, a, x, w)) = conv(c, g, a, split({k}, 3, p, x), w): a split of the samples",
              "x w", _CONV + " a:acti p:point", shapes=conv_shapes, ranks=_R)(named(f"split{k}_conv_batch", lambda A, v, k=k: (
                  A.split(k, 3, v.p, A.conv(v.c, v.g, v.a, v.x, v.w)),
                  A.conv(v.c, v.g, v.a, A.split(k, 3, v.p, v.x), v.w))))
        axiom(f"split({k}, 2, p, conv(c, 1, a, x, w)) = conv(c, 1, a, x, split({k}, 3, p, w)): a split of the "
              "channels", "x w", "c:window a:acti p:point", shapes=conv_shapes, ranks=_R)(
            named(f"split{k}_conv_out", lambda A, v, k=k: (
                A.split(k, 2, v.p, A.conv(v.c, 1, v.a, v.x, v.w)), A.conv(v.c, 1, v.a, v.x, A.split(k, 3, v.p, v.w)))))
        axiom(f"split({k}, 2, p, convb(c, 1, a, x, w, b)) = convb(c, 1, a, x, split({k}, 3, p, w), split({k}, 0, p, b))",
              "x w b", "c:window a:acti p:point", shapes=conv_shapes, ranks=_R)(
            named(f"split{k}_convb_out", lambda A, v, k=k: (
                A.split(k, 2, v.p, A.convb(v.c, 1, v.a, v.x, v.w, v.b)),
                A.convb(v.c, 1, v.a, v.x, A.split(k, 3, v.p, v.w), A.split(k, 0, v.p, v.b)))))


_conv_split_axioms()


# ---- data, model (channel), group and reduction parallelism ------------------------------------
@axiom("conv(c, g, a, partition(3, k, x), replicate(k, w)) = partition(3, k, conv(c, g, a, x, w)): data "
       "parallelism", "x w", _CONV + " a:acti k:deg", shapes=conv_shapes, ranks=_R, parallel=True)
def conv_data_parallel(A, v):
    return (A.conv(v.c, v.g, v.a, A.partition(3, v.k, v.x), A.replicate(v.k, v.w)),
            A.partition(3, v.k, A.conv(v.c, v.g, v.a, v.x, v.w)))


@axiom("convb(c, g, a, partition(3, k, x), replicate(k, w), replicate(k, b)) = partition(3, k, convb(c, g, a, x, "
       "w, b))", "x w b", _CONV + " a:acti k:deg", shapes=conv_shapes, ranks=_R, parallel=True)
def convb_data_parallel(A, v):
    return (A.convb(v.c, v.g, v.a, A.partition(3, v.k, v.x), A.replicate(v.k, v.w), A.replicate(v.k, v.b)),
            A.partition(3, v.k, A.convb(v.c, v.g, v.a, v.x, v.w, v.b)))


@axiom("combine(3, k, conv(c, g, a, x, replicate(k, w))) = conv(c, g, a, combine(3, k, x), w): gathering a "
       "data-parallel convolution", "x w", _CONV + " a:acti k:deg", shapes=conv_shapes,
       kinds=lambda v: {"x": {"parts": {3: v.k}}}, ranks=_R, parallel=True)
def conv_data_combine(A, v):
    return (A.combine(3, v.k, A.conv(v.c, v.g, v.a, v.x, A.replicate(v.k, v.w))),
            A.conv(v.c, v.g, v.a, A.combine(3, v.k, v.x), v.w))


@axiom("conv(c, 1, a, replicate(k, x), partition(3, k, w)) = partition(2, k, conv(c, 1, a, x, w)): model "
       "parallelism (output channels)", "x w", "c:window a:acti k:deg", shapes=conv_shapes, ranks=_R, parallel=True)
def conv_model_parallel(A, v):
    return (A.conv(v.c, 1, v.a, A.replicate(v.k, v.x), A.partition(3, v.k, v.w)),
            A.partition(2, v.k, A.conv(v.c, 1, v.a, v.x, v.w)))


@axiom("convb(c, 1, a, replicate(k, x), partition(3, k, w), partition(0, k, b)) = partition(2, k, convb(c, 1, a, "
       "x, w, b))", "x w b", "c:window a:acti k:deg", shapes=conv_shapes, ranks=_R, parallel=True)
def convb_model_parallel(A, v):
    return (A.convb(v.c, 1, v.a, A.replicate(v.k, v.x), A.partition(3, v.k, v.w), A.partition(0, v.k, v.b)),
            A.partition(2, v.k, A.convb(v.c, 1, v.a, v.x, v.w, v.b)))


@axiom("combine(2, k, conv(c, 1, a, replicate(k, x), w)) = conv(c, 1, a, x, combine(3, k, w)): gathering a "
       "model-parallel convolution", "x w", "c:window a:acti k:deg", shapes=conv_shapes,
       kinds=lambda v: {"w": {"parts": {3: v.k}}}, ranks=_R, parallel=True)
def conv_model_combine(A, v):
    return (A.combine(2, v.k, A.conv(v.c, 1, v.a, A.replicate(v.k, v.x), v.w)),
            A.conv(v.c, 1, v.a, v.x, A.combine(3, v.k, v.w)))


@axiom("conv(c, g, a, partition(2, k, x), partition(3, k, w)) = partition(2, k, conv(c, g, a, x, w)) when k "
       "divides g: each piece owns whole groups", "x w", _CONV + " a:acti k:deg",
       guard=lambda A, v: [v.g % v.k == 0], shapes=conv_shapes, ranks=_R, parallel=True)
def conv_group_parallel(A, v):
    return (A.conv(v.c, v.g, v.a, A.partition(2, v.k, v.x), A.partition(3, v.k, v.w)),
            A.partition(2, v.k, A.conv(v.c, v.g, v.a, v.x, v.w)))


@axiom("reduce(k, conv(c, 1, 0, partition(2, k, x), partition(2, k, w))) = conv(c, 1, 0, x, w): reduction "
       "parallelism (input channels) makes partial sums", "x w", "c:window k:deg", shapes=conv_shapes, ranks=_R,
       parallel=True)
def conv_reduction_parallel(A, v):
    return (A.reduce(v.k, A.conv(v.c, 1, 0, A.partition(2, v.k, v.x), A.partition(2, v.k, v.w))),
            A.conv(v.c, 1, 0, v.x, v.w))


@axiom("conv(c, g, 0, reduce(k, x), w) = reduce(k, conv(c, g, 0, x, replicate(k, w))): partial sums pass "
       "through", "x w", _CONV + " k:deg", shapes=conv_shapes, kinds=lambda v: {"x": {"sum": v.k}}, ranks=_R,
       parallel=True)
def conv_reduce_x(A, v):
    return A.conv(v.c, v.g, 0, A.reduce(v.k, v.x), v.w), A.reduce(v.k, A.conv(v.c, v.g, 0, v.x, A.replicate(v.k, v.w)))


# ---- batch norm (training mode: each channel's statistics over N, H, W) ----------------------------
# Laws along the channels only: a piece of the batch would normalize with its own statistics.

def bn_shapes(v, z):
    x, c = (z.b, z.i, 5, 6), (z.i,)
    return {"x": x, "x1": x, "x2": x, "s": c, "s1": c, "s2": c, "b": c, "b1": c, "b2": c}


@axiom("bn(2, x, s, b) = relu(bn(0, x, s, b)): PM_ACTI 2 is a fused ReLU", "x s b", shapes=bn_shapes, ranks=_R)
def bn_relu(A, v):
    return A.bn(2, v.x, v.s, v.b), A.relu(A.bn(0, v.x, v.s, v.b))


def _bn_axioms():
    for a in (0, 2):
        axiom(f"dim(bn({a}, x, s, b), i) = dim(x, i)", "x s b", "i:dim", shapes=bn_shapes, ranks=_R)(
            named(f"dim_bn{a}", lambda A, v, a=a: (A.dim(A.bn(a, v.x, v.s, v.b), v.i), A.dim(v.x, v.i))))
        axiom(f"bn({a}, concat(2, x1, x2), concat(0, s1, s2), concat(0, b1, b2)) = concat(2, bn({a}, x1, s1, b1), "
              f"bn({a}, x2, s2, b2)): channels are normalized apart", "x1 x2 s1 s2 b1 b2", shapes=bn_shapes,
              ranks=_R)(named(f"bn{a}_concat_channels", lambda A, v, a=a: (
                  A.bn(a, A.concat(2, v.x1, v.x2), A.concat(0, v.s1, v.s2), A.concat(0, v.b1, v.b2)),
                  A.concat(2, A.bn(a, v.x1, v.s1, v.b1), A.bn(a, v.x2, v.s2, v.b2)))))
        for k in (0, 1):
            axiom(f"split({k}, 2, p, bn({a}, x, s, b)) = bn({a}, split({k}, 2, p, x), split({k}, 0, p, s), "
                  f"split({k}, 0, p, b))", "x s b", "p:point", shapes=bn_shapes, ranks=_R)(
                named(f"split{k}_bn{a}", lambda A, v, a=a, k=k: (
                    A.split(k, 2, v.p, A.bn(a, v.x, v.s, v.b)),
                    A.bn(a, A.split(k, 2, v.p, v.x), A.split(k, 0, v.p, v.s), A.split(k, 0, v.p, v.b)))))
        axiom(f"bn({a}, partition(2, k, x), partition(0, k, s), partition(0, k, b)) = partition(2, k, bn({a}, x, s, "
              f"b)): channel parallelism", "x s b", "k:deg", shapes=bn_shapes, ranks=_R, parallel=True)(
            named(f"bn{a}_partition_channels", lambda A, v, a=a: (
                A.bn(a, A.partition(2, v.k, v.x), A.partition(0, v.k, v.s), A.partition(0, v.k, v.b)),
                A.partition(2, v.k, A.bn(a, v.x, v.s, v.b)))))
        axiom(f"combine(2, k, bn({a}, x, s, b)) = bn({a}, combine(2, k, x), combine(0, k, s), combine(0, k, b))",
              "x s b", "k:deg", shapes=bn_shapes, ranks=_R, parallel=True,
              kinds=lambda v: {"x": {"parts": {2: v.k}}, "s": {"parts": {0: v.k}}, "b": {"parts": {0: v.k}}})(
            named(f"bn{a}_combine_channels", lambda A, v, a=a: (
                A.combine(2, v.k, A.bn(a, v.x, v.s, v.b)),
                A.bn(a, A.combine(2, v.k, v.x), A.combine(0, v.k, v.s), A.combine(0, v.k, v.b)))))
        axiom(f"bn({a}, replicate(k, x), replicate(k, s), replicate(k, b)) = replicate(k, bn({a}, x, s, b))",
              "x s b", "k:deg", shapes=bn_shapes, ranks=_R, parallel=True)(
            named(f"bn{a}_replicate", lambda A, v, a=a: (
                A.bn(a, A.replicate(v.k, v.x), A.replicate(v.k, v.s), A.replicate(v.k, v.b)),
                A.replicate(v.k, A.bn(a, v.x, v.s, v.b)))))


_bn_axioms()
