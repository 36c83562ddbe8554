"""Standard and acceptance load phases: GEMM + silent-data-corruption compare, HBM, host
copies with NUMA locality, P2P matrix, all-reduce bus bandwidth, DDP burn-in, telemetry.

torch is imported only inside this package (the ``torch`` extra), never on the quick path.
Measuring (``tasks`` run by ``workers``, ``burnin``, ``telemetry``) and judging (``verdicts``)
live in separate modules; ``levels.run`` ties them together for ``nodegate.battery.load``.
"""
