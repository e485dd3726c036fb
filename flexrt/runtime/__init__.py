"""``flexrt.runtime``: executes the simulator's task graph for real, and measures this host.

- ``session.Session``: a strategy lowered and simulated once (the prediction), refused when a device
  would run out of memory, planned (``plan.ExecPlan``), its weights placed; ``step`` runs one
  training iteration and returns the loss, metrics, measured time and peak memory.
- ``executor.Executor``: runs the plan's tasks on a backend's devices, each device in the simulated
  order, a task after its dependencies; ``serial`` (one dispatch loop) or ``threads`` (a worker per
  device and link); ring AllReduce groups run as one collective; buffers freed after last use.
- ``backend``: NumPy devices (the reference; each device owns its arrays, transfers are copies) and
  the CuPy backend (``_cupy``, the only module importing CuPy).
- ``reference.ReferenceTrainer``: whole tensors on one device, the law every strategy must match.
- ``calibrate``: measures the host and writes the calibrated ``local`` machine (``flexrt calibrate``).

This layer may import ``flexrt.ir``, ``flexrt.machine``, ``flexrt.kernels`` and ``flexrt.simulator``.
"""
