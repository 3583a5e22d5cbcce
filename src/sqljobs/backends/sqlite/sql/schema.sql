-- The current schema in full. Must equal the migrations replayed in order (tested).
-- Jobs, one row per persisted run of a task. Times are Unix epoch seconds (REAL).
CREATE TABLE sqljobs_jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    queue           TEXT    NOT NULL,
    task            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    key             TEXT,
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'waiting', 'running', 'done', 'dead', 'cancelled')),
    priority        INTEGER NOT NULL DEFAULT 0,
    run_at          REAL    NOT NULL,
    created_at      REAL    NOT NULL,
    deadline_at     REAL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    token           INTEGER NOT NULL DEFAULT 0,
    lease           REAL    NOT NULL,
    lease_until     REAL,
    worker          TEXT,
    started_at      REAL,
    finished_at     REAL,
    errors          INTEGER NOT NULL DEFAULT 0,
    lease_expiries  INTEGER NOT NULL DEFAULT 0,
    crashes         INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    last_traceback  TEXT,
    history         TEXT    NOT NULL DEFAULT '[]',
    key_hold        REAL,
    released_key    TEXT,
    prefetched      INTEGER NOT NULL DEFAULT 0, -- in a worker's buffer, not started (0005)
    result          TEXT,                       -- the task's return value, JSON (0006)
    progress        TEXT,                       -- the last ctx.progress(), JSON (0006)
    limit_key       TEXT,                       -- its limits' key (0007)
    limit_max       INTEGER,                    -- at most this many running at once
    rate_max        INTEGER,                    -- at most this many starts
    rate_window     REAL,                       -- in any window of these seconds
    parents         TEXT,                       -- the ids it waits for, JSON (0008)
    after_policy    TEXT CHECK (after_policy IN ('done', 'always')),
    waiting_on      INTEGER NOT NULL DEFAULT 0, -- how many parents have not ended
    children        INTEGER NOT NULL DEFAULT 0, -- how many jobs were enqueued after it
    collected       TEXT,                       -- a group callback's parents' results
    key_retention   REAL,                       -- seconds its key outlives the row (0016)
    wake_at         REAL,                       -- a parked workflow is due again then (0019)
    wait_event      TEXT,                       -- the event a parked workflow waits for (0019)
    debounced       INTEGER NOT NULL DEFAULT 0  -- enqueues that replaced its arguments (0020)
);

