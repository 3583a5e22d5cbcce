"""The middleware every request passes before any route: the Host check, the session
cookie, the wrong-token throttle, authentication when a token is set, and the headers
that keep a browser from framing or sniffing the pages (the checks themselves are
:mod:`sqljobs.dashboard.security`'s)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from . import forms
from .security import BAD_TOKEN, SESSION_COOKIE, TOO_MANY_WRONG, Guard, WrongTokenThrottle

log = logging.getLogger("sqljobs.dashboard")

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; "
    "frame-ancestors 'none'"
)
"""Scripts and styles only from the dashboard's own static files: a value that slipped
through escaping still could not run. (Inline SVG is markup, not a resource.)"""


def set_cookie(response: Response, name: str, value: str, request: Request) -> None:
    """HttpOnly and SameSite=Strict always; Secure when the request came over HTTPS; sent
    only below the dashboard's prefix, when it is mounted in another application."""
    secure = request.url.scheme == "https"
    path = f"{forms.root(request)}/"
    response.set_cookie(name, value, httponly=True, samesite="strict", path=path, secure=secure)


class Gate(BaseHTTPMiddleware):
    """Before any route: the Host check, the session cookie, and (with a token) the
    authentication every request but the login page and the static files needs."""

    def __init__(
        self, asgi: Callable[..., Awaitable[None]], guard: Guard, throttle: WrongTokenThrottle
    ) -> None:
        super().__init__(asgi)
        self.guard = guard
        self.throttle = throttle

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        host = request.headers.get("host", "")
        if (why := self.guard.host_refusal(host)) is not None:
            log.warning("dashboard request refused: %s", why)
            return JSONResponse({"ok": False, "error": why}, status_code=400)
        session = self.guard.session(request)
        new_session = session is None
        request.state.session = session or self.guard.new_session()
        client = request.client.host if request.client else "?"
        response: Response
        if (wait := self.throttle.wait(client)) > 0:
            return _too_many(wait)
        request.state.identity = identity = self.guard.identify(request)
        if identity is None and "authorization" in request.headers:
            self.throttle.failed(client)
            log.warning("dashboard request from %s refused: wrong token", client)
        path = forms.route_path(request)
        open_path = path == "/login" or path.startswith("/static/")
        if identity is None and not open_path:
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                response = RedirectResponse(f"{forms.root(request)}/login", status_code=303)
            else:
                body = (
                    {"ok": False, "error": BAD_TOKEN}
                    if request.method == "POST"
                    else {"error": BAD_TOKEN}
                )
                response = JSONResponse(body, status_code=401)
                response.headers["WWW-Authenticate"] = (
                    'Bearer realm="sqljobs", Basic realm="sqljobs"'
                )
        else:
            response = await call_next(request)
        if new_session and not any(
            c.startswith(f"{SESSION_COOKIE}=") for c in response.headers.getlist("set-cookie")
        ):
            set_cookie(response, SESSION_COOKIE, request.state.session, request)
        # buttons inside another site's frame could be clicked for the user (clickjacking)
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def _too_many(wait: float) -> Response:
    why = TOO_MANY_WRONG.format(wait=max(wait, 1.0))
    response = JSONResponse({"ok": False, "error": why}, status_code=429)
    response.headers["Retry-After"] = str(max(int(wait + 0.999), 1))
    return response
