-- Named statements for SQLite (:name parameters; the enqueue's insert and key lookup,
-- run once per job, take ? ones). Columns are named after the fields they fill
-- (sqljobs.backends.rows reads them by name).

-- name: insert_job
INSERT INTO sqljobs_jobs
    (queue, task, payload, key, priority, run_at, created_at, deadline_at, max_attempts, lease,
     key_hold, limit_key, limit_max, rate_max, rate_window)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING

-- name: insert_keyed_job
-- insert_job, with how long the key outlives the row (unkeyed jobs bind one value fewer).
INSERT INTO sqljobs_jobs
    (queue, task, payload, key, priority, run_at, created_at, deadline_at, max_attempts, lease,
     key_hold, limit_key, limit_max, rate_max, rate_window, key_retention)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING

-- name: spent_key
-- The job a key named before the pruner deleted its row, while the key is kept.
SELECT job_id FROM sqljobs_spent_keys WHERE key = :key AND expires_at > :now

-- name: release_key
-- A finished job whose key_scope has run out gives its key up to a new enqueue.
UPDATE sqljobs_jobs SET released_key = key, key = NULL
WHERE key = :key AND state IN ('done', 'dead', 'cancelled')
  AND key_hold IS NOT NULL AND finished_at + key_hold <= :now

-- name: job_id_by_key
SELECT id FROM sqljobs_jobs WHERE key = ?

-- name: debounce_job
-- A debounced enqueue meeting its key's job still pending: the latest arguments and start
-- win. Its first write takes the write lock, so no claim comes between it and the insert.
UPDATE sqljobs_jobs SET payload = :payload, run_at = :run_at, debounced = debounced + 1
WHERE key = :key AND state = 'pending'
RETURNING id

-- name: release_debounce_key
-- A debounced enqueue whose key names a job already claimed or ended: a new window opens.
UPDATE sqljobs_jobs SET released_key = key, key = NULL
WHERE key = :key AND state <> 'pending'

-- name: claim
-- The levels and level fragments (at the end) say which queues and tasks a worker serves:
-- it claims only the tasks it has registered. Elsewhere the queue filter is empty (all
-- queues) or a condition on queue (filter_one_queue, which uses the (queue, ...) indexes
-- directly, or filter_queues), then, for a worker, filter_tasks.
-- Jobs of a paused queue (sqljobs_queues) are never claimed; the subquery is read once.
-- Jobs under a concurrency limit are claimed by limits.sql's statements, not this one.
-- The first :start_now jobs (in claim order) start at once; the rest wait in the worker's
-- buffer, marked `prefetched` here (a crash of the worker does not blame them), not by a
-- second statement.
-- The jobs are read level by level (see levels_of_queues), each level's due jobs from the
-- head of its index range, so jobs not yet due are never read.
-- Each job gets the lease its worker gives its task (the lease fragment: lease_of_each_task,
-- or lease_of_all_tasks when the worker gives all its tasks one lease).
WITH RECURSIVE {levels}
UPDATE sqljobs_jobs
SET state = 'running', attempts = attempts + 1, token = token + 1,
    worker = :worker, started_at = :now, prefetched = picked.rank > :start_now,
    {lease}
FROM (
    SELECT id, row_number() OVER (ORDER BY priority DESC, run_at, id) AS rank
    FROM ({level_jobs})) AS picked
WHERE sqljobs_jobs.id = picked.id
RETURNING id, task, payload, queue, priority, attempts AS attempt, token, lease,
          max_attempts, created_at, deadline_at, key, run_at

-- name: claim_suspect
-- A job that was in two workers that crashed is claimed alone and run alone, so a
-- further crash is blamed on it and not on innocent jobs that ran beside it. It waits
-- for the worker to empty `prefetched` (not started): a crash meanwhile does not blame it.
UPDATE sqljobs_jobs
SET state = 'running', attempts = attempts + 1, token = token + 1,
    worker = :worker, started_at = :now, prefetched = 1,
    lease = coalesce((SELECT value FROM json_each(:leases) WHERE key = task), lease),
    lease_until = :now + coalesce((SELECT value FROM json_each(:leases) WHERE key = task), lease)
