"""The fleet view: ``nodegate report DIR`` over many node reports.

``aggregate`` reduces each report to a cached summary and compares metrics across nodes,
``render`` prints text/JSON, ``html`` writes the self-contained HTML report, ``synthetic``
makes realistic reports for tests and the benchmark.
"""

# no re-exports here: importing the CLI module (every nodegate start) must stay light
