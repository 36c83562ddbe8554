"""``python -m nodegate``: the CLI where no console script is installed (a source checkout run
with PYTHONPATH=src, as on a borrowed GPU machine)."""

import gc

_collector = gc.isenabled()
gc.disable()  # the start-up without the collector, from the first import (cli.entry says why)

from nodegate.cli import entry  # noqa: E402

entry(collector=_collector)
