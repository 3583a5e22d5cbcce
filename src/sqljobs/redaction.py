"""Arguments hidden per task (``@app.task(redact=["card_number"])``): the dashboard (its
page and its JSON) and ``sqljobs jobs list|show`` show ``***`` for those values. Positional
arguments are matched to their parameters by position; naming a ``*args`` or ``**kwargs``
parameter hides every value it would collect.

Only tasks the App registers are known: start the dashboard or the CLI with ``--app``
(not a bare ``--url``) for their redactions to apply.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from .tasks import Task

MASK = "***"


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
