"""Battery: log group, Xid and SXid events in the kernel log.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