WHERE id IN (
    SELECT id FROM sqljobs_jobs
    WHERE state = 'pending' AND run_at <= :now AND crashes >= 2
      AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
      AND (:tasks IS NULL OR task IN (SELECT value FROM json_each(:tasks)))
      AND queue NOT IN (SELECT name FROM sqljobs_queues WHERE paused = 1)
    ORDER BY priority DESC, run_at, id
    LIMIT 1)
RETURNING id, task, payload, queue, priority, attempts AS attempt, token, lease,
          max_attempts, created_at, deadline_at, key, run_at

-- name: next_due
-- In how many seconds the next delayed job falls due, and the first job from crashed
-- workers does (`suspect_wait`, as claim_suspect filters them: a worker wakes for it
-- then, as for a retry); neither counts a paused queue's jobs (they wait for its
-- resume). The first: the earliest head of the claim's levels, one index probe a level,
-- however many jobs other queues hold (reading pending jobs in run_at order and filtering
-- by queue walked a backlog of another queue whole, on the worker's one connection, its
-- time growing with that backlog).
-- Also when the earliest schedule that is not paused falls due (one probe of its index):
-- the scheduler of a worker that asks this needs no pass of its own before then.
WITH RECURSIVE {levels}
SELECT (SELECT min((SELECT run_at FROM sqljobs_jobs
                    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
                      AND priority = l.priority {level_queue} {level_tasks}
                    ORDER BY run_at LIMIT 1))
        FROM levels AS l WHERE l.priority IS NOT NULL)
       - :now AS wait,
       (SELECT min(run_at) FROM sqljobs_jobs INDEXED BY sqljobs_jobs_suspects
        WHERE state = 'pending' AND crashes >= 2 {queue_filter}
          AND queue NOT IN (SELECT name FROM sqljobs_queues WHERE paused = 1))
       - :now AS suspect_wait,
       (SELECT min(at) FROM (
            SELECT min(next_run_at) AS at FROM sqljobs_schedules INDEXED BY sqljobs_schedules_due
            WHERE paused = 0
            UNION ALL
            SELECT min(wake_at) FROM sqljobs_jobs INDEXED BY sqljobs_jobs_wake
            WHERE state = 'waiting' AND wake_at IS NOT NULL)) AS schedule_at

-- name: complete_jobs
-- The hot path: a batch of plain completions, [[id, token], ...], in one statement
-- (each pair is one primary key probe; a statement's own cost is paid once a batch, not
-- once a job). A job others wait for (children > 0), or one fenced off, is left to
-- finish_job, which says which, and settles its children in the same transaction.
UPDATE sqljobs_jobs
SET state = 'done', finished_at = :now, lease_until = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:pairs)) AS p
WHERE sqljobs_jobs.id = p.id AND sqljobs_jobs.token = p.token
  AND state = 'running' AND children = 0
RETURNING sqljobs_jobs.id, sqljobs_jobs.token

-- name: complete_job_with
-- A completion that stores a result or a last progress report (most store neither).
UPDATE sqljobs_jobs
SET state = 'done', finished_at = :now, lease_until = NULL, result = :result,
    progress = coalesce(:progress, progress)
WHERE id = :id AND token = :token AND state = 'running' AND children = 0

-- name: finish_job
UPDATE sqljobs_jobs
SET state = :state,
    run_at = CASE WHEN :delay IS NULL THEN run_at ELSE :now + :delay END,
    attempts = attempts - :uncharge,
    finished_at = CASE WHEN :state IN ('done', 'dead', 'cancelled') THEN :now END,
    lease_until = CASE WHEN :hold THEN lease_until END,  -- (see renew_holds)
    last_error = coalesce(:error, last_error),
    last_traceback = CASE WHEN :error IS NULL THEN last_traceback ELSE :traceback END,
    errors = errors + :errors,
    lease_expiries = lease_expiries + :lease_expiries,
    crashes = crashes + :crashes,
    history = CASE WHEN :history IS NULL THEN history
                   ELSE json_insert(history, '$[#]', json(:history)) END,
    result = coalesce(:result, result),
    progress = coalesce(:progress, progress)
