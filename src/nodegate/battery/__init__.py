"""The validation battery: the engine that runs probes and the judge, and the pytest plugin."""
