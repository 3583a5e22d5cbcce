-- Claims of jobs under a concurrency or rate limit (sqljobs.limits), in one transaction of
-- two statements: lock the keys (transaction-scoped advisory locks), then, in a snapshot
-- taken after the locks, count each key's running jobs and recent starts and claim what
-- is free. A key another worker is claiming is waited for (a statement's time, at most
-- lock_timeout): skipping it left that worker asleep with slots free. The locks go at
-- commit.

-- name: limited_lock_timeout
-- A claimer that holds key locks answers within a statement's time; one that stopped
-- (a paused VM, a lost network) must not stall every claim behind it: give up instead,
-- and look again on the next claim.
SET LOCAL lock_timeout = '200ms'

-- name: lock_limited_keys
-- A loose index scan: up to %(max_keys)s limit keys that have pending jobs, one index seek
-- each, the keys after %(after)s first and then, wrapping around, those from the start
-- (the caller rotates %(after)s, so a cap never starves the last keys). They are locked
-- in key order, whatever order they were found in, so two claimers never wait for each
-- other in a circle (PostgreSQL's deadlock check would end one if they did).
WITH RECURSIVE later (key) AS (
    SELECT (SELECT min(limit_key) FROM {schema}.sqljobs_jobs
            WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key > %(after)s)
    UNION ALL
    SELECT (SELECT min(limit_key) FROM {schema}.sqljobs_jobs
            WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key > later.key)
    FROM later WHERE later.key IS NOT NULL
), earlier (key) AS (
    SELECT (SELECT min(limit_key) FROM {schema}.sqljobs_jobs
            WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key > '')
    UNION ALL
    SELECT (SELECT min(limit_key) FROM {schema}.sqljobs_jobs
            WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key > earlier.key)
    FROM earlier WHERE earlier.key IS NOT NULL AND earlier.key <= %(after)s
), found AS MATERIALIZED (
    (SELECT key, 0 AS turn FROM later WHERE key IS NOT NULL LIMIT %(max_keys)s)
    UNION ALL
    (SELECT key, 1 FROM earlier WHERE key IS NOT NULL AND key <= %(after)s
     LIMIT %(max_keys)s)
), chosen AS MATERIALIZED (
    SELECT key, turn FROM found ORDER BY turn, key LIMIT %(max_keys)s
)
SELECT key, turn, pg_advisory_xact_lock(hashtextextended('sqljobs:limit:' || key, 0))
       IS NOT NULL AS locked
FROM (SELECT key, turn FROM chosen ORDER BY key) AS sorted

-- name: claim_limited
-- For each locked key, how many of its due jobs (in claim order) may start: its limit less
-- its running jobs, and its rate's count less its starts within the window (the starts a
-- window has passed are dropped here too); of all those, the first %(limit)s in claim
-- order are claimed, and each start of a rate-limited key is written down. Times are
-- statement_timestamp(), taken after the key locks were waited for: now() (the
-- transaction's start) would date the starts early and open the window too soon.
WITH RECURSIVE slots AS (
    SELECT k.key, l.rate_max, l.rate_window,
           least(
               coalesce(l.limit_max - (SELECT count(*) FROM {schema}.sqljobs_jobs AS r
                                       WHERE r.limit_key = k.key AND r.state = 'running'
                                         AND r.limit_key IS NOT NULL)
                                    -- handlers that run on after their job left `running`
                                    - (SELECT count(*) FROM {schema}.sqljobs_jobs AS h
                                       WHERE h.limit_key = k.key AND h.state <> 'running'
                                         AND h.lease_until > statement_timestamp()
                                         AND h.lease_until IS NOT NULL
                                         AND h.limit_key IS NOT NULL),
                        2147483647),
               coalesce(l.rate_max - (SELECT count(*) FROM {schema}.sqljobs_starts AS s
                                      WHERE s.limit_key = k.key
                                        AND s.started_at > statement_timestamp() - make_interval(
                                                               secs => l.rate_window)),
                        2147483647)) AS free
    FROM unnest(%(keys)s::text[]) AS k(key)
    CROSS JOIN LATERAL (
        SELECT p.limit_max, p.rate_max, p.rate_window FROM {schema}.sqljobs_jobs AS p
        WHERE p.limit_key = k.key AND p.state = 'pending' LIMIT 1
    ) AS l
), open_keys (key) AS (
    SELECT key FROM slots WHERE free > 0
), {levels_of_keys}, picked AS MATERIALIZED (  -- each level's first due jobs, up to the key's free slots
    SELECT c.id, c.priority, c.run_at, c.limit_key,
           row_number() OVER (PARTITION BY c.limit_key ORDER BY c.priority DESC, c.run_at, c.id)
               AS nth
    FROM key_levels AS l CROSS JOIN LATERAL (
        SELECT id, priority, run_at, limit_key FROM {schema}.sqljobs_jobs
        WHERE limit_key = l.key AND priority = l.priority AND state = 'pending'
          AND run_at <= statement_timestamp() AND crashes < 2 {queue_filter}
          AND queue NOT IN (SELECT name FROM {schema}.sqljobs_queues WHERE paused)
        ORDER BY run_at, id
        LIMIT least((SELECT free FROM slots WHERE slots.key = l.key), %(limit)s)
        FOR UPDATE SKIP LOCKED
    ) AS c
), ranked AS (  -- the key's first free ones, then the first %(limit)s of all, in claim order
    SELECT id, row_number() OVER (ORDER BY priority DESC, run_at, id) AS rank
    FROM (SELECT p.id, p.priority, p.run_at FROM picked AS p JOIN slots ON slots.key = p.limit_key
          WHERE p.nth <= slots.free
          ORDER BY p.priority DESC, p.run_at, p.id
          LIMIT %(limit)s) AS kept
), claimed AS (
    UPDATE {schema}.sqljobs_jobs AS j
    SET state = 'running', attempts = j.attempts + 1, token = j.token + 1,
        worker = %(worker)s, started_at = statement_timestamp(), prefetched = ranked.rank > %(start_now)s,
        lease = coalesce((%(leases)s::jsonb ->> j.task)::float8, j.lease),
        lease_until = statement_timestamp() + make_interval(secs => coalesce((%(leases)s::jsonb ->> j.task)::float8,
                                                             j.lease))
    FROM ranked WHERE j.id = ranked.id
    RETURNING j.id, j.task, j.payload, j.queue, j.priority, j.attempts AS attempt, j.token,
              j.lease, j.max_attempts, extract(epoch FROM j.created_at)::float8 AS created_at,
              extract(epoch FROM j.deadline_at)::float8 AS deadline_at, j.key,
              extract(epoch FROM j.run_at)::float8 AS run_at, j.limit_key, j.rate_max
), logged AS (
    INSERT INTO {schema}.sqljobs_starts (limit_key, started_at)
    SELECT limit_key, statement_timestamp() FROM claimed WHERE rate_max IS NOT NULL
), dropped AS (
    DELETE FROM {schema}.sqljobs_starts AS s USING slots
    WHERE s.limit_key = slots.key AND slots.rate_max IS NOT NULL
      AND s.started_at <= statement_timestamp() - make_interval(secs => slots.rate_window)
)
SELECT * FROM claimed

-- name: complete_and_hand_over
-- A drain's limited round trip without a key lock or a count: each completed job under a
-- concurrency limit hands its slot to the next due job of its key, in this statement, so
-- the key's running count never changes and nothing needs counting. The heir is the next
-- job in line, or none: it must carry no rate (rates are counted by claim_limited) and a
-- limit no lower than the finished job's (a lowered limit is never overrun this way); a
-- job that ran as a suspect held no counted slot, so it hands none over. Ended jobs whose
-- key handed over every slot announce nothing (no slot is free); the others wake their
-- queue's workers as complete_jobs does.
-- Then jobs without a limit, for what is left of %(limit)s, with `claim`'s fragments
-- (queries.sql's level_picked and claim_chosen).
WITH RECURSIVE began AS (
    UPDATE {schema}.sqljobs_jobs AS j SET prefetched = false
    FROM unnest(%(began_ids)s::bigint[], %(began_tokens)s::bigint[]) AS b(id, token)
    WHERE j.id = b.id AND j.token = b.token AND j.state = 'running'
    RETURNING 1
), done AS (
    UPDATE {schema}.sqljobs_jobs AS j
    SET state = 'done', finished_at = now(), lease_until = NULL,
        result = %(results)s::jsonb ->> j.id::text,
        progress = coalesce(%(progress)s::jsonb ->> j.id::text, j.progress)
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS o(id, token)
    WHERE j.id = o.id AND j.token = o.token AND j.state = 'running' AND j.children = 0
    RETURNING j.id, j.waited, j.queue, j.limit_key, j.limit_max, j.rate_max, j.crashes
), freed AS (  -- (it reads `began`: both writes run before the heirs are locked, see
              -- queries.sql's level_picked)
    SELECT limit_key AS key, min(limit_max) AS limit_max, count(*) AS slots FROM done
    WHERE limit_key IS NOT NULL AND limit_max IS NOT NULL AND rate_max IS NULL AND crashes < 2
      AND (SELECT count(*) FROM began) >= 0
    GROUP BY limit_key
), open_keys (key) AS (
    SELECT key FROM freed
), {levels_of_keys}, heirs AS MATERIALIZED (
    SELECT h.id, h.priority, h.run_at, h.limit_key
    FROM (SELECT c.*, f.slots, f.limit_max AS floor,
                 row_number() OVER (PARTITION BY c.limit_key
                                    ORDER BY c.priority DESC, c.run_at, c.id) AS nth
          FROM key_levels AS l JOIN freed AS f ON f.key = l.key CROSS JOIN LATERAL (
              SELECT id, priority, run_at, limit_key, limit_max, rate_max
              FROM {schema}.sqljobs_jobs
              WHERE limit_key = l.key AND priority = l.priority AND state = 'pending'
                AND run_at <= now() AND crashes < 2 {queue_filter}
                AND queue NOT IN (SELECT name FROM {schema}.sqljobs_queues WHERE paused)
              ORDER BY run_at, id
              LIMIT f.slots
              FOR UPDATE SKIP LOCKED
          ) AS c) AS h
    WHERE h.nth <= h.slots  -- the next in line, or none:
      AND h.rate_max IS NULL AND h.limit_max >= h.floor
    ORDER BY h.priority DESC, h.run_at, h.id
    LIMIT %(hand_over)s
), kept AS (  -- keys whose every freed slot went to an heir
    SELECT freed.key FROM freed
    WHERE freed.slots = (SELECT count(*) FROM heirs WHERE heirs.limit_key = freed.key)
), ended AS (
    SELECT (SELECT count(pg_notify(%(channel)s, '#end:' || id)) FROM done WHERE waited)
           + (SELECT count(pg_notify(%(channel)s, queue)) FROM done
              WHERE limit_key IS NOT NULL AND limit_key NOT IN (SELECT key FROM kept))
           AS n
), {levels}, wanted (n) AS (SELECT greatest(%(limit)s - (SELECT count(*) FROM heirs), 0)
), {level_picked}, chosen AS (  -- (see queries.sql's levels_of_queues)
    SELECT coalesce(array_agg(id ORDER BY priority DESC, run_at, id), '{}') AS ids
    FROM (SELECT id, priority, run_at FROM heirs UNION ALL SELECT * FROM picked) AS both_
), claimed AS (
    {claim_chosen}
)
SELECT d.ids, d.limited, (SELECT count(*) FROM heirs) AS handed, c.*
FROM (SELECT array_agg(id) AS ids, count(limit_key) AS limited FROM done) AS d
CROSS JOIN ended LEFT JOIN claimed AS c ON true

-- name: next_rate_opening
-- In how many seconds the first rate-limited key with due jobs and a full window may
-- start one: its rate_max-th most recent start leaves the window then. A window that
-- opened in the last 50 ms counts as opening now: it may have opened between the worker's
-- claim and this question. Only a key with starts kept can have a full window, so the
-- keys come from sqljobs_starts (a few rows a key), each looked up in the limited index:
-- never a read of every pending limited job, on every round trip of a drain. No such key:
-- NULL (greatest() skips a NULL, so it must not see the empty min()).
SELECT CASE WHEN count(*) > 0 THEN
           greatest(0, extract(epoch FROM min(w.started_at + make_interval(secs => k.rate_window))
                                          - now()))::float8 END AS wait
FROM (SELECT DISTINCT limit_key FROM {schema}.sqljobs_starts) AS started
CROSS JOIN LATERAL (
    SELECT limit_key, rate_max, rate_window FROM {schema}.sqljobs_jobs
    WHERE limit_key = started.limit_key AND state = 'pending' AND rate_max IS NOT NULL
      AND run_at <= now() {queue_filter}
    LIMIT 1
) AS k
CROSS JOIN LATERAL (
    SELECT s.started_at FROM {schema}.sqljobs_starts AS s WHERE s.limit_key = k.limit_key
    ORDER BY s.started_at DESC OFFSET k.rate_max - 1 LIMIT 1
) AS w
WHERE w.started_at + make_interval(secs => k.rate_window) > now() - interval '50 milliseconds'

-- name: next_limited_due
-- When the next delayed limited job falls due (one already due waits for a slot, which
-- a completion announces: it is not a reason to look again now). It alone states
-- sqljobs_jobs_limited_due's `run_at > '-infinity'` (see levels_of_keys).
SELECT extract(epoch FROM min(run_at) - now())::float8 AS wait FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND limit_key IS NOT NULL AND run_at > now() {queue_filter}
  AND run_at > '-infinity'

-- name: limit_usage
-- What a limit key uses now: its running jobs, and its starts within %(window)s seconds.
SELECT (SELECT count(*) FROM {schema}.sqljobs_jobs
        WHERE state = 'running' AND limit_key = %(key)s)
       + (SELECT count(*) FROM {schema}.sqljobs_jobs
          WHERE lease_until > now() AND lease_until IS NOT NULL AND state <> 'running'
            AND limit_key IS NOT NULL AND limit_key = %(key)s) AS running,
       (SELECT count(*) FROM {schema}.sqljobs_starts
        WHERE limit_key = %(key)s AND started_at > now() - make_interval(secs => %(window)s))
           AS starts

-- name: limited_pending
-- Whether jobs under a limit wait for tasks this worker runs: then it claims them, even if
-- its own code declares no limit (the jobs carry theirs, from the code that enqueued them).
SELECT EXISTS (SELECT 1 FROM {schema}.sqljobs_jobs
               WHERE state = 'pending' AND limit_key IS NOT NULL {queue_filter}) AS waiting

-- name: limit_backlog
-- Per limit key, its due pending jobs (waiting for a slot, the rate's window, or a free
-- worker) and its limits, from the limited index (it holds pending limited jobs only);
-- the busiest keys first, at most %(most)s of them.
SELECT limit_key AS key, min(queue) AS queue, count(*) AS waiting,
       max(limit_max) AS limit_max, max(rate_max) AS rate_max, max(rate_window) AS rate_window
FROM {schema}.sqljobs_jobs
WHERE state = 'pending' AND limit_key IS NOT NULL AND run_at <= now()
GROUP BY limit_key ORDER BY waiting DESC, key LIMIT %(most)s

-- name: limit_running_all
-- Per limit key, the slots in use: its running jobs, and the handlers that run on after
-- their job left `running` (both from partial indexes: these sets are small).
SELECT limit_key AS key, min(queue) AS queue, count(*) AS running,
       max(limit_max) AS limit_max, max(rate_max) AS rate_max, max(rate_window) AS rate_window
FROM (SELECT limit_key, queue, limit_max, rate_max, rate_window FROM {schema}.sqljobs_jobs
      WHERE state = 'running' AND limit_key IS NOT NULL
      UNION ALL
      SELECT limit_key, queue, limit_max, rate_max, rate_window FROM {schema}.sqljobs_jobs
      WHERE lease_until > now() AND lease_until IS NOT NULL AND state <> 'running'
        AND limit_key IS NOT NULL) AS used
GROUP BY limit_key

-- name: prune_starts
-- Starts older than any window, of keys no claim has looked at since (a claim drops its
-- key's own): kept, they would make every question of when a window opens look at them.
DELETE FROM {schema}.sqljobs_starts WHERE ctid IN (
    SELECT ctid FROM {schema}.sqljobs_starts
    WHERE started_at < to_timestamp(%(before)s) LIMIT %(limit)s)

-- name: levels_of_keys
-- The priorities with pending jobs of each limit key in open_keys (a CTE of the statement),
-- highest first: a loose scan of sqljobs_jobs_limited, one probe a level. Each level is
-- then read from its head to its first job not yet due: read as one scan in claim order, a
-- key's jobs not yet due stood between its due ones and the next priority's, and a claim
-- that found fewer due jobs than the key's free slots walked all of them (as unlimited
-- claims did: see queries.sql's levels_of_queues).
key_levels (key, priority) AS (
    SELECT o.key, (SELECT max(priority) FROM {schema}.sqljobs_jobs
                   WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key = o.key)
    FROM open_keys AS o
    UNION ALL
    SELECT l.key, (SELECT max(priority) FROM {schema}.sqljobs_jobs
                   WHERE state = 'pending' AND limit_key IS NOT NULL AND limit_key = l.key
                     AND priority < l.priority)
    FROM key_levels AS l WHERE l.priority IS NOT NULL
)
