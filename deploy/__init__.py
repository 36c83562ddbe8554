"""pyinfra entry points beside deploy.py, and the gate deploys deploy.py imports.

A package so deploy.py and upgrade_driver.py import ``deploy.validate`` and friends without
sys.path edits: pyinfra puts the directory it runs in on sys.path, so run it from the checkout
(``pyinfra inventory.py deploy/join.py``). A package directory wins over ``deploy.py`` there, so
``import deploy`` is this package; pyinfra runs deploy.py by path, never imports it.
"""
