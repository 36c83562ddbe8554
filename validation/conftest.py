"""The nodegate validation battery. Run it from a nodegate checkout (the node package ships
the plugin, not these files; on a node without one, ``nodegate validate`` runs the same checks):

    pytest validation/ --nodegate-profile xe9680-h100 [--nodegate-level quick] \
        [--nodegate-checks gpu,log] [--nodegate-report-dir DIR]

The plugin (``nodegate.testing.plugin``) runs the same battery as ``nodegate validate`` once
per session, under the battery lock, and hands each test its check's results on every entity.

No test here is written by hand: ``validation/<group>/test_<subject>.py`` is collected as one
item per check declared with that group and subject (``nodegate.judge.*_checks``), named
``test_<check>`` and marked ``check(<check>)``; its body asserts the verdicts. Group and level
of each check come from ``nodegate.battery.registry``, not from these files.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegate.battery.registry import DECLARED
from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts

HERE = Path(__file__).parent


def check_test(results: list[CheckResult]) -> None:
    """Every declared check's test: the judge decided, this asserts its verdicts."""
    assert_verdicts(results)


class SubjectModule(pytest.Module):
    """``<group>/test_<subject>.py``: its items come from the declarations, not the file."""

    def collect(self) -> Iterator[pytest.Item]:
        group, subject = self.path.parent.name, self.path.stem.removeprefix("test_")
        for declared in DECLARED:
            if declared.group.value == group and declared.subject.value == subject:
                item = pytest.Function.from_parent(self, name=f"test_{declared.name}",
                                                   callobj=check_test)
                item.add_marker(pytest.mark.check(declared.name))
                yield item


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector
                                ) -> pytest.Module | None:
    if module_path.parent.parent != HERE or not module_path.name.startswith("test_"):
        return None
    module: pytest.Module = SubjectModule.from_parent(parent, path=module_path)
    return module
