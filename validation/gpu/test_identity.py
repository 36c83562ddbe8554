"""Battery: gpu group, which GPUs, driver and firmware.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
