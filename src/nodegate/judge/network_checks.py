"""The RDMA rail checks (sysfs), declared once (``nodegate.judge.declare``).

``nodegate.judge.network:judge_network`` emits every one, when the profile declares
``network.rails``; the port error counters are judged on their total there and again by
growth since the previous report (``nodegate.judge.counters``).
"""

from __future__ import annotations

from nodegate.judge.declare import Check, check
from nodegate.profiles.threshold_keys import Feature, Key
from nodegate.vocabulary import Group, Level, Subject

JUDGE = "nodegate.judge.network:judge_network"

#: sysfs port counter -> (its check, the total's key, the growth's key).
COUNTERS: dict[str, tuple[str, Key, Key]] = {
    "link_downed": ("ib_link_flaps", Key.IB_LINK_FLAPS_MAX, Key.IB_LINK_FLAPS_PER_HOUR_MAX),
    "link_error_recovery": ("ib_link_recoveries", Key.IB_LINK_RECOVERIES_MAX,
                            Key.IB_LINK_RECOVERIES_PER_HOUR_MAX),
    "symbol_error": ("ib_symbol_errors", Key.IB_SYMBOL_ERRORS_MAX,
                     Key.IB_SYMBOL_ERRORS_PER_HOUR_MAX),
    "port_rcv_errors": ("ib_rcv_errors", Key.IB_RCV_ERRORS_MAX, Key.IB_RCV_ERRORS_PER_HOUR_MAX),
    "port_xmit_discards": ("ib_xmit_discards", Key.IB_XMIT_DISCARDS_MAX,
                           Key.IB_XMIT_DISCARDS_PER_HOUR_MAX),
    "local_link_integrity_errors": ("ib_link_integrity_errors", Key.IB_LINK_INTEGRITY_ERRORS_MAX,
                                    Key.IB_LINK_INTEGRITY_ERRORS_PER_HOUR_MAX),
    "excessive_buffer_overrun_errors": ("ib_buffer_overruns", Key.IB_BUFFER_OVERRUNS_MAX,
                                        Key.IB_BUFFER_OVERRUNS_PER_HOUR_MAX),
}


def _rail(name: str, meaning: str, *keys: Key) -> Check:
    return check(name, meaning, JUDGE, *keys, subject=Subject.RAILS, group=Group.NETWORK,
                 level=Level.QUICK, requires=(Feature.RAILS,))


CHECKS: tuple[Check, ...] = (
    _rail("ib_rail_count", "as many rail HCAs as the profile says"),
    _rail("ib_port_state", "rail port ACTIVE and LinkUp"),
    _rail("ib_port_rate", "rail port rate as the profile says"),
    _rail("ib_link_layer", "InfiniBand or Ethernet as the profile says"),
    _rail("ib_hca_pcie_link", "HCA PCIe link at its max speed and width"),
    _rail("ib_firmware", "HCA firmware as pinned, else identical across rails"),
    _rail("ib_netdev", "RoCE interface up at the profile's MTU"),
    _rail("ib_topology", "each GPU's rail NIC(s) behind its PCIe switch, as the profile"),
    _rail("ib_rail_numa", "rail NIC on its GPU's NUMA node"),
    *(_rail(name, f"{counter} growth{' (a flap)' if counter == 'link_downed' else ''}",
            total, rate)
      for counter, (name, total, rate) in COUNTERS.items()),
)
