-- Jobs, one row per persisted run of a task. Times are Unix epoch seconds (REAL).
CREATE TABLE sqljobs_jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    queue           TEXT    NOT NULL,
    task            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    key             TEXT,
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'running', 'done', 'dead', 'cancelled')),
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
    history         TEXT    NOT NULL DEFAULT '[]'
);

-- A business key names one job (sqljobs enqueue keys); unkeyed jobs cost no index entry.
CREATE UNIQUE INDEX sqljobs_jobs_key ON sqljobs_jobs (key) WHERE key IS NOT NULL;
-- Claims read pending work in this order; the partial index holds pending rows only,
-- so finished rows never slow a claim down.
CREATE INDEX sqljobs_jobs_claim ON sqljobs_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2;
CREATE INDEX sqljobs_jobs_claim_any ON sqljobs_jobs (priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2;
-- Jobs that were in two workers that crashed: usually none, so finding them is free.
CREATE INDEX sqljobs_jobs_suspects ON sqljobs_jobs (priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes >= 2;
-- When the next delayed job falls due.
CREATE INDEX sqljobs_jobs_due ON sqljobs_jobs (run_at)
    WHERE state = 'pending' AND crashes < 2;
-- The reaper looks for expired leases.
CREATE INDEX sqljobs_jobs_lease ON sqljobs_jobs (lease_until) WHERE state = 'running';
-- The pruner deletes finished jobs by age.
CREATE INDEX sqljobs_jobs_finished ON sqljobs_jobs (finished_at)
    WHERE state IN ('done', 'cancelled');

-- Live worker processes. last_seen tells a crashed worker from a slow job.
CREATE TABLE sqljobs_workers (
    id                 TEXT PRIMARY KEY,
    host               TEXT NOT NULL,
    pid                INTEGER NOT NULL,
    queues             TEXT NOT NULL,
    concurrency        INTEGER NOT NULL,
    heartbeat_interval REAL NOT NULL,
    started_at         REAL NOT NULL,
    last_seen          REAL NOT NULL
);

-- Business idempotency markers (sqljobs.idempotent), written in the caller's transaction.
CREATE TABLE sqljobs_idempotency (
    key        TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    expires_at REAL
);
CREATE INDEX sqljobs_idempotency_expiry ON sqljobs_idempotency (expires_at)
    WHERE expires_at IS NOT NULL;
