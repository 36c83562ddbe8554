"""Battery: load group. GEMM in the further dtypes: speed and bit compare.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
