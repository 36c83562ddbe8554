from nodegate.versions import Version, upstream_of_package


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
