"""tasks-store-acme: an example third-party store (``acme://<name>``)."""

from __future__ import annotations

from tasks_store_acme.store import AcmeStore

__all__ = ["AcmeStore"]
