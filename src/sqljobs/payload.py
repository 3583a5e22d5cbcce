"""JSON payloads: encode at enqueue (naming the bad argument), decode once at the worker.

A payload is ``{"args": [...], "kwargs": {...}}``, with an optional third key,
``"headers"``: string metadata about the call rather than arguments to it (a trace
context, see sqljobs.tracing), added only by enqueue middleware. Argument decoding never
looks at it, so a job without headers costs nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import PayloadError, PayloadTooLarge

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _no_constant(name: str) -> Any:
    """Python's json reads NaN and Infinity, which JSON has not and sqljobs never writes."""
    raise ValueError(f"{name} is not JSON")


_decoder = json.JSONDecoder(parse_constant=_no_constant)


def storable(text: str) -> str:
    """Text from user code (an error message, a traceback) as a database column can hold
    it: NUL written as ``\\x00`` and lone surrogates as ``\\udXXX`` escapes, so an odd
    message cannot stop a worker from recording the attempt it describes."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode()
    return text


def encode(
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    names: Sequence[str] = (),
    limit: int | None = None,
) -> str:
    """Serialise a call; on failure say which argument of which task is to blame.

    ``names`` are the parameter names of the positional arguments, when known. ``limit``
    is the largest payload accepted, in bytes of UTF-8 JSON (the app's ``max_payload``).
    """
    if kwargs and not all(type(k) is str for k in kwargs):
        bad = next(k for k in kwargs if type(k) is not str)
        raise PayloadError(
            f"keyword argument name {bad!r} of task {task!r} is not a string: JSON would "
            "store it as another name, or not at all"
        )
    try:
        text = _encoder.encode({"args": list(args), "kwargs": dict(kwargs)})
        # ASCII is one byte a character; other text is encoded once, which also finds a
        # lone surrogate (no UTF-8 form: no database would take it)
        size = len(text) if text.isascii() else len(text.encode())
    except (TypeError, ValueError, RecursionError) as exc:
        raise _name_culprit(task, args, kwargs, names, exc) from exc
    if limit is not None and size > limit:
        raise PayloadTooLarge(
            f"payload of task {task!r} is {size:,} bytes of JSON, over the limit of "
            f"{limit:,} bytes: pass a reference (an id, a path, a URL) and load the data "
            "in the task, or raise the limit with App(max_payload=...)"
        )
    return text


def _name_culprit(
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    names: Sequence[str],
    exc: Exception,
) -> PayloadError:
    named: list[tuple[str, Any]] = [
        (f"argument {names[i]!r}" if i < len(names) else f"positional argument {i}", v)
        for i, v in enumerate(args)
    ]
    named += [(f"argument {k!r}", v) for k, v in kwargs.items()]
    named += [(f"the name of argument {k!r}", k) for k in kwargs]  # a lone surrogate
    for label, value in named:
        try:
            _encoder.encode(value).encode()
        except (TypeError, ValueError, RecursionError) as inner:
            return PayloadError(
                f"{label} of task {task!r} is not JSON-serialisable ({inner}); "
                "sqljobs stores payloads as JSON: pass ids, strings and numbers, not objects"
            )
    return PayloadError(f"arguments of task {task!r} are not JSON-serialisable: {exc}")


HEADERS_KEY = "headers"
_HEADERS_MARK = ',"headers":'
HEADERS_LIMIT = 8192
"""The most bytes of JSON a job's headers may take: they ride along with every claim of
the row, and a trace context needs about a hundred."""


def with_headers(payload: str, headers: Mapping[str, str]) -> str:
    """``payload`` (as :func:`encode` wrote it) carrying ``headers`` as its last key.
    Appended as text: the arguments are not encoded again."""
    if not headers:
        return payload
    bad = [k for k, v in headers.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise PayloadError(
            f"job headers must map strings to strings; {bad[0]!r} does not "
            f"({type(headers[bad[0]]).__name__} value)"
        )
    if not payload.endswith("}"):
        raise PayloadError(f"payload is not one sqljobs wrote: {payload[:200]!r}")
    text = _encoder.encode(dict(headers))
    if len(text) * 4 > HEADERS_LIMIT and len(text.encode()) > HEADERS_LIMIT:
        raise PayloadError(
            f"job headers are {len(text.encode()):,} bytes of JSON, over the limit of "
            f"{HEADERS_LIMIT:,}: headers carry small metadata (a trace context, an id); "
            "pass data as arguments"
        )
    return f"{payload[:-1]}{_HEADERS_MARK}{text}}}"


def headers(payload: str) -> dict[str, str]:
    """The headers a payload carries ({} for none). Our encoder puts them last, so only
    the tail is parsed; text written otherwise is parsed whole. Anything that is not a
    mapping of strings to strings is ignored: headers never stop a job from running."""
    at = payload.rfind(_HEADERS_MARK)
    if at < 0:
        return {}
    tail = payload[at + len(_HEADERS_MARK) : -1]
    found: Any = None
    try:
        found, end = _decoder.raw_decode(tail)
        exact = end == len(tail) and payload.endswith("}")
    except (ValueError, RecursionError):
        exact = False
    if not exact:  # a nested "headers" key inside the arguments, or foreign text
        try:
            data = _parse(payload)
        except (ValueError, RecursionError):
            return {}
        found = data.get(HEADERS_KEY) if isinstance(data, dict) else None
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def decode(payload: str) -> tuple[list[Any], dict[str, Any]]:
    """Parse a stored payload into (args, kwargs); raise PayloadError if it is not ours."""
    try:
        data = _parse(payload)
        args, kwargs = data["args"], data["kwargs"]
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise PayloadError(f"stored payload cannot be decoded ({exc}): {payload[:200]!r}") from exc
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise PayloadError(f"stored payload has the wrong shape: {payload[:200]!r}")
    return args, kwargs


def _parse(text: str) -> Any:
    """``json.loads(text)``, faster for the text our encoder writes. The worker decodes
    every payload on its coordinator thread, between two claims: ``raw_decode``, on a
    decoder made once, skips the whitespace scans around the value, and on a small payload
    costs a fraction of what ``json.loads`` does. Text it cannot take whole (whitespace
    around the value, extra data, not JSON) goes to ``json.loads``, which accepts or
    rejects it as always."""
    try:
        data, end = _decoder.raw_decode(text)
        if end == len(text):
            return data
    except ValueError:
        pass
    return json.loads(text, parse_constant=_no_constant)


def encode_result(task: str, value: Any, limit: int | None = None) -> str | None:
    """A task's return value as stored JSON (None for None: nothing to store). A value
    that is not JSON, or is bigger than ``limit`` bytes, raises PayloadError: the attempt
    fails with it, as any other error in the handler would."""
    if value is None:
        return None
    try:
        text = _encoder.encode(value)
        if not text.isascii():
            text.encode()  # a lone surrogate has no UTF-8 form: no database would take it
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadError(
            f"the return value of task {task!r} is not JSON-serialisable ({exc}); sqljobs "
            "stores results as JSON: return ids, strings, numbers, lists and dicts, or "
            "register the task with store_result=False"
        ) from None
    if limit is not None and len(text) * 4 > limit and len(text.encode()) > limit:
        raise PayloadError(
            f"the return value of task {task!r} is {len(text.encode()):,} bytes of JSON, over "
            f"the limit of {limit:,} bytes (App(max_payload=...)): store bulk data elsewhere "
            "and return a reference to it"
        )
    return text
