"""The nodegate-lab distribution: the test and rehearsal harness, kept out of the node package.

The embedded lab: disposable Debian 12 hosts booted with systemd-nspawn, each in its own
network namespace on a private lab bridge, with a simulated GPU board, reached over real SSH;
its PDU agent (``pdu_agent``) and Redfish BMC emulator (``bmc_emulator``). Also the md
rehearsal VM (``mdvm``) and the synthetic fleet (``synthetic_fleet``) of the fleet tests and
bench. It imports nodegate; nodegate never imports it.

Entry points: ``nodegate-lab up|status|shell|down|mdvm`` (``nodegate_lab.cli``) and
``nodegate_lab.lab`` for tests. See docs/lab.md.
"""
