"""Battery: load group. DDP training steps.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
