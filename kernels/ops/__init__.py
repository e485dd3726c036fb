"""Forward kernels, one module per operator family; importing this package registers them."""

from flexrt.kernels.ops import dense, elementwise  # noqa: F401
