"""The cyclic garbage collector paused around work that makes many short-lived objects and no
cycles: a health run's ~800 results, a fleet's millions of decoded summaries. The collector's
passes over those young objects were 5-10 % of the cron check and half of a warm fleet read
(docs/dev/benchmarks.md); reference counting still frees everything. It is back on afterwards,
for an in-process caller."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the ``with`` block; on again after it if it was on before."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
