"""Battery: power group, PSUs and inlet from the BMC; draw under load from BMC and PDUs.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
