-- Named statements for PostgreSQL. {schema} is the configured schema; parameters are
-- psycopg's %(name)s. Times cross the boundary as Unix seconds (float). Columns are named
-- after the fields they fill (sqljobs.backends.rows reads them by name).
-- {queue_filter} is empty (all queues) or filter_queues, then, for a worker, filter_tasks
-- (the fragments at the end): a worker claims only the tasks it has registered. Claims
-- and next_due say the same with their levels and level fragments (levels_of_queues).
-- Jobs of a paused queue (sqljobs_queues) are never claimed: NOT IN (subquery) is one
-- hashed subplan, read once per statement, and leaves the claim's ordered index scan
-- alone (`<> ALL(ARRAY(...))` made the planner expect one row and sort 100k on disk).
-- Jobs under a concurrency limit are claimed by limits.sql's statements, not these.
-- The hot path's fenced writes (done, began, mark_started) match each job to its token as
-- `id = ANY(ids) AND token = tokens[array_position(ids, id)]`, not by joining
-- unnest(ids, tokens): as a join, on the table statistics a queue has (few running rows),
-- the planner's generic plan was a nested loop that walked every running row and, for
-- each, the whole unnest, building a whole-row copy of every pair for EvalPlanQual:
-- running x batch rows a statement, so each job's share of the server's work grew with
-- the jobs in flight.

-- name: insert_jobs
-- A batch arrives as one JSON array of [queue, task, payload, key, priority, run_at,
-- deadline_at, max_attempts, lease, key_hold, delay, limit_key, limit_max, rate_max,
-- rate_window, key_retention] rows: one parameter, parsed by the
-- server, is far cheaper than typed arrays built element by element in Python. A delay,
-- if given, counts from the server's now() and wins over run_at (the client's clock).
-- A job inserted although the statement's snapshot shows a row with its key met that row
-- being deleted (or its key released) by a transaction that committed after the snapshot,
-- most likely a prune, whose kept key the snapshot cannot show: `kept` reads it afresh
-- (sqljobs_key_kept_meanwhile), the job it names being the answer, the new row to be
-- undone (%(undo)s: by failing the statement, to be run again; else by the caller).
-- `existing` is probed for every keyed row (a left join's condition on the outer row
-- alone does not spare the inner probe) and the function runs only in that race.
WITH input AS (
    SELECT e.ord, nextval('{schema}.sqljobs_jobs_id_seq'::regclass) AS new_id,
           e.j ->> 0 AS queue, e.j ->> 1 AS task, e.j ->> 2 AS payload, e.j ->> 3 AS key,
           (e.j ->> 4)::int AS priority, (e.j ->> 5)::float8 AS run_at,
           (e.j ->> 6)::float8 AS deadline_at, (e.j ->> 7)::int AS max_attempts,
           (e.j ->> 8)::float8 AS lease, (e.j ->> 9)::float8 AS key_hold,
           (e.j ->> 10)::float8 AS delay, e.j ->> 11 AS limit_key, (e.j ->> 12)::int AS limit_max,
           (e.j ->> 13)::int AS rate_max, (e.j ->> 14)::float8 AS rate_window,
           (e.j ->> 15)::float8 AS key_retention
    FROM jsonb_array_elements(%(jobs)s::jsonb) WITH ORDINALITY AS e(j, ord)
), spent AS (  -- keys kept after their jobs' rows were pruned: each one primary key probe
    SELECT s.key, s.job_id FROM {schema}.sqljobs_spent_keys AS s
    WHERE s.key IN (SELECT key FROM input) AND s.expires_at > to_timestamp(%(now)s)
), inserted AS (
    INSERT INTO {schema}.sqljobs_jobs
        (id, queue, task, payload, key, priority, run_at, deadline_at, max_attempts, lease,
         key_hold, limit_key, limit_max, rate_max, rate_window, key_retention)
    SELECT new_id, queue, task, payload, key, priority,
           coalesce(now() + make_interval(secs => delay), to_timestamp(run_at)),
           to_timestamp(deadline_at), max_attempts, lease, key_hold, limit_key, limit_max,
           rate_max, rate_window, key_retention
    FROM input WHERE key IS NULL OR key NOT IN (SELECT key FROM spent) ORDER BY ord
    ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id, key
), notified AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n FROM unnest(%(notify)s::text[]) AS queue
)
SELECT input.ord,
       coalesce(mine.id, same_batch.id, existing.id, spent.job_id) AS id,
       mine.id IS NOT NULL AS created,
       CASE WHEN mine.id IS NOT NULL AND existing.id IS NOT NULL
            THEN {schema}.sqljobs_key_kept_meanwhile(input.key, %(now)s, %(undo)s)
       END AS kept
FROM input
LEFT JOIN inserted AS mine ON mine.id = input.new_id
LEFT JOIN inserted AS same_batch ON mine.id IS NULL AND same_batch.key = input.key
LEFT JOIN {schema}.sqljobs_jobs AS existing ON existing.key = input.key
LEFT JOIN spent ON mine.id IS NULL AND spent.key = input.key
CROSS JOIN notified
ORDER BY input.ord

