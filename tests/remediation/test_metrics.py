"""The remediation phase as Prometheus gauges."""

from __future__ import annotations

from pathlib import Path

from nodegate.remediation import metrics
from nodegate.remediation.state import ActionRecord, NodeRemediation, Phase
from tests.remediation.helpers import NODE, NOW


def test_the_current_phase_is_1_and_every_other_0(tmp_path: Path) -> None:
    state = NodeRemediation(NODE, phase=Phase.REMEDIATING,
                            action=ActionRecord("reboot_node", [], {}, NOW, "boot-a"))
    text = metrics.write(state, tmp_path).read_text()
    assert f'nodegate_remediation_phase{{node="{NODE}",phase="remediating"}} 1' in text
    assert f'nodegate_remediation_phase{{node="{NODE}",phase="rma"}} 0' in text
    assert f'nodegate_remediation_in_flight{{node="{NODE}"}} 1' in text
    assert text.count("nodegate_remediation_phase{") == len(Phase)
