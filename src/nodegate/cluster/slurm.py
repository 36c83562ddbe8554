"""The Slurm adapter: ``scontrol``/``sinfo`` (Slurm 22.05 and later), argv lists only.

Why the CLI tools rather than slurmrestd: they are on every Slurm node and bastion, need no
token, and their machine-readable output (``sinfo -O``, ``scontrol show node -o``) is stable
across releases. Every call is idempotent: the node is read first and an update is only sent
when it would change something. When the controller cannot be reached the call is retried a
bounded number of times with exponential backoff, then a CannotRunError names the controller;
a failed call never leaves a half-applied state, because the one update is the only write.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from nodegate.cluster.holds import Raced, same_hold
from nodegate.cluster.reasons import clean_reason
from nodegate.cluster.scheduler import Change, NodeState
from nodegate.errors import CannotRunError, ConfigError
from nodegate.fileio import read_bytes

#: Signs in a client's stderr that the controller, not the request, is the problem.
UNREACHABLE_MARKERS = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "connect failure",
    "zero bytes were transmitted",
    "communication connection failure",
    "slurm backup controller in standby mode",
    "timed out after",
)

#: Messages meaning the node name is unknown (ConfigError, not retried).
UNKNOWN_NODE_MARKERS = ("not found", "invalid node name specified")

#: A single node name, never a hostlist (``ng[1-3]``, ``a,b``): one call must touch one node.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

#: sinfo state suffix characters (``man sinfo``, NODE STATE CODES) -> scontrol flag names.
STATE_SUFFIXES = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}


_T = TypeVar("_T")

Runner = Callable[[Sequence[str], Mapping[str, str], float], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: ``attempts`` tries in all, sleeping ``initial_delay_s * factor**k``
    (capped) between them. Each scontrol try itself gives up on a dead controller after
    about slurm.conf's ``MessageTimeout`` (default 10 s), so the default bound is about
    3 x 10 s + 1 s + 2 s = 33 s; with ``MessageTimeout=3``, about 12 s."""

    attempts: int = 3
    initial_delay_s: float = 1.0
    factor: float = 2.0
    max_delay_s: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"retry attempts must be >= 1, got {self.attempts}")

    def delays(self) -> list[float]:
        """The sleeps between tries (one fewer than ``attempts``)."""
        return [
            min(self.max_delay_s, self.initial_delay_s * self.factor**index)
            for index in range(self.attempts - 1)
        ]


def _default_runner(
    argv: Sequence[str], env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, env=dict(env), timeout=timeout, check=False
    )


