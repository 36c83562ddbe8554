"""Version comparison as each packaging system defines it, never as strings.

- Debian (apt/dpkg): python-debian's ``version_compare``, which implements Debian Policy 5.6.12
  (epoch, upstream, revision; ``~`` sorts before anything, so ``1.0~rc1`` < ``1.0``).
- RPM (dnf): ``rpm_compare`` follows rpm's ``rpmvercmp`` (rpmio/rpmvercmp.c) for version and
  release, with the epoch compared first: ``~`` sorts before anything, ``^`` after the end.
- pip: ``packaging``'s PEP 440 versions (local labels ``0.1.0+src.<digest>``).

``Version`` is the driver-facing view used by the judge and the roles: equality means "the
same upstream release" (``570.133.20-0ubuntu1`` is driver 570.133.20, as the kernel module
reports it), ordering follows Debian's rules on the epoch and upstream part.
"""

from __future__ import annotations

import re
from functools import total_ordering

#: Dotted numbers (``570.133.20``): valid Debian versions, each equal only to itself.
_DOTTED = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def deb_compare(a: str, b: str) -> int:
    """-1, 0 or 1 as dpkg orders two Debian versions (``dpkg --compare-versions``).

    The same dotted number is equal to itself without python-debian: the cron health
    check's driver pin is normally met exactly, and importing python-debian (with packaging)
    was ~3 ms of that check. Anything else, an invalid version included (python-debian's
    ValueError), is python-debian's to decide."""
    if a == b and _DOTTED.fullmatch(a):
        return 0
    from debian.debian_support import version_compare

    return int(version_compare(a, b))


def _ascii_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def rpmvercmp(a: str, b: str) -> int:
    """-1, 0 or 1 as rpm orders two version (or release) strings."""
    if a == b:
        return 0
    i = j = 0
    while i < len(a) or j < len(b):
        i, j = _skip_separators(a, i), _skip_separators(b, j)
        order = _tilde_order(a, i, b, j)
        if order is None:
            order = _caret_order(a, i, b, j)
        if order is not None:
            if order:
                return order
            i, j = i + 1, j + 1  # both sides had the same mark
            continue
        if i >= len(a) or j >= len(b):
            break
        order, i, j = _segment_order(a, i, b, j)
        if order:
            return order
    if i >= len(a) and j >= len(b):
        return 0
    return -1 if i >= len(a) else 1


def _skip_separators(text: str, i: int) -> int:
    """Past anything that is not an ASCII letter or digit, ``~`` or ``^``."""
    while i < len(text) and not _ascii_alnum(text[i]) and text[i] not in "~^":
        i += 1
    return i


def _tilde_order(a: str, i: int, b: str, j: int) -> int | None:
    """A tilde sorts before everything, the end included: -1 or 1 when one side is at one,
    0 when both are, None when neither is."""
    a_tilde, b_tilde = i < len(a) and a[i] == "~", j < len(b) and b[j] == "~"
    if not (a_tilde or b_tilde):
        return None
    if not a_tilde:
        return 1
    if not b_tilde:
        return -1
    return 0


def _caret_order(a: str, i: int, b: str, j: int) -> int | None:
    """A caret sorts after the end, before anything else: -1 or 1 when that decides, 0 when
    both sides are at one, None when neither is."""
    a_caret, b_caret = i < len(a) and a[i] == "^", j < len(b) and b[j] == "^"
    if not (a_caret or b_caret):
        return None
    if i >= len(a):
        return -1
    if j >= len(b):
        return 1
    if not a_caret:
        return 1
    if not b_caret:
        return -1
    return 0


def _segment_order(a: str, i: int, b: str, j: int) -> tuple[int, int, int]:
    """Compare the run of digits (or of letters) starting at ``a[i]`` with the one at ``b[j]``:
    (-1, 0 or 1, the end of each run)."""
    numeric = a[i].isdigit()
    kind = str.isdigit if numeric else str.isalpha
    i2, j2 = i, j
    while i2 < len(a) and a[i2].isascii() and kind(a[i2]):
        i2 += 1
    while j2 < len(b) and b[j2].isascii() and kind(b[j2]):
        j2 += 1
    one, two = a[i:i2], b[j:j2]
    if not two:  # segments of different kinds: a number is newer than letters
        return (1 if numeric else -1), i2, j2
    if numeric:
        one, two = one.lstrip("0"), two.lstrip("0")
        if len(one) != len(two):
            return (1 if len(one) > len(two) else -1), i2, j2
    if one != two:
        return (1 if one > two else -1), i2, j2
    return 0, i2, j2


def _split_evr(text: str) -> tuple[int, str, str]:
    epoch, _, rest = text.rpartition(":") if ":" in text else ("0", "", text)
    version, _, release = rest.partition("-")
    return (int(epoch) if epoch.isdigit() else 0), version, release


def rpm_compare(a: str, b: str) -> int:
    """-1, 0 or 1 for two ``[epoch:]version[-release]`` strings; a side without a release
    compares on epoch and version only (as dnf matches ``name-version``)."""
    ea, va, ra = _split_evr(a)
    eb, vb, rb = _split_evr(b)
    if ea != eb:
        return 1 if ea > eb else -1
    result = rpmvercmp(va, vb)
    if result or not ra or not rb:
        return result
    return rpmvercmp(ra, rb)


@total_ordering
class Version:
    """A driver or package version: equality is the same upstream release, order is dpkg's."""

    def __init__(self, text: str) -> None:
        self.text = str(text).strip()
        head = self.text.split("-", 1)[0]
        self.epoch, body = (self.text.split(":", 1) if ":" in head else ("0", self.text))
        upstream, _, revision = body.partition("-")
        self.upstream = upstream
        self.revision = revision
        self.public, _, local = upstream.partition("+")
        self.local = local

    def _ordered(self) -> str:
        return f"{self.epoch}:{self.upstream}" if self.epoch != "0" else self.upstream

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = Version(other)
        # local labels (``+src.<digest>``) name builds: two digests are two builds, even where
        # dpkg's digit rules would read them alike ("01a1" vs "1a01")
        return (isinstance(other, Version) and self.local.lower() == other.local.lower()
                and deb_compare(self.public, other.public) == 0)

    def __lt__(self, other: Version | str) -> bool:
        if isinstance(other, str):
            other = Version(other)
        return deb_compare(self._ordered(), other._ordered()) < 0

    def __hash__(self) -> int:
        return hash(self.local.lower())

    def matches(self, pin: Version | str) -> bool:
        """Whether this installed Python package version satisfies ``==pin`` as pip decides
        (PEP 440): a pin with a local label wants exactly that build; one without
        (``0.1.0``) is met by any local build of that release."""
        from packaging.version import InvalidVersion
        from packaging.version import Version as Pep440

        try:
            have, want = Pep440(self.text), Pep440(str(pin))
        except InvalidVersion:
            return False
        return have == want if want.local else Pep440(have.public) == want


def upstream_of_package(version: str) -> str:
    """``570.133.20-0ubuntu1`` -> ``570.133.20``; ``1:2.0-3`` -> ``2.0``."""
    return Version(version).upstream
