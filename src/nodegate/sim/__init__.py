"""The simulated GPU node: a ``libnvidia-ml.so.1`` below the real pynvml.

No machine that builds or tests nodegate has a GPU, so the one thing simulated is the driver's
NVML library. Scenarios (YAML) describe a board, faults overlay it, and :mod:`nodegate.sim.state`
flattens the result into a file the C library reads at ``nvmlInit``. Everything above NVML
(pynvml, probes, pytest, the CLI) runs unchanged.
"""
