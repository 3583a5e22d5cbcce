-- Control over work in flight: results, progress, paused queues; retention by state.

-- A task's return value (JSON), what its handler last reported with ctx.progress(), and
-- whether a caller waits on it: only then does its end send a NOTIFY.
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN result text;
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN progress text;
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN waited boolean NOT NULL DEFAULT false;

-- The pruner deletes done, cancelled and dead jobs, each state after its own age.
DROP INDEX {schema}.sqljobs_jobs_finished;
CREATE INDEX sqljobs_jobs_finished ON {schema}.sqljobs_jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;

-- A paused queue: claims skip its jobs (enqueues and schedules still add to it).
CREATE TABLE {schema}.sqljobs_queues (
    name       text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    paused_at  timestamptz,
    updated_at timestamptz NOT NULL
);
