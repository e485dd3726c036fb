"""FFModel's fused normalization layers with FlexFlow's names, arguments and return values: rms_norm,
residual_rms_norm, residual_layer_norm, add_bias_residual_layer_norm, sigmoid_silu_multi.

FlexFlow runs each as one fused kernel; here each is composed from flexrt's operators (RMSNorm,
BiasAdd, element-wise add / sigmoid / multiply, LayerNorm), so the values are exact and every
strategy, the simulator and the search treat the parts like any other layers. A call adds its
layers all or none: when a part is refused, the parts already added are removed again.

Names: the layer that makes the main (normalized) output is named ``name`` (by default
``{method}_{n}``, e.g. ``residual_rms_norm_1``); the parts before it are ``{name}.bias_add``,
``{name}.add``, ``{name}.add2``, ``{name}.sigmoid``, ``{name}.silu``, and their weights
``{layer}.{weight}`` as usual (``{name}.gamma``, ``{name}.bias_add.bias``).

``inplace_residual`` is accepted for FlexFlow's signature and kept as an option of the residual
sum's layer; it changes no value (flexrt's task runtime manages every buffer).

Entry point: ``FusedLayers`` (a mixin of ``FFModel``).
"""

from __future__ import annotations

import contextlib
from typing import Optional, Sequence

from flexrt.errors import ConfigError, ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import BiasAddAttrs, ElementBinaryAttrs, RMSNormAttrs
from flexrt.model import _check
from flexrt.model.initializers import UniformInitializer

# The attention bias of add_bias_residual_layer_norm starts at one: FlexFlow's initializer for it
# (UniformInitializer(seed, 1, 1)). RMSNorm's gamma starts at one by its operator's default
# (FlexFlow draws it from an unseeded GlorotUniform, which no run could reproduce).
_ONES = UniformInitializer(0, 1.0, 1.0)


