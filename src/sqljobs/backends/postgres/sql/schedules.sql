-- Named statements for periodic schedules (sqljobs.backends.schedule_store).
-- {schema} is the configured schema. Times cross the boundary as Unix seconds given by the
-- caller, so an injected clock rules them; {columns} is the schedule_columns fragment at
-- the end: the row named as ScheduleState reads it.

-- name: save_schedule
-- An upsert. The schedule keeps its place (next_run_at) and its paused flag unless its
-- timing changed, so re-syncing @app.periodic definitions at every start moves nothing.
INSERT INTO {schema}.sqljobs_schedules AS s
    (name, task, kwargs, cron, every, tz, overlap, misfire, queue, priority, source,
     next_run_at, created_at, updated_at)
VALUES (%(name)s, %(task)s, %(kwargs)s::jsonb, %(cron)s, %(every)s, %(tz)s, %(overlap)s,
        %(misfire)s, %(queue)s, %(priority)s, %(source)s, to_timestamp(%(next_run_at)s),
        to_timestamp(%(now)s), to_timestamp(%(now)s))
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, kwargs = excluded.kwargs, cron = excluded.cron,
    every = excluded.every, tz = excluded.tz, overlap = excluded.overlap,
    misfire = excluded.misfire, queue = excluded.queue, priority = excluded.priority,
    source = excluded.source,
    next_run_at = CASE WHEN s.cron IS NOT DISTINCT FROM excluded.cron
                            AND s.every IS NOT DISTINCT FROM excluded.every
                            AND s.tz = excluded.tz
                       THEN s.next_run_at ELSE excluded.next_run_at END,
    updated_at = excluded.updated_at
RETURNING {columns}

-- name: get_schedule
SELECT {columns} FROM {schema}.sqljobs_schedules AS s WHERE name = %(name)s

-- name: list_schedules
SELECT {columns} FROM {schema}.sqljobs_schedules AS s ORDER BY name

-- name: upcoming_schedules
-- The scheduler's one query per pass: the due rows, and after them the next to fall due.
SELECT {columns} FROM {schema}.sqljobs_schedules AS s
WHERE NOT paused
ORDER BY next_run_at
LIMIT %(limit)s

-- name: delete_schedule
DELETE FROM {schema}.sqljobs_schedules WHERE name = %(name)s

-- name: pause_schedule
UPDATE {schema}.sqljobs_schedules SET paused = true, updated_at = to_timestamp(%(now)s)
WHERE name = %(name)s

-- name: resume_schedule
-- Resuming starts afresh from now: ticks that fell while paused were not missed, they
-- were not wanted.
UPDATE {schema}.sqljobs_schedules
SET next_run_at = CASE WHEN paused THEN to_timestamp(%(next_run_at)s) ELSE next_run_at END,
    paused = false, updated_at = to_timestamp(%(now)s)
WHERE name = %(name)s

-- name: claim_tick
-- The tick claim: the row moves on only if it still holds the tick this replica read
-- (compared as the same float the replica read, so no rounding can make it miss). A
-- replica that finds the row locked waits for the holder, then sees it moved on. With
-- overlap='skip' a run that is pending or running turns the tick into a skip.
UPDATE {schema}.sqljobs_schedules AS s
SET next_run_at = to_timestamp(%(next_run_at)s), updated_at = to_timestamp(%(now)s),
    last_outcome = CASE
        WHEN %(skip_if_active)s AND EXISTS (
            SELECT 1 FROM {schema}.sqljobs_jobs AS j
            WHERE j.id = s.last_job_id
              AND (j.state IN ('pending', 'running') OR j.lease_until > now()))
        THEN 'skipped_overlap'
        ELSE %(outcome)s END
WHERE s.name = %(name)s AND NOT s.paused
  AND extract(epoch FROM s.next_run_at)::float8 = %(expected)s::float8
RETURNING s.last_outcome, extract(epoch FROM s.next_run_at)::float8 AS next_run_at

-- name: lock_for_run_now
-- run-now goes through the row too, so it is serialised with ticks and obeys overlap.
UPDATE {schema}.sqljobs_schedules AS s SET updated_at = to_timestamp(%(now)s)
WHERE s.name = %(name)s
RETURNING CASE WHEN s.overlap = 'skip' THEN (
    SELECT j.id FROM {schema}.sqljobs_jobs AS j
    WHERE j.id = s.last_job_id
      AND (j.state IN ('pending', 'running') OR j.lease_until > now()))
END AS active_job_id

-- name: record_job
UPDATE {schema}.sqljobs_schedules
SET last_job_id = %(job_id)s, last_run_at = to_timestamp(%(run_at)s),
    last_outcome = %(outcome)s
WHERE name = %(name)s

-- name: schedule_columns
s.name, s.task, s.kwargs, s.cron, s.every, s.tz, s.overlap, s.misfire, s.queue, s.priority,
s.source, extract(epoch FROM s.next_run_at)::float8 AS next_run_at,
extract(epoch FROM s.last_run_at)::float8 AS last_run_at, s.last_job_id, s.last_outcome,
s.paused, extract(epoch FROM s.updated_at)::float8 AS updated_at
