"""Battery: host group, the NVMe array and its drives' SMART health.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
