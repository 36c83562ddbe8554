"""Battery: gpu group, the PCIe link and its replays.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
