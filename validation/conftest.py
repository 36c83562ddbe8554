"""The nodegate validation battery. Run it on a node with:

    pytest validation/ --nodegate-profile xe9680-h100 [--nodegate-level quick] \
        [--nodegate-checks gpu,log] [--nodegate-report-dir DIR]

The plugin (``nodegate.battery.plugin``) measures once, judges against the profile and
parametrizes each test below with one result per entity.
"""
