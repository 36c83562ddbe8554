"""The embedded lab: disposable Debian 12 hosts booted with systemd-nspawn, each in its own
network namespace on a private lab bridge, with a simulated GPU board, reached over real SSH.

Entry points: ``nodegate-lab up|status|shell|down`` (``nodegate_lab.cli``) and
``nodegate_lab.lab`` for tests. See docs/lab.md.
"""
