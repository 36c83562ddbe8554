"""The nodegate validation battery. Run it on a node with:

    pytest validation/ --nodegate-profile xe9680-h100 [--nodegate-level quick] \
        [--nodegate-checks gpu,log] [--nodegate-report-dir DIR]

The plugin (``nodegate.battery.plugin``) runs the same battery as ``nodegate validate`` once
per session, under the battery lock, and hands each test its check's results on every entity.
Group and level of each check come from ``nodegate.battery.registry``, not from these files.
"""
