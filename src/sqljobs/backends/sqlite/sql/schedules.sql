-- Named statements for periodic schedules (sqljobs.backends.schedule_store).
-- Times are Unix seconds (REAL), given by the caller, so an injected clock rules them.

-- name: save_schedule
-- An upsert. The schedule keeps its place (next_run_at) and its paused flag unless its
-- timing changed, so re-syncing @app.periodic definitions at every start moves nothing.
INSERT INTO sqljobs_schedules
    (name, task, kwargs, cron, every, tz, overlap, misfire, queue, priority, source,
     next_run_at, created_at, updated_at)
VALUES (:name, :task, :kwargs, :cron, :every, :tz, :overlap, :misfire, :queue, :priority,
        :source, :next_run_at, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, kwargs = excluded.kwargs, cron = excluded.cron,
    every = excluded.every, tz = excluded.tz, overlap = excluded.overlap,
    misfire = excluded.misfire, queue = excluded.queue, priority = excluded.priority,
    source = excluded.source,
    next_run_at = CASE WHEN cron IS excluded.cron AND every IS excluded.every
                            AND tz = excluded.tz
                       THEN next_run_at ELSE excluded.next_run_at END,
    updated_at = excluded.updated_at
RETURNING name, task, kwargs, cron, every, tz, overlap, misfire, queue, priority, source,
          next_run_at, last_run_at, last_job_id, last_outcome, paused, updated_at

-- name: get_schedule
SELECT name, task, kwargs, cron, every, tz, overlap, misfire, queue, priority, source,
       next_run_at, last_run_at, last_job_id, last_outcome, paused, updated_at
FROM sqljobs_schedules WHERE name = :name

-- name: list_schedules
SELECT name, task, kwargs, cron, every, tz, overlap, misfire, queue, priority, source,
       next_run_at, last_run_at, last_job_id, last_outcome, paused, updated_at
FROM sqljobs_schedules ORDER BY name

-- name: upcoming_schedules
-- The scheduler's one query per pass: the due rows, and after them the next to fall due.
SELECT name, task, kwargs, cron, every, tz, overlap, misfire, queue, priority, source,
       next_run_at, last_run_at, last_job_id, last_outcome, paused, updated_at
FROM sqljobs_schedules INDEXED BY sqljobs_schedules_due
WHERE paused = 0
ORDER BY next_run_at
LIMIT :limit

-- name: delete_schedule
DELETE FROM sqljobs_schedules WHERE name = :name

-- name: pause_schedule
UPDATE sqljobs_schedules SET paused = 1, updated_at = :now WHERE name = :name

-- name: resume_schedule
-- Resuming starts afresh from now: ticks that fell while paused were not missed, they
-- were not wanted.
UPDATE sqljobs_schedules
SET next_run_at = CASE WHEN paused = 1 THEN :next_run_at ELSE next_run_at END,
    paused = 0, updated_at = :now
WHERE name = :name

-- name: claim_tick
-- The tick claim: the row moves on only if it still holds the tick this replica read.
-- With overlap='skip' a run that is pending or running turns the tick into a skip, read
-- in the same transaction.
UPDATE sqljobs_schedules
SET next_run_at = :next_run_at, updated_at = :now,
    last_outcome = CASE
        WHEN :skip_if_active AND EXISTS (
            SELECT 1 FROM sqljobs_jobs AS j
            WHERE j.id = sqljobs_schedules.last_job_id
              AND (j.state IN ('pending', 'running') OR j.lease_until > :now))
        THEN 'skipped_overlap'
        ELSE :outcome END
WHERE name = :name AND next_run_at = :expected AND paused = 0
RETURNING last_outcome, next_run_at

-- name: lock_for_run_now
-- run-now goes through the row too, so it is serialised with ticks and obeys overlap.
UPDATE sqljobs_schedules SET updated_at = :now WHERE name = :name
RETURNING CASE WHEN overlap = 'skip' THEN (
    SELECT j.id FROM sqljobs_jobs AS j
    WHERE j.id = sqljobs_schedules.last_job_id
      AND (j.state IN ('pending', 'running') OR j.lease_until > :now))
END AS active_job_id

-- name: record_job
UPDATE sqljobs_schedules
SET last_job_id = :job_id, last_run_at = :run_at, last_outcome = :outcome
WHERE name = :name