class SlurmScheduler:
    """``Scheduler`` over scontrol/sinfo.

    ``conf`` sets ``SLURM_CONF`` for the clients (a test cluster, a second cluster); without it
    the clients use their own default. ``controller`` names the controller in errors; by
    default it is read from ``SlurmctldHost``/``SlurmctldPort`` in that slurm.conf.
    """

    name = "slurm"

    def __init__(
        self,
        *,
        conf: str | os.PathLike[str] | None = None,
        controller: str | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        runner: Runner | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.conf = Path(conf) if conf is not None else None
        self._controller = controller
        self.bin_dir = Path(bin_dir) if bin_dir is not None else None
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self._runner = runner or _default_runner
        self._sleep = sleep

    # --- the Scheduler interface -----------------------------------------------------------

    def nodes(self) -> list[NodeState]:
        argv = [self._bin("sinfo"), "-a", "-N", "-h", "-O", "NodeList:|,StateComplete:|,Reason:0"]
        return self._asked(argv, "list nodes", None,
                           lambda out: _nonempty(out, parse_sinfo, "no nodes"))

    def state(self, node: str) -> NodeState:
        """One node's state, verified to be an answer about ``node`` (``verify_show``):
        empty, garbled or another node's answer is retried, then "could not ask" (exit 3)."""
        _check_node(node)
        argv = [self._bin("scontrol"), "show", "node", "-o", node]
        return self._asked(argv, "read", node, lambda out: verify_show(out, node))

    def _asked(self, argv: list[str], what: str, node: str | None,
               parse: Callable[[str], _T]) -> _T:
        """``_run`` and ``parse``, where an answer ``parse`` refuses (``Unanswered``) is
        asked again within the retry policy, then a CannotRunError naming what came back."""
        delays = self.retry.delays()
        last = ""
        for attempt in range(self.retry.attempts):
            out = self._run(argv, what=what, node=node)
            try:
                return parse(out)
            except Unanswered as exc:
                last = exc.message
            if attempt < len(delays):
                self._sleep(delays[attempt])
        raise CouldNotAsk(f"could not ask {self._where()} ({what}"
                             f"{' ' + node if node else ''}): {last} "
                             f"({self.retry.attempts} tries); no state was changed", host=node)

    def drain(self, node: str, reason: str, *, expect: NodeState | None = None) -> Change:
        reason = clean_reason(reason)
        before = self._before(node, expect, "drained")
        if before.drained and before.reason == reason:
            return Change(node, "drain", False, before, before)
        self._update(node, "State=DRAIN", f"Reason={reason}")
        after = self.state(node)
        if not after.drained:
            raise CannotRunError(
                f"drain sent to {self._where()} but the node is {after.describe()}", host=node
            )
        if expect is not None and after.reason != reason:
            raise Raced(f"{node} shows {after.describe()} right after nodegate's drain with "
                        f"'{reason}': someone else changed it meanwhile; left as it is",
                        host=node)
        return Change(node, "drain", True, before, after)

    def resume(self, node: str, *, expect: NodeState | None = None) -> Change:
        before = self._before(node, expect, "resumed")
        if before.available:
            return Change(node, "resume", False, before, before)
        self._update(node, "State=RESUME")
        after = self.state(node)
        if after.drained:
            raise CannotRunError(
                f"resume sent to {self._where()} but the node is {after.describe()}", host=node
            )
        return Change(node, "resume", True, before, after)

    def _before(self, node: str, expect: NodeState | None, verb: str) -> NodeState:
        """The read right before an update; with ``expect`` (the decision's read) a change
        since is ``Raced``: the node is left as it is now."""
        before = self.state(node)
        if expect is not None and not same_hold(before, expect):
            raise Raced(f"{node} changed since the decision's read (was {expect.describe()}, "
                        f"now {before.describe()}): left as it is, not {verb}", host=node)
        return before

    def partition_nodes(self, partition: str) -> list[NodeState]:
        """Every node of ``partition`` with its reason's time. An empty or garbled answer is
        asked again, then "could not ask" (exit 3): the drain budget reads partitions the
        node's own record names, and an empty list must never count as room to drain. Only
        where ``scontrol show partition`` then says the partition does not exist is it bad
        input (exit 2)."""
        _check_node(partition)
        argv = [self._bin("sinfo"), "-N", "-h", "-p", partition, "-O",
                "NodeList:|,StateComplete:|,Timestamp:|,Reason:0"]
        try:
            return self._asked(argv, f"list partition {partition}", None,
                               lambda out: _nonempty(out, parse_sinfo_timed,
                                                     f"no nodes in partition {partition!r}"))
        except CouldNotAsk:
            try:
                self._run([self._bin("scontrol"), "show", "partition", "-o", partition],
                          what=f"read partition {partition}", node=partition)
            except ConfigError:
                raise ConfigError(f"partition {partition!r} is not known to "
                                  f"{self._where()}", key="partition") from None
            raise

    def set_comment(self, node: str, comment: str | None, *,
                    expect: NodeState | None = None) -> Change:
        text = clean_reason(comment) if comment else None
        before = self.state(node)
        if expect is not None and before.comment != expect.comment:
            raise Raced(f"{node}'s comment changed since it was read (was {expect.comment!r}, "
                        f"now {before.comment!r}): left as it is", host=node)
        if before.comment == text:
            return Change(node, "comment", False, before, before)
        self._update(node, f"Comment={text or ''}")
        after = self.state(node)
        return Change(node, "comment", True, before, after)

    def node_address(self, node: str) -> str:
        """The address Slurm reaches ``node`` at (``NodeAddr``; the name when none is set):
        where a pair's other node dials its rendezvous."""
        _check_node(node)

        def address(out: str) -> str:
            verify_show(out, node)  # an answer about another node is no address of this one
            match = re.search(r"(?:^|\s)NodeAddr=(\S+)", out)
            return match.group(1) if match else node

        return self._asked([self._bin("scontrol"), "show", "node", "-o", node], "read", node,
                           address)

    # --- jobs (the sweep) -------------------------------------------------------------------

    def queue(self, fmt: str) -> str:
        """``squeue -h -o FMT`` over every job the controller holds (retried: a read)."""
        return self._run([self._bin("squeue"), "-h", "-o", fmt], what="list jobs")

    def submit(self, options: Sequence[str], wrap: str) -> str:
        """``sbatch OPTIONS --wrap WRAP``'s output, tried once: a retry after a lost answer
        could queue the same job twice (callers find their jobs by name instead)."""
        return self._run([self._bin("sbatch"), *options, f"--wrap={wrap}"], what="submit a job",
                         attempts=1, unanswered="the job may or may not be queued")

    # --- plumbing ----------------------------------------------------------------------------

    def _update(self, node: str, *fields: str) -> None:
        argv = [self._bin("scontrol"), "update", f"NodeName={node}", *fields]
        self._run(argv, what="update", node=node)

    def _bin(self, name: str) -> str:
        if self.bin_dir is not None:
            return str(self.bin_dir / name)
        return shutil.which(name) or name

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        return env

    def controller(self) -> str:
        """``host:port (from FILE)`` for messages; best effort, never raises."""
        if self._controller:
            return self._controller
        conf = self.conf or Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
        host, port = controller_from_conf(conf)
        if host is None:
            return f"the Slurm controller (no SlurmctldHost in {conf})"
        return f"{host}:{port} (from {conf})"

    def _where(self) -> str:
        return f"slurmctld {self.controller()}"

    def _run(self, argv: list[str], *, what: str, node: str | None = None,
             attempts: int | None = None, unanswered: str = "no state was changed") -> str:
        tries = self.retry.attempts if attempts is None else attempts
        delays = self.retry.delays()
        started = time.monotonic()
        last = ""
        for attempt in range(tries):
            try:
                proc = self._runner(argv, self._env(), self.timeout_s)
            except FileNotFoundError:
                raise CannotRunError(
                    f"{argv[0]} not found: install the Slurm client tools (slurm-client)",
                    host=node,
                ) from None
            except subprocess.TimeoutExpired:
                last = f"{Path(argv[0]).name} timed out after {self.timeout_s:g} s"
            else:
                if proc.returncode == 0:
                    return proc.stdout
                last = " ".join((proc.stderr or proc.stdout or "").split()) or (
                    f"exit status {proc.returncode}"
                )
                lowered = last.lower()
                if not any(marker in lowered for marker in UNREACHABLE_MARKERS):
                    if node is not None and any(m in lowered for m in UNKNOWN_NODE_MARKERS):
                        raise ConfigError(
                            f"node {node!r} is not known to {self._where()}: {last}", host=node
                        )
                    raise CannotRunError(f"{what} failed at {self._where()}: {last}", host=node)
            if attempt < min(len(delays), tries - 1):
                self._sleep(delays[attempt])
        elapsed = time.monotonic() - started
        raise CannotRunError(
            f"{self._where()} unreachable: {what} failed "
            f"{'once' if tries == 1 else f'{tries} times'} in "
            f"{elapsed:.1f} s ({last}); {unanswered}",
            host=node,
        )


# --- parsing (pure, tested against captured 22.05 output) --------------------------------------


class CouldNotAsk(CannotRunError):
    """Asked within the retry policy and never answered about what was asked (exit 3)."""


class Unanswered(CannotRunError):
    """An answer that is no answer to the question: empty, garbled, or about another node.
    "Could not ask" (exit 3), never bad input and never a verdict about a node."""


def verify_show(out: str, node: str) -> NodeState:
    """The one ``scontrol show node -o NODE`` answer about ``node``: exactly one line naming
    it; an empty answer, a garbled one or one naming another node is ``Unanswered``."""
    lines = [line for line in out.splitlines() if line.strip()]
    if not lines:
        raise Unanswered("an empty answer", host=node)
    try:
        states = [parse_show_node(line) for line in lines]
    except CannotRunError as exc:
        raise Unanswered(exc.message, host=node) from None
    named = {s.node for s in states}
    if named != {node}:
        raise Unanswered(f"an answer about {', '.join(sorted(named))}, not {node}", host=node)
    return states[0]


def _nonempty(out: str, parse: Callable[[str], list[NodeState]],
              empty: str) -> list[NodeState]:
    """``parse(out)``, where nothing listed or a garbled line is ``Unanswered``."""
    try:
        nodes = parse(out)
    except Unanswered:
        raise
    except CannotRunError as exc:
        raise Unanswered(exc.message) from None
    if not nodes:
        raise Unanswered(f"an empty answer ({empty})")
    return nodes


def _check_node(node: str) -> None:
    if not NODE_NAME.fullmatch(node):
        raise ConfigError(
            f"{node!r} is not a single node name (hostlists and spaces are refused)", host=node
        )


def parse_state(token: str) -> tuple[str, frozenset[str]]:
    """``IDLE+DRAIN`` / ``idle+drain`` / ``down*`` -> (``idle``, {``DRAIN``}) etc."""
    parts = [part for part in token.strip().split("+") if part]
    if not parts:
        return "unknown", frozenset()
    flags: set[str] = set()
    words: list[str] = []
    for part in parts:
        word = part
        while word and word[-1] in STATE_SUFFIXES:
            flags.add(STATE_SUFFIXES[word[-1]])
            word = word[:-1]
        if word:
            words.append(word)
    base = words[0].lower() if words else "unknown"
    flags.update(word.upper() for word in words[1:])
    if base in {"drained", "draining", "drain"}:
        flags.add("DRAIN")
    return base, frozenset(flags)


def is_drained(token: str) -> bool:
    """Drained, not draining: ``IDLE+DRAIN``/``DOWN+DRAIN`` (scontrol) or ``DRAINED`` (sinfo);
    ``MIXED+DRAIN``/``ALLOCATED+DRAIN`` still run jobs. The one reading of a state token the
    roles, the deploy entry points and the gate share."""
    base, flags = parse_state(token)
    return bool(flags & {"DRAIN", "DRAINED"}) and base in ("idle", "down", "drained")


_REASON_STAMP = re.compile(r" \[[^\[\]\s@]+@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\]")


def _reason_or_none(text: str) -> str | None:
    text = text.strip()
    return None if text in {"", "none", "(null)"} else text


def parse_show_node(line: str) -> NodeState:
    """One line of ``scontrol show node -o``.

    Values may hold spaces (``OS=Linux 6.1 #1 SMP ...``), so fields are found by anchored key
    patterns, not by splitting. ``Reason=`` runs to Slurm's `` [user@time]`` stamp; 22.05
    prints ``Comment=`` just before it (only when set), so a comment runs to `` Reason=`` or
    the end of the line.
    """
    name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
    state = re.search(r"\sState=(\S+)", line)
    if name is None or state is None:
        raise CannotRunError(f"unexpected scontrol output: {line[:200]!r}")
    base, flags = parse_state(state.group(1))
    reason: str | None = None
    reason_time: dt.datetime | None = None
    start = line.find(" Reason=")
    if start >= 0:
        rest = line[start + len(" Reason=") :]
        stamp = _REASON_STAMP.search(rest)
        reason = _reason_or_none(rest[: stamp.start()] if stamp else rest)
        if stamp:
            reason_time = parse_slurm_time(stamp.group().rsplit("@", 1)[1].rstrip("]"))
    comment: str | None = None
    begin = line.find(" Comment=")
    if begin >= 0:
        text = line[begin + len(" Comment=") : start if start > begin else None]
        comment = _reason_or_none(text)
    parts = re.search(r"\sPartitions=(\S+)", line)
    partitions = tuple(p for p in parts.group(1).split(",") if p) if parts else ()
    return NodeState(node=name.group(1), state=base, flags=flags, reason=reason,
                     reason_time=reason_time, comment=comment, partitions=partitions)


def parse_slurm_time(text: str) -> dt.datetime | None:
    """``2026-12-05T07:06:00`` (Slurm's ISO form, the controller's local time) or None for
    ``Unknown``/``None``/anything else."""
    try:
        return dt.datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None


def parse_sinfo(text: str) -> list[NodeState]:
    """``sinfo -N -h -O NodeList:|,StateComplete:|,Reason:0``; a node in several partitions
    is listed once per partition by sinfo and once here."""
    seen: dict[str, NodeState] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 2)
        if len(parts) != 3:
            raise CannotRunError(f"unexpected sinfo output: {line[:200]!r}")
        name, state, reason = (part.strip() for part in parts)
        base, flags = parse_state(state)
        seen.setdefault(name, NodeState(name, base, flags, _reason_or_none(reason)))
    return list(seen.values())


