-- Control over work in flight: results, progress, paused queues; retention by state.

-- A task's return value (JSON), and what its handler last reported with ctx.progress().
ALTER TABLE sqljobs_jobs ADD COLUMN result TEXT;
ALTER TABLE sqljobs_jobs ADD COLUMN progress TEXT;

-- The pruner deletes done, cancelled and dead jobs, each state after its own age.
DROP INDEX sqljobs_jobs_finished;
CREATE INDEX sqljobs_jobs_finished ON sqljobs_jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;

-- A paused queue: claims skip its jobs (enqueues and schedules still add to it).
CREATE TABLE sqljobs_queues (
    name       TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    paused_at  REAL,
    updated_at REAL    NOT NULL
);
