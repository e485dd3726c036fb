"""Unity Fig. 2b as a strategy file: the 2-layer MLP (b=64, c_i=784, h=512, c_o=10, no biases) on 2
devices with its first MatMul unfused from the ReLU and reduction-parallel (input features and
the weight's rows split in 2, partial sums AllReduced), the ReLU on both replicas, and the second
MatMul split by output channel, so activations move instead of weights: 4·b·h = 131,072
elements per iteration against data parallelism's 2(c_i·h + h·c_o) = 813,056.

Run ``python examples/strategies/unity_fig2.py`` to regenerate ``unity_fig2_reduction.json``;
``flexrt simulate`` takes it with ``--strategy`` (machine ``dgx1_v100``).
"""

from pathlib import Path

from flexrt.ir import ActiMode, DataType, OpType, TensorShape
from flexrt.ir.ops import ElementUnaryAttrs, InputAttrs, LinearAttrs, WeightAttrs
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.machine import load_machine
from flexrt.machine.views import MachineView, Projection
from flexrt.strategy import GraphStrategy, Strategy, apply_configs, save_strategy

MACHINE = "dgx1_v100"
FILE = Path(__file__).with_name("unity_fig2_reduction.json")


def unfused_mlp(b=64, ci=784, h=512, co=10) -> PCG:
    """x @ W1 -> relu -> @ W2, the MatMul and the ReLU as separate operators."""
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((b, ci), DataType.DT_FLOAT)), name="x")
    w1 = g.add_node(WeightAttrs(TensorShape((ci, h))), name="fc1.kernel")
    w2 = g.add_node(WeightAttrs(TensorShape((h, co))), name="fc2.kernel")
    y = g.add_node(LinearAttrs(h, False, ActiMode.AC_MODE_NONE), [TensorRef(x), TensorRef(w1)], "fc1")
    r = g.add_node(ElementUnaryAttrs(OpType.RELU), [TensorRef(y)], "relu")
    g.add_node(LinearAttrs(co, False), [TensorRef(r), TensorRef(w2)], "fc2")
    return g


def _view(num_axes: int) -> MachineView:
    """Devices 0, 1, ... along the one axis of degree > 1 (degree-1 axes are INTRA, stride 1)."""
    return MachineView(0, (1,) * num_axes, (Projection.INTRA,) * num_axes)


def reduction_strategy() -> Strategy:
    base = unfused_mlp()
    ids = {n.name: n.id for n in base.nodes}
    degrees = {ids["fc1"]: {"in": 2}, ids["relu"]: {"replica": 2}, ids["fc2"]: {"out": 2}}
    pcg, mapping = apply_configs(base, degrees)
    # linear's axes: dim0, out, in, partial; relu's: dim0, dim1, replica
    views = {mapping[ids["fc1"]]: _view(4), mapping[ids["relu"]]: _view(3), mapping[ids["fc2"]]: _view(4)}
    return GraphStrategy(pcg, views)


if __name__ == "__main__":
    save_strategy(str(FILE), reduction_strategy(), load_machine(MACHINE))
    print(f"wrote {FILE}")
