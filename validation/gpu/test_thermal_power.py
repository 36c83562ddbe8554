"""Battery: gpu group, clock events, idle temperature, foreign processes.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
