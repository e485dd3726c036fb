"""The axioms the substitution verifier reasons with (Unity §4, TASO's method), in one table (the
registry ``axiom_table.py``, filled by ``axioms_algebraic.py``, ``axioms_operators.py``,
``axioms_parallel.py`` and ``axioms_sizes.py``).

Every axiom is written once, as a function of an *algebra* ``A`` and its variables ``v``, and is
read two ways:

- by :class:`Z3Algebra` as a universally quantified first-order formula over an uninterpreted
  tensor sort ``T`` (``verify.py`` proves rules from these formulas);
- by :class:`NumpyAlgebra` on concrete parallel values, so that each axiom is checked on random
  float tensors with flexrt's NumPy kernels (``tests/search/test_axioms.py``): an unsound axiom
  fails a test.

Operators (see ``semantics.py`` for what each means in flexrt): ``linear(acti, x, w)``,
``linearb(acti, x, w, b)`` (with a bias), ``act(acti, t)``, ``bias_add(x, b)``, ``relu(x)``,
``unary(c, x)`` (``rule.UNARY_TYPES[c]``), ``softmax(d, x)``, ``bmm(a, b)``,
``layernorm(n, x[, gamma[, beta]])``, ``embedding(aggr, idx, table)``, ``ewadd(a, b)``,
``ewmul(a, b)``, ``smul(s, x)``, ``conv(c, g, a, x, w)`` and ``convb(c, g, a, x, w, b)`` (window code
``c``, ``g`` groups, fused activation ``a``; ``conv_h(c, n)`` / ``conv_w(c, n)`` its output height /
width on an input of n and ``kernel_h(c)`` / ``kernel_w(c)``, uninterpreted in Z3),
``bn(a, x, scale, bias)`` (training-mode batch norm of NCHW ``x``, ``a`` 0 or 2: a fused ReLU),
``reduce_sum(axis, x)`` (the sum along ``axis``, removed), ``transpose(x)``, ``concat(axis, a, b)``,
``split(k, axis, p, x)`` (part ``k`` of ``x`` cut along ``axis`` after its first ``p`` entries: 0 the
first ``p``, 1 the rest), ``reshape(s, x)`` (``x`` reshaped to the sizes ``s = (s0, s1, s2, s3)``, dims
0 to 3: a shape of rank at most 4, ``axioms_reshape.py``), ``partition(dim, deg, x)``, ``combine(dim, deg, x)``,
``replicate(deg, x)``, ``reduce(deg, x)``, and the size ``dim(t, i)`` (an Int).
Dimensions count from the innermost, as FlexFlow's do: on ``x`` [batch, in] the feature dim is 0
and the batch dim is 1; on ``w`` [in, out] the output dim is 0 and the input (row) dim is 1.

Tensors are typed by their sizes: ``dim(t, i)`` is an uninterpreted function with an axiom per
operator giving its output's sizes (``axioms_sizes.py``), and an axiom that holds only for some
sizes says so (``Axiom.where``): ``split(0, ax, p, concat(ax, a, b)) = a`` only when ``p = dim(a,
ax)``. (Concat associativity, unsound with the untyped equal-halves split axioms of before, where it
proved every tensor equal, is an axiom.) The verifier adds each rule's typing as hypotheses
(``translate.py``: every operator of both sides well typed, mapped outputs of equal sizes), the
conditions under which the rewriter applies a rule.

Entry points: ``AXIOMS``, ``axiom_by_name``, ``check_axiom`` (the concrete check), ``Z3Algebra``,
``NumpyAlgebra``, ``z3_axioms``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from flexrt.errors import GraphError
from flexrt.ir.ops.conv2d import window_output_size
from flexrt.search.substitutions.semantics import window_of
from flexrt.search.substitutions import (axioms_algebraic, axioms_operators, axioms_parallel,  # noqa: F401
                                         axioms_sizes)                                        # (they register)
from flexrt.search.substitutions import axioms_conv, axioms_reduce, axioms_reshape  # noqa: F401  (registers)
from flexrt.search.substitutions.axiom_table import (ACTI, AGGR, AXES, DEG, DIM, GROUP, POINT, SCALAR,  # noqa: F401
                                                     SIZE, UNARY, WINDOW, Axiom, registered)


AXIOMS: tuple[Axiom, ...] = registered()


def axiom_by_name(name: str) -> Axiom:
    for ax in AXIOMS:
        if ax.name == name:
            return ax
    raise GraphError(f"no axiom named {name!r} (there are {len(AXIOMS)}: {', '.join(a.name for a in AXIOMS[:5])}, ...)")


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
        self._split = (F("split0", I, I, T, T), F("split1", I, I, T, T))
        self._partition, self._combine = F("partition", I, I, T, T), F("combine", I, I, T, T)
        self._replicate, self._reduce = F("replicate", I, T, T), F("reduce", I, T, T)
        self._dim = F("dim", T, I, I)
        self._unary, self._act, self._softmax = F("unary", I, T, T), F("act", I, T, T), F("softmax", I, T, T)
        self._bias_add, self._linearb = F("bias_add", T, T, T), F("linearb", I, T, T, T, T)
        self._bmm, self._embedding = F("bmm", T, T, T), F("embedding", I, T, T, T)
        self._layernorm = {1: F("layernorm", I, T, T), 2: F("layernorm_g", I, T, T, T),
                           3: F("layernorm_gb", I, T, T, T, T)}
        self._conv, self._convb = F("conv", I, I, I, T, T, T), F("convb", I, I, I, T, T, T, T)
        self._bn = F("batchnorm", I, T, T, T, T)
        self._reduce_sum = F("reduce_sum", I, T, T)
        self._reshape = F("reshape", I, I, I, I, T, T)
        self.conv_h, self.conv_w = F("conv_h", I, I, I), F("conv_w", I, I, I)
        self.kernel_h, self.kernel_w = F("kernel_h", I, I), F("kernel_w", I, I)
        self.typing: list = []

    # Every operator application records when it is well typed (``typing``, on the sizes of
    # ``self.dims``): an axiom holds where both its sides are well typed, a rule where its sides are.
    # Unguarded, an axiom instantiated on ill-typed terms equates sizes that differ (ewadd(x, y) =
    # ewadd(y, x) with dim(ewadd(x, y), i) = dim(x, i) makes every two added tensors alike) and the
    # typing hypotheses of a rule become contradictory: everything is proved.
    dims = range(4)   # a rule's hypotheses speak of dims 0..3 at least (translate.rule_dims)

    def _typed(self, *conds):
        self.typing.extend(c for c in conds if not isinstance(c, bool))

    def _same(self, a, b, skip=lambda i: False):
        z3 = self.z3
        self._typed(*(z3.Or(skip(i), self.dim(a, i) == self.dim(b, i)) for i in self.dims))

    def linear(self, a, x, w):
        self._typed(self.dim(x, 0) == self.dim(w, 1))
        return self._linear(a, x, w)
    def relu(self, x): return self._relu(x)
    def transpose(self, x): return self._transpose(x)
    def ewadd(self, a, b):
        self._same(a, b)
        return self._ewadd(a, b)

    def ewmul(self, a, b):
        self._same(a, b)
        return self._ewmul(a, b)

    def smul(self, s, x): return self._smul(s, x)
    def concat(self, ax, a, b):
        self._same(a, b, lambda i: ax == i)
        return self._concat(ax, a, b)

    def split(self, k, ax, p, x):
        self._typed(p >= 1, p < self.dim(x, ax))
        return self._split[k](ax, p, x)

    def partition(self, d, k, x): return self._partition(d, k, x)
    def combine(self, d, k, x): return self._combine(d, k, x)
    def replicate(self, k, x): return self._replicate(k, x)
    def reduce(self, k, x): return self._reduce(k, x)
    def dim(self, t, i): return self._dim(t, i)
    def unary(self, c, x): return self._unary(c, x)
    def act(self, a, t): return self._act(a, t)
    def softmax(self, d, x): return self._softmax(d, x)
    def bias_add(self, x, b):
        self._typed(self.dim(x, 0) == self.dim(b, 0))
        return self._bias_add(x, b)

    def linearb(self, a, x, w, b):
        self._typed(self.dim(x, 0) == self.dim(w, 1), self.dim(b, 0) == self.dim(w, 0))
        return self._linearb(a, x, w, b)

    def bmm(self, a, b):
        self._typed(self.dim(a, 0) == self.dim(b, 1))
        self._same(a, b, lambda i: i < 2)
        return self._bmm(a, b)

    def embedding(self, g, idx, t): return self._embedding(g, idx, t)
    def layernorm(self, n, x, *weights):
        for w in weights:
            self._same(x, w, lambda i: self.z3.IntVal(i) >= n)
        return self._layernorm[1 + len(weights)](n, x, *weights)

    def _conv_typed(self, c, g, x, w):
        self._typed(self.dim(x, 2) == g * self.dim(w, 2), self.dim(w, 3) % g == 0,
                    self.dim(w, 1) == self.kernel_h(c), self.dim(w, 0) == self.kernel_w(c))

    def conv(self, c, g, a, x, w):
        self._conv_typed(c, g, x, w)
        return self._conv(c, g, a, x, w)

    def convb(self, c, g, a, x, w, b):
        self._conv_typed(c, g, x, w)
        self._typed(self.dim(b, 0) == self.dim(w, 3))
        return self._convb(c, g, a, x, w, b)

    def reduce_sum(self, ax, x): return self._reduce_sum(ax, x)
    def reshape(self, s, x):
        self._typed(*(v >= 1 for v in s))
        return self._reshape(*s, x)

    def bn(self, a, x, s, b):
        self._typed(self.dim(s, 0) == self.dim(x, 2), self.dim(b, 0) == self.dim(x, 2))
        return self._bn(a, x, s, b)

    def ite(self, c, a, b):
        return self.z3.If(c, a, b)

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
        self.typing = []
        lhs, rhs = ax.law(self, v)
        conds = []
        for n, dom in ax.ints:
            if dom == DIM:
                conds.append(env[n] >= 0)
            elif dom == DEG:
                conds.append(env[n] >= 1)
            elif dom in _DOMAINS:
                lo, hi = _DOMAINS[dom]
                conds += [env[n] >= lo] + ([env[n] <= hi] if hi is not None else [])
        conds += list(ax.guard(self, v)) if ax.guard else []
        conds += list(ax.where(self, v)) if ax.where else []
        conds += self.typing
        body = lhs == rhs if not conds else z3.Implies(z3.And(*conds), lhs == rhs)
        bound = list(env.values())
        pats = [side for side in (lhs, rhs) if patterns and _is_pattern(z3, side, set(env))]
        return z3.ForAll(bound, body, patterns=pats) if pats else z3.ForAll(bound, body)


_DOMAINS = {POINT: (1, None), SIZE: (1, None), ACTI: (0, 4), UNARY: (0, None), AXES: (1, None), AGGR: (0, 1), WINDOW: (0, None), GROUP: (1, None)}  # Z3's bounds (None: unbounded)


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


class IllTyped(GraphError):
    """A concrete check's assignment on which an operator is not defined (a split point outside its
    dimension): the axiom says nothing there (its Z3 reading carries the same typing as a condition)."""


class NumpyAlgebra:
    """Rule operators on ``ParallelValue``s with flexrt's NumPy kernels (compute operators run piece by
    piece with ``run_pieces``; parallel operators move pieces with ``apply_parallel_op``)."""

    def __init__(self):
        import numpy as np
        from flexrt.kernels import pieces
        from flexrt.search.substitutions.rule import UNARY_TYPES, PatternOp
        from flexrt.search.substitutions.semantics import to_attrs
        self.np, self.pieces, self.PatternOp, self.to_attrs = np, pieces, PatternOp, to_attrs
        self.UNARY_TYPES = UNARY_TYPES

    def _attrs(self, t, vals, choice=None, **params):
        return self.to_attrs(self.PatternOp(t, (), tuple(params.items())), [x.shape.tensor_shape for x in vals],
                             choice)

    def _run(self, t, vals, choice=None, **params):
        return self.pieces.run_pieces(self.np, self._attrs(t, vals, choice, **params), list(vals), t)

    def _move(self, t, x, **params):
        return self.pieces.apply_parallel_op(self.np, self._attrs(t, [x], **params), x)

    def linear(self, a, x, w): return self._run("OP_LINEAR", [x, w], PM_ACTI=a)[0]
    def relu(self, x): return self._run("OP_RELU", [x])[0]
    def transpose(self, x): return self._run("OP_TRANSPOSE", [x])[0]
    def ewadd(self, a, b): return self._run("OP_EW_ADD", [a, b])[0]
    def ewmul(self, a, b): return self._run("OP_EW_MUL", [a, b])[0]
    def smul(self, s, x): return self._run("OP_SCALAR_MULTIPLY", [x], PM_SCALAR=s)[0]
    def concat(self, ax, a, b): return self._run("OP_CONCAT", [a, b], PM_AXIS=ax, PM_NUM_INPUTS=2)[0]
    def split(self, k, ax, p, x):
        if not 1 <= p < self.dim(x, ax):
            raise IllTyped(f"split after {p} of a dimension of size {self.dim(x, ax)}")
        return self._run("OP_SPLIT", [x], p, PM_AXIS=ax, PM_NUM_OUTPUTS=2)[k]
    def partition(self, d, k, x): return self._move("OP_PARTITION", x, PM_PARALLEL_DIM=d, PM_PARALLEL_DEGREE=k)
    def combine(self, d, k, x): return self._move("OP_COMBINE", x, PM_PARALLEL_DIM=d, PM_PARALLEL_DEGREE=k)
    def replicate(self, k, x): return self._move("OP_REPLICATE", x, PM_PARALLEL_DEGREE=k)
    def reduce(self, k, x): return self._move("OP_REDUCE", x, PM_PARALLEL_DEGREE=k)
    def unary(self, c, x): return self._run(self.UNARY_TYPES[c], [x])[0]
    def softmax(self, d, x): return self._run("OP_SOFTMAX", [x], PM_SOFTMAX_DIM=d)[0]
    def bias_add(self, x, b): return self._run("OP_BIAS_ADD", [x, b])[0]
    def linearb(self, a, x, w, b): return self._run("OP_LINEAR", [x, w, b], PM_ACTI=a)[0]
    def bmm(self, a, b): return self._run("OP_BATCHMATMUL", [a, b])[0]
    def embedding(self, g, idx, t): return self._run("OP_EMBEDDING", [idx, t], PM_AGGR=g)[0]
    def layernorm(self, n, x, *weights): return self._run("OP_LAYERNORM", [x, *weights], PM_AXES=n)[0]
    def conv(self, c, g, a, x, w): return self._run("OP_CONV2D", [x, w], **self._window(c), PM_GROUP=g, PM_ACTI=a)[0]
    def convb(self, c, g, a, x, w, b):
        return self._run("OP_CONV2D", [x, w, b], **self._window(c), PM_GROUP=g, PM_ACTI=a)[0]

    def bn(self, a, x, s, b): return self._run("OP_BATCHNORM", [x, s, b], PM_ACTI=a)[0]
    def reduce_sum(self, ax, x): return self._run("OP_REDUCE_SUM", [x], PM_AXIS=ax)[0]

    def reshape(self, s, x):
        """``x`` reshaped to sizes ``s`` (innermost first; leading sizes 1 dropped down to a matrix, as
        ``dim`` reads them back); IllTyped when the element counts differ."""
        target = axioms_reshape.numpy_target([int(v) for v in s])
        if math.prod(target) != math.prod(x.shape.sizes):
            raise IllTyped(f"reshape of {list(x.shape.sizes)} to {target}: the element counts differ")
        return self._run("OP_RESHAPE", [x], tuple(target))[0]

    _window = staticmethod(window_of)

    def kernel_h(self, c): return self._window(c)["PM_KERNEL_H"]
    def kernel_w(self, c): return self._window(c)["PM_KERNEL_W"]

    def conv_h(self, c, n):
        p = self._window(c)
        return window_output_size("conv2d", "height", n, p["PM_KERNEL_H"], p["PM_STRIDE_H"], p["PM_PADDING_H"])

    def conv_w(self, c, n):
        p = self._window(c)
        return window_output_size("conv2d", "width", n, p["PM_KERNEL_W"], p["PM_STRIDE_W"], p["PM_PADDING_W"])

    def act(self, a, t):
        return t if a == 0 else self.relu(t) if a == 2 else self._run({1: "OP_SIGMOID", 3: "OP_TANH", 4: "OP_GELU"}[a],
                                                                       [t])[0]

    @staticmethod
    def dim(t, i):
        """Size of dimension ``i`` (from the innermost) of a parallel value; 1 beyond its rank."""
        sizes = t.shape.sizes
        return sizes[len(sizes) - 1 - i] if 0 <= i < len(sizes) else 1

    @staticmethod
    def ite(c, a, b):
        return a if c else b

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
        from flexrt.ir.datatype import DataType
        dtype = DataType.DT_INT64 if full.dtype.kind in "iu" else DataType.DT_FLOAT
        shape = ParallelTensorShape.of(full.shape, degrees, sum_degree=(kind or {}).get("sum", 1),
                                       discard_copy_degree=(kind or {}).get("rep", 1), dtype=dtype)
        return self.pieces.scatter(self.np, full, shape, rng)

    def same(self, a, b, rtol=1e-6, atol=1e-6) -> str | None:
        """None when two parallel values (or two sizes) are the same, else why not."""
        if isinstance(a, int) or isinstance(b, int):
            return None if a == b else f"sizes differ: {a} vs {b}"
        if a.shape != b.shape:
            return f"parallel shapes differ: {a.shape} vs {b.shape}"
        for key in a.pieces:
            if not self.np.allclose(a.pieces[key], b.pieces[key], rtol=rtol, atol=atol):
                return f"piece {key} differs"
        return None


class _Sizes:
    """Sizes for one concrete check: every size a multiple of ``unit`` (so every
    degree, and product of degrees, divides), one common shape per rank, and named sizes for linear (b, i, o, c)."""

    def __init__(self, rank: int, unit: int, rng):
        pick = lambda: unit * int(rng.integers(1, 3))
        self.rank = rank
        self.b, self.i, self.o, self.c, self.b2 = (pick() for _ in range(5))
        self._shape = tuple(pick() for _ in range(rank))
        self._pick = pick

    def shape(self, rank: int) -> tuple:
        return self._shape

    def other(self, ax: int) -> tuple:
        """The common shape with its size along ``ax`` (from the innermost) drawn again."""
        s = list(self._shape)
        s[len(s) - 1 - ax] = self._pick()
        return tuple(s)

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
    entries = min((shapes[t][0] for t in ax.tensors if t.startswith("t")), default=1)
    for t in ax.tensors:  # idx*: embedding indices into the tables t*
        full = rng.integers(0, entries, shapes[t]) if t.startswith("idx") else rng.standard_normal(shapes[t])
        setattr(v, t, A.value(full, kinds.get(t), rng))
    if ax.where and not all(ax.where(A, v)):
        return None
    try:
        lhs, rhs = ax.law(A, v)
    except IllTyped:
        return None
    why = A.same(lhs, rhs)
    return None if why is None else f"{ax.name} ({ax.comment}) with {ints}, rank {rank}: {why}"
