"""A backend wrapper that counts the calls a worker makes, to measure its idle cost."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, cast

from ..app import App
from ..backends.base import Backend


class CountingBackend:
    """Delegates everything to ``inner``; counts each method called, by name."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    @property
    def inner(self) -> Backend:
        """The backend counted."""
        return self._inner

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value):
            return value
        method = cast(Callable[..., Any], value)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted


class CountingApp(App):
    """An App whose workers' backends are counted (``backends`` holds them, in order)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counted: list[CountingBackend] = []

    def _open_backend(self, **options: Any) -> Backend:
        counted = CountingBackend(super()._open_backend(**options))
        self.counted.append(counted)
        return cast(Backend, counted)
