"""Battery: load group. HBM, host<->device, P2P, all-reduce and the other collectives.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