-- name: insert_unkeyed_jobs
-- The common case, no business keys: nothing can conflict, so no joins are needed.
WITH input AS (
    SELECT e.ord, nextval('{schema}.sqljobs_jobs_id_seq'::regclass) AS new_id,
           e.j ->> 0 AS queue, e.j ->> 1 AS task, e.j ->> 2 AS payload,
           (e.j ->> 4)::int AS priority, (e.j ->> 5)::float8 AS run_at,
           (e.j ->> 6)::float8 AS deadline_at, (e.j ->> 7)::int AS max_attempts,
           (e.j ->> 8)::float8 AS lease, (e.j ->> 9)::float8 AS key_hold,
           (e.j ->> 10)::float8 AS delay, e.j ->> 11 AS limit_key, (e.j ->> 12)::int AS limit_max,
           (e.j ->> 13)::int AS rate_max, (e.j ->> 14)::float8 AS rate_window
    FROM jsonb_array_elements(%(jobs)s::jsonb) WITH ORDINALITY AS e(j, ord)
), inserted AS (
    INSERT INTO {schema}.sqljobs_jobs
        (id, queue, task, payload, priority, run_at, deadline_at, max_attempts, lease,
         limit_key, limit_max, rate_max, rate_window)
    SELECT new_id, queue, task, payload, priority,
           coalesce(now() + make_interval(secs => delay), to_timestamp(run_at)),
           to_timestamp(deadline_at), max_attempts, lease, limit_key, limit_max, rate_max,
           rate_window
    FROM input ORDER BY ord
), notified AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n FROM unnest(%(notify)s::text[]) AS queue
)
SELECT input.ord, input.new_id AS id, true AS created
FROM input CROSS JOIN notified ORDER BY input.ord

-- name: release_keys
-- Finished jobs whose key_scope has run out give their keys up to new enqueues.
UPDATE {schema}.sqljobs_jobs SET released_key = key, key = NULL
WHERE key = ANY(%(keys)s::text[]) AND state IN ('done', 'dead', 'cancelled')
  AND key_hold IS NOT NULL AND finished_at + make_interval(secs => key_hold) <= now()

-- name: undo_inserts
-- Jobs a keyed enqueue inserted in the caller's transaction past a key kept meanwhile.
DELETE FROM {schema}.sqljobs_jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: job_ids_by_key
SELECT key, id FROM {schema}.sqljobs_jobs WHERE key = ANY(%(keys)s::text[])

-- name: debounce_job
-- A debounced enqueue, one row as insert_jobs reads them (see sqljobs_debounce).
SELECT job_id AS id, created FROM {schema}.sqljobs_debounce(%(job)s::jsonb)

-- name: claim
-- The first %(start_now)s jobs (in claim order) start at once; the rest wait in the
-- worker's buffer, marked `prefetched` so that a crash of the worker does not blame them.
-- `began` clears the mark of buffered jobs that have started since the last round trip.
-- The jobs are read level by level (see levels_of_queues), each level's due
-- jobs from the head of its index range, so jobs not yet due are never read.
-- `began` runs before the jobs are picked (`wanted` reads it): see level_picked.
WITH RECURSIVE began AS (
    UPDATE {schema}.sqljobs_jobs AS j SET prefetched = false
    WHERE j.id = ANY(%(began_ids)s::bigint[]) AND j.state = 'running'
      AND j.token = (%(began_tokens)s::bigint[])[array_position(%(began_ids)s::bigint[], j.id)]
      AND cardinality(%(began_ids)s::bigint[]) > 0  -- none: no scan at all
    RETURNING 1
), {levels}, wanted (n) AS (SELECT %(limit)s::integer FROM (SELECT count(*) FROM began) AS b
), {level_picked}, chosen AS (  -- (see levels_of_queues: an array, found by key, whatever the row guess)
    SELECT coalesce(array_agg(id ORDER BY priority DESC, run_at, id), '{}') AS ids FROM picked
)
{claim_chosen}

-- name: complete_and_claim
-- The hot path in one round trip and one commit: complete a batch, claim the next.
-- It claims with `claim`'s fragments (level_picked, claim_chosen). %(results)s and
-- %(progress)s map job ids to JSON texts (or are NULL);
-- a job a caller waits on (`waited`) announces its end with a NOTIFY, and a limited job's
-- end frees a slot: it wakes the workers of its queue. Those NOTIFYs are aggregates of the
-- last SELECT, beside the ids: a CTE of two subqueries cost each claim more planning.
-- `done` and `began` run before the jobs are picked (`wanted` reads them): see level_picked.
WITH RECURSIVE done AS (
    UPDATE {schema}.sqljobs_jobs AS j
    SET state = 'done', finished_at = now(), lease_until = NULL,
        result = %(results)s::jsonb ->> j.id::text,
        progress = coalesce(%(progress)s::jsonb ->> j.id::text, j.progress)
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'running' AND j.children = 0
      AND j.token = (%(tokens)s::bigint[])[array_position(%(ids)s::bigint[], j.id)]
    RETURNING j.id, j.waited, j.queue, j.limit_key
), began AS (
    UPDATE {schema}.sqljobs_jobs AS j SET prefetched = false
    WHERE j.id = ANY(%(began_ids)s::bigint[]) AND j.state = 'running'
      AND j.token = (%(began_tokens)s::bigint[])[array_position(%(began_ids)s::bigint[], j.id)]
      AND cardinality(%(began_ids)s::bigint[]) > 0  -- none: no scan at all
    RETURNING 1
), {levels}, wanted (n) AS (
    SELECT %(limit)s::integer FROM (SELECT count(*) FROM began) AS b, (SELECT count(*) FROM done) AS d
), {level_picked}, chosen AS (
    SELECT coalesce(array_agg(id ORDER BY priority DESC, run_at, id), '{}') AS ids FROM picked
), claimed AS (
    {claim_chosen}
)
SELECT d.ids, c.* FROM (
    SELECT array_agg(id) AS ids,
           -- (FILTER: each NOTIFY is sent only for the rows it is about; kept, though never
           -- read, because pg_notify is volatile)
           count(pg_notify(%(channel)s, '#end:' || id)) FILTER (WHERE waited)
           + count(pg_notify(%(channel)s, queue)) FILTER (WHERE limit_key IS NOT NULL)
           AS notified
    FROM done) AS d
