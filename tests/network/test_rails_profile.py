"""``network.rails`` in a profile: a link layer or rate that does not exist exits 2 naming the
file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegate.errors import ConfigError
from nodegate.profiles.loader import check_files
from tests.conftest import run_cli

RAILS = ("schema: nodegate.profile/1\nlayer: platform\nnetwork:\n  rails:\n"
         "    count: 8\n    pairing: same-switch\n    source: 'policy: test'\n")


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        ("    link_layer: Infiniband\n    rate_gbps: 400\n", "network.rails.link_layer",
         "is not one of"),
        ("    link_layer: InfiniBand\n    rate_gbps: 250\n", "network.rails.rate_gbps",
         "is not one of"),
        # 56 Gb/s is an FDR InfiniBand rate, not an Ethernet one
        ("    link_layer: Ethernet\n    rate_gbps: 56\n", "network.rails.rate_gbps",
         "is not one of"),
        ("    link_layer: Ethernet\n    rate_gbps: 400\n    mtu: 12000\n",
         "network.rails.mtu", "maximum"),
    ],
)
def test_bad_rails_name_file_and_key(tmp_path: Path, extra: str, key: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(RAILS + extra)
    with pytest.raises(ConfigError) as info:
        check_files([path])
    assert (info.value.key, info.value.file) == (key, str(path))
    assert words in info.value.message


def test_real_rates_load(tmp_path: Path) -> None:
    for layer, rate in (("InfiniBand", 400), ("InfiniBand", 200), ("Ethernet", 400),
                        ("Ethernet", 100)):
        path = tmp_path / "ok.yaml"
        path.write_text(RAILS + f"    link_layer: {layer}\n    rate_gbps: {rate}\n")
        assert check_files([path]) == [str(path)]


def test_cli_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(RAILS + "    link_layer: InfiniBand\n    rate_gbps: 250\n")
    result = run_cli("profiles", "check", str(path))
    assert result.returncode == 2
    assert "network.rails.rate_gbps" in result.stderr and "bad.yaml" in result.stderr
    assert "Traceback" not in result.stderr
