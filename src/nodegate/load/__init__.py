"""Standard and acceptance load phases: GEMM + silent-data-corruption compare, HBM, host
copies with NUMA locality, P2P matrix, all-reduce bus bandwidth, DDP burn-in, telemetry.

torch is imported only inside this package (the ``torch`` extra), never on the quick path.
This package only measures (``tasks`` run by ``workers``, ``burnin``, ``telemetry``); the
figures are judged in ``nodegate.judge.load``, and ``nodegate.battery.load_levels.run`` ties
the two together for ``nodegate.battery.load``.
"""
