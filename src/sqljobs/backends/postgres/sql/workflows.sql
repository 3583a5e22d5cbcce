-- Durable workflows (sqljobs.workflows). A checkpoint and a park are written only while
-- the workflow is `running` under the claim's token, on its row locked: a worker that lost
-- it writes nothing, and a reaper or a new claim waits for the one that holds it.

-- name: workflow_steps
SELECT position, name, kind, state, result, error, detail,
       attempt, extract(epoch FROM started_at)::float8 AS started_at,
       extract(epoch FROM ended_at)::float8 AS ended_at
FROM {schema}.sqljobs_workflow_steps WHERE job_id = %(id)s ORDER BY position

-- name: save_step
-- A step's checkpoint, inserted or moved on (a step's name never changes at its position:
-- a replay that meets another name fails before it writes), timed by the App's clock as
-- its wake-ups are. A checkpoint is progress: the
-- crashes of earlier attempts no longer make the workflow a poison job.
WITH held AS (
    SELECT id, attempts FROM {schema}.sqljobs_jobs
    WHERE id = %(id)s AND token = %(token)s AND state = 'running'
      -- durable whatever the session's setting, in this one round trip: the commit at the
      -- statement's end (or its transaction's) waits for the WAL flush
      AND set_config('synchronous_commit', 'on', true) IS NOT NULL
    FOR UPDATE
), progressed AS (
    UPDATE {schema}.sqljobs_jobs SET crashes = 0
    WHERE id = (SELECT id FROM held) AND crashes > 0
)
INSERT INTO {schema}.sqljobs_workflow_steps AS s
    (job_id, position, name, kind, state, result, error, detail, attempt, started_at,
     ended_at)
SELECT id, %(position)s, %(name)s, %(kind)s, %(state)s, %(result)s, %(error)s,
       %(detail)s, attempts, to_timestamp(%(now)s),
       CASE WHEN %(ended)s THEN to_timestamp(%(now)s) END
FROM held
ON CONFLICT (job_id, position) DO UPDATE
SET state = excluded.state, result = excluded.result, error = excluded.error,
    detail = excluded.detail, ended_at = excluded.ended_at, attempt = excluded.attempt
WHERE s.name = excluded.name
RETURNING job_id

-- name: lock_event
-- Emits and parks of one event name take turns: a park that finds no event is committed
-- before an emit looks for waiters, or it sees the event the emit committed.
SELECT pg_advisory_xact_lock(hashtext('sqljobs event ' || %(name)s))

-- name: lock_workflow
-- The row of a workflow still held under the claim's token, locked before a park locks
-- its children's rows, as a cancel by filter (in id order) takes the workflow first: so
-- neither waits for the other. (A child's end takes the child first, then the workflow:
-- on the deadlock that can make with a cancel, the backend runs the loser again, whole.)
SELECT id FROM {schema}.sqljobs_jobs
WHERE id = %(id)s AND token = %(token)s AND state = 'running'
FOR NO KEY UPDATE

-- name: park_workflow
-- The workflow gives its attempt back and waits (for a time, an event, its children),
-- unless what it waits for is there already: then it is due at once.
WITH parked AS (
    UPDATE {schema}.sqljobs_jobs AS j
    SET state = CASE WHEN w.due THEN 'pending' ELSE 'waiting' END,
        run_at = now(), attempts = j.attempts - 1, lease_until = NULL, prefetched = false,
        wake_at = CASE WHEN w.due THEN NULL ELSE to_timestamp(%(wake_at)s::float8) END,
        wait_event = CASE WHEN w.due THEN NULL ELSE %(event)s END,
        waiting_on = CASE WHEN w.due THEN 0 ELSE %(open)s END,
        after_policy = CASE WHEN %(open)s > 0 THEN 'always' ELSE j.after_policy END,
        collected = CASE WHEN %(open)s > 0 THEN NULL ELSE j.collected END  -- (its payload
        -- holds a group's results already: a child's end must not rewrite it again)
    FROM (SELECT (%(event)s::text IS NOT NULL AND EXISTS (
                      SELECT FROM {schema}.sqljobs_events
                      WHERE name = %(event)s AND id > %(after)s))
                 OR (%(wake_at)s::float8 IS NOT NULL AND %(wake_at)s::float8 <= %(now)s)
                 OR (%(children)s AND %(open)s = 0) AS due) AS w
    WHERE j.id = %(id)s AND j.token = %(token)s AND j.state = 'running'
    RETURNING j.state, j.queue
)
SELECT state, queue, CASE WHEN state = 'pending' THEN pg_notify(%(channel)s, queue) END AS notified
FROM parked

