import pytest

from nodegate.versions import Version, deb_compare, rpm_compare, upstream_of_package


def test_versions_compare_as_versions() -> None:
    assert Version("570.86.10") < Version("570.133.20")  # as strings it would be the reverse
    assert Version("570.133.20-0ubuntu1") == "570.133.20"
    assert Version("535.230.02") < "570.133.20"
    assert Version("1:2.26.2-1+cuda12.8") == Version("2.26.2-1+cuda12.8")
    assert upstream_of_package("570.133.20-1") == "570.133.20"
    assert Version("2.26.2-1+cuda12.8").revision == "1+cuda12.8"


def test_local_labels_are_builds_of_a_release() -> None:
    assert Version("0.1.0+src.0a1b2c3d4e5f") == "0.1.0+src.0a1b2c3d4e5f"
    assert Version("0.1.0+src.aaa") != Version("0.1.0+src.bbb")
    assert Version("0.1.0+src.01a1") != Version("0.1.0+src.1a01")  # same digits, other build
    assert Version("0.1.0") < Version("0.1.0+src.aaa") < Version("0.1.1")
    assert Version("0.1.0+src.aaa").matches("0.1.0")  # pip: ==0.1.0 ignores the label
    assert not Version("0.1.0+src.aaa").matches("0.1.0+src.bbb")
    assert not Version("0.1.0").matches("0.1.0+src.aaa")


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("1.0~rc1", "1.0", -1),            # Debian Policy 5.6.12: a tilde sorts before the end
    ("1.0~rc1", "1.0~rc2", -1),
    ("1.0-1", "1.0-2", -1),            # the revision orders builds of one upstream
    ("1:1.0", "2.0", 1),               # the epoch wins over everything after it
    ("570.86.10-1", "570.133.20-1", -1),
    ("2.26.2-1+cuda12.8", "2.26.2-1+cuda12.2", 1),
    ("1.0", "1.0", 0),
])
def test_debian_order_is_dpkgs(a: str, b: str, expected: int) -> None:
    assert deb_compare(a, b) == expected
    assert deb_compare(b, a) == -expected


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("570.133.20-1.el9", "570.86.10-1.el9", 1),
    ("1.0~rc1", "1.0", -1),            # rpmvercmp: tilde before anything, the end included
    ("1.0^git1", "1.0", 1),            # caret: after the end
    ("1.0^git1", "1.0.1", -1),         # ... but before anything else
    ("1.0a", "1.0", 1),
    ("1.0", "1.0.0", -1),
    ("1.01", "1.1", 0),                # numeric segments ignore leading zeros
    ("1:1.0-1", "2.0-1", 1),
    ("1.0-1.el9", "1.0-2.el9", -1),
    ("1.0-5", "1.0", 0),               # no release on one side: version alone, as dnf matches
])
def test_rpm_order_is_rpmvercmps(a: str, b: str, expected: int) -> None:
    assert rpm_compare(a, b) == expected
    assert rpm_compare(b, a) == -expected


def test_driver_view_orders_prereleases_before_the_release() -> None:
    assert Version("570.133.20~rc1") < Version("570.133.20")  # the old code said after
    assert Version("1:2.0") > Version("3.0")


@pytest.mark.parametrize(("text", "parsed"), [
    ("nodegate==0.1.0+src.abc", ("nodegate", "0.1.0+src.abc")),
    ("Node_Gate[power,torch]==0.1.0", ("node-gate", "0.1.0")),
    ("nodegate", ("nodegate", None)),
    ("nodegate>=0.1", None),           # a range: pip decides
    ("nodegate @ file:///wheels/nodegate.whl", None),
    ("not a requirement!", None),
])
def test_agent_reads_requirements_as_pip_does(text: str, parsed: tuple[str, str | None] | None,
                                               ) -> None:
    from roles.agent import parse_requirement

    assert parse_requirement(text) == parsed
