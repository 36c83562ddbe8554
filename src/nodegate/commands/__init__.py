"""Subcommand modules of the ``nodegate`` CLI (registered explicitly in ``nodegate.cli``)."""
