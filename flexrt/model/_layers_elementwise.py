"""FFModel element-wise layers: binary (with broadcasting), scalar, unary and pow. Signatures are FlexFlow's;
``inplace`` / ``inplace_a`` change no shape and are kept as layer options for the runtime."""

from __future__ import annotations

from flexrt.ir.op_type import OpType
from flexrt.ir.ops import ElementBinaryAttrs, ElementUnaryAttrs
from flexrt.model import _check


class ElementwiseLayers:
    """Mixin of ``FFModel``; every method adds one layer through ``FFModel._add_layer``."""

    def _binary(self, kind, op_type, x, y, inplace_a, name):
        _check.flag(kind, "inplace_a", inplace_a)
        return self._add_layer(kind, ElementBinaryAttrs(op_type), [x, y], name,
                               options=(("inplace_a", inplace_a),)).outputs[0]

    def _unary(self, kind, op_type, input, inplace, name, scalar=0.0):
        """``inplace`` None: the layer method has no such argument (FlexFlow's sigmoid, exp, ...)."""
        if inplace is not None:
            _check.flag(kind, "inplace", inplace)
        options = () if inplace is None else (("inplace", inplace),)
        return self._add_layer(kind, ElementUnaryAttrs(op_type, scalar), [input], name, options=options).outputs[0]

    def add(self, x, y, inplace_a=False, name=None):
        """x + y, element-wise with broadcasting."""
        return self._binary("add", OpType.EW_ADD, x, y, inplace_a, name)

    def subtract(self, x, y, inplace_a=False, name=None):
        """x - y, element-wise with broadcasting."""
        return self._binary("subtract", OpType.EW_SUB, x, y, inplace_a, name)

    def multiply(self, x, y, inplace_a=False, name=None):
        """x * y, element-wise with broadcasting."""
        return self._binary("multiply", OpType.EW_MUL, x, y, inplace_a, name)

    def divide(self, x, y, inplace_a=False, name=None):
        """x / y, element-wise with broadcasting."""
        return self._binary("divide", OpType.EW_DIV, x, y, inplace_a, name)

    def max(self, x, y, inplace_a=False, name=None):
        """max(x, y), element-wise with broadcasting."""
        return self._binary("max", OpType.EW_MAX, x, y, inplace_a, name)

    def min(self, x, y, inplace_a=False, name=None):
        """min(x, y), element-wise with broadcasting."""
        return self._binary("min", OpType.EW_MIN, x, y, inplace_a, name)

    def scalar_add(self, input, scalar, inplace=True, name=None):
        """x + scalar."""
        scalar = _check.number("scalar_add", "scalar", scalar)
        return self._unary("scalar_add", OpType.SCALAR_ADD, input, inplace, name, scalar)

    def scalar_sub(self, input, scalar, inplace=True, name=None):
        """x - scalar."""
        scalar = _check.number("scalar_sub", "scalar", scalar)
        return self._unary("scalar_sub", OpType.SCALAR_SUB, input, inplace, name, scalar)

    def scalar_multiply(self, input, scalar, inplace=True, name=None):
        """x * scalar."""
        scalar = _check.number("scalar_multiply", "scalar", scalar)
        return self._unary("scalar_multiply", OpType.SCALAR_MUL, input, inplace, name, scalar)

    def scalar_true_divide(self, input, scalar, inplace=True, name=None):
        """x / scalar."""
        scalar = _check.number("scalar_true_divide", "scalar", scalar)
        return self._unary("scalar_true_divide", OpType.SCALAR_TRUE_DIV, input, inplace, name, scalar)

    def relu(self, input, inplace=True, name=None):
        """relu(x), element-wise."""
        return self._unary("relu", OpType.RELU, input, inplace, name)

    def gelu(self, input, inplace=True, name=None):
        """gelu(x), element-wise."""
        return self._unary("gelu", OpType.GELU, input, inplace, name)

    def elu(self, input, inplace=True, name=None):
        """elu(x), element-wise."""
        return self._unary("elu", OpType.ELU, input, inplace, name)

    # FlexFlow's sigmoid, tanh, exp, sin, cos, rsqrt and identity take no ``inplace``.
    def sigmoid(self, input, name=None):
        """sigmoid(x), element-wise."""
        return self._unary("sigmoid", OpType.SIGMOID, input, None, name)

    def tanh(self, input, name=None):
        """tanh(x), element-wise."""
        return self._unary("tanh", OpType.TANH, input, None, name)

    def exp(self, x, name=None):
        """exp(x), element-wise."""
        return self._unary("exp", OpType.EXP, x, None, name)

    def log(self, x, name=None):
        """The natural logarithm, element-wise (flexrt's; torch.log, log_softmax)."""
        return self._unary("log", OpType.LOG, x, None, name)

    def sin(self, x, name=None):
        """sin(x), element-wise."""
        return self._unary("sin", OpType.SIN, x, None, name)

    def cos(self, x, name=None):
        """cos(x), element-wise."""
        return self._unary("cos", OpType.COS, x, None, name)

    def rsqrt(self, input, name=None):
        """rsqrt(x), element-wise."""
        return self._unary("rsqrt", OpType.RSQRT, input, None, name)

    def identity(self, input, name=None):
        """identity(x), element-wise."""
        return self._unary("identity", OpType.IDENTITY, input, None, name)

    def pow(self, input, exponent, name=None):
        """x ** exponent."""
        attrs = ElementUnaryAttrs(OpType.POW, _check.number("pow", "exponent", exponent))
        return self._add_layer("pow", attrs, [input], name).outputs[0]
