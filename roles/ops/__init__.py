"""nodegate's own pyinfra operations and the helpers roles and deploy/ share, one module per
domain, the way pyinfra keeps ``operations/apt.py`` beside ``facts/deb.py`` (nodegate's facts
are ``nodegate.facts``; these are the operations that act on what they read):

- ``common``: the target OS, knobs, templates, shell quoting, ``refuse`` and ``verdict``
- ``packages``: ``ensure_packages``, the one way a role installs OS packages (pinned or not)
- ``repos``: keyrings and DNF module streams a package install needs first
- ``files``: templates, text and secrets written when they differ
- ``server``: follow-up commands, the kernel module's state, the guarded reboot
- ``systemd``: unit starts that explain their failure
- ``storage``: md array, filesystem and mount unit, never recreated
- ``slurm``: this host's Slurm name and membership
- ``gate`` and ``gate_results``: the battery, multi-node and join gates in a deploy
- ``upgrade``: the driver upgrade's drain, wait and record

Every name here is public: roles/ and deploy/ import them by module
(``from roles.ops.packages import ensure_packages``); nothing is imported on ``import roles.ops``.
A role stays one module with one public ``@deploy`` under roles/.
"""
