"""nodegate's pyinfra roles: one module per component, one public ``@deploy`` each.

Run them all with ``pyinfra inventory.py deploy.py``, or one alone with
``pyinfra inventory.py roles/nccl.py`` (or ``roles.nccl.nccl``). Knob defaults: roles/defaults.py.
"""
