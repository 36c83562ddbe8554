"""Files on the node: nodegate's templates, plain text and secrets, each compared before it is
written (pyinfra's ``operations/files.py`` holds the stock ones these build on)."""

from __future__ import annotations

from collections.abc import Generator
from io import BytesIO, StringIO
from pathlib import Path
from typing import Any

import jinja2
from pyinfra.api.command import FileUploadCommand
from pyinfra.api.operation import operation
from pyinfra.api.util import get_file_sha1
from pyinfra.context import host
from pyinfra.facts.files import File, Sha1File
from pyinfra.operations import files

from roles.ops.common import TEMPLATES, cmd, q


def jinja_env() -> dict[str, Any]:
    """jinja2 settings for pyinfra's ``files.template`` on nodegate's templates.

    Its own environment already renders with StrictUndefined (a missing value stops the host
    with the template's line, never an empty string in a config file), keeps the trailing
    newline and does not autoescape; these add block trimming, which the templates are written
    for, and templates/ for includes. A new dict each call: pyinfra pops the loader out of it.
    """
    return {"trim_blocks": True, "lstrip_blocks": True,
            "loader": jinja2.FileSystemLoader(str(TEMPLATES))}


def put_template(name: str, src: str, dest: str, mode: str = "644", **values: Any) -> Any:
    """pyinfra's ``files.template`` for templates/<src>, with nodegate's jinja settings and a
    mode always set (pyinfra leaves an existing file's mode alone without one)."""
    return files.template(name=name, src=str(TEMPLATES / src), dest=dest, mode=mode,
                          jinja_env_kwargs=jinja_env(), **values)


@operation()
def put_text(dest: str, text: str, mode: str = "644") -> Generator[Any, None, None]:
    """Write ``text`` to ``dest`` when it differs (pyinfra's put: compared by checksum)."""
    yield from files.put._inner(src=StringIO(text), dest=dest, mode=mode)


@operation()
def put_secret(dest: str, text: str | bytes, owner: str = "root",
               mode: str = "600") -> Generator[Any, None, None]:
    """Write a credentials file (``owner``, ``mode``: root 0600 by default; munge's key is
    munge 0400) compared by checksum only: unlike files.put it never prints a diff, so
    ``--diff`` cannot leak the secret into a terminal or CI log."""
    local = BytesIO(text) if isinstance(text, bytes) else StringIO(text)
    remote_sum = host.get_fact(Sha1File, path=dest)
    if remote_sum and remote_sum == get_file_sha1(local):
        remote: dict[str, Any] = dict(host.get_fact(File, path=dest) or {})
        if remote.get("mode") == int(mode) and remote.get("user") == owner:
            host.noop(f"{dest} up to date ({owner} 0{mode})")
            return
    else:
        yield cmd("install", "-d", "-m", "0755", q(str(Path(dest).parent)))
        yield cmd("install", "-m", f"0{mode}", "-o", q(owner), "-g", q(owner), "/dev/null",
                  q(dest))
        yield FileUploadCommand(local, dest, remote_temp_filename=host.get_temp_filename(dest))
    yield cmd("chown", q(f"{owner}:{owner}"), q(dest))
    yield cmd("chmod", q(mode), q(dest))


__all__ = ["jinja_env", "put_secret", "put_template", "put_text"]
