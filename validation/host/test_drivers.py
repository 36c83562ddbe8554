"""Battery: host group, kernel modules and NVIDIA services.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
