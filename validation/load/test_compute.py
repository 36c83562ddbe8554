"""Battery: load group. GEMM throughput and silent data corruption.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
