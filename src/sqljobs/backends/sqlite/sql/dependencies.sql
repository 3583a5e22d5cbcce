-- Job dependencies (sqljobs.dependencies). A child's enqueue locks and counts its parents
-- in its own transaction; a parent's end takes its edges and settles each child in the
-- transaction that ended it. SQLite has one writer at a time, so nothing here can race.

-- name: lock_parents
-- The parents of a job about to be enqueued, and their states; each one that has not ended
-- counts the child (`children`), which sends its end down the path that settles children.
UPDATE sqljobs_jobs
SET children = children + (state NOT IN ('done', 'dead', 'cancelled'))
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, state, result

-- name: insert_dependent
INSERT INTO sqljobs_jobs
    (queue, task, payload, key, state, priority, run_at, created_at, deadline_at,
     max_attempts, lease, key_hold, limit_key, limit_max, rate_max, rate_window, parents,
     after_policy, waiting_on, collected, last_error, finished_at, key_retention)
VALUES (:queue, :task, :payload, :key, :state, :priority, :run_at, :now, :deadline_at,
        :max_attempts, :lease, :key_hold, :limit_key, :limit_max, :rate_max, :rate_window,
        :parents, :after_policy, :waiting_on, :collected, :error,
        CASE WHEN :state = 'cancelled' THEN :now END, :key_retention)
ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
RETURNING id

-- name: add_edges
INSERT INTO sqljobs_deps (parent_id, child_id)
SELECT value, :child FROM json_each(:ids) WHERE true
ON CONFLICT DO NOTHING

-- name: take_edges
-- The edges of parents that just ended, taken (deleted) so each is settled once.
DELETE FROM sqljobs_deps WHERE parent_id IN (SELECT value FROM json_each(:ids))
RETURNING parent_id, child_id

-- name: parent_results
SELECT id, result FROM sqljobs_jobs WHERE id IN (SELECT value FROM json_each(:ids))

-- name: release_child
-- :n of a waiting child's parents ended as its policy allows (their results, a JSON
-- object by parent id, are kept if it collects them); the last one makes it pending, due
-- no earlier than now (it did not wait in the queue, so it must not jump it).
UPDATE sqljobs_jobs
SET waiting_on = max(waiting_on - :n, 0),
    collected = CASE WHEN collected IS NULL THEN NULL ELSE json_patch(collected, :results) END,
    state = CASE WHEN waiting_on - :n <= 0 THEN 'pending' ELSE state END,
    run_at = CASE WHEN waiting_on - :n <= 0 THEN max(run_at, :now) ELSE run_at END
WHERE id = :id AND state = 'waiting'
RETURNING id, state, queue, task, payload, parents, collected

-- name: cancel_child
-- A parent ended dead or cancelled, and the child needs every parent done.
UPDATE sqljobs_jobs
SET state = 'cancelled', finished_at = :now, waiting_on = 0, last_error = :reason
WHERE id = :id AND state = 'waiting'
RETURNING id, children

-- name: rewrite_payload
UPDATE sqljobs_jobs SET payload = :payload WHERE id = :id

-- name: open_parents
-- Which of a waiting job's parents have not ended yet.
SELECT parent_id AS id FROM sqljobs_deps
WHERE parent_id IN (SELECT value FROM json_each(:ids)) AND child_id = :child

-- name: child_policies
SELECT id, after_policy FROM sqljobs_jobs WHERE id IN (SELECT value FROM json_each(:ids))

-- name: dependent_by_key
SELECT id FROM sqljobs_jobs WHERE key = :key
