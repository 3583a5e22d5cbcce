"""Point a module-level App (``app = sqljobs.App()`` in the user's code, bound to its URL
at import) at a test's database and clock for the length of a test."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..humanize import redact_url
from ..url import parse_url

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("sqljobs.testing")


@contextmanager
def bind(app: App, url: str, *, clock: Callable[[], float] | None = None) -> Iterator[App]:
    """Use ``app`` (with every task it registered) on ``url``, and on ``clock`` if given,
    inside the block; afterwards close what it opened there and give it back its own URL
    and clock. Not for an App that workers are running on meanwhile."""
    parse_url(url)  # a malformed URL fails here, naming it
    saved = app.url, app.clock
    app.close()  # connections to its own database are not the test's
    app.url = url
    if clock is not None:
        app.clock = clock
    app._schedules_synced = False  # its @app.periodic rows go to the test's database too
    log.debug("App bound to %s for a test", redact_url(url))
    try:
        yield app
    finally:
        app.close()
        app.url, app.clock = saved
        app._schedules_synced = False
