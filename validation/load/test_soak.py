"""Battery: load group. Thermal and power under load.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
