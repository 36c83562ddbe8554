"""scripts/driver_metadata_rpm.py's spec evaluation: the rhel 9 / x86_64 reading RHEL9.md
states, on a small spec written for this test (not NVIDIA's text)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "driver_metadata_rpm.py"

SPEC = """\
%global base demo
%if 0%{?rhel} == 8
%global flavour old
%else
%global flavour new
%endif
Name:           %{base}-driver
Version:        1.0
Release:        1%{?dist}
Epoch:          3
Requires:       %{name}-libs%{?_isa} = %{?epoch:%{epoch}:}%{version}, plain-dep
Requires(post): systemd
%if 0%{?fedora} >= 41 || 0%{?rhel} >= 10
Recommends:     only-on-el10
%endif
Provides:       %{base}-%{flavour}

%description
Text: with a colon and %{undefined_macro}, never read as a tag.

%package libs
Requires:       %{base}-common = %{?epoch:%{epoch}:}%{version}-%{release}
%ifarch x86_64
Requires:       x86-only
%endif
%ifnarch x86_64
Requires:       never-on-x86
%endif

%package -n %{base}-unbuilt
Requires:       nothing

%package -n xorg-%{base}
Supplements:    (%{base}-driver and xorg-x11-server-Xorg)

%files
%files libs
%ifarch %{ix86}
%files -n %{base}-unbuilt
%endif
%files -n xorg-%{base}

%changelog
- Note: %{whatever}
"""

COMMON = """\
Name:           demo-common
Version:        1.0
Release:        1%{?dist}
Epoch:          3
BuildArch:      noarch
Requires:       demo-driver = %{?epoch:%{epoch}:}%{version}
%files
"""


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("driver_metadata_rpm", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def test_conditionals_macros_and_built_packages_for_rhel9_x86_64() -> None:
    script = _script()
    pkgs = {p["name"]: p for p in script.packages([("demo", SPEC), ("common", COMMON)],
                                                  "570.133.20")}
    assert set(pkgs) == {"demo-driver", "demo-driver-libs", "xorg-demo", "demo-common"}
    driver = pkgs["demo-driver"]
    assert (driver["epoch"], driver["release"], driver["arch"]) == ("3", "1.el9", "x86_64")
    assert driver["requires"] == ["demo-driver-libs(x86-64) = 3:570.133.20", "plain-dep",
                                  "systemd"]
    assert "recommends" not in driver  # an el10/fedora-only relation
    assert driver["provides"] == ["demo-new"]  # the %else branch of rhel == 8
    assert driver["implicit_provides"] == ["demo-driver = 3:570.133.20-1.el9",
                                           "demo-driver(x86-64) = 3:570.133.20-1.el9"]
    assert pkgs["demo-driver-libs"]["requires"] == ["demo-common = 3:570.133.20-1.el9",
                                                    "x86-only"]
    assert pkgs["xorg-demo"]["supplements"] == ["(demo-driver and xorg-x11-server-Xorg)"]
    common = pkgs["demo-common"]
    assert common["arch"] == "noarch"
    assert common["implicit_provides"] == ["demo-common = 3:570.133.20-1.el9"]


def test_an_unresolved_macro_in_a_relation_stops_the_script() -> None:
    script = _script()
    with pytest.raises(ValueError, match="unresolved macro"):
        script.packages([("bad", "Name: x\nRequires: y = %{nope}\n%files\n")], "1.0")
