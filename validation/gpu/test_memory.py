"""Battery: gpu group, ECC counters, row remapping, retired pages.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
