-- Job dependencies (sqljobs.dependencies): a `waiting` state, a job's parents and policy,
-- and the edges from parents that have not ended to their children.
-- SQLite cannot change a CHECK constraint in place, so the jobs table is rebuilt: a new
-- table, the rows copied, the id sequence carried over (AUTOINCREMENT never reuses an id,
-- even one whose job was pruned), the old table dropped, the new one renamed, and its
-- indexes made again. One transaction, like every migration.
CREATE TABLE sqljobs_jobs_new (
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
    collected       TEXT                        -- a group callback's parents' results
);
INSERT INTO sqljobs_jobs_new (
    id, queue, task, payload, key, state, priority, run_at, created_at, deadline_at,
    attempts, max_attempts, token, lease, lease_until, worker, started_at, finished_at,
    errors, lease_expiries, crashes, last_error, last_traceback, history, key_hold,
    released_key, prefetched, result, progress, limit_key, limit_max, rate_max,
    rate_window)
SELECT
    id, queue, task, payload, key, state, priority, run_at, created_at, deadline_at,
    attempts, max_attempts, token, lease, lease_until, worker, started_at, finished_at,
    errors, lease_expiries, crashes, last_error, last_traceback, history, key_hold,
    released_key, prefetched, result, progress, limit_key, limit_max, rate_max,
    rate_window
FROM sqljobs_jobs;
INSERT INTO sqlite_sequence (name, seq)
SELECT 'sqljobs_jobs_new', seq FROM sqlite_sequence WHERE name = 'sqljobs_jobs'
  AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'sqljobs_jobs_new');
UPDATE sqlite_sequence
SET seq = max(seq, (SELECT seq FROM sqlite_sequence WHERE name = 'sqljobs_jobs'))
WHERE name = 'sqljobs_jobs_new';
DROP TABLE sqljobs_jobs;
ALTER TABLE sqljobs_jobs_new RENAME TO sqljobs_jobs;

CREATE UNIQUE INDEX sqljobs_jobs_key ON sqljobs_jobs (key) WHERE key IS NOT NULL;
CREATE INDEX sqljobs_jobs_claim ON sqljobs_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL;
CREATE INDEX sqljobs_jobs_claim_any ON sqljobs_jobs (priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL;
CREATE INDEX sqljobs_jobs_suspects ON sqljobs_jobs (priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes >= 2;
CREATE INDEX sqljobs_jobs_due ON sqljobs_jobs (run_at)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL;
CREATE INDEX sqljobs_jobs_limited ON sqljobs_jobs (limit_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND limit_key IS NOT NULL;
CREATE INDEX sqljobs_jobs_limited_due ON sqljobs_jobs (run_at)
    WHERE limit_key IS NOT NULL;
CREATE INDEX sqljobs_jobs_lease ON sqljobs_jobs (lease_until) WHERE state = 'running';
CREATE INDEX sqljobs_jobs_ended ON sqljobs_jobs (state, queue, finished_at)
    WHERE state <> 'pending' AND state <> 'running';
CREATE INDEX sqljobs_jobs_released_key ON sqljobs_jobs (released_key)
    WHERE released_key IS NOT NULL;

CREATE TABLE sqljobs_deps (
    parent_id INTEGER NOT NULL,
    child_id  INTEGER NOT NULL,
    PRIMARY KEY (parent_id, child_id)
) WITHOUT ROWID;
