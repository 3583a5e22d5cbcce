"""Database URLs in SQLAlchemy's form, checked where they are given."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from .errors import ConfigurationError
from .humanize import redact_url

DEFAULT_URL = "sqlite:///sqljobs.db"
_PASSWORD_KEY = re.compile(r"(password\s*=\s*)\S+", re.IGNORECASE)

URL_OPTIONS = ("listen",)
"""Backend options a URL may carry in its query string (``?listen=false``), so a worker
or CLI started from a URL alone can be told not to listen: on PostgreSQL behind PgBouncer
in transaction mode (no LISTEN), on SQLite where sockets beside the file are unwanted
(workers read its change counter every few milliseconds instead). sqljobs takes them out
before the URL reaches libpq."""
LIBPQ_PARAMETERS = frozenset({
    "application_name", "channel_binding", "client_encoding", "connect_timeout", "dbname",
    "fallback_application_name", "gssdelegation", "gssencmode", "gsslib", "host", "hostaddr",
    "keepalives", "keepalives_count", "keepalives_idle", "keepalives_interval", "krbsrvname",
    "load_balance_hosts", "max_protocol_version", "min_protocol_version", "oauth_client_id",
    "oauth_client_secret", "oauth_issuer", "oauth_scope", "options", "passfile", "password",
    "port", "replication", "require_auth", "requirepeer", "scram_client_key",
    "scram_server_key", "service", "ssl", "ssl_max_protocol_version",
    "ssl_min_protocol_version", "sslcert", "sslcertmode", "sslcompression", "sslcrl",
    "sslcrldir", "sslkey", "sslkeylogfile", "sslmode", "sslnegotiation", "sslpassword",
    "sslrootcert", "sslsni", "target_session_attrs", "tcp_user_timeout", "user",
})  # fmt: skip
"""The connection parameters libpq (version 18) takes in a URL's query string, ``ssl``
(its URI-only spelling of ``sslmode=require``) included: a PostgreSQL URL may carry these
beside sqljobs's own. A name not here is looked up in the installed libpq before it is
refused, so a newer libpq's parameters pass too."""
_FLAGS = {"true": True, "on": True, "yes": True, "1": True,
          "false": False, "off": False, "no": False, "0": False}  # fmt: skip


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed URL: ``scheme`` is ``sqlite`` or ``postgresql``; ``path`` is the SQLite file."""

    raw: str
    scheme: str
    path: str

    @property
    def file(self) -> str | None:
        """The SQLite file as an absolute path, a relative one resolved against the
        current directory (as opening it would); None for PostgreSQL."""
        return os.path.abspath(self.path) if self.scheme == "sqlite" else None


def resolve_url(url: str | None) -> str:
    """The URL given, else ``SQLJOBS_URL``, else ``sqlite:///sqljobs.db``."""
    return url or os.environ.get("SQLJOBS_URL") or DEFAULT_URL


def parse_url(url: str) -> DatabaseURL:
    """Check a URL and say exactly what is wrong with it.

    ``sqlite:///relative.db`` is relative to the working directory and
    ``sqlite:////abs/path.db`` absolute; ``postgresql://user@host/db`` (or ``postgres://``).
    """
    if not isinstance(url, str) or "://" not in url:
        # a libpq "key=value" string is not a URL, but may hold a password
        shown = repr(_PASSWORD_KEY.sub(r"\1***", url) if isinstance(url, str) else url)
        raise ConfigurationError(
            f"malformed database URL {shown}: expected sqlite:///path.db or "
            "postgresql://user@host/db"
        )
    shown = repr(redact_url(url))  # error messages end up in logs
    scheme = url.split("://", 1)[0].lower()
    driver = scheme.split("+", 1)[0]
    if driver == "sqlite":
        rest = url.split("://", 1)[1]
        if not rest.startswith("/"):
            raise ConfigurationError(
                f"malformed SQLite URL {shown}: use three slashes for a relative path "
                "(sqlite:///jobs.db) or four for an absolute one (sqlite:////var/jobs.db)"
            )
        path = rest[1:].split("?", 1)[0]
        if not path or path == ":memory:":
            raise ConfigurationError(
                f"SQLite URL {shown} names no file: workers and enqueuers share the queue "
                "through a file, e.g. sqlite:///jobs.db"
            )
        _check_option_names(url, "sqlite")
        url_options(url)  # a bad value fails here, where the URL is given
        return DatabaseURL(url, "sqlite", path)
    if driver in ("postgresql", "postgres"):
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # "Invalid IPv6 URL": a bracket left open
            raise ConfigurationError(f"malformed PostgreSQL URL {url!r}: {exc}") from None
        if not parts.hostname and not parts.path.strip("/") and not parts.query:
            raise ConfigurationError(f"PostgreSQL URL {shown} names no host or database")
        _check_option_names(url, "postgresql")
        url_options(url)  # a bad value fails here, where the URL is given
        return DatabaseURL(url, "postgresql", "")
    raise ConfigurationError(
        f"unsupported database URL scheme {scheme!r} in {shown}: sqljobs supports "
        "sqlite:///path.db and postgresql://user@host/db"
    )


