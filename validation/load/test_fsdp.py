"""Battery: load group. FSDP training steps, sharded checkpoints and their verified reload.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
