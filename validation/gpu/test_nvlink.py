"""Battery: gpu group, NVLink and the NVSwitch fabric.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