LEFT JOIN claimed AS c ON true

-- name: claim_suspect
-- A job that was in two workers that crashed, claimed to run alone once the worker has
-- emptied: `prefetched` (not started) until then, so a crash meanwhile does not blame it.
WITH picked AS MATERIALIZED (
    SELECT id FROM {schema}.sqljobs_jobs
    WHERE state = 'pending' AND run_at <= now() AND crashes >= 2
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
      AND (%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))
      AND queue NOT IN (SELECT name FROM {schema}.sqljobs_queues WHERE paused)
    ORDER BY priority DESC, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.sqljobs_jobs AS j
SET state = 'running', attempts = j.attempts + 1, token = j.token + 1,
    worker = %(worker)s, started_at = now(), prefetched = true,
    lease = coalesce((%(leases)s::jsonb ->> j.task)::float8, j.lease),
    lease_until = now() + make_interval(secs => coalesce((%(leases)s::jsonb ->> j.task)::float8,
                                                         j.lease))
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.task, j.payload, j.queue, j.priority, j.attempts AS attempt, j.token,
          j.lease, j.max_attempts, extract(epoch FROM j.created_at)::float8 AS created_at,
          extract(epoch FROM j.deadline_at)::float8 AS deadline_at, j.key,
          extract(epoch FROM j.run_at)::float8 AS run_at

-- name: next_due
-- In how many seconds the next delayed job falls due (by the server's clock, which claims
-- read): the earliest head of the claim's levels, one index probe a level, however many
-- jobs other queues hold (reading the pending jobs in run_at order and filtering by queue
-- walked a backlog of another queue whole, its time growing with that backlog).
-- And in how many seconds the first job from crashed workers does (`suspect_wait`, as
-- claim_suspect filters them): a worker wakes for it then, as for a retry.
-- A paused queue's jobs count for neither: they wait for its resume.
-- Also when the earliest schedule that is not paused falls due (Unix seconds, as the
-- scheduler writes them; one probe of its index): the scheduler of a worker that asks
-- this needs no pass of its own before then.
WITH RECURSIVE {levels}
SELECT (SELECT extract(epoch FROM min(f.run_at) - now())::float8
        FROM levels AS l CROSS JOIN LATERAL (
            SELECT run_at FROM {schema}.sqljobs_jobs
            WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
              AND priority = l.priority {level_queue} {level_tasks}
            ORDER BY run_at LIMIT 1) AS f) AS wait,
       (SELECT extract(epoch FROM min(run_at) - now())::float8 FROM {schema}.sqljobs_jobs
        WHERE state = 'pending' AND crashes >= 2 {queue_filter}
          AND queue NOT IN (SELECT name FROM {schema}.sqljobs_queues WHERE paused))
           AS suspect_wait,
       least((SELECT extract(epoch FROM min(next_run_at))::float8
              FROM {schema}.sqljobs_schedules WHERE NOT paused),
             (SELECT extract(epoch FROM min(wake_at))::float8 FROM {schema}.sqljobs_jobs
              WHERE state = 'waiting' AND wake_at IS NOT NULL)) AS schedule_at

-- name: complete_jobs
WITH began AS (
    UPDATE {schema}.sqljobs_jobs AS j SET prefetched = false
    WHERE j.id = ANY(%(began_ids)s::bigint[]) AND j.state = 'running'
      AND j.token = (%(began_tokens)s::bigint[])[array_position(%(began_ids)s::bigint[], j.id)]
      AND cardinality(%(began_ids)s::bigint[]) > 0  -- none: no scan at all
    RETURNING 1
), done AS (
    UPDATE {schema}.sqljobs_jobs AS j
    SET state = 'done', finished_at = now(), lease_until = NULL,
        result = %(results)s::jsonb ->> j.id::text,
        progress = coalesce(%(progress)s::jsonb ->> j.id::text, j.progress)
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state = 'running' AND j.children = 0
      AND j.token = (%(tokens)s::bigint[])[array_position(%(ids)s::bigint[], j.id)]
    RETURNING j.id, j.waited, j.queue, j.limit_key
), notified AS (  -- as in complete_and_claim (a CTE: run once, whatever the join)
    SELECT count(pg_notify(%(channel)s, '#end:' || id)) FILTER (WHERE waited)
           + count(pg_notify(%(channel)s, queue)) FILTER (WHERE limit_key IS NOT NULL) AS n
    FROM done
)
SELECT id FROM done CROSS JOIN notified

-- name: mark_started
UPDATE {schema}.sqljobs_jobs AS j SET prefetched = false
WHERE j.id = ANY(%(began_ids)s::bigint[]) AND j.state = 'running'
  AND j.token = (%(began_tokens)s::bigint[])[array_position(%(began_ids)s::bigint[], j.id)]

-- name: finish_jobs
WITH finished AS (
UPDATE {schema}.sqljobs_jobs AS j
SET state = o.state,
    run_at = CASE WHEN o.delay IS NULL THEN j.run_at
                  ELSE now() + make_interval(secs => o.delay) END,
    attempts = j.attempts - o.uncharge,
    finished_at = CASE WHEN o.state IN ('done', 'dead', 'cancelled') THEN now() END,
    lease_until = CASE WHEN o.hold THEN j.lease_until END,  -- (see renew_holds)
    last_error = coalesce(o.error, j.last_error),
    last_traceback = CASE WHEN o.error IS NULL THEN j.last_traceback ELSE o.traceback END,
    errors = j.errors + o.errors,
    lease_expiries = j.lease_expiries + o.lease_expiries,
    crashes = j.crashes + o.crashes,
    history = CASE WHEN o.history IS NULL THEN j.history
                   ELSE j.history || jsonb_build_array(o.history::jsonb) END,
    result = coalesce(o.result, j.result),
    progress = coalesce(o.progress, j.progress)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(states)s::text[], %(delays)s::float8[],
            %(uncharges)s::int[], %(errors_text)s::text[], %(tracebacks)s::text[],
            %(errors)s::int[], %(lease_expiries)s::int[], %(crashes)s::int[],
            %(histories)s::text[], %(results)s::text[], %(progresses)s::text[],
            %(holds)s::bool[])
     AS o(id, token, state, delay, uncharge, error, traceback, errors, lease_expiries,
          crashes, history, result, progress, hold)
