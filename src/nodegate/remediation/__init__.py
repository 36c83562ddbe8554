"""Remediation: from a node nodegate drained back to service, or to an RMA with its evidence.

``state`` keeps the per-node state machine on disk (one remediation at a time, resumable),
``actions`` decides what NVIDIA's documentation says cures the evidence, ``escalation`` keeps
the count per GPU serial, ``bundle`` writes the RMA archive and ``engine`` runs one step of
it all (``nodegate remediate``). docs/remediation.md is the operator's page.
"""
