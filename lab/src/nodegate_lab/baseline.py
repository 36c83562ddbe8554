"""A lab's baseline: the state ``nodegate-lab reset`` puts every host back to.

Each host's root is an overlay (``nodegate_lab.hosts``): shared read-only layers below, the
host's own upper layer on top. ``snapshot`` powers the host off and turns its upper layer into
one more read-only layer (``HOST/baseline``) under a fresh, empty upper; ``reset`` powers it
off and empties the upper again. Both are renames and a delete of what changed since, never a
copy of the host: a deployed node's upper holds hundreds of MB (driver packages, the agent's
venv), and what a test changes after the baseline is small.

Everything a host writes lives in its upper layer: installed packages, /etc, Slurm's saved
state on the controller (node states and reasons), logs. The rest is made afresh by the boot
that follows: the simulated board (its faults), /run. The node's disks are loop files outside
the overlay and keep their contents (the roles never recreate a filesystem that holds data).

``shape.json`` in the lab dir records what the last ``up`` was asked for (nodes, faults,
scenario, mirror); ``snapshot`` copies it to ``baseline-shape.json``, so a reset brings back the
baseline's lab with the faults it is given.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nodegate.errors import CannotRunError
from nodegate_lab import config
from nodegate_lab.config import Member

LAYER = "baseline"
#: What the last ``up`` made, and what the lab was when its baseline was taken (``reset``
#: brings back the latter, even after an ``up`` changed the lab since).
SHAPE, BASELINE_SHAPE = "shape.json", "baseline-shape.json"


def write_shape(shape: dict[str, object], name: str = SHAPE) -> None:
    """Record the lab's shape (``up`` after every bring-up, ``snapshot`` for the baseline)."""
    path = config.lab_dir() / name
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(shape, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def read_shape(name: str = SHAPE) -> dict[str, object]:
    """A recorded shape; fails loudly, naming the file, when it was not recorded."""
    path = config.lab_dir() / name
    try:
        shape = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CannotRunError(f"the lab's shape is not recorded ({exc}); run "
                             "`nodegate-lab up` again", file=str(path)) from exc
    if not isinstance(shape, dict) or not {"nodes", "faults", "scenario",
                                           "with_mirror"} <= set(shape):
        raise CannotRunError("the lab's shape record lacks nodes/faults/scenario/with_mirror",
                             file=str(path))
    return shape


def has(member: Member) -> bool:
    """True when the host has a baseline layer."""
    return (member.dir / LAYER).is_dir()


def layers(member: Member) -> list[Path]:
    """The host's baseline as overlay lower layers (top first): none before ``snapshot``."""
    return [member.dir / LAYER] if has(member) else []


def _fresh_upper(member: Member) -> None:
    """An empty upper and work dir (overlayfs wants the work dir empty, on the same fs)."""
    for name in ("upper", "work"):
        shutil.rmtree(member.dir / name, ignore_errors=True)
        if (member.dir / name).exists():
            raise CannotRunError(f"could not remove {member.dir / name}", host=member.name)
        (member.dir / name).mkdir()


def _check_down(member: Member) -> None:
    """Layers change only under a host that is off and unmounted (overlayfs's rule)."""
    from nodegate_lab import hosts

    root = member.dir / "root"
    if hosts.supervisor_pid(member) is not None or hosts.mounted(root):
        raise CannotRunError("still running or mounted: its layers cannot change",
                             host=member.name, file=str(root))


def take(member: Member) -> None:
    """The host's upper layer becomes its baseline (host off and unmounted)."""
    _check_down(member)
    if has(member):
        raise CannotRunError("already has a baseline", host=member.name)
    (member.dir / "upper").rename(member.dir / LAYER)
    _fresh_upper(member)


def drop_changes(member: Member) -> None:
    """Drop what the host wrote since its baseline (host off and unmounted)."""
    _check_down(member)
    if not has(member):
        raise CannotRunError("has no baseline to go back to", host=member.name)
    _fresh_upper(member)
