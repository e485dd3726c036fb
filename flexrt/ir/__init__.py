"""``flexrt.ir``: the parallel computation graph and its value types (Unity §3).

Nothing here imports kernels, YAML or the simulator.
"""

from flexrt.ir.datatype import DataType  # noqa: F401
from flexrt.ir.enums import ActiMode, AggrMode, PoolType  # noqa: F401
from flexrt.ir.op_type import OpType  # noqa: F401
from flexrt.ir.parallel_tensor import ParallelDegrees, ParallelDim, ParallelTensorShape  # noqa: F401
from flexrt.ir.registry import op_def  # noqa: F401
from flexrt.ir.tensor_shape import TensorShape  # noqa: F401
