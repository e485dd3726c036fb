"""flexrt: find fast parallelization strategies for DNN training and run them.

Layers (each imports only those to its left): ``flexrt.ir`` -> ``flexrt.machine`` ->
``flexrt.kernels`` -> ``flexrt.simulator`` -> ``flexrt.search``; ``flexrt.runtime``;
``flexrt.model`` and ``flexrt.cli`` on top. See README.md.
"""

__version__ = "0.1.0"
