"""tasks-dashboard: a web dashboard of tasks — queues, tasks, a task's history and live
progress, workers; cancel and respond — as an ASGI app.

``create_app(app_or_store, token=... | authorize=..., allowed_hosts=...)`` builds it
(mount it in your own app, or run ``tasks dashboard``). There is no open dashboard: without
a token or an ``authorize`` callback ``create_app`` raises :class:`DashboardConfigError`.
``loopback_hosts(address)`` gives the ``allowed_hosts`` of a dashboard served on a
loopback address.
"""

from __future__ import annotations

from tasks_dashboard._app import create_app
from tasks_dashboard._security import Authorize, DashboardConfigError, loopback_hosts

__all__ = ["Authorize", "DashboardConfigError", "create_app", "loopback_hosts"]
