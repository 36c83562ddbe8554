"""Probes measure: they read NVML, the kernel log and host state, and return typed data.

They never decide; the judge (``nodegate.judge``) compares their output with the profile.
"""