WHERE j.id = o.id AND j.token = o.token AND j.state = 'running'
  AND (j.children = 0 OR o.state NOT IN ('done', 'dead', 'cancelled') OR %(with_children)s)
RETURNING j.id, j.waited, j.state, j.queue, j.limit_key, j.children
), ended AS (  -- and a limited job that left `running` freed a slot
    SELECT (SELECT count(pg_notify(%(channel)s, '#end:' || id)) FROM finished
            WHERE waited AND state IN ('done', 'dead'))
           + (SELECT count(pg_notify(%(channel)s, queue)) FROM finished
              WHERE limit_key IS NOT NULL) AS n
)
SELECT id, state, children FROM finished CROSS JOIN ended

-- name: amend_done_job
-- A job its handler completed inside ctx.transaction(): what came after the commit (the
-- return value, or what the handler raised), fenced by the attempt's token on the job
-- still being done (pruned, retried by an operator: nothing is written).
UPDATE {schema}.sqljobs_jobs
SET result = coalesce(%(result)s, result),
    last_error = coalesce(%(error)s, last_error),
    last_traceback = CASE WHEN %(error)s::text IS NULL THEN last_traceback
                          ELSE %(traceback)s END,
    history = CASE WHEN %(history)s::text IS NULL THEN history
                   ELSE history || jsonb_build_array(%(history)s::jsonb) END
WHERE id = %(id)s AND token = %(token)s AND state = 'done'
RETURNING id

-- name: renew_leases
WITH seen AS (
    UPDATE {schema}.sqljobs_workers SET last_seen = now() WHERE id = %(worker)s
)
UPDATE {schema}.sqljobs_jobs AS j
SET lease_until = now() + make_interval(secs => j.lease)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
WHERE j.id = h.id AND j.token = h.token AND j.state = 'running'
RETURNING j.id

-- name: renew_holds
-- Handlers that run on after their job left `running` (cancelled, or timed out with the
-- outcome written): their rows keep lease_until, renewed by the worker's heartbeat, and
-- so hold the job's concurrency slot and its schedule's overlap, until end_holds.
UPDATE {schema}.sqljobs_jobs AS j
SET lease_until = now() + make_interval(secs => j.lease)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
WHERE j.id = h.id AND j.token = h.token AND j.state <> 'running'
  AND j.lease_until IS NOT NULL

-- name: end_holds
-- Those handlers have ended: the slots they held are free, and the workers of a limited
-- job's queue are told.
WITH ended AS (
    UPDATE {schema}.sqljobs_jobs AS j SET lease_until = NULL
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS h(id, token)
    WHERE j.id = h.id AND j.token = h.token AND j.state <> 'running'
      AND j.lease_until IS NOT NULL
    RETURNING j.queue, j.limit_key
)
SELECT count(pg_notify(%(channel)s, queue)) FILTER (WHERE limit_key IS NOT NULL) AS n
FROM ended

-- name: save_progress
-- What handlers reported with ctx.progress(), fenced like every other write about a
-- claimed job: a stale worker's report is refused.
UPDATE {schema}.sqljobs_jobs AS j SET progress = h.progress
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(progresses)s::text[])
     AS h(id, token, progress)
WHERE j.id = h.id AND j.token = h.token AND j.state = 'running'
RETURNING j.id

-- name: ended_among
-- Of the jobs callers wait on, those that have ended (one query however many wait).
SELECT id FROM {schema}.sqljobs_jobs
WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('done', 'dead', 'cancelled')

-- name: cancelled_among
-- Of the jobs a heartbeat could not renew, those that were cancelled (not lost).
SELECT id FROM {schema}.sqljobs_jobs WHERE id = ANY(%(ids)s::bigint[]) AND state = 'cancelled'

-- name: watch_job
-- A caller is about to wait on this job: its end will send a NOTIFY.
UPDATE {schema}.sqljobs_jobs SET waited = true
WHERE id = %(id)s AND NOT waited AND state IN ('pending', 'waiting', 'running')

-- name: register_worker
INSERT INTO {schema}.sqljobs_workers
    (id, host, pid, queues, concurrency, heartbeat_interval, started_at, last_seen, tasks)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s, %(heartbeat_interval)s,
        now(), now(), %(tasks)s)
ON CONFLICT (id) DO UPDATE SET last_seen = now()

-- name: save_task
-- A worker's task as its code defines it: what an enqueue by name elsewhere should use.
INSERT INTO {schema}.sqljobs_tasks
    (name, queue, priority, lease, max_attempts, deadline, concurrency, keyed, rate_max,
     rate_window, updated_at)
VALUES (%(name)s, %(queue)s, %(priority)s, %(lease)s, %(max_attempts)s, %(deadline)s,
        %(concurrency)s, %(keyed)s, %(rate_max)s, %(rate_window)s, now())
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, lease = excluded.lease,
    max_attempts = excluded.max_attempts, deadline = excluded.deadline,
    concurrency = excluded.concurrency, keyed = excluded.keyed,
    rate_max = excluded.rate_max, rate_window = excluded.rate_window,
    updated_at = excluded.updated_at

