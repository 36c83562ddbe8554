"""``ib_write_bw`` (linux-rdma/perftest) per rail: run it, bounded in time, and parse its table.

perftest prints a banner (test name, ``Device``, ``Link type``, QPs), the local and remote
queue-pair lines, then one table: ``#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec]
MsgRate[Mpps]`` with one row per size, closed by a dashed line. With ``--use_cuda`` it first
prints its CUDA set-up (``initializing CUDA``, ``device name = [...]``). A failed run prints
``Completion with error``, ``Failed status``, ``Couldn't ...`` lines, sometimes after rows (a
run that dies mid-sweep still printed its small sizes): such a run is an error, whatever rows
came before. We always pass ``--report_gbits`` (decimal Gb/s, the unit rates are quoted in);
a table in MB/sec is refused rather than converted with a guessed MB.

The server side serves one client and exits. Loopback (both sides on this node, as Azure's
azurehpc-health-checks ``check_ib_bw_gdr`` does) and a pair with a known-good peer use the same
code: the server here or there, the client retrying its connection until a deadline.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from nodegate.errors import CannotRunError

TOOL = "ib_write_bw"
#: Where the tool comes from: the distribution package on Debian/Ubuntu and RHEL alike.
PACKAGE = "perftest"
#: perftest's default TCP port for its out-of-band exchange.
DEFAULT_TCP_PORT = 18515

_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+"
                     r"BW average\[(?P=unit)\]\s+MsgRate\[Mpps\]\s*$")
_ROW = re.compile(r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>\d+(?:\.\d+)?)\s+"
                  r"(?P<avg>\d+(?:\.\d+)?)\s+(?P<rate>\d+(?:\.\d+)?)\s*$")
_DASHES = re.compile(r"^\s*-{20,}\s*$")
_FIELD = re.compile(r"(Device|Link type|Number of qps)\s*:\s*(\S+)")
#: Lines perftest prints on failure (perftest's own messages).
_FAILED = re.compile(r"Completion with error|Failed status|Failed to|Couldn't|Unable to|"
                     r"ERROR|Error:|failed to|Segmentation fault")
#: Lines it may print inside the table that are not results.
_NOISE = re.compile(r"Conflicting CPU frequency|^\s*WARNING|^\s*$")


class PerftestParseError(ValueError):
    """The output did not have the shape perftest prints; names the tool and the line."""

    def __init__(self, tool: str, line_no: int | None, line: str, why: str) -> None:
        where = f"line {line_no}" if line_no is not None else "output"
        super().__init__(f"{tool}: {why} ({where}: {line.strip()[:160]!r})")
        self.tool, self.line_no, self.line = tool, line_no, line


@dataclass(frozen=True)
class BwRow:
    bytes: int
    iterations: int
    peak_gbps: float
    average_gbps: float
    msg_rate_mpps: float


@dataclass
class BwResult:
    tool: str
    device: str | None
    link_type: str | None
    qps: int | None
    rows: list[BwRow]
    cuda_device: str | None = None  # "device name = [NVIDIA H200]" with --use_cuda

    @property
    def top(self) -> BwRow:
        """The largest size's row: the one a floor judges."""
        return max(self.rows, key=lambda r: r.bytes)


def parse_bw(text: str, tool: str = TOOL) -> BwResult:
    """Parse one side's output; PerftestParseError names the line when it is not a result."""
    lines = text.splitlines()
    for no, line in enumerate(lines, 1):
        if _FAILED.search(line):
            raise PerftestParseError(tool, no, line, "the run reported a failure")
    fields, cuda, header = _banner(lines, tool)
    rows = _rows(lines, header, tool)
    qps = fields.get("Number of qps")
    return BwResult(tool, fields.get("Device"), fields.get("Link type"),
                    int(qps) if qps and qps.isdigit() else None, rows, cuda)


def _banner(lines: list[str], tool: str) -> tuple[dict[str, str], str | None, int]:
    """The banner's fields, the CUDA device name, and the table header's line number."""
    fields: dict[str, str] = {}
    cuda = None
    for no, line in enumerate(lines, 1):
        for key, value in _FIELD.findall(line):
            fields.setdefault(key, value)
        if "device name = [" in line:
            cuda = line.split("device name = [", 1)[1].rstrip("]\r\n ")
        if "#bytes" not in line:
            continue
        match = _HEADER.match(line)
        if match is None:
            raise PerftestParseError(tool, no, line, "not a bandwidth table header")
        if match.group("unit") != "Gb/sec":
            raise PerftestParseError(tool, no, line, f"table in {match.group('unit')}, "
                                                     "not Gb/sec (run with --report_gbits)")
        return fields, cuda, no
    raise PerftestParseError(tool, None, "\n".join(lines)[-200:], "no result table")


def _rows(lines: list[str], header: int, tool: str) -> list[BwRow]:
    rows: list[BwRow] = []
    for no in range(header + 1, len(lines) + 1):
        line = lines[no - 1]
        if _DASHES.match(line):
            if not rows:
                raise PerftestParseError(tool, header, lines[header - 1], "a table with no rows")
            return rows
        if _NOISE.search(line):
            continue
        match = _ROW.match(line)
        if match is None:
            raise PerftestParseError(tool, no, line, "not a result row")
        rows.append(BwRow(int(match["bytes"]), int(match["iters"]), float(match["peak"]),
                          float(match["avg"]), float(match["rate"])))
    raise PerftestParseError(tool, len(lines), lines[-1] if lines else "",
                             "the table never ended (output cut short)")


