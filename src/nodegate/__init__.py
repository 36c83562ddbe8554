"""nodegate: provision 8-GPU NVIDIA servers and gate them before they join a cluster."""

__version__ = "0.1.0"
