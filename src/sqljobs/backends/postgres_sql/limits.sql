-- Claims of jobs under a concurrency limit (sqljobs.limits), in one transaction of two
-- statements: lock the keys (transaction-scoped advisory locks), then, in a snapshot
-- taken after the locks, count each key's running jobs and claim its free slots. A key
-- another worker is claiming is skipped, never waited for; the locks go at commit.

-- name: lock_limited_keys
-- A loose index scan: the limit keys that have pending jobs, one index seek each, from
-- %(after)s on (the caller rotates where it starts), those this transaction could lock.
WITH RECURSIVE keys(key) AS (
    SELECT (SELECT min(limit_key) FROM {schema}.sqljobs_jobs
            WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key > %(after)s)
    UNION ALL
    SELECT (SELECT min(limit_key) FROM {schema}.sqljobs_jobs
            WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key > keys.key)
    FROM keys WHERE keys.key IS NOT NULL
), found AS MATERIALIZED (
    SELECT key FROM keys WHERE key IS NOT NULL LIMIT %(max_keys)s
)
SELECT key, pg_try_advisory_xact_lock(hashtextextended('sqljobs:limit:' || key, 0)) AS locked
FROM found

-- name: claim_limited
-- For each locked key: its limit less its running jobs is how many of its due jobs (in
-- claim order) may start; of all those, the first %(limit)s in claim order are claimed.
WITH slots AS (
    SELECT k.key,
           (SELECT p.limit_max FROM {schema}.sqljobs_jobs AS p
            WHERE p.limit_key = k.key AND p.state = 'pending' LIMIT 1)
           - (SELECT count(*) FROM {schema}.sqljobs_jobs AS r
              WHERE r.limit_key = k.key AND r.state = 'running') AS free
    FROM unnest(%(keys)s::text[]) AS k(key)
), picked AS MATERIALIZED (
    SELECT c.id, c.priority, c.run_at
    FROM slots CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM {schema}.sqljobs_jobs
        WHERE limit_key = slots.key AND state = 'pending' AND run_at <= now() AND crashes < 2
          {queue_filter}
          AND queue NOT IN (SELECT name FROM {schema}.sqljobs_queues WHERE paused)
        ORDER BY priority DESC, run_at, id
        LIMIT greatest(slots.free, 0)
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(limit)s
), ranked AS (
    SELECT id, row_number() OVER (ORDER BY priority DESC, run_at, id) AS rank FROM picked
)
UPDATE {schema}.sqljobs_jobs AS j
SET state = 'running', attempts = j.attempts + 1, token = j.token + 1,
    worker = %(worker)s, started_at = now(), prefetched = ranked.rank > %(start_now)s,
    lease = coalesce((%(leases)s::jsonb ->> j.task)::float8, j.lease),
    lease_until = now() + make_interval(secs => coalesce((%(leases)s::jsonb ->> j.task)::float8,
                                                         j.lease))
FROM ranked WHERE j.id = ranked.id
RETURNING j.id, j.task, j.payload, j.queue, j.priority, j.attempts AS attempt, j.token,
          j.lease, j.max_attempts, extract(epoch FROM j.created_at)::float8 AS created_at,
          extract(epoch FROM j.deadline_at)::float8 AS deadline_at, j.key,
          extract(epoch FROM j.run_at)::float8 AS run_at

-- name: next_limited_due
-- When the next delayed limited job falls due (one already due waits for a slot, which
-- a completion announces: it is not a reason to look again now).
SELECT extract(epoch FROM min(run_at) - now())::float8 AS wait FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND limit_key IS NOT NULL AND run_at > now() {queue_filter}