def parse_sinfo_timed(text: str) -> list[NodeState]:
    """``sinfo -N -h -p PART -O NodeList:|,StateComplete:|,Timestamp:|,Reason:0``: one
    partition's nodes with the time of each drain reason (the drain budget orders by it)."""
    seen: dict[str, NodeState] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 3)
        if len(parts) != 4:
            raise CannotRunError(f"unexpected sinfo output: {line[:200]!r}")
        name, state, stamp, reason = (part.strip() for part in parts)
        base, flags = parse_state(state)
        seen.setdefault(name, NodeState(name, base, flags, _reason_or_none(reason),
                                        reason_time=parse_slurm_time(stamp)))
    return list(seen.values())


def controller_from_conf(conf: Path) -> tuple[str | None, int]:
    """(host, port) of the primary controller from slurm.conf; (None, 6817) when unknown."""
    host: str | None = None
    port = 6817
    try:
        text = read_bytes(conf, kind="config").decode("utf-8", errors="replace")
    except (OSError, ConfigError):
        return None, port
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip().lower()
        value = value.strip()
        if key in {"slurmctldhost", "controlmachine"} and host is None:
            host = value.split("(", 1)[0].strip() or None
        elif key == "slurmctldport":
            match = re.match(r"\d+", value)
            if match:
                port = int(match.group())
    return host, port
