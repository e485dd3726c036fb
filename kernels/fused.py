"""Fused element-wise kernels: a chain of element-wise operators evaluated as one expression.

A forward fusion group whose members are all element-wise operators (DisCo §3, a fused operator
keeps its intermediates on chip) computes its result in one pass over memory and with no
temporary arrays: the chain is rendered as one expression, evaluated by numexpr on the CPU
(NumPy backend) or compiled as one ``cupy.ElementwiseKernel`` on a GPU (CuPy is imported only
there). Each operator is written with the same operations, in the same order, as its own kernel
(``flexrt.kernels.ops.elementwise``), so arithmetic chains give bitwise the member kernels' result
and transcendental ones agree to rounding.

``backward_reads`` says which operands and outputs an operator's backward kernel reads, so that a
runtime need not keep (or compute) an intermediate that no backward reads.

Example:
    >>> from flexrt.ir.op_type import OpType
    >>> from flexrt.ir.ops.element_unary import ElementUnaryAttrs
    >>> chain = ElementwiseChain((ChainStep(ElementUnaryAttrs(OpType.SCALAR_MUL, 2.0), (("in", 0),)),
    ...                           ChainStep(ElementUnaryAttrs(OpType.TANH), (("step", 0),))))
    >>> chain.text("numexpr")
    'tanh((x0 * c0))'

Entry points: ``ElementwiseChain``, ``ChainStep``, ``CHAIN_OPS``, ``backward_reads``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flexrt.errors import GraphError
from flexrt.ir.op_type import ELEMENT_BINARY, ELEMENT_UNARY, OpType

DIALECTS = ("numexpr", "cuda")
MAX_TEXT = 4000      # longer (operands repeated in deep chains) is not worth one expression
MAX_INPUTS = 24      # numexpr's operand limit is higher; a chain this wide is rare

# op -> (numexpr template, CUDA C template); {0} {1} are the operands' expressions, {s} the scalar's name.
# Each is the member kernel's own formula, NaNs included: NumPy's maximum(x, 0) and minimum return a
# NaN operand (x != x holds for a NaN alone).
_TEMPLATES = {
    OpType.RELU: ("where({0} < zero, zero, {0})", "({0} < zero ? zero : {0})"),
    OpType.SIGMOID: ("one / (one + exp(-{0}))", "one / (one + exp(-{0}))"),
    OpType.TANH: ("tanh({0})", "tanh({0})"),
    OpType.ELU: ("where({0} > zero, {0}, expm1(where({0} > zero, zero, {0})))",
                 "({0} > zero ? {0} : expm1({0} > zero ? zero : {0}))"),
    OpType.EXP: ("exp({0})", "exp({0})"),
    OpType.LOG: ("log({0})", "log({0})"),
    OpType.SIN: ("sin({0})", "sin({0})"),
    OpType.COS: ("cos({0})", "cos({0})"),
    OpType.IDENTITY: ("{0}", "{0}"),
    OpType.RSQRT: ("one / sqrt({0})", "one / sqrt({0})"),
    OpType.POW: ("{0} ** {s}", "pow({0}, {s})"),
    OpType.SCALAR_ADD: ("{0} + {s}", "{0} + {s}"),
    OpType.SCALAR_SUB: ("{0} - {s}", "{0} - {s}"),
    OpType.SCALAR_MUL: ("{0} * {s}", "{0} * {s}"),
    OpType.SCALAR_TRUE_DIV: ("{0} / {s}", "{0} / {s}"),
    OpType.EW_ADD: ("{0} + {1}", "{0} + {1}"),
    OpType.EW_SUB: ("{0} - {1}", "{0} - {1}"),
    OpType.EW_MUL: ("{0} * {1}", "{0} * {1}"),
    OpType.EW_DIV: ("{0} / {1}", "{0} / {1}"),
    OpType.EW_MAX: ("where(({0} >= {1}) | ({0} != {0}), {0}, {1})", "(({0} >= {1} || {0} != {0}) ? {0} : {1})"),
    OpType.EW_MIN: ("where(({0} <= {1}) | ({0} != {0}), {0}, {1})", "(({0} <= {1} || {0} != {0}) ? {0} : {1})"),
}
# GELU needs erf, which numexpr lacks: a chain holding it runs member by member.
CHAIN_OPS = frozenset(_TEMPLATES)
# Transcendental steps: NumPy's own loops are vectorized (SIMD), numexpr's are scalar libm calls unless
# it was built with Intel's VML, so on NumPy a chain holding one pays only with VML.
TRANSCENDENTAL = frozenset({OpType.SIGMOID, OpType.TANH, OpType.ELU, OpType.EXP, OpType.LOG, OpType.SIN, OpType.COS,
                            OpType.POW})
assert CHAIN_OPS == (ELEMENT_UNARY | ELEMENT_BINARY) - {OpType.GELU}
_SCALAR_OPS = frozenset({OpType.POW, OpType.SCALAR_ADD, OpType.SCALAR_SUB, OpType.SCALAR_MUL,
                         OpType.SCALAR_TRUE_DIV})

# What each element-wise backward kernel reads: (operand indices, output indices); others read all.
# (A kernel that reads none of them still takes the arrays for their shapes and dtypes.)
_BACKWARD_READS = {
    OpType.RELU: ((0,), ()), OpType.GELU: ((0,), ()), OpType.SIN: ((0,), ()), OpType.COS: ((0,), ()),
    OpType.POW: ((0,), ()), OpType.LOG: ((0,), ()), OpType.ELU: ((0,), (0,)),
    OpType.SIGMOID: ((), (0,)), OpType.TANH: ((), (0,)), OpType.EXP: ((), (0,)), OpType.RSQRT: ((), (0,)),
    OpType.IDENTITY: ((), ()), OpType.SCALAR_ADD: ((), ()), OpType.SCALAR_SUB: ((), ()),
    OpType.SCALAR_MUL: ((), ()), OpType.SCALAR_TRUE_DIV: ((), ()),
    OpType.EW_ADD: ((), ()), OpType.EW_SUB: ((), ()),
    OpType.EW_MUL: ((0, 1), ()), OpType.EW_DIV: ((0, 1), ()), OpType.EW_MAX: ((0, 1), ()),
    OpType.EW_MIN: ((0, 1), ()),
}
assert set(_BACKWARD_READS) == ELEMENT_UNARY | ELEMENT_BINARY


def backward_reads(op_type: OpType, num_operands: int, num_outputs: int) -> tuple[tuple, tuple]:
    """(operand indices, output indices) whose values ``op_type``'s backward kernel reads; an operator
    not listed reads all of them."""
    return _BACKWARD_READS.get(op_type, (tuple(range(num_operands)), tuple(range(num_outputs))))


@dataclass(frozen=True, slots=True)
class ChainStep:
    """One operator of a chain: its attributes and, per operand, ``("in", j)`` (input ``j`` of the
    chain) or ``("step", k)`` (the result of an earlier step ``k``)."""

    attrs: object
    args: tuple


@dataclass(frozen=True, slots=True)
class ElementwiseChain:
    """Steps in the order they run; the last is the chain's result. Every step's operands have the
    result's shape (no broadcasting) and one dtype."""

    steps: tuple

    def __post_init__(self):
        if not self.steps:
            raise GraphError("an element-wise chain needs at least one step")
        for k, s in enumerate(self.steps):
            t = s.attrs.op_type
            if t not in CHAIN_OPS:
                raise GraphError(f"chain step {k}: {t.value} is not a chainable element-wise operator; valid: "
                                 f"{', '.join(sorted(o.value for o in CHAIN_OPS))}")
            want = 2 if t in ELEMENT_BINARY else 1
            if len(s.args) != want:
                raise GraphError(f"chain step {k}: {t.value} takes {want} operands, got {len(s.args)}")
            for kind, j in s.args:
                if kind not in ("in", "step") or (kind == "step" and not 0 <= j < k):
                    raise GraphError(f"chain step {k}: operand {(kind, j)} is neither a chain input nor an "
                                     f"earlier step")

    @property
    def num_inputs(self) -> int:
        return 1 + max((j for s in self.steps for kind, j in s.args if kind == "in"), default=-1)

    def text(self, dialect: str = "numexpr") -> str:
        """The chain as one expression over inputs ``x0, x1, ...``, scalars ``c<step>`` and the
        constants ``zero`` and ``one``."""
        if dialect not in DIALECTS:
            raise GraphError(f"unknown expression dialect {dialect!r}; valid: {', '.join(DIALECTS)}")
        col = DIALECTS.index(dialect)
        done: list[str] = []
        for k, s in enumerate(self.steps):
            args = [f"x{j}" if kind == "in" else done[j] for kind, j in s.args]
            done.append("(" + _TEMPLATES[s.attrs.op_type][col].format(*args, s=f"c{k}") + ")")
        out = done[-1]
        return out[1:-1] if out.startswith("(") and out.endswith(")") else out

    def one_pass_pays(self, xp) -> bool:
        """Whether evaluating the chain as one expression on ``xp`` beats running its kernels: always
        on CuPy (one kernel instead of several); on NumPy unless a transcendental step would go through
        numexpr without VML (measured here: tanh of 1 MB 15x slower than NumPy's)."""
        if xp is not np:
            return True
        import numexpr
        return bool(getattr(numexpr, "use_vml", False)) or not any(s.attrs.op_type in TRANSCENDENTAL
                                                                   for s in self.steps)

    def fits(self) -> bool:
        """Whether the chain is small enough to evaluate as one expression."""
        return self.num_inputs <= MAX_INPUTS and len(self.text("numexpr")) <= MAX_TEXT

    def constants(self, dtype) -> dict:
        """The named constants of ``text`` as 0-d arrays of ``dtype`` (so float32 stays float32)."""
        dt = np.dtype(dtype)
        out = {"zero": np.asarray(0, dtype=dt), "one": np.asarray(1, dtype=dt)}
        for k, s in enumerate(self.steps):
            if s.attrs.op_type in _SCALAR_OPS:
                out[f"c{k}"] = np.asarray(s.attrs.scalar, dtype=dt)
        return out

    def evaluate(self, xp, inputs: list):
        """The chain's result for ``inputs`` (arrays of one shape and dtype) in one pass: numexpr for
        NumPy arrays, one CuPy elementwise kernel for CuPy arrays."""
        if len(inputs) != self.num_inputs:
            raise GraphError(f"element-wise chain: {len(inputs)} inputs given, {self.num_inputs} expected")
        dtype = inputs[0].dtype
        if xp is np:
            import numexpr
            local = {f"x{j}": a for j, a in enumerate(inputs)}
            local.update(self.constants(dtype))
            out = numexpr.evaluate(self.text("numexpr"), local_dict=local, global_dict={})
            return out if out.dtype == dtype else out.astype(dtype)
        kernel = _cuda_kernel(self)
        consts = self.constants(dtype)
        return kernel(*inputs, *(dtype.type(consts[n]) for n in _const_names(self)))


def cuda_source(chain: ElementwiseChain) -> tuple[str, str, str]:
    """(input parameters, output parameter, body) of the ``cupy.ElementwiseKernel`` for ``chain``:
    every input and constant of type ``T``."""
    ins = [f"T x{j}" for j in range(chain.num_inputs)] + [f"T {n}" for n in _const_names(chain)]
    return ", ".join(ins), "T y", f"y = {chain.text('cuda')};"


def _const_names(chain: ElementwiseChain) -> list[str]:
    return list(chain.constants(np.float64))


def _cuda_kernel(chain: ElementwiseChain):
    """The compiled kernel for ``chain`` (``kernels/_fused_cupy.py``: the only module here that
    imports CuPy; cached, compiled per dtype by CuPy on first call)."""
    from flexrt.kernels._fused_cupy import elementwise_kernel
    return elementwise_kernel(chain, *cuda_source(chain))