WHERE id = :id AND token = :token AND state = 'running'
RETURNING children

-- name: amend_done_job
-- A job its handler completed inside ctx.transaction(): what came after the commit (the
-- return value, or what the handler raised), fenced by the attempt's token on the job
-- still being done (pruned, retried by an operator: nothing is written).
UPDATE sqljobs_jobs
SET result = coalesce(:result, result),
    last_error = coalesce(:error, last_error),
    last_traceback = CASE WHEN :error IS NULL THEN last_traceback ELSE :traceback END,
    history = CASE WHEN :history IS NULL THEN history
                   ELSE json_insert(history, '$[#]', json(:history)) END
WHERE id = :id AND token = :token AND state = 'done'
RETURNING id

-- name: mark_prefetched
-- Limited jobs (claimed by limits.sql's claim_ids) beyond those that start at once wait
-- in the worker's buffer: a crash of the worker does not blame them.
UPDATE sqljobs_jobs SET prefetched = 1 WHERE id IN (SELECT value FROM json_each(:ids))

-- name: mark_started
-- Buffered jobs that have started since the worker's last round trip.
UPDATE sqljobs_jobs SET prefetched = 0
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:held)) AS held
WHERE sqljobs_jobs.id = held.id AND sqljobs_jobs.token = held.token
  AND sqljobs_jobs.state = 'running'

-- name: renew_leases
UPDATE sqljobs_jobs
SET lease_until = :now + lease
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:held)) AS held
WHERE sqljobs_jobs.id = held.id AND sqljobs_jobs.token = held.token
  AND sqljobs_jobs.state = 'running'
RETURNING sqljobs_jobs.id

-- name: renew_holds
-- Handlers that run on after their job left `running` (cancelled, or timed out with the
-- outcome written): their rows keep lease_until, renewed by the worker's heartbeat, and
-- so hold the job's concurrency slot and its schedule's overlap, until end_holds.
UPDATE sqljobs_jobs SET lease_until = :now + lease
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:held)) AS held
WHERE sqljobs_jobs.id = held.id AND sqljobs_jobs.token = held.token
  AND sqljobs_jobs.state <> 'running' AND sqljobs_jobs.lease_until IS NOT NULL

-- name: end_holds
-- Those handlers have ended: the slots they held are free.
UPDATE sqljobs_jobs SET lease_until = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:held)) AS held
WHERE sqljobs_jobs.id = held.id AND sqljobs_jobs.token = held.token
  AND sqljobs_jobs.state <> 'running' AND sqljobs_jobs.lease_until IS NOT NULL
RETURNING sqljobs_jobs.queue

-- name: save_progress
-- What handlers reported with ctx.progress(), a batch of [id, token, progress] fenced
-- like every other write about a claimed job: a stale worker's report is refused.
UPDATE sqljobs_jobs SET progress = held.progress
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS progress
      FROM json_each(:held)) AS held
WHERE sqljobs_jobs.id = held.id AND sqljobs_jobs.token = held.token
  AND sqljobs_jobs.state = 'running'
RETURNING sqljobs_jobs.id

-- name: ended_among
-- Of the jobs callers wait on, those that have ended (one query however many wait).
SELECT id FROM sqljobs_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('done', 'dead', 'cancelled')

-- name: cancelled_among
-- Of the jobs a heartbeat could not renew, those that were cancelled (not lost).
SELECT id FROM sqljobs_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'cancelled'

-- name: touch_worker
UPDATE sqljobs_workers SET last_seen = :now WHERE id = :worker

-- name: register_worker
INSERT OR REPLACE INTO sqljobs_workers
    (id, host, pid, queues, concurrency, heartbeat_interval, started_at, last_seen, tasks)
