"""Power path of a GPU node: PDU (SNMP) and BMC (Redfish) readers, the poller, power checks.

Probes here measure (``readings``); ``checks`` judges against the resolved profile. Nothing in
this package accepts a credential literal where it could end up in a log, a metric or ``ps``.
"""
