"""A redacted argument stays hidden where the job's own texts quote it: its error, its
traceback, its attempt history, its progress note and its limit key, as the CLI shows
them (the dashboard's tests check its pages)."""

from __future__ import annotations

import pytest

from sqljobs import App, JobContext, JobFailed, JobState, Retry
from sqljobs.redaction import MASK, redact_job
from sqljobs.testing import stepped_worker


def test_a_hidden_value_quoted_by_an_error_is_masked_everywhere(app: App) -> None:
    @app.task(
        redact=["card", "pin"],
        retry=Retry(max_attempts=1),
        concurrency=1,
        concurrency_key=lambda card, pin: card,
    )
    def charge(ctx: JobContext, card: str, pin: int) -> None:
        ctx.progress(1, total=2, note=f"checking {card}")
        raise ValueError(f"card {card} declined (pin {pin})")

    handle = charge.enqueue("4111-1111-1111-1111", 12345)
    with stepped_worker(app) as worker, pytest.raises(JobFailed):
        worker.result(handle)
    job = app.job(handle.id)
    raw = job.refresh()
    assert raw.state is JobState.DEAD and "4111-1111-1111-1111" in (raw.last_error or "")
    shown = redact_job(charge, raw)
    assert shown.args == [MASK, MASK]
    for text in (shown.last_error, shown.last_traceback, shown.limit_key):
        assert text is not None and "4111" not in text and "12345" not in text, text
    assert (
        shown.last_error
        == f"failed 1 of 1 attempts; last: ValueError: card {MASK} declined (pin {MASK})"
    )
    # (the card's digits with their dash: a bare "4111" also matched the entries' Unix
    # timestamps during 1796411100-1796411199)
    assert all("4111-1111" not in str(entry) for entry in shown.history)
    assert all(MASK in str(entry) for entry in shown.history if entry.get("error"))
    assert shown.progress is not None and shown.progress.note == f"checking {MASK}"
    assert redact_job(None, raw) is raw  # a task not known here: nothing to hide
