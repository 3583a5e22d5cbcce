"""Backends by URL scheme. Each implements :class:`sqljobs.backends.base.Backend`."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError
from ..url import parse_url
from .base import Backend, WorkerInfo

__all__ = ["Backend", "WorkerInfo", "open_backend"]


def open_backend(url: str, **options: Any) -> Backend:
    """Open the backend a URL names. Options go to the backend's constructor."""
    parsed = parse_url(url)
    if parsed.scheme == "sqlite":
        from .sqlite import SqliteBackend

        return SqliteBackend(parsed.path, url=url, **options)
    try:
        from .postgres import PostgresBackend  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise ConfigurationError(
            f"{url!r} needs the PostgreSQL backend: pip install 'sqljobs[postgres]' ({exc})"
        ) from exc
    backend: Backend = PostgresBackend(url, **options)
    return backend
