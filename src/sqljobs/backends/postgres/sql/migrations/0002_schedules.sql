-- Periodic schedules, one row each: @app.periodic definitions (source 'code', written when
-- a worker starts) and app.schedule() ones ('dynamic'). A tick is claimed by one
-- conditional UPDATE of next_run_at, so every worker may run the scheduler.
CREATE TABLE {schema}.sqljobs_schedules (
    name          text             PRIMARY KEY,
    task          text             NOT NULL,
    kwargs        jsonb            NOT NULL DEFAULT '{}',
    cron          text,
    every         double precision,
    tz            text             NOT NULL DEFAULT 'UTC',
    overlap       text             NOT NULL DEFAULT 'allow' CHECK (overlap IN ('allow', 'skip')),
    misfire       text             NOT NULL DEFAULT 'catch_up_once'
                  CHECK (misfire IN ('catch_up_once', 'skip')),
    queue         text             NOT NULL,
    priority      integer          NOT NULL DEFAULT 0,
    source        text             NOT NULL DEFAULT 'dynamic'
                  CHECK (source IN ('code', 'dynamic')),
    next_run_at   timestamptz      NOT NULL,
    last_run_at   timestamptz,
    last_job_id   bigint,
    last_outcome  text,
    paused        boolean          NOT NULL DEFAULT false,
    created_at    timestamptz      NOT NULL,
    updated_at    timestamptz      NOT NULL,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
-- The scheduler's one question: which active schedules are due, and when is the next.
CREATE INDEX sqljobs_schedules_due ON {schema}.sqljobs_schedules (next_run_at) WHERE NOT paused;