def check_sqlite_directory(url: str) -> None:
    """Refuse a SQLite URL whose directory does not exist.

    SQLite creates a missing file, so a wrong path would give an empty queue that the
    other side of the service never sees; a missing directory is the mistake we can tell
    apart from a first start. Checked when the database is opened rather than when the
    App is defined, so a module can define its App before the directory is made.
    """
    parsed = parse_url(url)
    if parsed.file is None:
        return
    directory = os.path.dirname(parsed.file)
    if not os.path.isdir(directory):
        raise ConfigurationError(
            f"SQLite URL {url!r}: directory {directory} does not exist (the database file "
            f"would be {parsed.file}); create the directory or fix the path "
            f"(sqlite:///relative.db is relative to the working directory {os.getcwd()}, "
            "sqlite:////abs/path.db is absolute)"
        )


def _check_option_names(url: str, scheme: str) -> None:
    """Refuse an option the URL's engine would not use: SQLite would ignore it silently,
    and libpq refuses it only at the first connection, without saying what it takes."""
    names = [item.partition("=")[0] for item in url.partition("?")[2].split("&") if item]
    if scheme == "sqlite":
        known: frozenset[str] = frozenset(URL_OPTIONS)
    else:
        known = LIBPQ_PARAMETERS | frozenset(URL_OPTIONS)
        if any(name not in known for name in names):
            known |= _installed_libpq_parameters()
    unknown = [name for name in names if name not in known]
    if not unknown:
        return
    import difflib

    name = unknown[0]
    close = difflib.get_close_matches(name, sorted(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    shown = redact_url(url)
    if scheme == "sqlite":
        raise ConfigurationError(
            f"SQLite URL {shown!r}: unknown option {name!r}{hint}. A SQLite URL takes only "
            "listen (?listen=false: no wake-up sockets, workers read the file's change "
            "counter instead)"
        )
    raise ConfigurationError(
        f"PostgreSQL URL {shown!r}: unknown option {name!r}{hint}. A PostgreSQL URL takes "
        "sqljobs's listen (?listen=false: poll-only mode) and libpq's connection "
        f"parameters: {', '.join(sorted(known - set(URL_OPTIONS)))}"
    )


def _installed_libpq_parameters() -> frozenset[str]:
    """The parameters the installed libpq knows (none if psycopg is not installed: then
    no connection is made anyway); asked only for a name not in LIBPQ_PARAMETERS."""
    try:
        from psycopg.pq import Conninfo
    except ImportError:
        return frozenset()
    return frozenset(option.keyword.decode() for option in Conninfo.get_defaults())


def url_options(url: str) -> tuple[str, dict[str, bool]]:
    """A PostgreSQL URL split into what libpq is given (the URL without sqljobs's own
    query options, the rest of the query kept as written) and those options."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, {}
    kept: list[str] = []
    options: dict[str, bool] = {}
    for item in query.split("&"):
        name, _, value = item.partition("=")
        if name not in URL_OPTIONS:
            kept.append(item)
            continue
        flag = _FLAGS.get(value.lower())
        if flag is None:
            raise ConfigurationError(
                f"URL option {name}={value!r}: expected true or false "
                f"(?{name}=false is poll-only mode: no LISTEN on PostgreSQL, as behind "
                "PgBouncer in transaction mode; no wake-up sockets on SQLite)"
            )
        options[name] = flag
    return base + ("?" + "&".join(kept) if kept else ""), options
