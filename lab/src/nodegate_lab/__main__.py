"""``python -m nodegate_lab``: the ``nodegate-lab`` command where no console script is
installed (under sudo with a bare PATH, say)."""

import sys

from nodegate_lab.cli import main

sys.exit(main())