-- name: task_names
SELECT name FROM {schema}.sqljobs_tasks

-- name: task_info
SELECT name, queue, priority, lease, max_attempts, deadline, concurrency, keyed, rate_max,
       rate_window
FROM {schema}.sqljobs_tasks WHERE name = %(name)s

-- name: unregister_worker
DELETE FROM {schema}.sqljobs_workers WHERE id = %(worker)s

-- name: expired_jobs
SELECT j.id, j.token, j.task, j.attempts AS attempt, j.max_attempts, j.lease,
       extract(epoch FROM j.started_at)::float8 AS started_at,
       extract(epoch FROM j.lease_until)::float8 AS lease_until,
       extract(epoch FROM j.deadline_at)::float8 AS deadline_at, j.worker,
       (w.id IS NOT NULL
        AND w.last_seen >= now() - make_interval(secs => 2.5 * w.heartbeat_interval))
           AS worker_alive,
       j.errors, j.lease_expiries, j.crashes, j.prefetched, j.queue,
       extract(epoch FROM now())::float8 AS now
FROM {schema}.sqljobs_jobs AS j LEFT JOIN {schema}.sqljobs_workers AS w ON w.id = j.worker
WHERE j.state = 'running' AND j.lease_until < now()
ORDER BY j.lease_until
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED

-- name: jobs_of_worker
SELECT j.id, j.token, j.task, j.attempts AS attempt, j.max_attempts, j.lease,
       extract(epoch FROM j.started_at)::float8 AS started_at,
       extract(epoch FROM j.lease_until)::float8 AS lease_until,
       extract(epoch FROM j.deadline_at)::float8 AS deadline_at, j.worker,
       false AS worker_alive, j.errors, j.lease_expiries, j.crashes, j.prefetched, j.queue,
       extract(epoch FROM now())::float8 AS now
FROM {schema}.sqljobs_jobs AS j
WHERE j.state = 'running' AND j.worker = %(worker)s
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED

-- name: count_by_queue_state
-- Jobs by queue and state, but for pending ones (pending_by_queue), each part read
-- from a partial index and none from the table, which keeps every finished job until the
-- pruner takes it: running from the lease index, dead from sqljobs_jobs_ended, both exact.
-- Done and cancelled jobs grow with retention, so each queue's are counted only up to
-- cap + 1 (a row more than the cap says "more than the cap"), and the queues that have
-- any are found by a skip scan of sqljobs_jobs_ended (the next queue after the last one
-- found), a few index seeks each. The repeated `state <> 'pending' AND state <> 'running'`
-- (done, dead or cancelled) is sqljobs_jobs_ended's predicate: the planner cannot prove
-- that `state = e.state` implies it.
WITH RECURSIVE ended (state, queue) AS (
    SELECT s.state, (SELECT min(queue) FROM {schema}.sqljobs_jobs
                     WHERE state = s.state AND state <> 'pending' AND state <> 'running')
    FROM (VALUES ('done'), ('cancelled')) AS s (state)
    UNION ALL
    SELECT e.state, (SELECT min(queue) FROM {schema}.sqljobs_jobs
                     WHERE state = e.state AND queue > e.queue
                       AND state <> 'pending' AND state <> 'running')
    FROM ended AS e WHERE e.queue IS NOT NULL
)
SELECT queue, state,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.sqljobs_jobs
                              WHERE state = e.state AND queue = e.queue
                                AND state <> 'pending' AND state <> 'running'
                              LIMIT %(cap)s + 1) AS upto) AS jobs
FROM ended AS e WHERE queue IS NOT NULL
UNION ALL
SELECT queue, 'dead', count(*) FROM {schema}.sqljobs_jobs
WHERE state = 'dead' AND state <> 'pending' AND state <> 'running' GROUP BY queue
UNION ALL
SELECT queue, 'waiting', count(*) FROM {schema}.sqljobs_jobs
WHERE state = 'waiting' AND state <> 'pending' AND state <> 'running' GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*) FROM {schema}.sqljobs_jobs
WHERE state = 'running' GROUP BY queue

-- name: pending_by_queue
-- Pending jobs by queue, and how long the oldest due one has waited (by the server's
-- clock), from the claim index (it holds queue and run_at, in queue order) and the suspects
-- index (usually empty); a queue may come in two rows, which add up. Their predicates
-- together are `state = 'pending'`, which no partial index has on its own.
SELECT queue, count(*) AS pending,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8 AS age
FROM {schema}.sqljobs_jobs WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
GROUP BY queue
UNION ALL  -- jobs under a concurrency limit, from their own index
SELECT queue, count(*) AS pending,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8 AS age
FROM {schema}.sqljobs_jobs WHERE state = 'pending' AND limit_key IS NOT NULL GROUP BY queue
UNION ALL
SELECT queue, count(*) AS pending,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8 AS age
FROM {schema}.sqljobs_jobs WHERE state = 'pending' AND crashes >= 2 AND limit_key IS NULL
GROUP BY queue

-- name: pending_by_task
-- Pending jobs by task, through the same two indexes; a task may come in two rows, which
-- add up. (`run_at > '-infinity'`, true of every job, lets the first part read
-- sqljobs_jobs_claim_any, the smaller.)
SELECT task, count(*) AS pending FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL AND run_at > '-infinity'
GROUP BY task
UNION ALL
SELECT task, count(*) AS pending FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND limit_key IS NOT NULL GROUP BY task
UNION ALL
SELECT task, count(*) AS pending FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND crashes >= 2 AND limit_key IS NULL GROUP BY task

