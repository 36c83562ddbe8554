"""``python -m nodegate``: the CLI where no console script is installed (a source checkout run
with PYTHONPATH=src, as on a borrowed GPU machine)."""

from nodegate.cli import entry

entry()
