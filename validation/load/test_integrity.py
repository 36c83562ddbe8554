"""Battery: load group. Did the copies and the all-reduce deliver the right bytes?

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
