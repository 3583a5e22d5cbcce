"""Who may use the dashboard, and how a browser is kept from being used against it.

- **Bind.** Loopback by default; a bind beyond loopback needs a token (:func:`check_bind`),
  since anyone who reaches the port would otherwise read every job's arguments and act.
- **Authentication**, once a token is set, on every request but the login page:
  ``Authorization: Bearer <token>`` (scripts), HTTP basic auth with the token as the
  password (any user name, which the log records), or the login form, which sets a cookie.
- **CSRF.** A per-session token, an HMAC of the session cookie, sits in every action form
  and is checked on every action (``hmac.compare_digest``); a script sends it as the
  ``X-CSRF-Token`` header (``GET /api/csrf`` hands it out). A bearer token stands in for
  it, because a browser never attaches one to a cross-site request; basic auth and the
  login cookie do not, because a browser does attach those. Cookies are HttpOnly and
  SameSite=Strict, so a cross-site request carries no session at all.
- **Guessing.** A client address that gives a wrong token :data:`WRONG_TOKENS_ALLOWED`
  times within :data:`WRONG_TOKEN_WINDOW` seconds (bearer, basic auth or the login form)
  is refused with 429 until the window has passed (:class:`WrongTokenThrottle`).
- **Transport.** Cookies are marked ``Secure`` when the request came over HTTPS (behind a
  TLS proxy, uvicorn reads ``X-Forwarded-Proto`` from proxies it trusts), so a browser
  never sends them over plain HTTP.
- **Messages.** An action's outcome comes back to the page as a sentence in the
  redirect's query, signed (:meth:`Guard.flash_sig`): a link that carries a sentence of
  its own ("your token expired, enter it at ...") shows nothing.
- **DNS rebinding.** Bound to loopback, only ``localhost``, ``127.0.0.1`` and ``[::1]``
  (with the port) are accepted in the ``Host`` header: a page on ``evil.example`` whose
  name was rebound to 127.0.0.1 reaches the port with its own name as the Host.

The signing secret is derived from the token when there is one (so sessions outlive a
restart, and changing the token logs everyone out), else drawn at random per process.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from ..errors import ConfigurationError

SESSION_COOKIE = "sqljobs_session"
AUTH_COOKIE = "sqljobs_auth"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
TOKEN_ENV = "SQLJOBS_DASHBOARD_TOKEN"

EXPOSED_WITHOUT_TOKEN = (
    "the dashboard on {host} would be reachable beyond this machine without a token: "
    f"give --token (or set {TOKEN_ENV}), or bind to loopback (--host 127.0.0.1)"
)
BAD_TOKEN = (
    "a valid token is required: the one this dashboard was started with (--token or "
    f"{TOKEN_ENV}), as 'Authorization: Bearer <token>', as the password of HTTP basic "
    "auth, or through the login page (/login)"
)
BAD_CSRF = (
    "refused: this action carries no valid CSRF token, so it may come from another site. "
    "Use the buttons of the dashboard's own page (reload it if it is old), or send the "
    f"token of GET /api/csrf as the {CSRF_HEADER} header with that response's session "
    "cookie, or authenticate with 'Authorization: Bearer <token>'"
)
WRONG_TOKENS_ALLOWED = 10
WRONG_TOKEN_WINDOW = 60.0
"""A client address may give a wrong token this many times in this many seconds."""
TOO_MANY_WRONG = "too many wrong tokens from this address: wait {wait:.0f} s before trying again"
READ_ONLY = (
    "read-only: this dashboard was started with --read-only and takes no actions "
    "(retry, cancel, delete, pause, resume, run now)"
)


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse a bind beyond loopback without a token, and an empty token."""
    if token is not None and not token:
        raise ConfigurationError(f"the dashboard token must not be empty (--token, {TOKEN_ENV})")
    if token is None and not is_loopback(host):
        raise ConfigurationError(EXPOSED_WITHOUT_TOKEN.format(host=host))


@dataclass(frozen=True)
class Identity:
    """Who made a request, as the action log names them; ``bearer``: authenticated by a
    header no browser sends cross-site, so no CSRF token is needed."""

    who: str
    bearer: bool = False


