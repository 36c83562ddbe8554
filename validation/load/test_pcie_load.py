"""Battery: load group. PCIe link generation under load (an idle link trains down).

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
