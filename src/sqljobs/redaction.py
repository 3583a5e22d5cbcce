"""Arguments hidden per task (``@app.task(redact=["card_number"])``): the dashboard (its
page and its JSON) and ``sqljobs jobs list|show`` show ``***`` for those values. Positional
arguments are matched to their parameters by position; naming a ``*args`` or ``**kwargs``
parameter hides every value it would collect.

A hidden value can leak through text the job produced: an error that quotes it, a
traceback line, a progress note, a limit key made from it. :func:`redact_job` masks the
arguments and replaces every hidden value of :data:`MIN_SCRUBBED` characters or more in
those texts too (a shorter one would mask common words and numbers).

The worker's log lines about a failed attempt are scrubbed the same way (:func:`scrubber`).

Only tasks the App registers are known: start the dashboard or the CLI with ``--app``
(not a bare ``--url``) for their redactions to apply.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from .jobs import Job
from .tasks import Task

MASK = "***"
MIN_SCRUBBED = 4
"""The shortest hidden value also replaced in a job's texts (errors, traceback, notes)."""


def redact_arguments(
    task: Task | None, args: list[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` with the values of ``task``'s redacted parameters masked."""
    if task is None or not task.redact:
        return args, kwargs
    hidden = set(task.redact)
    params: Mapping[str, inspect.Parameter] = task.signature.parameters
    positional = [
        p.name for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    rest_args = next((p.name for p in params.values() if p.kind is p.VAR_POSITIONAL), None)
    rest_kwargs = next((p.name for p in params.values() if p.kind is p.VAR_KEYWORD), None)
    named = {p.name for p in params.values() if p.kind is not p.POSITIONAL_ONLY} - {
        rest_args,
        rest_kwargs,
    }

    def hide_arg(i: int) -> bool:
        return (positional[i] if i < len(positional) else rest_args) in hidden

    def hide_kwarg(name: str) -> bool:
        return name in hidden if name in named else rest_kwargs in hidden

    return (
        [MASK if hide_arg(i) else value for i, value in enumerate(args)],
        {name: MASK if hide_kwarg(name) else value for name, value in kwargs.items()},
    )


def scrubber(
    task: Task | None, args: list[Any], kwargs: dict[str, Any]
) -> Callable[[str | None], str | None]:
    """A function that replaces, in a text about this call (an error, a traceback, a log
    line), every value of ``task``'s redacted parameters of :data:`MIN_SCRUBBED`
    characters or more with ``***``."""
    masked_args, masked_kwargs = redact_arguments(task, args, kwargs)
    if masked_args is args and masked_kwargs is kwargs:
        return lambda text: text
    secrets = sorted(
        {
            text
            for old, new in (*zip(args, masked_args, strict=True), *_pairs(kwargs, masked_kwargs))
            if new == MASK and old != MASK
            for text in _texts(old)
            if len(text) >= MIN_SCRUBBED
        },
        key=len,
        reverse=True,  # a longer secret first, so a shorter one inside it leaves no tail
    )

    def scrub(text: str | None) -> str | None:
        if text is None:
            return None
        for secret in secrets:
            text = text.replace(secret, MASK)
        return text

    return scrub


def redact_job(task: Task | None, job: Job) -> Job:
    """``job`` as an operator may see it: the redacted arguments masked, and their values
    replaced in its error, traceback, attempt history, progress note and limit key."""
    args, kwargs = redact_arguments(task, job.args, job.kwargs)
    if args is job.args and kwargs is job.kwargs:
        return job
    scrub = scrubber(task, job.args, job.kwargs)
    history = [
        {k: scrub(v) if isinstance(v, str) else v for k, v in entry.items()}
        for entry in job.history
    ]
    progress = job.progress
    if progress is not None and progress.note is not None:
        progress = replace(progress, note=scrub(progress.note))
    return replace(
        job,
        args=args,
        kwargs=kwargs,
        last_error=scrub(job.last_error),
        last_traceback=scrub(job.last_traceback),
        history=history,
        progress=progress,
        limit_key=scrub(job.limit_key),
        result=scrub(job.result) if isinstance(job.result, str) else job.result,
    )


def _pairs(old: dict[str, Any], new: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    return ((value, new[name]) for name, value in old.items())


def _texts(value: Any) -> Iterator[str]:
    """Every scalar inside ``value`` as the text a message would quote it as."""
    if isinstance(value, dict):
        for inner in value.values():
            yield from _texts(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from _texts(inner)
    elif value is not None and not isinstance(value, bool):
        yield str(value)
