from nodegate.versions import Version, upstream_of_package


def test_versions_compare_as_versions() -> None:
    assert Version("570.86.10") < Version("570.133.20")  # as strings it would be the reverse
    assert Version("570.133.20-0ubuntu1") == "570.133.20"
    assert Version("535.230.02") < "570.133.20"
    assert Version("1:2.26.2-1+cuda12.8") == Version("2.26.2-1+cuda12.8")
    assert upstream_of_package("570.133.20-1") == "570.133.20"
    assert Version("2.26.2-1+cuda12.8").revision == "1+cuda12.8"
