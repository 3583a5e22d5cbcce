-- Job dependencies (sqljobs.dependencies). A child's enqueue locks its parents' rows and
-- counts them in its own transaction; a parent's end, in the transaction that ended it,
-- takes its edges in a later statement (a new snapshot, after the parent's row lock), so
-- an edge committed by an enqueue that held that lock first is always seen: no child is
-- left waiting for a parent that has ended.

-- name: lock_parents
-- The parents of a job about to be enqueued, and their states as last committed (the
-- row lock waits out a parent's end in flight); each one that has not ended counts the
-- child (`children`), which sends its end down the path that settles children. Locked
-- in id order, as a cancel by filter and an emit lock theirs, so that two of them never
-- each hold one row and wait for the other's.
UPDATE {schema}.sqljobs_jobs
SET children = children + (state NOT IN ('done', 'dead', 'cancelled'))::int
WHERE id IN (SELECT id FROM {schema}.sqljobs_jobs WHERE id = ANY(%(ids)s::bigint[])
             ORDER BY id FOR NO KEY UPDATE)
RETURNING id, state, result

-- name: insert_dependent
-- A keyed job inserted past a key the pruner kept since the enqueue's spent_key check
-- (this statement's snapshot shows it: the prune committed while the parents were
-- locked) or kept meanwhile (see insert_jobs) comes back with `kept`, the job that key
-- names: the caller deletes the new row and answers with that job.
WITH inserted AS (
    INSERT INTO {schema}.sqljobs_jobs
        (queue, task, payload, key, state, priority, run_at, deadline_at, max_attempts,
         lease, key_hold, limit_key, limit_max, rate_max, rate_window, parents, after_policy,
         waiting_on, collected, last_error, finished_at, key_retention)
    VALUES (%(queue)s, %(task)s, %(payload)s, %(key)s, %(state)s, %(priority)s,
            coalesce(now() + make_interval(secs => %(delay)s::float8),
                     to_timestamp(%(run_at)s::float8)),
            to_timestamp(%(deadline_at)s::float8), %(max_attempts)s, %(lease)s,
            %(key_hold)s, %(limit_key)s, %(limit_max)s, %(rate_max)s, %(rate_window)s,
            %(parents)s::bigint[], %(after_policy)s, %(waiting_on)s, %(collected)s::jsonb,
            %(error)s, CASE WHEN %(state)s = 'cancelled' THEN now() END,
            %(key_retention)s::float8)
    ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id, state, queue
)
SELECT id, CASE WHEN state = 'pending' THEN pg_notify(%(channel)s, queue) END AS notified,
       CASE WHEN %(key)s::text IS NULL THEN NULL
            ELSE coalesce(
                (SELECT job_id FROM {schema}.sqljobs_spent_keys
                 WHERE key = %(key)s AND expires_at > to_timestamp(%(now)s)),
                CASE WHEN EXISTS (SELECT FROM {schema}.sqljobs_jobs WHERE key = %(key)s)
                     THEN {schema}.sqljobs_key_kept_meanwhile(%(key)s, %(now)s, false) END)
       END AS kept
FROM inserted

-- name: add_edges
INSERT INTO {schema}.sqljobs_deps (parent_id, child_id)
SELECT parent, %(child)s FROM unnest(%(ids)s::bigint[]) AS parent
ON CONFLICT DO NOTHING

-- name: take_edges
-- The edges of parents that just ended, taken (deleted) so each is settled once.
DELETE FROM {schema}.sqljobs_deps WHERE parent_id = ANY(%(ids)s::bigint[])
RETURNING parent_id, child_id

-- name: parent_results
SELECT id, result FROM {schema}.sqljobs_jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: release_child
-- %(n)s of a waiting child's parents ended as its policy allows (their results, a JSON
-- object by parent id, are kept if it collects them); the last one makes it pending, due
-- no earlier than now (it did not wait in the queue, so it must not jump it). Two parents
-- ending at once on two workers: the row lock orders them, and the second one's update
-- reads the first one's counts.
WITH released AS (
    UPDATE {schema}.sqljobs_jobs
    SET waiting_on = greatest(waiting_on - %(n)s, 0),
        collected = collected || %(results)s::jsonb,
        state = CASE WHEN waiting_on - %(n)s <= 0 THEN 'pending' ELSE state END,
        run_at = CASE WHEN waiting_on - %(n)s <= 0 THEN greatest(run_at, now()) ELSE run_at END
    WHERE id = %(id)s AND state = 'waiting'
    RETURNING id, state, queue, task, payload, parents, collected
)
SELECT *, CASE WHEN state = 'pending' THEN pg_notify(%(channel)s, queue) END AS notified
FROM released

-- name: cancel_child
-- A parent ended dead or cancelled, and the child needs every parent done; whoever waits
-- on the child's result hears of its end.
WITH cancelled AS (
    UPDATE {schema}.sqljobs_jobs
    SET state = 'cancelled', finished_at = now(), waiting_on = 0, last_error = %(reason)s
    WHERE id = %(id)s AND state = 'waiting'
    RETURNING id, children, waited
)
SELECT id, children, CASE WHEN waited THEN pg_notify(%(channel)s, '#end:' || id) END AS notified
FROM cancelled

-- name: rewrite_payload
UPDATE {schema}.sqljobs_jobs SET payload = %(payload)s WHERE id = %(id)s

-- name: open_parents
-- Which of a waiting job's parents have not ended yet.
SELECT parent_id AS id FROM {schema}.sqljobs_deps
WHERE parent_id = ANY(%(ids)s::bigint[]) AND child_id = %(child)s

-- name: child_policies
SELECT id, after_policy FROM {schema}.sqljobs_jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: dependent_by_key
SELECT id FROM {schema}.sqljobs_jobs WHERE key = %(key)s
