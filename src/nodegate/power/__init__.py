"""Power path of a GPU node: PDU (SNMP) and BMC (Redfish) readers and the poller.

Probes here measure (``readings``); ``nodegate.judge.power`` judges against the resolved
profile. Nothing in
this package accepts a credential literal where it could end up in a log, a metric or ``ps``.
"""
