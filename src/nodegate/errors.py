"""One error base class for everything nodegate reports to an operator.

Every error knows which exit code it maps to and where it came from (file, host, key), so the
CLI prints one line that says exactly what to fix, never a traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Documented, stable process exit codes (docs/exit-codes.md)."""

    PASSED = 0  # every check passed (warnings allowed)
    FAILED = 1  # at least one check failed
    BAD_INPUT = 2  # bad input or configuration: nothing was run
    CANNOT_RUN = 3  # could not run (lock held, missing dependency); NVML down is a result (1)


class NodegateError(Exception):
    """Base of every error meant for an operator; carries its location and exit code."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        host: str | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.host = host
        self.key = key

    def __str__(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file))
        if self.host:
            where.append(f"host {self.host}")
        if self.key:
            where.append(f"key {self.key}")
        prefix = ": ".join([", ".join(where)]) + ": " if where else ""
        return f"{prefix}{self.message}"


class ConfigError(NodegateError):
    """Bad profile, site file, scenario or argument. Exit 2."""

    exit_code = ExitCode.BAD_INPUT


class CannotRunError(NodegateError):
    """The environment prevents running (lock held, not root, a missing dependency). Exit 3."""

    exit_code = ExitCode.CANNOT_RUN
