-- Claims of jobs under a concurrency limit (sqljobs.limits), run in one write transaction:
-- SQLite has one writer, so nothing else can claim between the count and the claim.

-- name: limited_keys
-- A loose index scan: the limit keys that have pending jobs, one index seek each, from
-- :after on (the caller rotates where it starts, so a cap never starves the last keys).
WITH RECURSIVE keys(key) AS (
    SELECT (SELECT min(limit_key) FROM sqljobs_jobs
            WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key > :after)
    UNION ALL
    SELECT (SELECT min(limit_key) FROM sqljobs_jobs
            WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key > keys.key)
    FROM keys WHERE keys.key IS NOT NULL
)
SELECT key FROM keys WHERE key IS NOT NULL LIMIT :max_keys

-- name: limit_running
-- How many jobs of each of these keys run now (claimed and held, anywhere), with the
-- handlers that run on after their job left `running` (see renew_holds).
SELECT key, count(*) AS running FROM (
    SELECT limit_key AS key FROM sqljobs_jobs
    WHERE state = 'running' AND limit_key IN (SELECT value FROM json_each(:keys))
    UNION ALL
    SELECT limit_key FROM sqljobs_jobs INDEXED BY sqljobs_jobs_held
    WHERE lease_until > :now AND state <> 'running' AND limit_key IS NOT NULL
      AND limit_key IN (SELECT value FROM json_each(:keys)))
GROUP BY key

