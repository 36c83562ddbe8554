"""The judge decides: it compares probe measurements with the node's profile.

Each function takes typed measurements and a resolved ``Profile`` and returns
``CheckResult`` objects; no threshold is a number in this package.
"""