-- name: pending_by_task_in_queue
-- One queue's pending jobs by task, through the same indexes (the claim index by queue):
-- asked only for a queue where some task's jobs may find no live worker that serves it.
SELECT task, count(*) AS pending FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL AND queue = %(queue)s GROUP BY task
UNION ALL
SELECT task, count(*) AS pending FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND limit_key IS NOT NULL AND queue = %(queue)s GROUP BY task
UNION ALL
SELECT task, count(*) AS pending FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND crashes >= 2 AND limit_key IS NULL AND queue = %(queue)s GROUP BY task

-- name: live_workers
-- The task names each live worker runs (a JSON list per worker) and the queues it serves
-- (a JSON list, or null: every queue).
SELECT tasks, queues FROM {schema}.sqljobs_workers
WHERE last_seen >= now() - make_interval(secs => 2.5 * heartbeat_interval)

-- name: get_job
-- The job_columns fragment (below) fills in a whole job, named as Job's fields.
SELECT {job_columns} FROM {schema}.sqljobs_jobs WHERE id = %(id)s

-- name: list_jobs
SELECT {job_columns} FROM {schema}.sqljobs_jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id DESC LIMIT %(limit)s

-- name: job_columns
id, queue, task, payload, key, state, priority,
extract(epoch FROM run_at)::float8 AS run_at,
extract(epoch FROM created_at)::float8 AS created_at, attempts, max_attempts, token, lease,
extract(epoch FROM lease_until)::float8 AS lease_until, worker,
extract(epoch FROM started_at)::float8 AS started_at,
extract(epoch FROM finished_at)::float8 AS finished_at, errors, lease_expiries, crashes,
last_error, last_traceback, extract(epoch FROM deadline_at)::float8 AS deadline_at, history,
result, progress, limit_key, limit_max, rate_max, rate_window, parents, after_policy, waiting_on,
key_hold, released_key, debounced

-- name: cancel_job
-- Pending or waiting: cancelled at once. Running: cancelled too, so the worker's outcome (fenced on
-- `running`) can never be written; the NOTIFY tells the worker holding it (and anyone
-- waiting on its result) at once. No attempt is charged; the history notes a run that
-- was cut short. A running job keeps its lease_until: its handler may run on, and holds
-- the job's slots until its worker says it ended (end_holds) or the lease lapses.
WITH cancelled AS (
    UPDATE {schema}.sqljobs_jobs AS j
    SET state = 'cancelled', finished_at = now(), prefetched = false,
        lease_until = CASE WHEN j.state = 'running' THEN j.lease_until END,
        waiting_on = 0,
        history = CASE WHEN j.state = 'running' THEN j.history || jsonb_build_array(
            jsonb_build_object('attempt', j.attempts, 'outcome', 'cancelled',
                'started_at', extract(epoch FROM j.started_at),
                'ended_at', extract(epoch FROM now()), 'worker', j.worker,
                'error', 'cancelled while running'))
            ELSE j.history END
    WHERE j.id = %(id)s AND j.state IN ('pending', 'waiting', 'running')
    RETURNING j.id, j.queue, j.limit_key, j.children
)  -- a limited job's cancel frees its slot: its queue's workers may claim
SELECT id, children, pg_notify(%(channel)s, '#cancel:' || id),
       CASE WHEN limit_key IS NOT NULL THEN pg_notify(%(channel)s, queue) END
FROM cancelled

-- name: pause_queue
-- RETURNING tells whether this call paused it (an already paused queue keeps its time).
INSERT INTO {schema}.sqljobs_queues AS q (name, paused, paused_at, updated_at)
VALUES (%(name)s, true, now(), now())
ON CONFLICT (name) DO UPDATE SET
    paused_at = CASE WHEN q.paused THEN q.paused_at ELSE now() END,
    paused = true, updated_at = now()
RETURNING paused_at = now() AS changed

-- name: resume_queue
UPDATE {schema}.sqljobs_queues SET paused = false, paused_at = NULL, updated_at = now()
WHERE name = %(name)s AND paused

-- name: queue_states
SELECT name, paused, extract(epoch FROM paused_at)::float8 AS paused_at
FROM {schema}.sqljobs_queues

-- name: ended_queues
-- The queues that have jobs that ended in %(state)s: a skip scan of sqljobs_jobs_ended
-- (the next queue after the last one found), one index seek each.
WITH RECURSIVE found (queue) AS (
    SELECT (SELECT min(queue) FROM {schema}.sqljobs_jobs
            WHERE state = %(state)s AND state <> 'pending' AND state <> 'running')
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.sqljobs_jobs
            WHERE state = %(state)s AND queue > found.queue
              AND state <> 'pending' AND state <> 'running')
    FROM found WHERE found.queue IS NOT NULL
)
SELECT queue FROM found WHERE queue IS NOT NULL