@dataclass(frozen=True)
class Guard:
    """The dashboard's security settings and the checks made with them."""

    token: str | None
    secret: bytes
    check_host: bool
    port: int | None

    @classmethod
    def create(cls, token: str | None, *, exposed: bool, port: int | None) -> Guard:
        if token is not None and not token:
            raise ConfigurationError(
                f"the dashboard token must not be empty (--token, {TOKEN_ENV})"
            )
        if exposed and token is None:
            raise ConfigurationError(EXPOSED_WITHOUT_TOKEN.format(host="a public address"))
        secret = (
            hmac.new(token.encode(), b"sqljobs dashboard sessions", hashlib.sha256).digest()
            if token is not None
            else secrets.token_bytes(32)
        )
        return cls(token=token, secret=secret, check_host=not exposed, port=port)

    # -- Host -------------------------------------------------------------------------

    def host_refusal(self, host: str) -> str | None:
        """None if the Host header names this loopback dashboard, else why not."""
        if not self.check_host:
            return None
        name, port = host, None
        if host.startswith("["):
            end = host.find("]")
            name, rest = host[: end + 1], host[end + 1 :]
            port = rest[1:] if rest.startswith(":") else None
        elif ":" in host:
            name, _, port = host.rpartition(":")
        ok_port = port is None or self.port is None or port == str(self.port)
        if name.lower() in LOOPBACK_NAMES and ok_port:
            return None
        where = "localhost, 127.0.0.1 or [::1]" + (
            "" if self.port is None else f" with port {self.port}"
        )
        return (
            f"Host header {host!r} refused: this dashboard is bound to loopback and answers "
            f"only to {where} (another name may be a DNS rebinding attack); open it as "
            f"http://127.0.0.1{'' if self.port is None else f':{self.port}'}/"
        )

    # -- sessions and CSRF ------------------------------------------------------------

    def _sign(self, purpose: str, session: str) -> str:
        return hmac.new(self.secret, f"{purpose}:{session}".encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def session(request: Request) -> str | None:
        """The session cookie, if it looks like one this dashboard set."""
        value = request.cookies.get(SESSION_COOKIE, "")
        return value if 20 <= len(value) <= 100 and value.isascii() else None

    @staticmethod
    def new_session() -> str:
        return secrets.token_urlsafe(32)

    def csrf_token(self, session: str) -> str:
        return self._sign("csrf", session)

    def csrf_ok(self, session: str | None, given: str) -> bool:
        if session is None or not given:
            return False
        return hmac.compare_digest(given.encode(), self.csrf_token(session).encode())

    def auth_cookie(self, session: str) -> str:
        return self._sign("auth", session)

    def flash_sig(self, kind: str, sentence: str) -> str:
        """The signature of an outcome's sentence in a redirect's query: the page shows
        only sentences the dashboard wrote, never text a link of someone else's carries."""
        return self._sign("flash", f"{kind}:{sentence}")

    def flash_ok(self, kind: str, sentence: str, sig: str) -> bool:
        return bool(sig) and hmac.compare_digest(
            sig.encode(), self.flash_sig(kind, sentence).encode()
        )

    # -- authentication ---------------------------------------------------------------

    def identify(self, request: Request) -> Identity | None:
        """Who is asking; None when a token is set and the request does not carry it."""
        if self.token is None:
            return Identity("loopback")
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        credentials = credentials.strip()
        if scheme.lower() == "bearer":
            if self.token_ok(credentials):
                return Identity("bearer token", bearer=True)
            return None
        if scheme.lower() == "basic":
            try:
                user, _, password = (
                    base64.b64decode(credentials, validate=True).decode().partition(":")
                )
            except (binascii.Error, UnicodeDecodeError):
                return None
            return Identity(f"user {user!r} (basic auth)") if self.token_ok(password) else None
        session = self.session(request)
        cookie = request.cookies.get(AUTH_COOKIE, "")
        if session is not None and hmac.compare_digest(
            cookie.encode(), self.auth_cookie(session).encode()
        ):
            return Identity(f"login session {hashlib.sha256(session.encode()).hexdigest()[:8]}")
        return None

    def token_ok(self, given: str) -> bool:
        """Whether ``given`` is the token (compared in constant time)."""
        if self.token is None:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())


class WrongTokenThrottle:
    """Wrong tokens by client address: the :data:`WRONG_TOKENS_ALLOWED`-th within
    :data:`WRONG_TOKEN_WINDOW` seconds closes the door to that address until the window
    has passed, so a token cannot be guessed at the speed of the network. Kept in this
    process's memory (a restart forgets it), for at most ``max_clients`` addresses.

    The door closes to the right token too (else a guess that got through would show
    itself by its answer): people behind one NAT or proxy address share it, so someone
    there who guesses can keep the others out for a minute at a time."""

    def __init__(
        self,
        allowed: int = WRONG_TOKENS_ALLOWED,
        window: float = WRONG_TOKEN_WINDOW,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.allowed, self.window, self.clock, self.max_clients = (
            allowed,
            window,
            clock,
            max_clients,
        )
        self._failures: dict[str, collections.deque[float]] = {}
        self._lock = threading.Lock()  # sync routes run on a thread pool

    def wait(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: now)."""
        with self._lock:
            if client not in self._failures:  # looking adds nobody: only failures count
                return 0.0
            recent = self._recent(client)
            if len(recent) < self.allowed:
                return 0.0
            return max(recent[0] + self.window - self.clock(), 0.0)

    def failed(self, client: str) -> None:
        """Note a wrong token from ``client``."""
        with self._lock:
            if client not in self._failures and len(self._failures) >= self.max_clients:
                self._forget_quiet()
            self._recent(client).append(self.clock())

    def _recent(self, client: str) -> collections.deque[float]:
        failures = self._failures.setdefault(client, collections.deque(maxlen=self.allowed))
        while failures and failures[0] <= self.clock() - self.window:
            failures.popleft()
        return failures

    def _forget_quiet(self) -> None:
        """Make room: drop the addresses with no failure inside the window (and, if all
        have one, the one whose last failure is oldest)."""
        cutoff = self.clock() - self.window
        for client in [c for c, f in self._failures.items() if not f or f[-1] <= cutoff]:
            del self._failures[client]
        if len(self._failures) >= self.max_clients:
            oldest = min(self._failures, key=lambda c: self._failures[c][-1])
            del self._failures[oldest]
