-- Finding jobs for an operator (sqljobs.jobs and sqljobs.admin). find_jobs, count_jobs and match_ids take a
-- {where}: the where_* fragments of the filter's given fields, joined by AND (no value is
-- ever written into the text; every one is a parameter).

-- name: find_jobs
SELECT id, queue, task, payload, key, state, priority, run_at, created_at, attempts,
       max_attempts, token, lease, lease_until, worker, started_at, finished_at, errors,
       lease_expiries, crashes, last_error, last_traceback, deadline_at, history, result,
       progress, limit_key, limit_max, rate_max, rate_window, parents, after_policy,
       waiting_on, key_hold, released_key, debounced
FROM sqljobs_jobs WHERE {where} ORDER BY id DESC LIMIT :limit

-- name: count_jobs
-- Counted up to :cap rows, so a count over a large table stops early.
SELECT count(*) AS n FROM (SELECT 1 FROM sqljobs_jobs WHERE {where} LIMIT :cap)

-- name: match_ids
-- One batch of a bulk action: the next ids below :before among the states it may change.
SELECT id FROM sqljobs_jobs
WHERE {where} AND id < :before AND state IN (SELECT value FROM json_each(:states))
ORDER BY id DESC LIMIT :limit

-- name: newest_id
SELECT coalesce(max(id), 0) AS id FROM sqljobs_jobs

-- name: first_job_from
-- The first job at or after an id, with its creation time: a step of the search that turns
-- a time into an id (jobs are numbered as they are created).
SELECT id, created_at FROM sqljobs_jobs WHERE id >= :id ORDER BY id LIMIT 1

-- name: oldest_id
SELECT coalesce(min(id), 0) AS id FROM sqljobs_jobs

-- name: where_state
state = :state
-- name: where_state_ended
-- An ended state, with the predicate of the index on ended jobs (SQLite uses a partial
-- index only when the query repeats its predicate).
state = :state AND state <> 'pending' AND state <> 'running'
-- name: where_queue
queue = :queue
-- name: where_task
task = :task
-- name: where_key
key = :key
-- name: where_text
instr(lower(payload), lower(:text)) > 0
-- name: where_since
created_at >= :since
-- name: where_until
created_at < :until
-- name: where_skip_tasks
task NOT IN (SELECT value FROM json_each(:skip_tasks))
-- name: where_range
-- The ids a query may read: from the time bounds, a page's cursor, a confirmed count's
-- newest id and a bounded scan's share.
id >= :low AND id < :high
-- name: where_ids
id IN (SELECT value FROM json_each(:ids))

-- name: retry_ids
-- By hand (app.retry_job, retry_dead, retry_jobs): fresh attempts, the history keeps the old
-- ones and notes the retry; a cancelled job that runs after others is left alone
-- while any of them is not done (it would run before them).
UPDATE sqljobs_jobs
SET state = 'pending', run_at = :now, finished_at = NULL, attempts = 0,
    lease_expiries = 0, crashes = 0, last_error = NULL, last_traceback = NULL,
    result = NULL, progress = NULL,
    history = json_insert(history, '$[#]', json_object(
        'outcome', 'retried', 'from', state, 'started_at', :now, 'ended_at', :now,
        'error', 'sent back to pending by hand: attempts start again')),
    deadline_at = CASE WHEN deadline_at IS NULL THEN NULL
                       ELSE :now + (deadline_at - created_at) END
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('dead', 'cancelled')
  AND NOT (state = 'cancelled' AND parents IS NOT NULL AND EXISTS (
      SELECT 1 FROM json_each(sqljobs_jobs.parents) AS e
      JOIN sqljobs_jobs AS p ON p.id = e.value WHERE p.state <> 'done'))

-- name: cancel_ids
-- A batch of a cancel by filter (app.cancel_many, cancel_jobs): pending or waiting jobs at
-- once; running ones too, so their outcome (fenced on `running`) is never written.
UPDATE sqljobs_jobs
SET state = 'cancelled', finished_at = :now, prefetched = 0,
    lease_until = CASE WHEN state = 'running' THEN lease_until END,  -- (see cancel_job)
    waiting_on = 0,
    history = CASE WHEN state = 'running' THEN json_insert(history, '$[#]', json_object(
        'attempt', attempts, 'outcome', 'cancelled', 'started_at', started_at,
        'ended_at', :now, 'worker', worker, 'error', 'cancelled while running'))
        ELSE history END
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('pending', 'waiting', 'running')
RETURNING id, children

-- name: delete_ids
-- Only ended jobs: a pending one may be a parent others wait for, a running one is in a
-- worker's hands (cancel it first).
DELETE FROM sqljobs_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('done', 'dead', 'cancelled')

-- name: worker_statuses
SELECT id, host, pid, queues, concurrency, heartbeat_interval, started_at, last_seen, tasks
FROM sqljobs_workers WHERE last_seen >= :now - 2.5 * heartbeat_interval
ORDER BY host, pid

-- name: running_of
-- The running jobs of these workers (the partial index on running leases holds them).
SELECT id, queue, task, payload, key, state, priority, run_at, created_at, attempts,
       max_attempts, token, lease, lease_until, worker, started_at, finished_at, errors,
       lease_expiries, crashes, last_error, last_traceback, deadline_at, history, result,
       progress, limit_key, limit_max, rate_max, rate_window, parents, after_policy,
       waiting_on, key_hold, released_key, debounced
FROM sqljobs_jobs
WHERE state = 'running' AND worker IN (SELECT value FROM json_each(:workers))
ORDER BY id

-- name: job_children
-- A child is always enqueued after its parent, so has a higher id; the partial index holds
-- only jobs that have parents.
SELECT id FROM sqljobs_jobs INDEXED BY sqljobs_jobs_dependent
WHERE parents IS NOT NULL AND id > :id
  AND EXISTS (SELECT 1 FROM json_each(parents) WHERE value = :id)
ORDER BY id LIMIT :limit
