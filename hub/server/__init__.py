"""The Starlette application: routes, lifespan, security headers.

``create_app(settings, *, store=None, clock=None)`` builds everything from arguments; no
globals. Only this package imports Starlette.
"""

from __future__ import annotations

from hub.server.app import create_app

__all__ = ["create_app"]
