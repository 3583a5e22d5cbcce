-- Finding jobs for an operator (sqljobs.jobs and sqljobs.admin). find_jobs, count_jobs and match_ids take a
-- {where}: the where_* fragments of the filter's given fields, joined by AND (no value is
-- ever written into the text; every one is a parameter).

-- name: find_jobs
SELECT {job_columns} FROM {schema}.sqljobs_jobs WHERE {where} ORDER BY id DESC LIMIT %(limit)s

-- name: count_jobs
-- Counted up to %(cap)s rows, so a count over a large table stops early.
SELECT count(*) AS n FROM (SELECT 1 FROM {schema}.sqljobs_jobs WHERE {where} LIMIT %(cap)s) AS c

-- name: match_ids
-- One batch of a bulk action: the next ids below %(before)s among the states it may change.
SELECT id FROM {schema}.sqljobs_jobs
WHERE {where} AND id < %(before)s AND state = ANY(%(states)s::text[])
ORDER BY id DESC LIMIT %(limit)s

-- name: newest_id
SELECT coalesce(max(id), 0) AS id FROM {schema}.sqljobs_jobs

-- name: first_job_from
-- The first job at or after an id, with its creation time: a step of the search that turns
-- a time into an id (jobs are numbered as they are created).
SELECT id, extract(epoch FROM created_at)::float8 AS created_at FROM {schema}.sqljobs_jobs
WHERE id >= %(id)s ORDER BY id LIMIT 1

-- name: oldest_id
SELECT coalesce(min(id), 0) AS id FROM {schema}.sqljobs_jobs

-- name: where_state
state = %(state)s::text
-- name: where_state_ended
-- An ended state, with the predicate of the index on ended jobs (SQLite uses a partial
-- index only when the query repeats its predicate).
state = %(state)s::text AND state <> 'pending' AND state <> 'running'
-- name: where_queue
queue = %(queue)s::text
-- name: where_task
task = %(task)s::text
-- name: where_key
key = %(key)s::text
-- name: where_text
strpos(lower(payload), lower(%(text)s::text)) > 0
-- name: where_since
created_at >= to_timestamp(%(since)s)
-- name: where_until
created_at < to_timestamp(%(until)s)
-- name: where_skip_tasks
task <> ALL(%(skip_tasks)s::text[])
-- name: where_range
-- The ids a query may read: from the time bounds, a page's cursor, a confirmed count's
-- newest id and a bounded scan's share.
id >= %(low)s AND id < %(high)s
-- name: where_ids
id = ANY(%(ids)s::bigint[])

-- name: retry_ids
-- By hand (app.retry_job, retry_dead, retry_jobs): fresh attempts, the history keeps the old
-- ones and notes the retry; a cancelled job that runs after others is left alone
-- while any of them is not done (it would run before them).
UPDATE {schema}.sqljobs_jobs AS j
SET state = 'pending', run_at = now(), finished_at = NULL, attempts = 0,
    lease_expiries = 0, crashes = 0, last_error = NULL, last_traceback = NULL,
    result = NULL, progress = NULL,
    history = j.history || jsonb_build_array(jsonb_build_object(
        'outcome', 'retried', 'from', j.state, 'started_at', extract(epoch FROM now()),
        'ended_at', extract(epoch FROM now()),
        'error', 'sent back to pending by hand: attempts start again')),
    deadline_at = CASE WHEN j.deadline_at IS NULL THEN NULL
                       ELSE now() + (j.deadline_at - j.created_at) END
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state IN ('dead', 'cancelled')
  AND NOT (j.state = 'cancelled' AND j.parents IS NOT NULL AND EXISTS (
      SELECT 1 FROM {schema}.sqljobs_jobs AS p
      WHERE p.id = ANY(j.parents) AND p.state <> 'done'))

-- name: cancel_ids
-- A batch of a cancel by filter (app.cancel_many, cancel_jobs): pending or waiting jobs at
-- once; running ones too, so their outcome (fenced on `running`) is never written.
WITH cancelled AS (
    UPDATE {schema}.sqljobs_jobs AS j
    SET state = 'cancelled', finished_at = now(), prefetched = false, waiting_on = 0,
        lease_until = CASE WHEN j.state = 'running' THEN j.lease_until END,  -- (cancel_job)
        history = CASE WHEN j.state = 'running' THEN j.history || jsonb_build_array(
            jsonb_build_object('attempt', j.attempts, 'outcome', 'cancelled',
                'started_at', extract(epoch FROM j.started_at),
                'ended_at', extract(epoch FROM now()), 'worker', j.worker,
                'error', 'cancelled while running'))
            ELSE j.history END
    WHERE j.id IN (
        SELECT id FROM {schema}.sqljobs_jobs
        WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('pending', 'waiting', 'running')
        ORDER BY id  -- (in id order, as lock_parents: a workflow before its children)
        FOR UPDATE)  -- waits out a claim or heartbeat on a row: skipping it would miss it
    RETURNING j.id, j.children
)
SELECT id, children,
       (SELECT count(pg_notify(%(channel)s, '#cancel:*'))
        FROM (SELECT 1 FROM cancelled LIMIT 1) AS one) AS notified
FROM cancelled

-- name: delete_ids
-- Only ended jobs: a pending one may be a parent others wait for, a running one is in a
-- worker's hands (cancel it first).
DELETE FROM {schema}.sqljobs_jobs
WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('done', 'dead', 'cancelled')

-- name: worker_statuses
SELECT id, host, pid, queues, concurrency, heartbeat_interval,
       extract(epoch FROM started_at)::float8 AS started_at,
       extract(epoch FROM last_seen)::float8 AS last_seen, tasks
FROM {schema}.sqljobs_workers
WHERE last_seen >= now() - make_interval(secs => 2.5 * heartbeat_interval)
ORDER BY host, pid

-- name: running_of
-- The running jobs of these workers (the partial index on running leases holds them).
SELECT {job_columns} FROM {schema}.sqljobs_jobs
WHERE state = 'running' AND worker = ANY(%(workers)s::text[])
ORDER BY id

-- name: job_children
-- A child is always enqueued after its parent, so has a higher id; the partial index holds
-- only jobs that have parents.
SELECT id FROM {schema}.sqljobs_jobs
WHERE parents IS NOT NULL AND id > %(id)s AND %(id)s = ANY(parents)
ORDER BY id LIMIT %(limit)s