-- A business key names one job (sqljobs enqueue keys); unkeyed jobs cost no index entry.
CREATE UNIQUE INDEX sqljobs_jobs_key ON sqljobs_jobs (key) WHERE key IS NOT NULL;
-- Claims read pending work in this order; the partial index holds pending rows only,
-- so finished rows never slow a claim down, and no jobs under a concurrency limit (0007),
-- so a backlog of those waiting for slots never slows the others.
-- Claims and next_due read it level by level, (queue, priority), each level's due head (0014).
CREATE INDEX sqljobs_jobs_claim ON sqljobs_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL;
CREATE INDEX sqljobs_jobs_claim_any ON sqljobs_jobs (priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL;
-- Jobs that were in two workers that crashed: usually none, so finding them is free.
CREATE INDEX sqljobs_jobs_suspects ON sqljobs_jobs (priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes >= 2;
-- Jobs under a concurrency limit (0007): by key in claim order (the loose scan over keys,
-- each key's first jobs), and when the next delayed one is due.
CREATE INDEX sqljobs_jobs_limited ON sqljobs_jobs (limit_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND limit_key IS NOT NULL;
-- (not by state: an index whose columns and predicate a claim or an outcome leaves alone
-- costs those nothing; finished jobs' run_at lies in the past, before any it is asked for)
CREATE INDEX sqljobs_jobs_limited_due ON sqljobs_jobs (run_at)
    WHERE limit_key IS NOT NULL;
-- The reaper looks for expired leases.
CREATE INDEX sqljobs_jobs_lease ON sqljobs_jobs (lease_until) WHERE state = 'running';
-- Rows out of `running` whose handler still runs hold their limit key's slot (0016).
CREATE INDEX sqljobs_jobs_held ON sqljobs_jobs (limit_key)
    WHERE lease_until IS NOT NULL AND state <> 'running' AND limit_key IS NOT NULL;
-- The pruner deletes finished jobs by state and age (0006).
-- Ended jobs by state, queue and age: the pruner's and the stats' one index (0006).
CREATE INDEX sqljobs_jobs_ended ON sqljobs_jobs (state, queue, finished_at)
    WHERE state <> 'pending' AND state <> 'running';
-- A job's children, found among the jobs that have parents (0011 in SQLite, 0013 in PostgreSQL).
CREATE INDEX sqljobs_jobs_dependent ON sqljobs_jobs (id) WHERE parents IS NOT NULL;

-- Live worker processes. last_seen tells a crashed worker from a slow job.
CREATE TABLE sqljobs_workers (
    id                 TEXT PRIMARY KEY,
    host               TEXT NOT NULL,
    pid                INTEGER NOT NULL,
    queues             TEXT NOT NULL,
    concurrency        INTEGER NOT NULL,
    heartbeat_interval REAL NOT NULL,
    started_at         REAL NOT NULL,
    last_seen          REAL NOT NULL,
    tasks              TEXT NOT NULL DEFAULT '[]'  -- JSON list of the task names it runs
);

-- Every task a worker has registered, with its defaults: an enqueue by name from a process
-- that lacks the task gets its queue, priority, lease and retry policy (0005).
CREATE TABLE sqljobs_tasks (
    name         TEXT PRIMARY KEY,
    queue        TEXT NOT NULL,
    priority     INTEGER NOT NULL,
    lease        REAL NOT NULL,
    max_attempts INTEGER NOT NULL,
    deadline     REAL,
    updated_at   REAL NOT NULL,
    concurrency  INTEGER,                      -- its concurrency limit, if any (0007)
    keyed        INTEGER NOT NULL DEFAULT 0,   -- counted per key, by a key function
    rate_max     INTEGER,                      -- its rate limit, if any
    rate_window  REAL
);

-- Business idempotency markers (sqljobs.idempotent), written in the caller's transaction.
CREATE TABLE sqljobs_idempotency (
    key        TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    expires_at REAL
);
CREATE INDEX sqljobs_idempotency_expiry ON sqljobs_idempotency (expires_at)
    WHERE expires_at IS NOT NULL;

-- 0002: periodic schedules, one row each: @app.periodic definitions (source 'code',
-- written when a worker starts) and app.schedule() ones ('dynamic'). A tick is claimed by one
-- conditional UPDATE of next_run_at, so every worker may run the scheduler.
CREATE TABLE sqljobs_schedules (
    name          TEXT    PRIMARY KEY,
    task          TEXT    NOT NULL,
    kwargs        TEXT    NOT NULL DEFAULT '{}',
    cron          TEXT,
    every         REAL,
    tz            TEXT    NOT NULL DEFAULT 'UTC',
    overlap       TEXT    NOT NULL DEFAULT 'allow' CHECK (overlap IN ('allow', 'skip')),
    misfire       TEXT    NOT NULL DEFAULT 'catch_up_once'
                  CHECK (misfire IN ('catch_up_once', 'skip')),
    queue         TEXT    NOT NULL,
    priority      INTEGER NOT NULL DEFAULT 0,
    source        TEXT    NOT NULL DEFAULT 'dynamic' CHECK (source IN ('code', 'dynamic')),
    next_run_at   REAL    NOT NULL,
    last_run_at   REAL,
    last_job_id   INTEGER,
    last_outcome  TEXT,
    paused        INTEGER NOT NULL DEFAULT 0,
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
-- The scheduler's one question: which active schedules are due, and when is the next.
CREATE INDEX sqljobs_schedules_due ON sqljobs_schedules (next_run_at) WHERE paused = 0;

-- 0003: keys released after their job, and external effects.
CREATE INDEX sqljobs_jobs_released_key ON sqljobs_jobs (released_key)
    WHERE released_key IS NOT NULL;

-- External effects as a state machine: intent recorded before the call, outcome after.
CREATE TABLE sqljobs_effects (
    key        TEXT PRIMARY KEY,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unknown')),
    result     TEXT,
    error      TEXT,
    job_id     INTEGER,
    holder     TEXT,
    held_until REAL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);

-- 0005: paused queues. Claims skip the jobs of a paused queue; enqueues still add to it.
CREATE TABLE sqljobs_queues (
    name       TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    paused_at  REAL,
    updated_at REAL    NOT NULL,
    concurrency INTEGER,           -- its limits (app.limit_queue), as workers record them (0009)
    rate_max    INTEGER,
    rate_window REAL
);

-- 0006: the starts of rate-limited jobs within their window, per key (sqljobs.limits).
CREATE TABLE sqljobs_starts (
    limit_key  TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE INDEX sqljobs_starts_key ON sqljobs_starts (limit_key, started_at);

-- 0007: dependencies. An edge is kept while its parent has not ended: the transaction
-- that ends the parent takes its edges and releases (or cancels) the children.
CREATE TABLE sqljobs_deps (
    parent_id INTEGER NOT NULL,
    child_id  INTEGER NOT NULL,
    PRIMARY KEY (parent_id, child_id)
) WITHOUT ROWID;

-- 0009: the metrics rollup (sqljobs.rollup): attempts by outcome, duration and
-- enqueue-to-start histograms, schedule lag, by minute (pruned after a day) and in total.
CREATE TABLE sqljobs_metric_minutes (
    minute  INTEGER NOT NULL, -- Unix seconds at the start of the minute
    queue   TEXT    NOT NULL,
    task    TEXT    NOT NULL,
    outcome TEXT    NOT NULL, -- done, retried, dead, cancelled, lease_expired, crashed; '' for lag
    series  TEXT    NOT NULL, -- attempts, duration, duration_sum, wait, wait_sum, schedule_lag...
    le      REAL    NOT NULL, -- a bucket's upper bound, seconds (inf: the last, or not a bucket)
    amount  REAL    NOT NULL,
    PRIMARY KEY (minute, queue, task, outcome, series, le)
) WITHOUT ROWID;
CREATE TABLE sqljobs_metric_totals (
    queue   TEXT NOT NULL,
    task    TEXT NOT NULL,
    outcome TEXT NOT NULL,
    series  TEXT NOT NULL,
    le      REAL NOT NULL,
    amount  REAL NOT NULL,
    PRIMARY KEY (queue, task, outcome, series, le)
) WITHOUT ROWID;

-- 0013: business keys kept after the pruner deleted their jobs' rows, each until its
-- expires_at (Inf: for ever); a keyed enqueue that finds one answers with its job.
CREATE TABLE sqljobs_spent_keys (
    key        TEXT    PRIMARY KEY,
    job_id     INTEGER NOT NULL,
    task       TEXT    NOT NULL,
    state      TEXT    NOT NULL, -- how the job ended
    spent_at   REAL    NOT NULL, -- when its row was pruned
    expires_at REAL    NOT NULL  -- when the key is free again
) WITHOUT ROWID;
CREATE INDEX sqljobs_spent_keys_expiry ON sqljobs_spent_keys (expires_at);
CREATE INDEX sqljobs_spent_keys_job ON sqljobs_spent_keys (job_id);
-- 0019: durable workflows: parked workflows, their checkpointed steps, events.
CREATE INDEX sqljobs_jobs_wake ON sqljobs_jobs (wake_at)
    WHERE state = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX sqljobs_jobs_wait_event ON sqljobs_jobs (wait_event)
    WHERE state = 'waiting' AND wait_event IS NOT NULL;

CREATE TABLE sqljobs_workflow_steps (
    job_id      INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('running', 'waiting', 'done', 'failed')),
    result      TEXT,
    error       TEXT,
    detail      TEXT    NOT NULL DEFAULT '{}',
    attempt     INTEGER NOT NULL,
    started_at  REAL    NOT NULL,
    ended_at    REAL,
    PRIMARY KEY (job_id, position)
) WITHOUT ROWID;
-- A job's steps go with its row (pruned, or deleted by an operator).
CREATE TRIGGER sqljobs_workflow_steps_pruned AFTER DELETE ON sqljobs_jobs
BEGIN
    DELETE FROM sqljobs_workflow_steps WHERE job_id = old.id;
END;

CREATE TABLE sqljobs_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    payload     TEXT,
    emitted_at  REAL    NOT NULL
);
CREATE INDEX sqljobs_events_name ON sqljobs_events (name, id);
CREATE INDEX sqljobs_events_emitted ON sqljobs_events (emitted_at);

-- 0020: enqueue from SQL, for a program without sqljobs: INSERT INTO sqljobs_enqueue
-- (task, args, ...) VALUES (...) checks the row, fills in the task's defaults from the
-- catalogue the workers write, and keeps keys as a Python enqueue does.
CREATE VIEW sqljobs_enqueue (task, args, kwargs, key, run_at, queue, priority) AS
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;

CREATE TRIGGER sqljobs_enqueue_insert INSTEAD OF INSERT ON sqljobs_enqueue
BEGIN
    SELECT RAISE(ABORT, 'sqljobs_enqueue: task must be a name of 1 to 500 characters')
    WHERE typeof(NEW.task) <> 'text' OR length(NEW.task) NOT BETWEEN 1 AND 500;
    SELECT RAISE(ABORT, 'sqljobs_enqueue: args must be a JSON array of positional arguments (keyword arguments go in kwargs, a JSON object)')
    WHERE NEW.args IS NOT NULL
      AND (typeof(NEW.args) <> 'text' OR NOT json_valid(NEW.args)
           OR json_type(NEW.args) <> 'array');
    SELECT RAISE(ABORT, 'sqljobs_enqueue: kwargs must be a JSON object of keyword arguments')
    WHERE NEW.kwargs IS NOT NULL
      AND (typeof(NEW.kwargs) <> 'text' OR NOT json_valid(NEW.kwargs)
           OR json_type(NEW.kwargs) <> 'object');
    SELECT RAISE(ABORT, 'sqljobs_enqueue: key must be NULL or a text of 1 to 500 characters')
    WHERE NEW.key IS NOT NULL AND (typeof(NEW.key) <> 'text' OR length(NEW.key) NOT BETWEEN 1 AND 500);
    SELECT RAISE(ABORT, 'sqljobs_enqueue: queue name is not valid: use 1-64 letters, digits, ''_'', ''-'', ''.'', '':''')
    WHERE NEW.queue IS NOT NULL
      AND (typeof(NEW.queue) <> 'text' OR length(NEW.queue) NOT BETWEEN 1 AND 64
           OR NEW.queue GLOB '*[^A-Za-z0-9_.:-]*');
    SELECT RAISE(ABORT, 'sqljobs_enqueue: priority must be an integer from -2147483648 to 2147483647')
    WHERE NEW.priority IS NOT NULL
      AND (typeof(NEW.priority) <> 'integer'
           OR NEW.priority NOT BETWEEN -2147483648 AND 2147483647);
    SELECT RAISE(ABORT, 'sqljobs_enqueue: run_at must be Unix seconds within the years 1 to 9999 (NULL: now)')
    WHERE NEW.run_at IS NOT NULL
      AND (typeof(NEW.run_at) NOT IN ('integer', 'real')
           OR NEW.run_at NOT BETWEEN -62135596800 AND 253402300799);
    SELECT RAISE(ABORT, 'sqljobs_enqueue: this task limits its concurrency per key, by a function in the service that defines it: enqueue it from Python with concurrency_key=...')
    FROM sqljobs_tasks WHERE name = NEW.task AND keyed;
    -- an ended job whose key_scope has run out gives its key up (as release_key)
    UPDATE sqljobs_jobs SET released_key = key, key = NULL
    WHERE NEW.key IS NOT NULL AND key = NEW.key AND state IN ('done', 'dead', 'cancelled')
      AND key_hold IS NOT NULL AND finished_at + key_hold <= (julianday('now') - 2440587.5) * 86400.0;
    INSERT INTO sqljobs_jobs
        (queue, task, payload, key, priority, run_at, created_at, deadline_at, max_attempts,
         lease, limit_key, limit_max, rate_max, rate_window)
    SELECT d.queue, NEW.task,
           json_object('args', json(coalesce(NEW.args, '[]')),
                       'kwargs', json(coalesce(NEW.kwargs, '{}'))),
           NEW.key, coalesce(NEW.priority, t.priority, 0), coalesce(NEW.run_at, d.now), d.now,
           d.now + t.deadline, coalesce(t.max_attempts, 5), coalesce(t.lease, 30.0),
           CASE WHEN t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN NEW.task
                WHEN l.name IS NOT NULL THEN 'queue:' || d.queue END,
           CASE WHEN t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN t.concurrency
                ELSE l.concurrency END,
           CASE WHEN t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN t.rate_max
                ELSE l.rate_max END,
           CASE WHEN t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN t.rate_window
                ELSE l.rate_window END
    FROM (SELECT coalesce(NEW.queue, (SELECT queue FROM sqljobs_tasks WHERE name = NEW.task),
                          'default') AS queue,
                 (julianday('now') - 2440587.5) * 86400.0 AS now) AS d
    LEFT JOIN sqljobs_tasks AS t ON t.name = NEW.task
    LEFT JOIN sqljobs_queues AS l
           ON l.name = d.queue AND (l.concurrency IS NOT NULL OR l.rate_max IS NOT NULL)
    WHERE NEW.key IS NULL
       OR NOT EXISTS (SELECT 1 FROM sqljobs_spent_keys AS s
                      WHERE s.key = NEW.key AND s.expires_at > d.now)
    ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING;
END;