-- name: wake_workflows
-- Parked workflows whose time has come (a sleep's end, a wait's timeout), made due at that
-- time: a worker that resumes one counts the wait over by its run_at, whatever its clock.
WITH woken AS (
    UPDATE {schema}.sqljobs_jobs SET state = 'pending', run_at = wake_at, wake_at = NULL,
                                     wait_event = NULL
    WHERE id IN (SELECT id FROM {schema}.sqljobs_jobs
                 WHERE state = 'waiting' AND wake_at <= to_timestamp(%(now)s)
                 ORDER BY wake_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
      AND state = 'waiting'
    RETURNING queue
)
SELECT (SELECT count(*) FROM woken) AS n,
       (SELECT count(pg_notify(%(channel)s, q)) FROM (SELECT DISTINCT queue AS q FROM woken) AS d)
           AS notified

-- name: next_wake
SELECT extract(epoch FROM min(wake_at))::float8 AS at FROM {schema}.sqljobs_jobs
WHERE state = 'waiting' AND wake_at IS NOT NULL

-- name: insert_event
-- (emitted_at by the App's clock, as the pruner's cut-off is)
INSERT INTO {schema}.sqljobs_events (name, payload, emitted_at)
VALUES (%(name)s, %(payload)s, to_timestamp(%(now)s))
RETURNING id

-- name: wake_waiters
-- The workflows waiting for an event just emitted, made due (in the emit's transaction:
-- one that rolls back wakes none), by the function that lets a producer do it.
SELECT {schema}.sqljobs_wake_waiters(%(name)s, %(channel)s) AS n

-- name: first_event
-- The first event of a name after the one a workflow last took.
SELECT id, payload, extract(epoch FROM emitted_at)::float8 AS emitted_at
FROM {schema}.sqljobs_events WHERE name = %(name)s AND id > %(after)s ORDER BY id LIMIT 1

-- name: child_states
SELECT id, state, result, last_error FROM {schema}.sqljobs_jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: workflow_children
-- The children that workflows just cancelled still wait for (a cancel cascades to them).
SELECT detail FROM {schema}.sqljobs_workflow_steps
WHERE job_id = ANY(%(ids)s::bigint[]) AND state = 'waiting' AND kind IN ('run', 'gather')

-- name: workflow_jobs
-- Workflows, newest first (the tasks named are the App's workflows).
SELECT id, task, state, wait_event, extract(epoch FROM wake_at)::float8 AS wake_at,
       waiting_on, extract(epoch FROM created_at)::float8 AS created_at,
       extract(epoch FROM finished_at)::float8 AS finished_at,
       (SELECT count(*) FROM {schema}.sqljobs_workflow_steps s WHERE s.job_id = j.id) AS steps
FROM {schema}.sqljobs_jobs AS j
WHERE task = ANY(%(tasks)s::text[]) AND (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY id DESC LIMIT %(limit)s

-- name: prune_events
DELETE FROM {schema}.sqljobs_events
WHERE id IN (SELECT id FROM {schema}.sqljobs_events WHERE emitted_at < to_timestamp(%(before)s)
             ORDER BY emitted_at LIMIT %(limit)s)
