"""`Unplanned`: what the lean reader (store/lean.py) and the lean writer (store/lean_write.py)
raise for a call they leave to the store. Its own module: a lean write loads neither the
reader nor its filters (issue 25)."""

from __future__ import annotations


class Unplanned(Exception):
    """The lean path has no SQL for this call: make it through the store."""