-- name: prune_finished
-- One bounded batch of a queue's jobs that ended in %(state)s before %(before)s (a range
-- of sqljobs_jobs_ended, whose predicate repeats), and, in the same statement, the keys
-- of the keyed ones kept in sqljobs_spent_keys: a "retained" key for its key_retention
-- from now (NULL: the pruning App's), a key_scope duration to its end. A key kept there
-- before (its period over, not yet dropped) has since named another job: the newer one's
-- is kept. A workflow's child (keyed wf:<workflow>:<position>:...) is kept while the
-- step that started it still waits, since that step reads its outcome from its row: one
-- primary key probe for such a child, none for another job (a scalar subquery, which the
-- planner cannot turn into a scan of every waiting step, as it may an EXISTS).
WITH deleted AS (
    DELETE FROM {schema}.sqljobs_jobs WHERE id IN (
        SELECT id FROM {schema}.sqljobs_jobs AS j
        WHERE state = %(state)s AND queue = %(queue)s
          AND finished_at < to_timestamp(%(before)s)
          AND state <> 'pending' AND state <> 'running'
          AND CASE WHEN left(j.key, 3) = 'wf:' THEN (
                  SELECT s.state FROM {schema}.sqljobs_workflow_steps AS s
                  WHERE s.job_id = substring(j.key FROM '^wf:([0-9]{1,18}):')::bigint
                    AND s.position = substring(j.key FROM '^wf:[0-9]{1,18}:([0-9]{1,9}):')::int
              ) IS DISTINCT FROM 'waiting' ELSE true END
        LIMIT %(limit)s)
    RETURNING id, key, task, state,
              CASE WHEN key IS NULL THEN NULL
                   WHEN key_hold IS NOT NULL THEN finished_at + make_interval(secs => key_hold)
                   ELSE to_timestamp(%(now)s + coalesce(key_retention, %(key_retention)s))
              END AS expires_at
), spent AS (
    INSERT INTO {schema}.sqljobs_spent_keys (key, job_id, task, state, spent_at, expires_at)
    SELECT key, id, task, state, to_timestamp(%(now)s), expires_at FROM deleted
    WHERE key IS NOT NULL AND expires_at > to_timestamp(%(now)s)
    ON CONFLICT (key) DO UPDATE SET
        job_id = excluded.job_id, task = excluded.task, state = excluded.state,
        spent_at = excluded.spent_at, expires_at = excluded.expires_at
)
SELECT count(*) AS n FROM deleted

-- name: prune_spent_keys
DELETE FROM {schema}.sqljobs_spent_keys WHERE key IN (
    SELECT key FROM {schema}.sqljobs_spent_keys
    WHERE expires_at <= to_timestamp(%(before)s) LIMIT %(limit)s)

-- name: spent_key
-- The job a key named before the pruner deleted its row, while the key is kept.
SELECT job_id FROM {schema}.sqljobs_spent_keys
WHERE key = %(key)s AND expires_at > to_timestamp(%(now)s)

-- name: spent_key_of_job
SELECT key, task, state, extract(epoch FROM spent_at)::float8 AS spent_at,
       extract(epoch FROM expires_at)::float8 AS expires_at
FROM {schema}.sqljobs_spent_keys WHERE job_id = %(id)s

-- name: prune_idempotency
DELETE FROM {schema}.sqljobs_idempotency WHERE key IN (
    SELECT key FROM {schema}.sqljobs_idempotency
    WHERE expires_at IS NOT NULL AND expires_at < to_timestamp(%(before)s) LIMIT %(limit)s)

-- name: effect_begin
-- Record the intent before calling out; on a repeat, say what is known of it. One attempt
-- at a time holds an effect that is not done; a hold runs out (its holder died) after
-- %(hold)s seconds, and the next attempt takes it over.
INSERT INTO {schema}.sqljobs_effects AS e
    (key, state, job_id, holder, held_until, attempts, created_at, updated_at)
VALUES (%(key)s, 'pending', %(job_id)s, %(holder)s, now() + make_interval(secs => %(hold)s), 1,
        now(), now())
ON CONFLICT (key) DO UPDATE SET
    attempts = e.attempts + 1,
    updated_at = now(),
    job_id = CASE WHEN e.state <> 'done' AND e.held_until <= now() THEN %(job_id)s
                  ELSE e.job_id END,
    holder = CASE WHEN e.state <> 'done' AND e.held_until <= now() THEN %(holder)s
                  ELSE e.holder END,
    held_until = CASE WHEN e.state <> 'done' AND e.held_until <= now()
                      THEN now() + make_interval(secs => %(hold)s) ELSE e.held_until END
RETURNING state, result, error, attempts, holder = %(holder)s AS mine

-- name: effect_set
UPDATE {schema}.sqljobs_effects
SET state = %(state)s, result = %(result)s, error = %(error)s, updated_at = now(),
    held_until = now()
WHERE key = %(key)s AND holder = %(holder)s

-- name: effect_forget
DELETE FROM {schema}.sqljobs_effects
WHERE key = %(key)s AND state = 'pending' AND holder = %(holder)s

-- name: mark_idempotent
-- sqljobs.idempotent(): uniqueness from the primary key (insert-or-ignore, judged by the
-- row count), never from a check-then-insert, so concurrent deliveries cannot both pass.
-- On a connection sqljobs did not hand out, the schema prefix is dropped: the table is
-- found by the connection's search_path.
INSERT INTO {schema}.sqljobs_idempotency (key, created_at, expires_at)
VALUES (%(key)s, to_timestamp(%(now)s), to_timestamp(%(expires)s))
ON CONFLICT (key) DO NOTHING

-- name: levels_of_queues
-- The claim order's levels, for a worker of some queues: each queue's priorities that
-- have pending jobs, highest first, found by a loose scan of sqljobs_jobs_claim (one index
-- probe a level). A claim then reads each level's due jobs from the head of its range of
-- the index, (queue, priority, run_at, id), so the scan ends at the first job not yet due:
-- read in claim order across levels, as one scan, the jobs due in a day stood between
-- each priority's due jobs and the next priority's, and a claim that found fewer due jobs
-- than its limit walked all of them, the more slowly on a queue = ANY(...), which cannot
-- be read in index order. The claim's limit and the queues and tasks are read through
-- (SELECT ...), so the plan does not depend on their values and the generic plan, made
-- once, is used: planned with their values, each claim was planned anew, the planner's
-- time paid again at every round trip. The planner then guesses a tenth of the table
-- picked, so the claimed rows are updated by key from an array (`chosen`), never by a
-- join it would choose for that guess (a merge join along the whole primary key).
levels (queue, priority) AS (
    SELECT q.name, (SELECT max(priority) FROM {schema}.sqljobs_jobs
                    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
                      AND queue = q.name)
    FROM (SELECT DISTINCT unnest((SELECT %(queues)s::text[]))) AS q (name)
    WHERE q.name NOT IN (SELECT name FROM {schema}.sqljobs_queues WHERE paused)
    UNION ALL
    SELECT l.queue, (SELECT max(priority) FROM {schema}.sqljobs_jobs
                     WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
                       AND queue = l.queue AND priority < l.priority)
    FROM levels AS l WHERE l.priority IS NOT NULL
)

-- name: levels_of_all
-- The same for a worker of every queue: the priorities with pending jobs, from
-- sqljobs_jobs_claim_any, (priority, run_at, id). Only statements of every queue state
-- its predicate's `run_at > '-infinity'` (true of every job): a plan for one queue's level
-- cannot take it, filter it by queue and walk another queue's backlog (a generic plan did,
-- the smaller index being the cheaper guess for an unknown queue).
levels (queue, priority) AS (
    SELECT NULL::text, (SELECT max(priority) FROM {schema}.sqljobs_jobs
                        WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
                          AND run_at > '-infinity')
    UNION ALL
    SELECT NULL::text, (SELECT max(priority) FROM {schema}.sqljobs_jobs
                        WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
                          AND run_at > '-infinity' AND priority < l.priority)
    FROM levels AS l WHERE l.priority IS NOT NULL
)