-- name: limited_candidates
-- The first due jobs of each key in :keys, in claim order (the caller keeps as many as
-- the key has free slots and starts left in its rate's window), with the key's limits:
-- one statement, each level of each key (see levels_of_keys) one seek into the limited
-- index, up to :most rows a level (a statement a key pays a statement's own cost for
-- every key, and a UNION ALL of them cost more still). The index is named: its run_at
-- twin covers finished jobs too, and a level read from it would read every due limited
-- job.
WITH RECURSIVE open_keys (key) AS (
    SELECT value FROM json_each(:keys)
), {levels_of_keys}
SELECT j.id, j.priority, j.run_at, j.limit_max, j.rate_max, j.rate_window, j.limit_key
FROM key_levels AS l JOIN sqljobs_jobs AS j ON j.id IN (
    SELECT id FROM sqljobs_jobs INDEXED BY sqljobs_jobs_limited
    WHERE limit_key = l.key AND priority = l.priority AND state = 'pending'
      AND limit_key IS NOT NULL AND run_at <= :now AND crashes < 2 {queue_filter}
      AND queue NOT IN (SELECT name FROM sqljobs_queues WHERE paused = 1)
    ORDER BY run_at, id
    LIMIT :most)

-- name: hand_over
-- Each job of :ended (just written, in this transaction) that held a slot under a
-- concurrency limit hands it to the next due job of its key: the key's running count
-- stays what it was, so nothing needs counting (see LimitedScans). The heir is the next
-- job in line, or none: it must carry no rate (rates are counted by the full claim) and a
-- limit no lower than the ended job's (a lowered limit is never overrun this way); a job that ran as a suspect held no counted
-- slot, so it hands none over. At most :limit heirs, in claim order.
WITH RECURSIVE freed AS (
    SELECT limit_key AS key, min(limit_max) AS limit_max, count(*) AS slots FROM sqljobs_jobs
    WHERE id IN (SELECT value FROM json_each(:ended)) AND state <> 'running'
      AND lease_until IS NULL  -- (a handler that runs on keeps its slot: renew_holds)
      AND limit_key IS NOT NULL AND limit_max IS NOT NULL AND rate_max IS NULL AND crashes < 2
    GROUP BY limit_key
), open_keys (key) AS (
    SELECT key FROM freed
), {levels_of_keys}, heirs AS (
    SELECT j.id, j.priority, j.run_at, j.limit_max, j.rate_max, f.slots, f.limit_max AS floor,
           row_number() OVER (PARTITION BY j.limit_key ORDER BY j.priority DESC, j.run_at, j.id)
               AS nth
    FROM key_levels AS l JOIN freed AS f ON f.key = l.key JOIN sqljobs_jobs AS j ON j.id IN (
        SELECT id FROM sqljobs_jobs INDEXED BY sqljobs_jobs_limited
        WHERE limit_key = l.key AND priority = l.priority AND state = 'pending'
          AND limit_key IS NOT NULL AND run_at <= :now AND crashes < 2 {queue_filter}
          AND queue NOT IN (SELECT name FROM sqljobs_queues WHERE paused = 1)
        ORDER BY run_at, id
        LIMIT (SELECT max(slots) FROM freed))  -- each level reads no more than a key may take
)
UPDATE sqljobs_jobs
SET state = 'running', attempts = attempts + 1, token = token + 1,
    worker = :worker, started_at = :now, prefetched = :all_buffered,
    lease = coalesce((SELECT value FROM json_each(:leases) WHERE key = task), lease),
    lease_until = :now + coalesce((SELECT value FROM json_each(:leases) WHERE key = task), lease)
WHERE id IN (SELECT id FROM heirs  -- the next in line, or none
             WHERE nth <= slots AND rate_max IS NULL AND limit_max >= floor
             ORDER BY priority DESC, run_at, id LIMIT :limit)
RETURNING id, task, payload, queue, priority, attempts AS attempt, token, lease,
          max_attempts, created_at, deadline_at, key, run_at

-- name: drop_starts
-- A rate's window has passed these starts: they count no more.
DELETE FROM sqljobs_starts WHERE limit_key = :key AND started_at <= :since

-- name: count_starts
SELECT count(*) AS starts FROM sqljobs_starts WHERE limit_key = :key AND started_at > :since

-- name: add_start
INSERT INTO sqljobs_starts (limit_key, started_at) VALUES (:key, :now)

-- name: rate_keys
-- The rate-limited keys with due pending jobs, and their rates (for when the next start
-- is allowed: a worker sleeps until then instead of asking again and again). Only a key
-- with starts kept can have a full window, so the keys come from sqljobs_starts (a few
-- rows a key) and each is looked up in the limited index, one seek: never a read of
-- every pending limited job, which a worker would pay on every round trip of a drain.
SELECT k.key, j.rate_max, j.rate_window
FROM (SELECT DISTINCT limit_key AS key FROM sqljobs_starts) AS k
JOIN sqljobs_jobs AS j ON j.id = (
    SELECT id FROM sqljobs_jobs
    WHERE limit_key = k.key AND state = 'pending' AND rate_max IS NOT NULL
      AND run_at <= :now {queue_filter}
    LIMIT 1)

-- name: window_start
-- The start that must leave a full window before another may start: the rate_max-th
-- most recent.
SELECT started_at FROM sqljobs_starts WHERE limit_key = :key
ORDER BY started_at DESC LIMIT 1 OFFSET :nth

-- name: claim_ids
-- Claim the chosen limited jobs, as the claim statement does.
UPDATE sqljobs_jobs
SET state = 'running', attempts = attempts + 1, token = token + 1,
    worker = :worker, started_at = :now, prefetched = :all_buffered,
    lease = coalesce((SELECT value FROM json_each(:leases) WHERE key = task), lease),
    lease_until = :now + coalesce((SELECT value FROM json_each(:leases) WHERE key = task), lease)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending'
RETURNING id, task, payload, queue, priority, attempts AS attempt, token, lease,
          max_attempts, created_at, deadline_at, key, run_at

-- name: next_limited_due
-- When the next delayed limited job falls due (one already due waits for a slot, which
-- a completion announces: it is not a reason to look again now).
SELECT min(run_at) - :now AS wait FROM sqljobs_jobs INDEXED BY sqljobs_jobs_limited_due
WHERE state = 'pending' AND limit_key IS NOT NULL AND run_at > :now {queue_filter}

-- name: limit_usage
-- What a limit key uses now: its running jobs, and its starts since :since.
SELECT (SELECT count(*) FROM sqljobs_jobs WHERE state = 'running' AND limit_key = :key)
       + (SELECT count(*) FROM sqljobs_jobs INDEXED BY sqljobs_jobs_held
          WHERE lease_until > :now AND state <> 'running' AND limit_key IS NOT NULL
            AND limit_key = :key) AS running,
       (SELECT count(*) FROM sqljobs_starts WHERE limit_key = :key AND started_at > :since)
           AS starts

-- name: limited_pending
-- Whether jobs under a limit wait for tasks this worker runs: then it claims them, even if
-- its own code declares no limit (the jobs carry theirs, from the code that enqueued them).
SELECT EXISTS (SELECT 1 FROM sqljobs_jobs
               WHERE state = 'pending' AND limit_key IS NOT NULL {queue_filter}) AS waiting

-- name: limit_backlog
-- Per limit key, its due pending jobs (waiting for a slot, the rate's window, or a free
-- worker) and its limits, from the limited index (it holds pending limited jobs only);
-- the busiest keys first, at most :most of them.
SELECT limit_key AS key, min(queue) AS queue, count(*) AS waiting,
       max(limit_max) AS limit_max, max(rate_max) AS rate_max, max(rate_window) AS rate_window
FROM sqljobs_jobs
WHERE state = 'pending' AND limit_key IS NOT NULL AND run_at <= :now
GROUP BY limit_key ORDER BY waiting DESC, key LIMIT :most

-- name: limit_running_all
-- Per limit key, the slots in use: its running jobs, and the handlers that run on after
-- their job left `running` (both from partial indexes: these sets are small).
SELECT limit_key AS key, min(queue) AS queue, count(*) AS running,
       max(limit_max) AS limit_max, max(rate_max) AS rate_max, max(rate_window) AS rate_window
FROM (SELECT limit_key, queue, limit_max, rate_max, rate_window FROM sqljobs_jobs
      WHERE state = 'running' AND limit_key IS NOT NULL
      UNION ALL
      SELECT limit_key, queue, limit_max, rate_max, rate_window
      FROM sqljobs_jobs INDEXED BY sqljobs_jobs_held
      WHERE lease_until > :now AND state <> 'running' AND limit_key IS NOT NULL)
GROUP BY limit_key

-- name: prune_starts
-- Starts older than any window, of keys no claim has looked at since (a claim drops its
-- key's own): kept, they would make every question of when a window opens look at them.
DELETE FROM sqljobs_starts WHERE rowid IN (
    SELECT rowid FROM sqljobs_starts WHERE started_at < :before LIMIT :limit)

-- name: levels_of_keys
-- The priorities with pending jobs of each limit key in open_keys (a CTE of the statement),
-- highest first: a loose scan of sqljobs_jobs_limited, one seek a level. Each level is
-- then read from its head to its first job not yet due: read as one scan in claim order, a
-- key's jobs not yet due stood between its due ones and the next priority's, and a claim
-- that found fewer due jobs than it may take walked all of them.
key_levels (key, priority) AS (
    SELECT o.key, (SELECT max(priority) FROM sqljobs_jobs
                   WHERE state = 'pending' AND limit_key = o.key)
    FROM open_keys AS o
    UNION ALL
    SELECT l.key, (SELECT max(priority) FROM sqljobs_jobs
                   WHERE state = 'pending' AND limit_key = l.key AND priority < l.priority)
    FROM key_levels AS l WHERE l.priority IS NOT NULL
)
