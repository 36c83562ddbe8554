"""Battery: gpu group, persistence, MIG, compute and ECC modes, the power limit.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
