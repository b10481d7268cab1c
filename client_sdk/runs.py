"""Durable runs: a journal of external calls, replay without repeats (issue 6).

``Hub`` inherits :class:`RunsMixin`; everything about runs lives in this module.
"""

from __future__ import annotations


class RunsMixin:
    """Run and journal methods of :class:`client_sdk.Hub`."""