-- name: level_picked
-- A claim's jobs, in claim order: up to `wanted`'s n of them (a one-row CTE each statement
-- defines: its limit, read through a subquery, see levels_of_queues), each level read from
-- the head of its index range to its first job not yet due. claim, complete_and_claim and
-- limits.sql's complete_and_hand_over share it, and claim_chosen.
-- A statement's writes that may wait for a row lock (`done`, `began`) all run before this
-- scan, which `wanted` makes read them: SKIP LOCKED never waits, but where its snapshot
-- still saw a row pending that another claim has since taken, it locks that row's newest
-- version and keeps the lock (the row is then filtered out, not unlocked) until the commit.
-- A statement that waited after it (began ran last) could hold such a row while a second
-- lane's statement, which completed that very row, held the row it waited for: a deadlock,
-- found only after deadlock_timeout (1 s), with both lanes of the worker stopped meanwhile.
picked AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at
    FROM levels AS l CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM {schema}.sqljobs_jobs
        WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
          AND priority = l.priority AND run_at <= now() {level_queue} {level_tasks}
        ORDER BY run_at, id
        LIMIT (SELECT n FROM wanted)
        FOR UPDATE SKIP LOCKED
    ) AS j
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT (SELECT n FROM wanted)
)

-- name: claim_chosen
-- Start the jobs of `chosen` (an array of ids in claim order, see levels_of_queues): the
-- first %(start_now)s at once, the rest marked prefetched; each with its task's lease.
UPDATE {schema}.sqljobs_jobs AS j
SET state = 'running', attempts = j.attempts + 1, token = j.token + 1,
    worker = %(worker)s, started_at = now(),
    prefetched = array_position((SELECT ids FROM chosen), j.id) > %(start_now)s,
    lease = coalesce((%(leases)s::jsonb ->> j.task)::float8, j.lease),
    lease_until = now() + make_interval(secs => coalesce((%(leases)s::jsonb ->> j.task)::float8,
                                                         j.lease))
WHERE j.id = ANY((SELECT ids FROM chosen)::bigint[])
RETURNING j.id, j.task, j.payload, j.queue, j.priority, j.attempts AS attempt, j.token,
          j.lease, j.max_attempts, extract(epoch FROM j.created_at)::float8 AS created_at,
          extract(epoch FROM j.deadline_at)::float8 AS deadline_at, j.key,
          extract(epoch FROM j.run_at)::float8 AS run_at

-- name: level_of_queue
AND queue = l.queue

-- name: level_of_any
AND run_at > '-infinity' AND queue NOT IN (SELECT name FROM {schema}.sqljobs_queues WHERE paused)

-- name: level_tasks
AND task = ANY((SELECT %(tasks)s::text[])::text[])

-- name: filter_queues
AND queue = ANY(%(queues)s::text[])

-- name: filter_tasks
AND task = ANY(%(tasks)s::text[])

-- name: save_queue_limit
-- A queue's limits as a worker's code defines them, for enqueues by name
-- from services without that code. A queue's pause is left as it is.
INSERT INTO {schema}.sqljobs_queues AS q
    (name, paused, updated_at, concurrency, rate_max, rate_window)
VALUES (%(queue)s, false, now(), %(concurrency)s, %(rate_max)s, %(rate_window)s)
ON CONFLICT (name) DO UPDATE SET
    concurrency = excluded.concurrency, rate_max = excluded.rate_max,
    rate_window = excluded.rate_window, updated_at = excluded.updated_at
WHERE q.concurrency IS DISTINCT FROM excluded.concurrency
   OR q.rate_max IS DISTINCT FROM excluded.rate_max
   OR q.rate_window IS DISTINCT FROM excluded.rate_window

-- name: clear_queue_limit
-- A queue a worker serves whose code sets no limit: a limit recorded before is taken away.
UPDATE {schema}.sqljobs_queues SET concurrency = NULL, rate_max = NULL, rate_window = NULL
WHERE name = %(queue)s AND (concurrency IS NOT NULL OR rate_max IS NOT NULL)

-- name: queue_limit
SELECT concurrency, rate_max, rate_window FROM {schema}.sqljobs_queues WHERE name = %(name)s
