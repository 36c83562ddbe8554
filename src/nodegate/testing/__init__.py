"""The pytest front end of the battery: ``plugin`` (the ``pytest11`` entry point, which runs
``nodegate.battery.run`` once per session) and ``asserts`` (what each one-line test in
``validation/`` calls to turn its check's results into a pytest outcome)."""