class FusedLayers:
    """Mixin of ``FFModel``; every method adds its layers through ``FFModel._add_layer``."""

    # ---- helpers ------------------------------------------------------------------------------
    def _fused_name(self, kind: str, name: Optional[str], parts: Sequence[str]) -> str:
        """The main layer's name (``name``, or the first free ``{kind}_{n}``) such that it and every
        ``{name}.{part}`` are free; ConfigError when a given ``name`` or one of its parts is taken."""
        def free(base: str) -> bool:
            return not any(self._name_taken(n) for n in [base] + [f"{base}.{p}" for p in parts])

        if name is None:
            n = 1
            while not free(f"{kind}_{n}"):
                n += 1
            return f"{kind}_{n}"
        base = self._layer_name(kind, name)  # a non-empty string not yet used
        taken = [f"{base}.{p}" for p in parts if self._name_taken(f"{base}.{p}")]
        if taken:
            raise ConfigError(f"{kind}: name '{base}' needs the layer names {', '.join(f'{base}.{p}' for p in parts)}"
                              f", but {', '.join(repr(t) for t in taken)} already exist; layer names must be unique")
        return base

    def _same_shapes(self, kind: str, tensors: Sequence, names: Sequence[str]) -> None:
        """FlexFlow's fused kernels read every input at the same index: equal sizes and types, no broadcasting."""
        for i, t in enumerate(tensors):
            self._ref_of(t, kind, i)
        first = tensors[0].get_shape()
        for t, n in zip(tensors[1:], names[1:]):
            if t.get_shape() != first:
                raise ShapeError(f"{kind}: {n} {t.get_shape()} must have the shape and type of {names[0]} {first}")

    @contextlib.contextmanager
    def _all_or_nothing(self):
        """Remove the layers (and the weights they created) added inside the block when it raises."""
        start = len(self._layers)
        try:
            yield
        except BaseException:
            for layer in reversed(self._layers[start:]):
                self.pcg.remove_node(layer.node)
                for w in reversed(layer.weights):
                    if w.owner == layer.name:
                        self.pcg.remove_node(w.node)
                del self._by_name[layer.name]
            del self._layers[start:]
            raise

    def _residual_sum(self, base: str, part: str, a, b, inplace_residual: bool):
        attrs = ElementBinaryAttrs(OpType.EW_ADD)
        return self._add_layer("add", attrs, [a, b], f"{base}.{part}",
                               options=(("inplace_residual", inplace_residual),)).outputs[0]

    def _rms_norm_layer(self, input, eps, dim, name: Optional[str]):
        attrs = RMSNormAttrs(_check.number("rms_norm", "eps", eps, low=0.0, low_open=True),
                             _check.integer("rms_norm", "dim", dim, 1))
        return self._add_layer("rms_norm", attrs, [input], name).outputs[0]

    # ---- layers -------------------------------------------------------------------------------
    def rms_norm(self, input, eps, dim, name=None):
        """y = x / sqrt(mean(x^2 over the last dimension) + eps) * gamma, gamma of shape (dim,) (initially
        ones); ``dim`` is the size of the last dimension (FlexFlow's meaning; a ShapeError otherwise).

        Example: ``ffmodel.rms_norm(x, 1e-6, x.dims[-1])``."""
        return self._rms_norm_layer(input, eps, dim, name)

    def residual_rms_norm(self, input1, input2, eps, dim, inplace_residual=False, name=None):
        """(input1 + input2, rms_norm of it): FlexFlow's two outputs, in its order."""
        w = "residual_rms_norm"
        _check.flag(w, "inplace_residual", inplace_residual)
        self._same_shapes(w, [input1, input2], ["input1", "input2"])
        base = self._fused_name(w, name, ("add",))
        with self._all_or_nothing():
            added = self._residual_sum(base, "add", input1, input2, inplace_residual)
            return added, self._rms_norm_layer(added, eps, dim, base)

    def residual_layer_norm(self, input, residual1, residual2, use_two_residuals, axes, elementwise_affine=True,
                            eps=1e-5, use_bias=True, inplace_residual=False, name=None):
        """(input + residual1 (+ residual2), layer_norm of it over ``axes``): FlexFlow's two outputs, in
        its order. ``residual2`` is read only when ``use_two_residuals`` (it may be None otherwise);
        ``axes``, ``elementwise_affine``, ``eps`` and ``use_bias`` are ``layer_norm``'s."""
        w = "residual_layer_norm"
        _check.flag(w, "use_two_residuals", use_two_residuals)
        _check.flag(w, "inplace_residual", inplace_residual)
        if use_two_residuals and residual2 is None:
            raise ConfigError(f"{w}: residual2 must be a Tensor when use_two_residuals is True, got None")
        tensors = [input, residual1] + ([residual2] if use_two_residuals else [])
        self._same_shapes(w, tensors, ["input", "residual1", "residual2"])
        parts = ("add", "add2") if use_two_residuals else ("add",)
        base = self._fused_name(w, name, parts)
        with self._all_or_nothing():
            added = self._residual_sum(base, "add", input, residual1, inplace_residual)
            if use_two_residuals:
                added = self._residual_sum(base, "add2", added, residual2, inplace_residual)
            return added, self.layer_norm(added, axes, elementwise_affine, eps, use_bias, name=base)

    def add_bias_residual_layer_norm(self, input, residual, axes, elementwise_affine=True, eps=1e-5, use_bias=True,
                                     inplace_residual=False, name=None):
        """(input + bias + residual, layer_norm of it over ``axes``): FlexFlow's two outputs, in its
        order. The bias is a learned weight of the last dimension's size (FlexFlow's attention bias,
        initially ones), added by a BiasAdd layer ``{name}.bias_add``."""
        w = "add_bias_residual_layer_norm"
        _check.flag(w, "inplace_residual", inplace_residual)
        self._same_shapes(w, [input, residual], ["input", "residual"])
        base = self._fused_name(w, name, ("bias_add", "add"))
        with self._all_or_nothing():
            biased = self._add_layer("bias_add", BiasAddAttrs(), [input], f"{base}.bias_add",
                                     bias_initializer=_ONES).outputs[0]
            added = self._residual_sum(base, "add", biased, residual, inplace_residual)
            return added, self.layer_norm(added, axes, elementwise_affine, eps, use_bias, name=base)

    def sigmoid_silu_multi(self, input1, input2, name=None):
        """silu(input1) * input2 = input1 * sigmoid(input1) * input2 (LLaMA's gated MLP), element-wise."""
        w = "sigmoid_silu_multi"
        self._same_shapes(w, [input1, input2], ["input1", "input2"])
        base = self._fused_name(w, name, ("sigmoid", "silu"))
        with self._all_or_nothing():
            silu = self.multiply(input1, self.sigmoid(input1, name=f"{base}.sigmoid"), name=f"{base}.silu")
            return self.multiply(silu, input2, name=base)
