"""``flexrt.runtime``: running on this host, starting with measuring it.

Entry point so far: :func:`flexrt.runtime.calibrate.calibrate` (``flexrt calibrate``), which measures
the host with NumPy and writes the calibrated ``local`` machine
(:func:`flexrt.runtime.calibrate.write_machine_yaml`). This layer may import ``flexrt.ir``,
``flexrt.machine``, ``flexrt.kernels`` and ``flexrt.simulator``.
"""
