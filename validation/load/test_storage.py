"""Battery: load group. The NVMe array under fio, and DCGM's diagnostic where installed.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
