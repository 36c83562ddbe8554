"""Battery: host group, IOMMU, ACS and nccl.conf.

One pytest item per check declared with this group and subject (validation/conftest.py).
"""
