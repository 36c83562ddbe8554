"""The cluster side of the gate: a scheduler adapter (Slurm now, Kubernetes later) and the
pure policy deciding whether a node joins, is drained, or is left alone.

``scheduler`` holds the interface, ``slurm`` the scontrol/sinfo implementation, ``gate`` the
policy (no I/O), ``cli`` the ``nodegate gate`` command.
"""

# no re-exports here: importing the CLI module (every nodegate start) must stay light
