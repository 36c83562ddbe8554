"""Battery: network group, the RDMA rails.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
