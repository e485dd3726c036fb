"""Axioms of ``reshape(s, x)``: ``x`` (of rank at most 4) with its elements, in order, laid out as the
sizes ``s = (s0, s1, s2, s3)`` (dimension 0, the innermost, first; a shape is its sizes up to leading
sizes of 1). A reshape moves no element: element-wise functions and partial sums pass through it, two
reshapes are one, a reshape to the tensor's own sizes is the tensor, and one that keeps the innermost
dimension lets every operator that works along that dimension alone (a linear, a bias, a softmax over
it) pass through. Each is checked on real tensors like every axiom; the element counts are not part
of the typing (each law relates reshapes of one tensor, and the rewriter checks every real shape).
Read by ``axioms.py``, registered on import.
"""

from __future__ import annotations

from flexrt.search.substitutions.axiom_table import axiom, named

_S = "s0:size s1:size s2:size s3:size"


def _s(v, name="s") -> tuple:
    return tuple(getattr(v, f"{name}{d}") for d in range(4))


def numpy_target(s) -> tuple:
    """The NumPy shape of sizes ``s`` (innermost first), leading 1s dropped down to a matrix."""
    t = list(reversed(s))
    while len(t) > 2 and t[0] == 1:
        t.pop(0)
    return tuple(t)


def _any(v, z):
    """x: another arrangement of the target's elements (its sizes in the other order)."""
    return {"x": tuple(_s(v)), "a": tuple(_s(v)), "b": tuple(_s(v))}


def _inner(v, z):
    """x keeps the target's innermost size; w [s0, o], b [s0]."""
    s = _s(v)
    x = (s[3] * s[2], s[1], s[0])
    return {"x": x, "w": (s[0], z.o), "b": (s[0],)}


def _keeps_innermost(A, v):
    return [v.s0 == A.dim(v.x, 0)]


@axiom("dim(reshape(s, x), i) = s_i for i <= 3, else 1", "x", _S + " i:dim", shapes=_any, ranks=(2, 3, 4))
def dim_reshape(A, v):
    s = _s(v)
    return A.dim(A.reshape(s, v.x), v.i), A.ite(v.i == 0, s[0], A.ite(v.i == 1, s[1], A.ite(
        v.i == 2, s[2], A.ite(v.i == 3, s[3], 1))))


@axiom("reshape(s, reshape(t, x)) = reshape(s, x): two reshapes are one", "x",
       _S + " t0:size t1:size t2:size t3:size", shapes=_any)
def reshape_reshape(A, v):
    return A.reshape(_s(v), A.reshape(_s(v, "t"), v.x)), A.reshape(_s(v), v.x)


@axiom("reshape(s, x) = x where s_i = dim(x, i) for i <= 3: a reshape to its own sizes", "x", _S,
       where=lambda A, v: [A.dim(v.x, d) == s for d, s in enumerate(_s(v))],
       shapes=lambda v, z: {"x": numpy_target(_s(v))})
def reshape_identity(A, v):
    return A.reshape(_s(v), v.x), v.x


_THROUGH = (  # (name, ints, outer(A, v, t)): f(reshape(s, x)) = reshape(s, f(x)) for f element-wise
    ("relu", "", lambda A, v, t: A.relu(t)),
    ("unary", " c:unary", lambda A, v, t: A.unary(v.c, t)),
    ("smul", " k:scalar", lambda A, v, t: A.smul(v.k, t)),
)
for _name, _ints, _f in _THROUGH:
    axiom(f"{_name}(reshape(s, x)) = reshape(s, {_name}(x)): element-wise", "x", _S + _ints, shapes=_any)(
        named(f"reshape_{_name}", lambda A, v, f=_f: (f(A, v, A.reshape(_s(v), v.x)), A.reshape(_s(v), f(A, v, v.x)))))

for _name in ("ewadd", "ewmul"):
    axiom(f"{_name}(reshape(s, a), reshape(s, b)) = reshape(s, {_name}(a, b))", "a b", _S, shapes=_any)(
        named(f"reshape_{_name}", lambda A, v, n=_name: (
            getattr(A, n)(A.reshape(_s(v), v.a), A.reshape(_s(v), v.b)), A.reshape(_s(v), getattr(A, n)(v.a, v.b)))))


@axiom("linear(a, reshape(s, x), w) = reshape((dim(w, 0), s1, s2, s3), linear(a, x, w)) where s0 = dim(x, 0): "
       "a reshape that keeps the features", "x w", _S + " a:acti", where=_keeps_innermost, shapes=_inner,
       ranks=(3,))
def reshape_linear(A, v):
    s = _s(v)
    return A.linear(v.a, A.reshape(s, v.x), v.w), A.reshape((A.dim(v.w, 0),) + s[1:], A.linear(v.a, v.x, v.w))


@axiom("linearb(a, reshape(s, x), w, b) = reshape((dim(w, 0), s1, s2, s3), linearb(a, x, w, b)) where "
       "s0 = dim(x, 0)", "x w b", _S + " a:acti", where=_keeps_innermost,
       shapes=lambda v, z: {**_inner(v, z), "b": (z.o,)}, ranks=(3,))
def reshape_linearb(A, v):
    s = _s(v)
    return (A.linearb(v.a, A.reshape(s, v.x), v.w, v.b),
            A.reshape((A.dim(v.w, 0),) + s[1:], A.linearb(v.a, v.x, v.w, v.b)))


@axiom("bias_add(reshape(s, x), b) = reshape(s, bias_add(x, b)) where s0 = dim(x, 0)", "x b", _S,
       where=_keeps_innermost, shapes=_inner, ranks=(3,))
def reshape_bias_add(A, v):
    return A.bias_add(A.reshape(_s(v), v.x), v.b), A.reshape(_s(v), A.bias_add(v.x, v.b))


@axiom("softmax(0, reshape(s, x)) = reshape(s, softmax(0, x)) where s0 = dim(x, 0): rows stay rows", "x", _S,
       where=_keeps_innermost, shapes=_inner, ranks=(3,))
def reshape_softmax(A, v):
    return A.softmax(0, A.reshape(_s(v), v.x)), A.reshape(_s(v), A.softmax(0, v.x))


# ---- parallel ---------------------------------------------------------------------------------
@axiom("replicate(k, reshape(s, x)) = reshape(s, replicate(k, x)): copies pass through", "x", _S + " k:deg",
       shapes=_any, parallel=True)
def reshape_replicate(A, v):
    return A.replicate(v.k, A.reshape(_s(v), v.x)), A.reshape(_s(v), A.replicate(v.k, v.x))


@axiom("reduce(k, reshape(s, x)) = reshape(s, reduce(k, x)): a reshape is linear, partial sums pass through", "x",
       _S + " k:deg", shapes=_any, kinds=lambda v: {"sum": v.k}, parallel=True)
def reshape_reduce(A, v):
    return A.reduce(v.k, A.reshape(_s(v), v.x)), A.reshape(_s(v), A.reduce(v.k, v.x))