VALUES (:id, :host, :pid, :queues, :concurrency, :heartbeat_interval, :now, :now, :tasks)

-- name: save_task
-- A worker's task as its code defines it: what an enqueue by name elsewhere should use.
INSERT INTO sqljobs_tasks
    (name, queue, priority, lease, max_attempts, deadline, concurrency, keyed, rate_max,
     rate_window, updated_at)
VALUES (:name, :queue, :priority, :lease, :max_attempts, :deadline, :concurrency, :keyed,
        :rate_max, :rate_window, :now)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, lease = excluded.lease,
    max_attempts = excluded.max_attempts, deadline = excluded.deadline,
    concurrency = excluded.concurrency, keyed = excluded.keyed,
    rate_max = excluded.rate_max, rate_window = excluded.rate_window,
    updated_at = excluded.updated_at

-- name: task_names
SELECT name FROM sqljobs_tasks

-- name: task_info
SELECT name, queue, priority, lease, max_attempts, deadline, concurrency, keyed, rate_max,
       rate_window
FROM sqljobs_tasks WHERE name = :name

-- name: unregister_worker
DELETE FROM sqljobs_workers WHERE id = :worker

-- name: expired_jobs
SELECT j.id, j.token, j.task, j.attempts AS attempt, j.max_attempts, j.lease, j.started_at,
       j.lease_until, j.deadline_at, j.worker,
       (w.id IS NOT NULL AND w.last_seen >= :now - 2.5 * w.heartbeat_interval) AS worker_alive,
       j.errors, j.lease_expiries, j.crashes, j.prefetched, j.queue
FROM sqljobs_jobs AS j LEFT JOIN sqljobs_workers AS w ON w.id = j.worker
WHERE j.state = 'running' AND j.lease_until < :now
ORDER BY j.lease_until
LIMIT :limit

-- name: any_expired
SELECT 1 FROM sqljobs_jobs WHERE state = 'running' AND lease_until < :now LIMIT 1

-- name: jobs_of_worker
SELECT j.id, j.token, j.task, j.attempts AS attempt, j.max_attempts, j.lease, j.started_at,
       j.lease_until, j.deadline_at, j.worker, 0 AS worker_alive,
       j.errors, j.lease_expiries, j.crashes, j.prefetched, j.queue
FROM sqljobs_jobs AS j
WHERE j.state = 'running' AND j.worker = :worker
LIMIT :limit

-- name: count_by_queue_state
-- Jobs by queue and state, but for pending ones (pending_by_queue), each part read
-- from a partial index and none from the table, which keeps every finished job until the
-- pruner takes it: running from the lease index, dead from sqljobs_jobs_ended, both exact.
-- Done and cancelled jobs grow with retention, so each queue's are counted only up to
-- :cap + 1 (a row more than the cap says "more than :cap"), and the queues that have any
-- are found by a skip scan of sqljobs_jobs_ended (the next queue after the last one found),
-- a few index seeks each.
-- `state <> 'pending' AND state <> 'running'` (done, dead or cancelled) repeats
-- sqljobs_jobs_ended's predicate: SQLite takes a partial index only for a query that states
-- its predicate's terms.
WITH RECURSIVE ended (state, queue) AS (
    SELECT s.state, (SELECT min(queue) FROM sqljobs_jobs
                     WHERE state = s.state AND state <> 'pending' AND state <> 'running')
    FROM (SELECT 'done' AS state UNION ALL SELECT 'cancelled') AS s
    UNION ALL
    SELECT e.state, (SELECT min(queue) FROM sqljobs_jobs
                     WHERE state = e.state AND queue > e.queue
                       AND state <> 'pending' AND state <> 'running')
    FROM ended AS e WHERE e.queue IS NOT NULL
)
SELECT queue, state,
       (SELECT count(*) FROM (SELECT 1 FROM sqljobs_jobs
                              WHERE state = e.state AND queue = e.queue
                                AND state <> 'pending' AND state <> 'running'
                              LIMIT :cap + 1)) AS jobs
