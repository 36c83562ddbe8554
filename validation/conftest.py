"""The nodegate validation battery. Run it from a nodegate checkout (the node package ships
the plugin, not these files; on a node without one, ``nodegate validate`` runs the same checks):

    pytest validation/ --nodegate-profile xe9680-h100 [--nodegate-level quick] \
        [--nodegate-checks gpu,log] [--nodegate-report-dir DIR]

The plugin (``nodegate.testing.plugin``) runs the same battery as ``nodegate validate`` once
per session, under the battery lock, and hands each test its check's results on every entity.
Group and level of each check come from ``nodegate.battery.registry``, not from these files.
"""
