-- Durable workflows (sqljobs.workflows). A checkpoint and a park are written only while
-- the workflow is `running` under the claim's token; SQLite's one writer orders them
-- against a reaper, a new claim and an emit.

-- name: workflow_steps
SELECT position, name, kind, state, result, error, detail, attempt, started_at, ended_at
FROM sqljobs_workflow_steps WHERE job_id = :id ORDER BY position

-- name: save_step
-- A step's checkpoint, inserted or moved on (a step's name never changes at its position:
-- a replay that meets another name fails before it writes).
INSERT INTO sqljobs_workflow_steps AS s
    (job_id, position, name, kind, state, result, error, detail, attempt, started_at, ended_at)
SELECT id, :position, :name, :kind, :state, :result, :error, :detail, attempts, :now,
       CASE WHEN :ended THEN :now END
FROM sqljobs_jobs WHERE id = :id AND token = :token AND state = 'running'
ON CONFLICT (job_id, position) DO UPDATE
SET state = excluded.state, result = excluded.result, error = excluded.error,
    detail = excluded.detail, ended_at = excluded.ended_at, attempt = excluded.attempt
WHERE s.name = excluded.name
RETURNING job_id

-- name: step_progressed
-- A checkpoint is progress: the crashes of earlier attempts no longer make the workflow
-- a poison job.
UPDATE sqljobs_jobs SET crashes = 0
WHERE id = :id AND token = :token AND state = 'running' AND crashes > 0

-- name: lock_event
-- (SQLite's one writer already orders emits and parks.)
SELECT 1

-- name: lock_workflow
-- (SQLite's one writer already orders a park against a cancel: only the fence is read.)
SELECT id FROM sqljobs_jobs WHERE id = :id AND token = :token AND state = 'running'

-- name: park_workflow
-- The workflow gives its attempt back and waits (for a time, an event, its children),
-- unless what it waits for is there already: then it is due at once.
UPDATE sqljobs_jobs
SET state = CASE WHEN w.due THEN 'pending' ELSE 'waiting' END,
    run_at = :now, attempts = attempts - 1, lease_until = NULL, prefetched = 0,
    wake_at = CASE WHEN w.due THEN NULL ELSE :wake_at END,
    wait_event = CASE WHEN w.due THEN NULL ELSE :event END,
    waiting_on = CASE WHEN w.due THEN 0 ELSE :open END,
    after_policy = CASE WHEN :open > 0 THEN 'always' ELSE after_policy END,
    collected = CASE WHEN :open > 0 THEN NULL ELSE collected END  -- (its payload holds a
    -- group's results already: a child's end must not rewrite it again)
FROM (SELECT (:event IS NOT NULL AND EXISTS (
                  SELECT 1 FROM sqljobs_events WHERE name = :event AND id > :after))
             OR (:wake_at IS NOT NULL AND :wake_at <= :now)
             OR (:children AND :open = 0) AS due) AS w
WHERE id = :id AND token = :token AND state = 'running'
RETURNING state, queue

-- name: wake_workflows
-- Parked workflows whose time has come (a sleep's end, a wait's timeout), made due at that
-- time: a worker that resumes one counts the wait over by its run_at, whatever its clock.
UPDATE sqljobs_jobs SET state = 'pending', run_at = wake_at, wake_at = NULL, wait_event = NULL
WHERE id IN (SELECT id FROM sqljobs_jobs INDEXED BY sqljobs_jobs_wake
             WHERE state = 'waiting' AND wake_at IS NOT NULL AND wake_at <= :now
             ORDER BY wake_at LIMIT :limit)
RETURNING queue

-- name: next_wake
SELECT min(wake_at) AS at FROM sqljobs_jobs INDEXED BY sqljobs_jobs_wake
WHERE state = 'waiting' AND wake_at IS NOT NULL

-- name: insert_event
INSERT INTO sqljobs_events (name, payload, emitted_at) VALUES (:name, :payload, :now)
RETURNING id

-- name: wake_waiters
-- The workflows waiting for an event just emitted, made due (in the emit's transaction:
-- one that rolls back wakes none).
UPDATE sqljobs_jobs SET state = 'pending', run_at = :now, wake_at = NULL, wait_event = NULL
WHERE state = 'waiting' AND wait_event = :name
RETURNING queue

-- name: first_event
-- The first event of a name after the one a workflow last took.
SELECT id, payload, emitted_at FROM sqljobs_events
WHERE name = :name AND id > :after ORDER BY id LIMIT 1

-- name: child_states
SELECT id, state, result, last_error FROM sqljobs_jobs
WHERE id IN (SELECT value FROM json_each(:ids))

-- name: workflow_children
-- The children that workflows just cancelled still wait for (a cancel cascades to them).
SELECT detail FROM sqljobs_workflow_steps
WHERE job_id IN (SELECT value FROM json_each(:ids)) AND state = 'waiting'
  AND kind IN ('run', 'gather')

-- name: workflow_jobs
-- Workflows, newest first (the tasks named are the App's workflows).
SELECT id, task, state, wait_event, wake_at, waiting_on, created_at, finished_at,
       (SELECT count(*) FROM sqljobs_workflow_steps s WHERE s.job_id = j.id) AS steps
FROM sqljobs_jobs AS j
WHERE task IN (SELECT value FROM json_each(:tasks)) AND (:state IS NULL OR state = :state)
ORDER BY id DESC LIMIT :limit

-- name: prune_events
DELETE FROM sqljobs_events
WHERE id IN (SELECT id FROM sqljobs_events WHERE emitted_at < :before
             ORDER BY emitted_at LIMIT :limit)
