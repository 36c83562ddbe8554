"""The fleet view: ``nodegate report DIR`` over many node reports.

``aggregate`` reduces each report to a cached summary and compares metrics across nodes,
``render`` prints text/JSON, ``html`` writes the self-contained HTML report. Realistic
reports for tests and the benchmark come from ``nodegate_lab.synthetic_fleet`` (the lab's
distribution: no node needs them).
"""

# no re-exports here: importing the CLI module (every nodegate start) must stay light
