-- Periodic schedules, one row each: @app.periodic definitions (source 'code', written when
-- a worker starts) and app.schedule() ones ('dynamic'). A tick is claimed by one
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
