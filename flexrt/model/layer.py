"""``Layer``: the record ``FFModel`` keeps of each layer call (FlexFlow's ``Op`` handle).

A layer is one PCG operator node plus the weight nodes it reads. ``Weight`` keeps each weight's
initializer for the runtime (initializers do nothing at build time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from flexrt.errors import ConfigError
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import TensorRef
from flexrt.ir.tensor_shape import TensorShape
from flexrt.model.tensor import Parameter, Tensor


@dataclass(frozen=True, slots=True)
class Weight:
    """One weight a layer reads: PCG node ``node`` named ``{owner}.{name}``.

    ``owner`` is the layer that created it; a layer built with ``shared_op`` reads its weights
    from that owner.
    """

    name: str
    node: int
    shape: TensorShape
    owner: str
    initializer: Optional[Any] = None

    @property
    def node_name(self) -> str:
        return f"{self.owner}.{self.name}"


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer: its index in the model, name, the call that made it (``kind``, e.g. ``dense``),
    operator attributes, PCG node, input and output tensors and weights.

    ``options`` keeps FlexFlow arguments that do not change the graph (``inplace``,
    ``kernel_regularizer``, ``create_grad`` ...), by name.
    """

    index: int
    name: str
    kind: str
    attrs: Any
    node: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    weights: tuple[Weight, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def op_type(self) -> OpType:
        return self.attrs.op_type

    @property
    def shares_weights(self) -> bool:
        """Whether this layer reads weights another layer created (``shared_op``)."""
        return any(w.owner != self.name for w in self.weights)

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)

    # FlexFlow's Op methods --------------------------------------------------------------------
    def get_output_tensor(self, index: int = 0) -> Tensor:
        return self.outputs[self._index("get_output_tensor", index, len(self.outputs), "outputs")]

    def get_input_tensor(self, index: int = 0) -> Tensor:
        return self.inputs[self._index("get_input_tensor", index, len(self.inputs), "inputs")]

    def _index(self, where: str, index: Any, n: int, what: str) -> int:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
            raise ConfigError(f"layer '{self.name}': {where}({index!r}): the layer has {n} {what}; valid: 0..{n - 1}")
        return index

    def get_number_outputs(self) -> int:
        return len(self.outputs)

    def get_number_inputs(self) -> int:
        return len(self.inputs)

    def get_input_tensor_by_id(self, id: int) -> Tensor:
        return self._pick("get_input_tensor_by_id", "input", self.inputs, id)

    def get_output_tensor_by_id(self, id: int) -> Tensor:
        return self._pick("get_output_tensor_by_id", "output", self.outputs, id)

    get_input_by_id = get_input_tensor_by_id
    get_output_by_id = get_output_tensor_by_id

    def get_number_parameters(self) -> int:
        return len(self.weights)

    def get_parameter_by_id(self, id: int) -> Parameter:
        """Weight ``id`` (0: the kernel, 1: the bias where there is one) as a ``Parameter``."""
        w = self._pick("get_parameter_by_id", "weight", self.weights, id)
        model = self.outputs[0].model
        return Parameter(model, TensorRef(w.node, 0), w.shape, w.owner, w.node_name)

    def get_weight_tensor(self) -> Parameter:
        """The kernel (FlexFlow's ``get_parameter_by_id(0)``)."""
        return self.get_parameter_by_id(0)

    def get_bias_tensor(self) -> Parameter:
        """The bias (FlexFlow's ``get_parameter_by_id(1)``)."""
        names = [w.name for w in self.weights]
        if len(names) < 2:
            raise ConfigError(f"get_bias_tensor: layer '{self.name}' ({self.kind}) has no bias; its weights: "
                              f"{', '.join(names) or 'none'}")
        return self.get_parameter_by_id(1)

    def _pick(self, where: str, what: str, items, i):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(items):
            raise ConfigError(f"{where}: layer '{self.name}' ({self.kind}) has no {what} {i!r}; valid: "
                              f"{', '.join(map(str, range(len(items)))) or 'none'}")
        return items[i]