def require_tool(tool: str = TOOL) -> str:
    """The tool's path; exit 3 (CannotRunError) naming the package when it is missing."""
    path = shutil.which(tool)
    if path is None:
        raise CannotRunError(f"{tool} is not installed: install the {PACKAGE} package "
                             f"(apt/dnf install {PACKAGE}; the network role installs it)")
    return path


@dataclass(frozen=True)
class BwSpec:
    """One ``ib_write_bw`` side. ``server`` None: this is the server; else the client dials it."""

    device: str
    port: int = 1
    size: int = 8 << 20  # 8 MiB, the size AzNHC's GPUDirect check judges
    duration_s: int = 5
    tcp_port: int = DEFAULT_TCP_PORT
    cuda_index: int | None = None
    server: str | None = None
    gid_index: int | None = None
    extra: tuple[str, ...] = field(default_factory=tuple)

    def argv(self, tool_path: str) -> list[str]:
        argv = [tool_path, "-d", self.device, "-i", str(self.port), "-p", str(self.tcp_port),
                "-s", str(self.size), "-D", str(self.duration_s), "-F", "--report_gbits"]
        if self.gid_index is not None:
            argv += ["-x", str(self.gid_index)]
        if self.cuda_index is not None:
            argv.append(f"--use_cuda={self.cuda_index}")
        return [*argv, *self.extra, *([self.server] if self.server else [])]


@dataclass
class BwOutcome:
    ok: bool
    result: BwResult | None
    error: str | None
    output: str
    duration_s: float


def _run(argv: list[str], deadline: float) -> tuple[int | None, str]:
    """Run to the end or the deadline (then the whole session is killed): (exit, output)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        return proc.returncode, out or ""
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out or ""


def listening(tcp_port: int, proc_net: str = "/proc/net/tcp") -> bool:
    """Is something listening on ``tcp_port``? (A probe connection would use up the perftest
    server's one client, so the socket table is read instead.)"""
    for table in (proc_net, proc_net + "6"):
        with contextlib.suppress(OSError):
            for line in open(table).read().splitlines()[1:]:  # noqa: SIM115
                parts = line.split()
                if len(parts) > 3 and parts[3] == "0A" and \
                        int(parts[1].rsplit(":", 1)[1], 16) == tcp_port:
                    return True
    return False


def run_client(spec: BwSpec, timeout_s: float, tool: str = TOOL) -> BwOutcome:
    """The client side: dial ``spec.server`` until it answers (its server may start later)
    or ``timeout_s`` passes, then parse. A peer that never answers is an error, not a hang."""
    path = require_tool(tool)
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    output = ""
    while True:
        code, output = _run(spec.argv(path), deadline)
        if code is None:
            return BwOutcome(False, None, f"{tool} did not finish within {timeout_s:g} s",
                             output, time.monotonic() - t0)
        if code == 0 or "Couldn't connect" not in output or time.monotonic() >= deadline - 1:
            break
        time.sleep(1.0)  # the server is not up yet
    return _outcome(code, output, t0, tool, timeout_s)


def run_server(spec: BwSpec, timeout_s: float, tool: str = TOOL) -> BwOutcome:
    path = require_tool(tool)
    t0 = time.monotonic()
    code, output = _run(spec.argv(path), t0 + timeout_s)
    if code is None:
        return BwOutcome(False, None, f"no client came to {tool} on TCP port {spec.tcp_port} "
                         f"within {timeout_s:g} s", output, time.monotonic() - t0)
    return _outcome(code, output, t0, tool, timeout_s)


def run_loopback(spec: BwSpec, timeout_s: float, tool: str = TOOL) -> BwOutcome:
    """Server and client on this node over the same HCA port (the HCA loops the traffic
    back: it exercises the NIC, its PCIe link and, with ``cuda_index``, GPUDirect)."""
    path = require_tool(tool)
    t0 = time.monotonic()
    server = subprocess.Popen(spec.argv(path), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        while not listening(spec.tcp_port) and server.poll() is None and \
                time.monotonic() < t0 + min(timeout_s, 15.0):
            time.sleep(0.1)
        client = BwSpec(**{**spec.__dict__, "server": "localhost"})
        outcome = run_client(client, max(1.0, timeout_s - (time.monotonic() - t0)), tool)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.pid, signal.SIGKILL)
        server.communicate()
    return outcome


def _outcome(code: int, output: str, t0: float, tool: str, timeout_s: float) -> BwOutcome:
    took = time.monotonic() - t0
    try:
        result = parse_bw(output, tool)
    except PerftestParseError as exc:
        if "Couldn't connect" in output:
            return BwOutcome(False, None, f"the peer did not answer {tool} within "
                             f"{timeout_s:g} s ({exc})", output, took)
        return BwOutcome(False, None, str(exc), output, took)
    if code != 0:
        return BwOutcome(False, result, f"{tool} exited {code}", output, took)
    return BwOutcome(True, result, None, output, took)