FROM ended AS e WHERE queue IS NOT NULL
UNION ALL
SELECT queue, 'dead', count(*) FROM sqljobs_jobs
WHERE state = 'dead' AND state <> 'pending' AND state <> 'running' GROUP BY queue
UNION ALL
SELECT queue, 'waiting', count(*) FROM sqljobs_jobs
WHERE state = 'waiting' AND state <> 'pending' AND state <> 'running' GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*) FROM sqljobs_jobs WHERE state = 'running' GROUP BY queue

-- name: pending_by_queue
-- Pending jobs by queue, and how long the oldest due one has waited, from the claim index
-- alone (it holds queue and run_at, in queue order: no row is read, nothing is sorted) and
-- the suspects index (usually empty), and, for jobs under a concurrency limit, the limited
-- index (their rows are read for the queue); a queue may come in several rows, which add
-- up. Their predicates together are `state = 'pending'`, which no partial index has alone.
SELECT queue, count(*) AS pending, :now - min(CASE WHEN run_at <= :now THEN run_at END) AS age
FROM sqljobs_jobs WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL GROUP BY queue
UNION ALL
SELECT queue, count(*) AS pending, :now - min(CASE WHEN run_at <= :now THEN run_at END) AS age
FROM sqljobs_jobs WHERE state = 'pending' AND limit_key IS NOT NULL GROUP BY queue
UNION ALL
SELECT queue, count(*) AS pending, :now - min(CASE WHEN run_at <= :now THEN run_at END) AS age
FROM sqljobs_jobs WHERE state = 'pending' AND crashes >= 2 AND limit_key IS NULL GROUP BY queue

