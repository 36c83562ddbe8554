"""JSON Schema of a site file (``inventory/<site>.yaml``)."""

from __future__ import annotations

from typing import Any

_STR = {"type": "string", "minLength": 1}
_NAME = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*$"}
#: Group names as Ansible inventories write them (``slurm-master``, ``k8s_cluster``, ``gpu.a``);
#: pyinfra takes them as they are (inventory.py), so they are not rewritten.
GROUP_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"

_BMC = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "url": {"type": "string", "pattern": r"^https?://"},
        "model": {"enum": ["idrac9", "ilo6", "generic", "lab"]},
        "username": _STR,
        "username_env": _STR,
        "password_env": _STR,
        "password_file": _STR,
        "password": {},  # present only so the secret check can name it
        "ca_bundle": _STR,
        "verify_tls": {"type": "boolean"},
        # plain http:// only with this set (secret_refs refuses a credential over http without)
        "insecure": {"type": "boolean"},
    },
    "required": ["url"],
}

_PDU = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": _NAME,
        "url": {"type": "string", "pattern": r"^snmp(v3)?://"},
        "model": {"enum": ["apc-rpdu2", "raritan-pdu2", "servertech-sentry4", "vertiv-geist"]},
        "outlets": {"type": "array", "items": {"type": "integer", "minimum": 1}},
        "community_env": _STR,
        "community_file": _STR,
        "community": {},
        "username_env": _STR,
        "auth_password_env": _STR,
        "auth_password_file": _STR,
        "priv_password_env": _STR,
        "priv_password_file": _STR,
        "auth_password": {},
        "priv_password": {},
        "circuit_amps": {"type": "number", "minimum": 1},
        "circuit_volts": {"type": "number", "minimum": 1},
        # 3: a 3-phase PDU, circuit_volts line-to-line (capacity V x I x sqrt 3)
        "phases": {"enum": [1, 3]},
    },
    "required": ["url", "model"],
}

HOST_PROPERTIES: dict[str, Any] = {
    "address": _STR,
    # /etc/machine-id of the machine (systemd's 32 lower-case hex digits), where the site
    # records it: two hosts with one machine id are refused (one machine listed twice)
    "machine_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
    "profile": _NAME,
    "ssh_user": _STR,
    "ssh_port": {"type": "integer", "minimum": 1, "maximum": 65535},
    "ssh_key": _STR,
    "ssh_known_hosts_file": _STR,
    "ssh_strict_host_key_checking": {"enum": ["yes", "no", "accept-new", "off"]},
    "sim_scenario": _STR,
    "bmc": _BMC,
    "pdu": _PDU,
    "pdus": {"type": "array", "items": _PDU},
    "slurm": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"node_name": _NAME, "partition": _NAME},
    },
    "nvme": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"devices": {"type": "array", "items": {"type": "string",
                                                              "pattern": "^/dev/"}}},
    },
    "nccl": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"socket_ifname": _STR, "ib_hca": _STR, "ib_gid_index": {"type": "integer"}},
    },
    "network": {  # roles/network.py: where the RDMA stack comes from, RoCE QoS
        "type": "object",
        "additionalProperties": False,
        "properties": {"stack": {"enum": ["distro", "doca-ofed", "mlnx-ofed"]},
                       "ofed_mirror_url": _STR, "ofed_keyring_url": _STR,
                       "dscp": {"type": "integer", "minimum": 0, "maximum": 63},
                       "pfc_priority": {"type": "integer", "minimum": 0, "maximum": 7},
                       "ecn": {"type": "boolean"}},
    },
    "profile_overrides": {"type": "object"},
    "data": {"type": "object"},
}

SITE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "nodegate.site/1",
    "type": "object",
    "additionalProperties": False,
    "required": ["schema", "name", "hosts"],
    "properties": {
        "schema": {"const": "nodegate.site/1"},
        "name": _NAME,
        "description": _STR,
        "defaults": {"type": "object", "additionalProperties": False,
                     "properties": HOST_PROPERTIES},
        "profile_overrides": {"type": "object"},
        "groups": {
            "type": "object",
            # a member list, or {hosts: [...], data: {...}, profile_overrides: {...}}: the
            # group's role knobs and profile overrides, between the defaults' and each host's
            # own (a partition's opt-in)
            "additionalProperties": {
                "if": {"type": "array"},
                "then": {"type": "array", "items": _NAME},
                "else": {"type": "object", "additionalProperties": False,
                         "required": ["hosts"],
                         "properties": {"hosts": {"type": "array", "items": _NAME},
                                        "data": {"type": "object"},
                                        "profile_overrides": {"type": "object"}}},
            },
            "propertyNames": {"pattern": GROUP_NAME},
        },
        "hosts": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": _NAME,
            "additionalProperties": {"type": "object", "additionalProperties": False,
                                     "properties": HOST_PROPERTIES},
        },
        "slurm": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"controller": _STR, "partition": _NAME,
                           "cluster_name": _NAME,
                           # the share of a partition the health gate may hold drained
                           # (docs/gate.md, "The drain budget")
                           "drain_budget": {"type": "number", "minimum": 0, "maximum": 1}},
        },
    },
}
