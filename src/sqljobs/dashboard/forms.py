"""What the pages' forms send and where their answers go: a form post wants the page
back (a 303 to the page it came from, with the outcome's sentence in its query) where a
script wants JSON; a ``back`` field may only name a path on this dashboard; a page's query
parameters leave out the empty fields a GET form sends and refuse unknown ones.

Mounted under a prefix (``Mount("/jobs-admin", create_app(app))``), the prefix is the
scope's ``root_path``: :func:`root` is what every link and redirect starts with, and
:func:`route_path` is the path the dashboard's own routes know.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request

from .api import BadParameter
from .security import CSRF_FIELD

FLASH = ("message", "error", "sig")
"""The query parameters of an outcome's sentence: its kind, and ``sig``, the dashboard's
signature of it (:meth:`~sqljobs.dashboard.security.Guard.flash_sig`)."""
MAX_FLASH = 2000  # a sentence, not a page


def root(request: Request) -> str:
    """The prefix the dashboard is mounted under ("" when it is the whole site): links and
    redirects carry it, or a mounted dashboard's pages would point at the host app."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def route_path(request: Request) -> str:
    """This request's path below the prefix, as the dashboard's routes name it."""
    path, prefix = request.url.path, root(request)
    if prefix and (path == prefix or path.startswith(prefix + "/")):
        return path[len(prefix) :] or "/"
    return path


def from_page(request: Request) -> bool:
    """A post from the page's own forms, which wants the page back rather than JSON."""
    content_type = request.headers.get("content-type", "")
    return content_type.startswith("application/x-www-form-urlencoded")


def wants_page(request: Request) -> bool:
    """A person's browser asking for a page (not a script asking for JSON)."""
    path = route_path(request)
    return not path.startswith("/api/") and path != "/metrics"


def local_path(text: str | None, default: str = "/") -> str:
    """``text`` if it is a path on this dashboard (``/jobs?state=dead``), else ``default``:
    a form's ``back`` field must not send anyone to another site."""
    if not text or not text.startswith("/") or text.startswith("//") or "\\" in text:
        return default
    parts = urlsplit(text)
    if parts.scheme or parts.netloc:
        return default
    return text


def with_flash(path: str, kind: str, sentence: str, sig: str) -> str:
    """``path`` with the outcome's sentence and its signature in its query (replacing an
    earlier one)."""
    parts = urlsplit(path)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in FLASH]
    query += [(kind, sentence), ("sig", sig)]
    return f"{parts.path}?{urlencode(query)}"


def here(request: Request) -> str:
    """This page's address without its flash message: where its forms come back to."""
    query = [(k, v) for k, v in request.query_params.multi_items() if k not in FLASH]
    return request.url.path + (f"?{urlencode(query)}" if query else "")


async def action_fields(request: Request) -> ImmutableMultiDict[str, str]:
    """An action's parameters: a page's form fields (empty ones left out, as a filter
    form sends them), or a script's query string."""
    if not from_page(request):
        return ImmutableMultiDict(request.query_params.multi_items())
    form = await request.form()
    return ImmutableMultiDict(
        [
            (k, v)
            for k, v in form.multi_items()
            if isinstance(v, str) and v != "" and k not in (CSRF_FIELD, "back")
        ]
    )


def page_params(
    request: Request, allowed: tuple[str, ...], where: str
) -> ImmutableMultiDict[str, str]:
    """A page's query parameters: empty ones left out (a GET form sends every field),
    unknown ones refused."""
    params = ImmutableMultiDict([(k, v) for k, v in request.query_params.multi_items() if v])
    for name in params:
        if name not in allowed and name not in FLASH:
            takes = ", ".join(allowed) if allowed else "no parameters"
            raise BadParameter(f"unknown parameter {name!r}: {where} takes {takes}")
    return params