-- name: pending_by_task
-- Pending jobs by task, through the same two indexes (each job's row is read for its task);
-- a task may come in two rows, which add up. Kept apart from pending_by_queue: grouping by
-- queue and task at once sorts every pending job, and costs more than both.
SELECT task, count(*) AS pending FROM sqljobs_jobs
WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL GROUP BY task
UNION ALL
SELECT task, count(*) AS pending FROM sqljobs_jobs
WHERE state = 'pending' AND limit_key IS NOT NULL GROUP BY task
UNION ALL
SELECT task, count(*) AS pending FROM sqljobs_jobs
WHERE state = 'pending' AND crashes >= 2 AND limit_key IS NULL GROUP BY task

-- name: pending_by_task_in_queue
-- One queue's pending jobs by task, through the same indexes (the claim index by queue):
-- asked only for a queue where some task's jobs may find no live worker that serves it.
SELECT task, count(*) AS pending FROM sqljobs_jobs
WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL AND queue = :queue GROUP BY task
UNION ALL
SELECT task, count(*) AS pending FROM sqljobs_jobs
WHERE state = 'pending' AND limit_key IS NOT NULL AND queue = :queue GROUP BY task
UNION ALL
SELECT task, count(*) AS pending FROM sqljobs_jobs
WHERE state = 'pending' AND crashes >= 2 AND limit_key IS NULL AND queue = :queue GROUP BY task

-- name: live_workers
-- The task names each live worker runs (a JSON list per worker) and the queues it serves
-- (a JSON list, or null: every queue).
SELECT tasks, queues FROM sqljobs_workers WHERE last_seen >= :now - 2.5 * heartbeat_interval

-- name: get_job
SELECT id, queue, task, payload, key, state, priority, run_at, created_at, attempts,
       max_attempts, token, lease, lease_until, worker, started_at, finished_at, errors,
       lease_expiries, crashes, last_error, last_traceback, deadline_at, history, result,
       progress, limit_key, limit_max, rate_max, rate_window, parents, after_policy,
       waiting_on, key_hold, released_key, debounced
FROM sqljobs_jobs WHERE id = :id

-- name: list_jobs
SELECT id, queue, task, payload, key, state, priority, run_at, created_at, attempts,
       max_attempts, token, lease, lease_until, worker, started_at, finished_at, errors,
       lease_expiries, crashes, last_error, last_traceback, deadline_at, history, result,
       progress, limit_key, limit_max, rate_max, rate_window, parents, after_policy,
       waiting_on, key_hold, released_key, debounced
FROM sqljobs_jobs
WHERE (:state IS NULL OR state = :state) AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit

-- name: cancel_job
-- Pending or waiting: cancelled at once. Running: cancelled too, so the worker's outcome
-- (fenced on `running`) can never be written; the worker learns of it at its next
-- heartbeat. No attempt is charged; the history notes a run that was cut short. Its
-- children are settled by the caller, in the same transaction. A running job keeps its
-- lease_until: its handler may run on, and holds the job's slots until its worker says
-- it ended (end_holds) or the lease lapses.
UPDATE sqljobs_jobs
SET state = 'cancelled', finished_at = :now, prefetched = 0,
    lease_until = CASE WHEN state = 'running' THEN lease_until END,
    waiting_on = 0,
    history = CASE WHEN state = 'running' THEN json_insert(history, '$[#]', json_object(
        'attempt', attempts, 'outcome', 'cancelled', 'started_at', started_at,
        'ended_at', :now, 'worker', worker, 'error', 'cancelled while running'))
        ELSE history END
WHERE id = :id AND state IN ('pending', 'waiting', 'running')
RETURNING id, children

-- name: pause_queue
-- RETURNING tells whether this call paused it (an already paused queue keeps its time).
INSERT INTO sqljobs_queues (name, paused, paused_at, updated_at) VALUES (:name, 1, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    paused_at = CASE WHEN paused = 1 THEN paused_at ELSE :now END,
    paused = 1, updated_at = :now
RETURNING paused_at = :now AS changed

-- name: resume_queue
UPDATE sqljobs_queues SET paused = 0, paused_at = NULL, updated_at = :now
WHERE name = :name AND paused = 1

-- name: queue_states
SELECT name, paused, paused_at FROM sqljobs_queues

-- name: ended_queues
-- The queues that have jobs that ended in :state: a skip scan of sqljobs_jobs_ended (the
-- next queue after the last one found), one index seek each.
WITH RECURSIVE found (queue) AS (
    SELECT (SELECT min(queue) FROM sqljobs_jobs
            WHERE state = :state AND state <> 'pending' AND state <> 'running')
    UNION ALL
    SELECT (SELECT min(queue) FROM sqljobs_jobs
            WHERE state = :state AND queue > found.queue
              AND state <> 'pending' AND state <> 'running')
    FROM found WHERE found.queue IS NOT NULL
)
SELECT queue FROM found WHERE queue IS NOT NULL

-- name: prune_finished
-- One bounded batch of a queue's jobs that ended in :state before :before (a range of
-- sqljobs_jobs_ended, whose predicate the last line repeats). Each keyed one says until
-- when its key is kept (spend_key, in the same transaction): a "retained" key for its
-- key_retention from now (NULL: the pruning App's), a key_scope duration to its end.
-- A workflow's child (keyed wf:<workflow>:<position>:...) is kept while the step that
-- started it still waits, since that step reads its outcome from its row: one primary
-- key probe for such a child (a cast reads a text's leading integer), none for another.
DELETE FROM sqljobs_jobs WHERE id IN (
    SELECT id FROM sqljobs_jobs AS j INDEXED BY sqljobs_jobs_ended
    WHERE state = :state AND queue = :queue AND finished_at < :before
      AND state <> 'pending' AND state <> 'running'
      AND CASE WHEN j.key GLOB 'wf:*' THEN (
              SELECT s.state FROM sqljobs_workflow_steps AS s
              WHERE s.job_id = CAST(substr(j.key, 4) AS INTEGER)
                AND s.position = CAST(substr(j.key, 4 + instr(substr(j.key, 4), ':')) AS INTEGER)
          ) IS NOT 'waiting' ELSE 1 END
    LIMIT :limit)
RETURNING id AS job_id, key, task, state,
          CASE WHEN key IS NULL THEN NULL
               WHEN key_hold IS NOT NULL THEN finished_at + key_hold
               ELSE :now + coalesce(key_retention, :key_retention) END AS expires_at

-- name: spend_key
-- A pruned job's key, kept until expires_at. A key kept here before (its period over,
-- not yet dropped) has since named another job: the newer one's is kept.
INSERT INTO sqljobs_spent_keys (key, job_id, task, state, spent_at, expires_at)
VALUES (:key, :job_id, :task, :state, :now, :expires_at)
ON CONFLICT (key) DO UPDATE SET
    job_id = excluded.job_id, task = excluded.task, state = excluded.state,
    spent_at = excluded.spent_at, expires_at = excluded.expires_at

-- name: prune_spent_keys
DELETE FROM sqljobs_spent_keys WHERE key IN (
    SELECT key FROM sqljobs_spent_keys WHERE expires_at <= :before LIMIT :limit)

-- name: spent_key_of_job
SELECT key, task, state, spent_at, expires_at FROM sqljobs_spent_keys WHERE job_id = :id

-- name: prune_idempotency
DELETE FROM sqljobs_idempotency WHERE key IN (
    SELECT key FROM sqljobs_idempotency
    WHERE expires_at IS NOT NULL AND expires_at < :before LIMIT :limit)

-- name: effect_begin
-- Record the intent before calling out; on a repeat, say what is known of it. One attempt
-- at a time holds an effect that is not done; a hold runs out (its holder died) after
-- :hold seconds, and the next attempt takes it over.
INSERT INTO sqljobs_effects
    (key, state, job_id, holder, held_until, attempts, created_at, updated_at)
VALUES (:key, 'pending', :job_id, :holder, :now + :hold, 1, :now, :now)
ON CONFLICT (key) DO UPDATE SET
    attempts = attempts + 1,
    updated_at = :now,
    job_id = CASE WHEN state <> 'done' AND held_until <= :now THEN :job_id ELSE job_id END,
    holder = CASE WHEN state <> 'done' AND held_until <= :now THEN :holder ELSE holder END,
    held_until = CASE WHEN state <> 'done' AND held_until <= :now THEN :now + :hold
                      ELSE held_until END
RETURNING state, result, error, attempts, holder = :holder AS mine

-- name: effect_set
UPDATE sqljobs_effects
SET state = :state, result = :result, error = :error, updated_at = :now, held_until = :now
WHERE key = :key AND holder = :holder

-- name: effect_forget
DELETE FROM sqljobs_effects WHERE key = :key AND state = 'pending' AND holder = :holder

-- name: mark_idempotent
-- sqljobs.idempotent(): uniqueness from the primary key (insert-or-ignore, judged by the
-- row count), never from a check-then-insert, so concurrent deliveries cannot both pass.
INSERT INTO sqljobs_idempotency (key, created_at, expires_at) VALUES (:key, :now, :expires)
ON CONFLICT (key) DO NOTHING

-- name: levels_of_queues
-- The claim order's levels, for a worker of some queues: each queue's priorities that
-- have pending jobs, highest first, found by a loose scan of sqljobs_jobs_claim (one index
-- probe a level). A claim then reads each level's due jobs from the head of its range of
-- the index, (queue, priority, run_at, id), so the scan ends at the first job not yet due:
-- read in claim order across levels, as one scan, the jobs due in a day stood between
-- each priority's due jobs and the next priority's, and a claim that found fewer due jobs
-- than its limit walked all of them, holding the write lock meanwhile.
levels (queue, priority) AS (
    SELECT q.value, (SELECT max(priority) FROM sqljobs_jobs
                     WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
                       AND queue = q.value)
    FROM (SELECT DISTINCT value FROM json_each(:queues)) AS q
    WHERE q.value NOT IN (SELECT name FROM sqljobs_queues WHERE paused = 1)
    UNION ALL
    SELECT l.queue, (SELECT max(priority) FROM sqljobs_jobs
                     WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
                       AND queue = l.queue AND priority < l.priority)
    FROM levels AS l WHERE l.priority IS NOT NULL
)

-- name: levels_of_all
-- The same for a worker of every queue: the priorities with pending jobs, from
-- sqljobs_jobs_claim_any, (priority, run_at, id).
levels (queue, priority) AS (
    SELECT NULL, (SELECT max(priority) FROM sqljobs_jobs
                  WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL)
    UNION ALL
    SELECT NULL, (SELECT max(priority) FROM sqljobs_jobs
                  WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
                    AND priority < l.priority)
    FROM levels AS l WHERE l.priority IS NOT NULL
)

-- name: level_jobs_of_queue
-- A claim's jobs from one queue's levels: an IN over the levels on the index's priority
-- column keeps the index order, so the claim stops at its limit with nothing sorted.
SELECT id, priority, run_at FROM sqljobs_jobs
WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL AND queue = :queue
  AND priority IN (SELECT priority FROM levels) AND run_at <= :now {level_tasks}
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: level_jobs_of_all
SELECT id, priority, run_at FROM sqljobs_jobs
WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
  AND priority IN (SELECT priority FROM levels) AND run_at <= :now {level_tasks}
  AND queue NOT IN (SELECT name FROM sqljobs_queues WHERE paused = 1)
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: level_jobs_of_queues
-- Several queues: each level's first due jobs, up to the limit, then the best of those
-- (a sort of at most levels x limit rows, never of a whole backlog).
SELECT j.id, j.priority, j.run_at
FROM levels AS l JOIN sqljobs_jobs AS j ON j.id IN (
    SELECT id FROM sqljobs_jobs
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL
      AND queue = l.queue AND priority = l.priority AND run_at <= :now {level_tasks}
    ORDER BY run_at, id
    LIMIT :limit)
ORDER BY j.priority DESC, j.run_at, j.id
LIMIT :limit

-- name: level_of_queue
AND queue = l.queue

-- name: level_of_any
AND queue NOT IN (SELECT name FROM sqljobs_queues WHERE paused = 1)

-- name: filter_one_queue
AND queue = :queue

-- name: filter_queues
AND queue IN (SELECT value FROM json_each(:queues))

-- name: filter_tasks
AND task IN (SELECT value FROM json_each(:tasks))

-- name: lease_of_each_task
-- The claim's lease: the worker's lease for the job's task (a lookup a row), else the
-- job's own (a claim of all tasks, which gives no leases).
lease = coalesce((SELECT value FROM json_each(:leases) WHERE key = task), lease),
lease_until = :now + coalesce((SELECT value FROM json_each(:leases) WHERE key = task), lease)

-- name: lease_of_all_tasks
-- The same when the worker gives every task it claims one lease, :lease (the common
-- case): no lookup a row, which every claimed job would pay.
lease = :lease, lease_until = :now + :lease

-- name: save_queue_limit
-- A queue's limits as a worker's code defines them, for enqueues by name
-- from services without that code. A queue's pause is left as it is.
INSERT INTO sqljobs_queues (name, paused, updated_at, concurrency, rate_max, rate_window)
VALUES (:queue, 0, :now, :concurrency, :rate_max, :rate_window)
ON CONFLICT (name) DO UPDATE SET
    concurrency = excluded.concurrency, rate_max = excluded.rate_max,
    rate_window = excluded.rate_window, updated_at = excluded.updated_at
WHERE sqljobs_queues.concurrency IS NOT excluded.concurrency
   OR sqljobs_queues.rate_max IS NOT excluded.rate_max
   OR sqljobs_queues.rate_window IS NOT excluded.rate_window

-- name: clear_queue_limit
-- A queue a worker serves whose code sets no limit: a limit recorded before is taken away.
UPDATE sqljobs_queues SET concurrency = NULL, rate_max = NULL, rate_window = NULL
WHERE name = :queue AND (concurrency IS NOT NULL OR rate_max IS NOT NULL)

-- name: queue_limit
SELECT concurrency, rate_max, rate_window FROM sqljobs_queues WHERE name = :name
