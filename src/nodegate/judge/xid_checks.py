"""The kernel log's check, declared once (``nodegate.judge.declare``): Xid and NVSwitch SXid
lines of this boot, judged against NVIDIA's catalogue (``judge_xids`` and ``judge_sxids`` both
emit it; an unreadable log is ``nodegate.judge.kernel_log``'s ERROR)."""

from __future__ import annotations

from nodegate.judge.declare import Check, check
from nodegate.vocabulary import Group, Level, Subject

CHECKS: tuple[Check, ...] = (
    check("xid_events", "no hardware-critical Xid this boot", "nodegate.judge.xid:judge_xids",
          subject=Subject.XID, group=Group.LOG, level=Level.QUICK),
)
