"""``sqljobs dashboard``: backlog health in a browser, JSON for scripts, ``/metrics`` for
Prometheus, and the actions an operator needs (retry, cancel and delete jobs, one or many;
pause and resume a queue or a schedule; run a schedule now).

Reads come straight from the database on every request, through the App (no SQL here), so
every dashboard, scraper and ``sqljobs stats`` agrees, on either backend. It binds to
127.0.0.1 unless told otherwise, and refuses to bind beyond loopback without a token;
once a token is set, every request needs it. Actions are POSTs that need a CSRF token too
(or a bearer token), and are logged; ``read_only`` refuses them all. See
:mod:`sqljobs.dashboard.security`.

The pages (:mod:`sqljobs.dashboard.pages`; ``docs/dashboard.md`` describes them):
``/`` overview, ``/jobs`` (filters and a ``before`` cursor as query parameters),
``/jobs/ID``, ``/jobs/confirm`` (a bulk action's count, before it is done),
``/workflows`` (``?state=S``), ``/workflows/ID`` (a workflow's timeline of steps),
``/queues``, ``/schedules``, ``/workers``.

The JSON API:

- ``GET /api/stats``: counts by queue and state, live workers, and the ages of the oldest
  due pending jobs in float seconds (ages are durations, so they stay numbers).
- ``GET /api/queues``: every queue with ``paused``, ``paused_at``, its ``counts`` by state
  and ``oldest_due_age`` (float seconds).
- ``GET /api/jobs?state=S&queue=Q&task=T&key=K&text=X&since=A&until=B&before=ID&limit=N``:
  the matching jobs, newest first, ``limit`` from 1 to 1000 (default 50). ``since`` and
  ``until`` bound the creation time (``1h`` ago, ISO 8601, or Unix seconds); ``text`` is
  found in the arguments. When there are more, a ``Link: <...>; rel="next"`` header names
  the next page (its ``before``). ``GET /api/jobs/ID``: one job, with its ``result`` (the
  task's return value, or null) and ``progress`` (``done``, ``total``, ``note``,
  ``updated_at``, or null). In jobs, the times ``run_at``, ``created_at``,
  ``lease_until``, ``started_at``, ``finished_at``, ``deadline_at``,
  ``progress.updated_at`` and, in ``history`` entries, ``started_at`` and ``ended_at`` are
  ISO 8601 strings in UTC (``2026-12-03T08:14:05.123+00:00``) or null: a person reading
  the JSON sees when, and every language parses them; so is a queue's ``paused_at``.
- ``GET /api/jobs?workflow=ID`` (with any filter above): the child jobs of workflow ``ID``,
  the ids its run and gather steps started; 400 when ``ID`` is no workflow's job.
- ``GET /api/workflows?state=S&limit=N``: the App's workflows, newest first, as ``sqljobs
  workflows list --json`` has them (``wait_event``, ``wake_at``, ``waiting_on``: what a
  waiting one waits for), times as ISO 8601 UTC strings. ``GET /api/workflows/ID``:
  ``{"job": ..., "reason": ..., "steps": [...], "children": [ids]}``, each step as
  ``sqljobs workflows show --json`` has it plus ``duration`` (float seconds), its times and
  those of its ``detail`` as ISO 8601 UTC strings; 404 when ``ID`` is no job or no
  workflow.
- ``GET /api/workers``: every live worker and the jobs it is running;
  ``GET /api/schedules``: every schedule, with its timing ``in_words``.
- ``POST /api/jobs/ID/retry`` (a dead or cancelled job), ``POST /api/jobs/ID/cancel`` (a
  pending, waiting or running one, ``app.cancel``: ``was_running`` says whether a handler
  was cut short; cancelling a cancelled job succeeds with a note), ``POST
  /api/jobs/ID/delete`` (an ended one), ``POST /api/dead/retry?queue=Q``, ``POST
  /api/queues/NAME/pause`` or ``/resume`` (pausing a paused queue, or resuming one that is
  not, succeeds with a note), ``POST /api/jobs/retry``, ``/cancel`` or ``/delete`` with
  ``ids`` (a selection) or filter parameters (every match; at least one is needed),
  answering ``{"ok": true, "retried"|"cancelled"|"deleted": n}``, and ``POST
  /api/schedules/NAME/pause``, ``/resume`` or ``/run`` answer ``{"ok": true, ...}``, or
  ``{"ok": false, "error": why}`` with 401 (token missing or wrong), 403 (read-only, or
  no valid CSRF token), 404 (no such job or schedule) or 409 (the job's state rules it
  out). The pages' own form posts get a 303 back to the page they came from instead,
  which shows the same sentence.
- ``GET /api/csrf``: ``{"csrf": token}`` for this session (its cookie comes with it), to
  send as the ``X-CSRF-Token`` header of a script's actions when it has no bearer token.
- A bad parameter is a 400 ``{"error": why}`` that names it and says what is allowed (a
  page that a person opened says it on a page).

Needs the ``dashboard`` extra (starlette, uvicorn, prometheus-client, python-multipart,
jinja2).

Where things are: :mod:`~sqljobs.dashboard.server` maps every URL to its endpoint;
``page_routes``, ``api_routes`` and ``action_routes`` hold the endpoints, each handed the
one :class:`~sqljobs.dashboard.site.Site` they share; ``gate`` is the middleware in front
of them all. What they call on: ``pages`` (reads and templates), ``api`` (parameters and
JSON), ``actions``, ``metrics``, ``security``, ``forms``, ``reads``, ``flows`` (a
workflow's steps and children), ``render``.
"""

from .security import check_bind, is_loopback
from .server import create_app, serve

__all__ = ["check_bind", "create_app", "is_loopback", "serve"]
