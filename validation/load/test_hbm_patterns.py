"""Battery: load group. The whole-HBM pattern test (acceptance).

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
